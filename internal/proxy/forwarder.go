package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/repeatlog"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/stroomzip"
)

// forwarder sends aggregates to one destination with its own workers, so
// a slow or dead destination delays no other. Items are taken by due
// time, not in a strict FIFO: an item waiting for its retry never blocks
// the items behind it.
type forwarder struct {
	p        *Proxy
	dest     Destination
	q        config.Queue
	notify   chan struct{}
	done     chan struct{} // a send finished: capacity is free
	mu       sync.Mutex
	inflight map[int64]bool
	live     atomic.Bool
	wg       sync.WaitGroup
	readFail *repeatlog.Failures // failed reads of the queue: one every pollInterval while the database is down
	// lastMs is the clock at the last dispatch (0 before the first): one
	// that reads earlier has stepped back.
	lastMs int64
}

func newForwarder(p *Proxy, d Destination, q config.Queue) *forwarder {
	f := &forwarder{p: p, dest: d, q: q, notify: make(chan struct{}, 1), done: make(chan struct{}, 1), inflight: map[int64]bool{},
		readFail: repeatlog.New(failureLogInterval)}
	f.live.Store(true)
	return f
}

func (f *forwarder) wake() {
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// pollInterval bounds how long the dispatcher sleeps, so that items
// replayed by another process are picked up soon.
const pollInterval = 2 * time.Second

func (f *forwarder) run(ctx context.Context) {
	defer f.wg.Wait()
	if f.dest.HasLiveness() {
		f.checkLive(ctx)
		f.wg.Add(1)
		go f.liveness(ctx)
	}
	for {
		wait := pollInterval
		if f.live.Load() {
			var err error
			wait, err = f.dispatch(ctx)
			if ctx.Err() == nil {
				f.readFail.Observe(f.p.log, slog.LevelError, err,
					"forwarding: cannot read the queue; retrying every 2 s, logged at most once a minute",
					"forwarding: the queue can be read again", "destination", f.dest.Name())
			}
			if err != nil {
				wait = pollInterval
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-f.notify:
		case <-f.done:
		case <-t.C:
		}
		t.Stop()
	}
}

// dispatch starts sends for due items while workers are free and returns
// how long to wait before looking again.
func (f *forwarder) dispatch(ctx context.Context) (time.Duration, error) {
	f.mu.Lock()
	free := f.q.ForwardThreadCount - len(f.inflight)
	skip := make([]int64, 0, len(f.inflight))
	for id := range f.inflight {
		skip = append(skip, id)
	}
	f.mu.Unlock()
	if free <= 0 {
		return pollInterval, nil
	}
	now := f.p.now()
	if nowMs := now.UnixMilli(); nowMs < f.lastMs || f.lastMs == 0 {
		// The first dispatch, or the clock stepped back: aggregates
		// scheduled by a later clock are due now rather than after the
		// step (a retry a little early is harmless; one that waits an
		// hour is not).
		n, err := f.p.repo.PullForwardsBack(ctx, f.dest.Name(), nowMs)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			f.p.log.Warn("the clock is earlier than when aggregates were queued; they are due now",
				"destination", f.dest.Name(), "aggregates", n)
		}
	}
	f.lastMs = now.UnixMilli()
	f.p.metrics.queueReads.WithLabelValues(f.dest.Name()).Inc()
	due, err := f.p.repo.DueForwards(ctx, f.dest.Name(), now.UnixMilli(), skip, free)
	if err != nil {
		return 0, err
	}
	for _, fw := range due {
		f.mu.Lock()
		f.inflight[fw.ID] = true
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.send(ctx, fw)
			f.mu.Lock()
			delete(f.inflight, fw.ID)
			f.mu.Unlock()
			select {
			case f.done <- struct{}{}:
			default:
			}
		}()
	}
	if len(due) == free {
		return pollInterval, nil // full: a finished send wakes the loop
	}
	for _, fw := range due {
		skip = append(skip, fw.ID)
	}
	// Those in flight are left out: a finished send wakes the loop, and a
	// newly closed aggregate too.
	next, ok, err := f.p.repo.NextForwardMs(ctx, f.dest.Name(), skip)
	if err != nil || !ok {
		return pollInterval, err
	}
	return min(max(time.Until(time.UnixMilli(next)), 5*time.Millisecond), pollInterval), nil
}

// send makes one attempt and records its outcome.
func (f *forwarder) send(ctx context.Context, fw meta.Forward) {
	repo, st := f.p.repo, f.p.store
	streams, err := repo.AggregateStreams(ctx, fw.ID)
	if err != nil {
		if ctx.Err() == nil {
			f.p.log.Error("forwarding: cannot list the aggregate's streams; retrying", "destination", f.dest.Name(), "aggregate", fw.ID, "err", err)
		}
		// Nothing is recorded, so the aggregate is still due: wait before
		// the end of this send wakes the dispatcher, or it would try again
		// at once, as fast as the database fails.
		t := time.NewTimer(pollInterval)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return
	}
	if len(streams) == 0 {
		// Nothing left to send (its streams are gone): drop the entry.
		f.p.log.Warn("forwarding: aggregate has no streams; dropping it from the queue", "destination", f.dest.Name(), "aggregate", fw.ID)
		done, err := repo.ForwardSent(context.WithoutCancel(ctx), fw.ID, f.dest.Name())
		if err == nil {
			f.p.removeStreams(context.WithoutCancel(ctx), done)
		}
		return
	}
	attrs := commonAttributes(fw.Aggregate, streams)
	start := f.p.now()
	newZip := func(w io.Writer) *stroomzip.Writer { return stroomzip.NewWriterLevel(w, flate.BestSpeed) }
	if z, ok := f.dest.(interface {
		NewZip(io.Writer) *stroomzip.Writer
	}); ok {
		newZip = z.NewZip
	}
	// Set when a stream's stored data could not be read. Send returns
	// only once write has (PostStream waits for its goroutine).
	var unreadable *unreadableStream
	out := f.dest.Send(ctx, fw.Aggregate, attrs, func(w io.Writer) error {
		err := writeZip(ctx, st, streams, newZip(w))
		errors.As(err, &unreadable)
		return err
	})
	if out.Duration == 0 {
		out.Duration = f.p.now().Sub(start)
	}
	if ctx.Err() != nil && !out.OK {
		// Stopping: the attempt did not fail, it was interrupted. The item
		// stays queued as it was and goes at the next start.
		return
	}
	f.p.metrics.forwarded(f.dest.Name(), out)
	f.logSend(fw, attrs, streams, out)
	if out.OK {
		done, err := repo.ForwardSent(context.WithoutCancel(ctx), fw.ID, f.dest.Name())
		if err != nil {
			// Sent but not recorded: it is sent again later, which the
			// downstream can tell by the aggregate's GUID.
			f.p.log.Error("forwarding: sent, but recording it failed; it will be sent again", "destination", f.dest.Name(), "aggregate", fw.ID, "err", err)
			return
		}
		f.p.removeStreams(context.WithoutCancel(ctx), done)
		return
	}
	if unreadable != nil && unreadable.damaged() {
		// Retrying cannot help, and the aggregate's other streams must
		// not wait with it (until maxRetryAge, then all to the failure
		// area): the stream is set aside, the rest sent at once. A
		// stream alone in its aggregate goes to the failure area.
		msg := fmt.Sprintf("stream %d cannot be sent: %s: %v", unreadable.id, store.Problem(unreadable.err), unreadable.err)
		if len(streams) == 1 {
			out.Permanent, out.Message, out.Err = true, msg, nil
		} else if f.setAside(context.WithoutCancel(ctx), fw, unreadable.id, msg) {
			return
		}
	}
	f.failed(context.WithoutCancel(ctx), fw, out)
}

// setAside moves a damaged stream (see unreadableStream.damaged) out of
// the aggregate into one of its own, in the failure area of every
// destination the aggregate still waits for, with msg as its error; the
// aggregate, still due, is then sent again at once without it. Once the
// stream is repaired (restored from a backup, say) its aggregate can be
// replayed. When the stream is no longer in the aggregate (another
// destination's send set it aside first) the rest is sent again at once
// too. It reports false only when the database failed: the attempt is
// then recorded as failed, and retried.
func (f *forwarder) setAside(ctx context.Context, fw meta.Forward, stream int64, msg string) bool {
	now := f.p.now()
	line := fmt.Sprintf("%s - attempt 1 - %s (set aside from aggregate %d)", now.UTC().Format("2006-01-02T15:04:05.000Z"), msg, fw.ID)
	id, err := f.p.repo.SetAsideStream(ctx, fw.ID, stream, newGUID(), now.UnixMilli(), msg, line)
	if err != nil {
		f.p.log.Error("forwarding: cannot set a damaged stream aside", "destination", f.dest.Name(), "aggregate", fw.ID, "stream", stream, "err", err)
		return false
	}
	if id != 0 {
		f.p.log.Error("forwarding: a stream cannot be read; it is set aside in an aggregate of its own, in the failure area, and the rest of its aggregate is sent",
			"destination", f.dest.Name(), "aggregate", fw.ID, "stream", stream, "setAsideAggregate", id, "feed", fw.Feed, "error", msg)
	}
	return true
}

// failed records a failed attempt: to the failure area when retrying
// cannot help or the item has failed for too long, else queued again after
// a delay that grows with each attempt (at least what Retry-After asks).
func (f *forwarder) failed(ctx context.Context, fw meta.Forward, out Outcome) {
	now := f.p.now()
	nowMs := now.UnixMilli()
	fw.Attempts++
	if fw.FirstMs == 0 {
		fw.FirstMs = nowMs
	}
	fw.LastMs = nowMs
	fw.LastStatus = out.Code
	fw.Error = outcomeMessage(out)
	fw.State = meta.ForwardQueued
	reason := ""
	switch {
	case out.Permanent:
		reason = "the downstream refused it permanently"
	case now.Sub(time.UnixMilli(fw.FirstMs)) >= f.q.MaxRetryAge.D():
		reason = fmt.Sprintf("it has failed for longer than maxRetryAge (%s)", f.q.MaxRetryAge)
	case fw.Attempts >= math.MaxInt16:
		reason = "too many attempts"
	}
	var delay time.Duration
	if reason != "" {
		fw.State = meta.ForwardFailed
		fw.NextMs = nowMs
	} else {
		delay = retryDelay(f.q, fw.Attempts)
		if out.RetryAfter > delay {
			delay = min(out.RetryAfter, f.q.MaxRetryDelay.D())
		}
		fw.NextMs = now.Add(delay).UnixMilli()
	}
	line := fmt.Sprintf("%s - attempt %d - %s", now.UTC().Format("2006-01-02T15:04:05.000Z"), fw.Attempts, fw.Error)
	if err := f.p.repo.ForwardAttemptFailed(ctx, fw, line); err != nil {
		f.p.log.Error("forwarding: cannot record a failed attempt; it will be retried", "destination", f.dest.Name(), "aggregate", fw.ID, "err", err)
		return
	}
	if fw.State == meta.ForwardFailed {
		f.p.log.Error("forwarding failed: aggregate moved to the failure area", "destination", f.dest.Name(),
			"aggregate", fw.ID, "feed", fw.Feed, "type", fw.Type, "attempts", fw.Attempts, "why", reason, "error", fw.Error)
	} else {
		f.p.log.Warn("forwarding failed; will retry", "destination", f.dest.Name(), "aggregate", fw.ID,
			"feed", fw.Feed, "attempts", fw.Attempts, "retryIn", delay.String(), "error", fw.Error)
	}
}

// retryDelay is the wait after the n-th failed attempt (n >= 1).
func retryDelay(q config.Queue, n int) time.Duration {
	d := float64(q.RetryDelay.D()) * math.Pow(q.RetryDelayGrowthFactor, float64(n-1))
	if d > float64(q.MaxRetryDelay.D()) || math.IsInf(d, 0) || math.IsNaN(d) {
		return q.MaxRetryDelay.D()
	}
	return time.Duration(d)
}

func outcomeMessage(out Outcome) string {
	var parts []string
	if out.HTTPStatus != 0 {
		parts = append(parts, fmt.Sprintf("HTTP %d", out.HTTPStatus))
	}
	if out.Code != 0 {
		parts = append(parts, fmt.Sprintf("status %d", out.Code))
	}
	msg := out.Message
	if msg == "" && out.Err != nil {
		msg = out.Err.Error()
	}
	if msg != "" {
		parts = append(parts, strings.ReplaceAll(msg, "\n", " "))
	}
	return strings.Join(parts, " - ")
}

// logSend writes the send-log line of one attempt: the reference proxy's
// fields (event, url, HTTP status, status code, the downstream's receipt
// id, bytes, duration, message and the configured attributes).
func (f *forwarder) logSend(fw meta.Forward, attrs *attr.Map, streams []meta.Stream, out Outcome) {
	event, level := "SEND", slog.LevelInfo
	if !out.OK {
		event, level = "ERROR", slog.LevelWarn
	}
	msg := "OK"
	if !out.OK {
		msg = outcomeMessage(out)
	}
	args := []any{"event", event, "destination", f.dest.Name(), "url", f.dest.Target(),
		"httpStatus", out.HTTPStatus, "status", out.Code, "receiptId", out.Receipt,
		"bytes", out.Bytes, "durationMs", out.Duration.Milliseconds(), "message", msg,
		"aggregate", fw.ID, "feed", fw.Feed, "type", fw.Type, "items", fw.Items, "attempt", fw.Attempts + 1}
	// The receipt ids this proxy gave the aggregate's posts: with the
	// downstream's receipt id, they trace a sender's receipt to the next hop.
	ids := make([]string, len(streams))
	for i, s := range streams {
		ids[i] = s.ReceiptID
	}
	args = append(args, "receiptIds", ids)
	if out.Resent != "" {
		args = append(args, "resent", out.Resent)
	}
	if keys := f.p.opt.LogMetaKeys; len(keys) > 0 {
		m := make([]any, 0, len(keys))
		for _, k := range keys {
			m = append(m, slog.String(k, attrs.Value(k)))
		}
		args = append(args, slog.Group("meta", m...))
	}
	f.p.sendLog.Log(context.Background(), level, "send", args...)
}

// liveness checks the destination every interval and pauses sending while
// it is not live.
func (f *forwarder) liveness(ctx context.Context) {
	defer f.wg.Done()
	t := time.NewTicker(f.q.LivenessCheckInterval.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.checkLive(ctx)
		}
	}
}

func (f *forwarder) checkLive(ctx context.Context) {
	err := f.dest.Live(ctx)
	if ctx.Err() != nil {
		return
	}
	was := f.live.Swap(err == nil)
	f.p.metrics.setLive(f.dest.Name(), err == nil)
	switch {
	case err != nil && was:
		f.p.log.Error("destination is not live: forwarding to it is paused", "destination", f.dest.Name(), "err", err)
	case err == nil && !was:
		f.p.log.Info("destination is live again: forwarding resumes", "destination", f.dest.Name())
		f.wake()
	}
}
