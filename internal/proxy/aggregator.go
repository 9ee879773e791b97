package proxy

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/repeatlog"
)

// aggregator puts complete streams into aggregates and closes them. It
// finds its work in the database (complete streams in no aggregate), so a
// post committed just before a crash is picked up after the restart with
// nothing else to recover.
type aggregator struct {
	p            *Proxy
	cfg          config.Aggregator
	open         map[[2]string]*meta.Aggregate // by feed and type (exact, case-sensitive)
	since        int64                         // streams completed before this are all assigned
	lastMs       int64                         // the clock at the last pass: one that reads earlier has stepped back
	nextFullScan time.Duration                 // on the monotonic clock (Proxy.mono)
	// due is when each open aggregate (by GUID) is old enough to close,
	// on the monotonic clock: the clock its CreateMs was read from may
	// step back, and an aggregate would then stay open as long as the step.
	due      map[string]time.Duration
	notify   chan struct{}
	failures *repeatlog.Failures // failed passes: one a tick while the database is down
}

// batchLimit is how many streams one aggregator transaction takes.
const batchLimit = 512

// sinceMargin is how far behind the newest pass the stream scan starts:
// streams are completed in commit order, by one committer, so a margin
// only has to cover clock steps (and the full scan every minute covers a
// larger one). Every pass reads the index over the margin, so it is kept
// short.
const sinceMargin = 3 * time.Second

// minPassGap is the least time between passes woken by posts: under load
// a pass per post rescanned the same recent streams hundreds of times a
// second, while aggregates close on a scale of seconds anyway.
const minPassGap = 50 * time.Millisecond

func newAggregator(p *Proxy, cfg config.Aggregator) *aggregator {
	return &aggregator{p: p, cfg: cfg, due: map[string]time.Duration{}, notify: make(chan struct{}, 1),
		failures: repeatlog.New(failureLogInterval)}
}

// wake asks for a pass soon (a post was stored).
func (g *aggregator) wake() {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// tick is how often aggregates are checked for age: often enough that an
// aggregate closes within a second of its time (the reference system
// checks every 10 seconds).
func (g *aggregator) tick() time.Duration {
	t := g.cfg.AggregationFrequency.D() / 4
	return min(max(t, 10*time.Millisecond), time.Second)
}

func (g *aggregator) run(ctx context.Context) {
	t := time.NewTicker(g.tick())
	defer t.Stop()
	var last time.Time // of the last pass that found no more work
	for {
		if wait := minPassGap - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		more, err := g.pass(ctx)
		if ctx.Err() == nil {
			g.failures.Observe(g.p.log, slog.LevelError, err,
				"aggregation failed; retrying every pass, logged at most once a minute", "aggregation works again")
		}
		if err != nil {
			g.open = nil // reload from the database: memory may be ahead of it
			more = false
		}
		if more {
			continue
		}
		last = time.Now()
		select {
		case <-ctx.Done():
			return
		case <-g.notify:
		case <-t.C:
		}
	}
}

// pass assigns one batch of waiting streams and closes what is full or
// old. It reports whether more streams are waiting.
func (g *aggregator) pass(ctx context.Context) (bool, error) {
	repo := g.p.repo
	if g.open == nil {
		open, err := repo.OpenAggregates(ctx)
		if err != nil {
			return false, err
		}
		g.open = make(map[[2]string]*meta.Aggregate, len(open))
		known := make(map[string]bool, len(open))
		for i := range open {
			a := open[i]
			g.open[[2]string{a.Feed, a.Type}] = &a
			known[a.GUID] = true
		}
		for guid := range g.due {
			if !known[guid] {
				delete(g.due, guid) // made by a batch that failed
			}
		}
	}
	now := g.p.now()
	nowMs := now.UnixMilli()
	mono := g.p.mono()
	if mono >= g.nextFullScan || nowMs < g.lastMs {
		// Now and then look at every waiting stream, not only recent ones,
		// in case a commit took longer than the margin; and at once when
		// the clock has stepped back: streams completed since have a
		// status time before the scan's start.
		g.since, g.nextFullScan = 0, mono+time.Minute
	}
	g.lastMs = nowMs
	freq := g.cfg.AggregationFrequency.D()
	streams, err := repo.UnaggregatedStreams(ctx, g.since, batchLimit)
	if err != nil {
		return false, err
	}
	b := &meta.AggregationBatch{Destinations: g.p.destinationNames()}
	saved := map[*meta.Aggregate]bool{}
	var reasons []string
	closeAgg := func(a *meta.Aggregate, reason string) {
		a.CloseMs = nowMs
		b.Close = append(b.Close, a)
		delete(g.open, [2]string{a.Feed, a.Type})
		delete(g.due, a.GUID)
		reasons = append(reasons, reason)
	}
	maxItems, maxBytes := g.cfg.MaxItemsPerAggregate, int64(g.cfg.MaxUncompressedByteSize)
	for _, s := range streams {
		parts := max(s.Parts, 1)
		key := [2]string{s.Feed, s.Type}
		a := g.open[key]
		if !g.cfg.Enabled {
			a = nil
		}
		// A stream is never split: when it does not fit, the aggregate
		// closes first and the stream starts the next (alone, if it is
		// bigger than the limits by itself).
		if a != nil && a.Items > 0 && (a.Items+parts > maxItems || a.Bytes+s.RawSize > maxBytes) {
			closeAgg(a, "full")
			a = nil
		}
		if a == nil {
			a = &meta.Aggregate{Feed: s.Feed, Type: s.Type, GUID: newGUID(), Open: true, CreateMs: nowMs}
			b.New = append(b.New, a)
			g.open[key] = a
			g.due[a.GUID] = mono + freq
		}
		a.Items += parts
		a.Bytes += s.RawSize
		b.Items = append(b.Items, meta.AggregateItem{Aggregate: a, StreamID: s.ID})
		saved[a] = true
		switch {
		case !g.cfg.Enabled:
			closeAgg(a, "unaggregated")
		case a.Items >= maxItems:
			closeAgg(a, "items")
		case a.Bytes >= maxBytes:
			closeAgg(a, "bytes")
		}
	}
	for _, a := range g.open {
		age := now.Sub(time.UnixMilli(a.CreateMs))
		due, ok := g.due[a.GUID]
		if !ok {
			// Read from the database (a start): its age by the clock,
			// which cannot be more than the frequency left nor less
			// than none, however the clock has moved since.
			due = mono + min(max(freq-age, 0), freq)
			g.due[a.GUID] = due
		}
		// By the clock too: one that stepped forward closes aggregates
		// early, which is harmless, and a test's clock moves only so.
		if age >= freq || mono >= due {
			closeAgg(a, "age")
		}
	}
	for a := range saved {
		if a.Open && !contains(b.Close, a) {
			b.Save = append(b.Save, a)
		}
	}
	if len(b.New)+len(b.Items)+len(b.Close) == 0 {
		g.advance(now, len(streams))
		return false, nil
	}
	if err := repo.ApplyAggregation(ctx, b); err != nil {
		return false, fmt.Errorf("aggregate %d streams: %w", len(streams), err)
	}
	for i, a := range b.Close {
		g.p.metrics.closed(reasons[i])
		g.p.log.Debug("aggregate closed", "aggregate", a.ID, "feed", a.Feed, "type", a.Type,
			"items", a.Items, "bytes", a.Bytes, "reason", reasons[i])
	}
	if len(b.Close) > 0 {
		g.p.wakeForwarders()
	}
	g.advance(now, len(streams))
	return len(streams) == batchLimit, nil
}

// advance moves the scan start once every stream before it is assigned.
func (g *aggregator) advance(now time.Time, found int) {
	if found < batchLimit {
		g.since = max(g.since, now.Add(-sinceMargin).UnixMilli())
	}
}

func contains(as []*meta.Aggregate, a *meta.Aggregate) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// newGUID is a random UUID (version 4) naming an aggregate to downstreams.
func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
