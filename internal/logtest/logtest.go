// Package logtest has a slog.Handler for tests that assert what was
// logged, and how often.
package logtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Counter counts records by message and keeps the last record's
// attributes. The zero value is ready to use; it is safe for concurrent
// use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
	last   map[string]slog.Value
}

func (h *Counter) Enabled(context.Context, slog.Level) bool { return true }

func (h *Counter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[r.Message]++
	h.last = map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		h.last[a.Key] = a.Value
		return true
	})
	return nil
}

// WithAttrs and WithGroup return h itself: the attributes they add are
// not counted.
func (h *Counter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *Counter) WithGroup(string) slog.Handler      { return h }

// Count returns how many records had a message starting with prefix.
func (h *Counter) Count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for m, c := range h.counts {
		if strings.HasPrefix(m, prefix) {
			n += c
		}
	}
	return n
}

// Last returns the attribute key of the last record handled.
func (h *Counter) Last(key string) slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[key]
}
