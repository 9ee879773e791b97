// Package repeatlog keeps a failure that repeats out of the log while it
// repeats: a task that retries every few seconds against a database that
// is down for an hour would otherwise log the same error hundreds of
// times and bury everything else. The first failure is logged, then at
// most one per interval with the count of those left out, and the first
// success after them once.
package repeatlog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Failures tracks one repeating failure. The zero value is not ready:
// use New. It is safe for concurrent use.
type Failures struct {
	every time.Duration

	mu       sync.Mutex
	failing  bool
	logged   time.Time
	unlogged int
}

// New returns a Failures that logs at most one failure per every.
func New(every time.Duration) *Failures {
	return &Failures{every: every}
}

// Failed records a failure at now and says whether to log it and how
// many failures since the last one logged were not. now should come from
// time.Now, whose monotonic reading keeps a step of the wall clock from
// silencing the log (backwards) or flooding it (forwards).
func (f *Failures) Failed(now time.Time) (log bool, notLogged int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing && now.Sub(f.logged) < f.every && now.Sub(f.logged) >= 0 {
		f.unlogged++
		return false, 0
	}
	notLogged = f.unlogged
	f.failing, f.logged, f.unlogged = true, now, 0
	return true, notLogged
}

// Succeeded records a success and says whether to log the recovery (the
// first success after failures) and how many failures were not logged.
func (f *Failures) Succeeded() (log bool, notLogged int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failing {
		return false, 0
	}
	notLogged = f.unlogged
	f.failing, f.unlogged = false, 0
	return true, notLogged
}

// Observe logs the outcome of one try: a failure (err not nil) as msg at
// level, with args, "err" and "notLogged", unless it repeats one logged
// within the interval; the first success after failures as recovered at
// Info, once.
func (f *Failures) Observe(log *slog.Logger, level slog.Level, err error, msg, recovered string, args ...any) {
	if err == nil {
		if ok, n := f.Succeeded(); ok {
			log.Log(context.Background(), slog.LevelInfo, recovered, append(args, "notLogged", n)...)
		}
		return
	}
	if ok, n := f.Failed(time.Now()); ok {
		log.Log(context.Background(), level, msg, append(args, "err", err, "notLogged", n)...)
	}
}
