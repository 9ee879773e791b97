package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/repeatlog"
	"github.com/weirhq/weir/internal/store"
)

// Target is a destination with its queue settings.
type Target struct {
	Destination Destination
	Queue       config.Queue
}

// Options wires a Proxy.
type Options struct {
	Repo        *meta.Repo
	Store       *store.Store
	Aggregator  config.Aggregator
	Targets     []Target
	Repository  config.Repository
	DataDir     string   // the volume whose free space is watched
	LogMetaKeys []string // attributes each send-log line carries
	Log         *slog.Logger
	SendLog     *slog.Logger // one line per forward attempt
	Registry    prometheus.Registerer
	Now         func() time.Time
	// Monotonic reads a clock that never steps: how long aggregates have
	// been open and when the aggregator's full scan is due are measured
	// on it, not on Now, which an NTP step or an operator can move. nil:
	// the time since New, measured monotonically.
	Monotonic func() time.Duration
}

// Proxy aggregates stored posts and forwards them.
type Proxy struct {
	opt        Options
	repo       *meta.Repo
	store      *store.Store
	log        *slog.Logger
	sendLog    *slog.Logger
	now        func() time.Time
	mono       func() time.Duration
	metrics    *metrics
	agg        *aggregator
	forwarders []*forwarder

	housekeepFail *repeatlog.Failures // failed housekeeping: one a second while the database is down

	pending atomic.Int64 // bytes in the repository: recounted by housekeeping, and added to by each post stored
	free    atomic.Int64 // free bytes on the data volume (-1: unknown)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// failureLogInterval is the least time between two logged failures of a
// task that retries every second or so (aggregation, forwarding's queue
// reads, housekeeping) while they keep failing, as while the database is
// down: the first is logged, then one a minute, then the recovery.
const failureLogInterval = time.Minute

// New builds a Proxy; Start runs it.
func New(opt Options) *Proxy {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.SendLog == nil {
		opt.SendLog = opt.Log
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Monotonic == nil {
		start := time.Now()
		opt.Monotonic = func() time.Duration { return time.Since(start) }
	}
	p := &Proxy{opt: opt, repo: opt.Repo, store: opt.Store, log: opt.Log, sendLog: opt.SendLog, now: opt.Now,
		mono: opt.Monotonic, metrics: newMetrics(opt.Registry), housekeepFail: repeatlog.New(failureLogInterval)}
	p.free.Store(-1)
	p.agg = newAggregator(p, opt.Aggregator)
	for _, t := range opt.Targets {
		p.forwarders = append(p.forwarders, newForwarder(p, t.Destination, t.Queue))
		p.metrics.setLive(t.Destination.Name(), true)
	}
	return p
}

// Start cleans up what a crash left (streams of aggregates that were
// delivered everywhere) and starts aggregating and forwarding.
func (p *Proxy) Start(ctx context.Context) error {
	if err := p.cleanUp(ctx); err != nil {
		return err
	}
	if err := p.housekeep(ctx); err != nil {
		return err
	}
	p.warnUnknownDestinations(ctx)
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.wg.Add(2 + len(p.forwarders))
	go func() { defer p.wg.Done(); p.agg.run(ctx) }()
	go func() { defer p.wg.Done(); p.housekeeping(ctx) }()
	for _, f := range p.forwarders {
		go func() { defer p.wg.Done(); f.run(ctx) }()
	}
	return nil
}

// Stop stops aggregating and forwarding and waits for sends in flight to
// end (they are interrupted; an interrupted send is sent again at the next
// start).
func (p *Proxy) Stop() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

// Stored tells the proxy that a post was stored.
func (p *Proxy) Stored(fileBytes int64) {
	// Counted at once, so that repository.maxSize holds between
	// housekeeping's recounts: a second's worth of posts could otherwise
	// all be admitted past it.
	p.pending.Add(fileBytes)
	p.agg.wake()
}

func (p *Proxy) wakeForwarders() {
	for _, f := range p.forwarders {
		f.wake()
	}
}

func (p *Proxy) destinationNames() []string {
	names := make([]string, len(p.forwarders))
	for i, f := range p.forwarders {
		names[i] = f.dest.Name()
	}
	return names
}

// ErrFull is returned by Admit while the repository is full.
var ErrFull = errors.New("the proxy's repository is full")

// Admit refuses new posts while the repository holds more than its
// maximum or the data volume is nearly full, so that forwarding can drain
// it; senders get 503 and retry.
func (p *Proxy) Admit() error {
	r := p.opt.Repository
	if r.MaxSize > 0 && p.pending.Load() >= int64(r.MaxSize) {
		return fmt.Errorf("%w: %s waiting to be forwarded (repository.maxSize %s)", ErrFull, config.ByteSize(p.pending.Load()), r.MaxSize)
	}
	// The sample is up to a second old; a refusal looks again, so that
	// posts are accepted as soon as space returns, not a tick later.
	low := func(free int64) bool { return free >= 0 && free < int64(r.MinFreeSpace) }
	if low(p.free.Load()) {
		if free := p.sampleFree(); low(free) {
			return fmt.Errorf("%w: the data volume has %s free (repository.minFreeSpace %s)", ErrFull, config.ByteSize(free), r.MinFreeSpace)
		}
	}
	return nil
}

// housekeeping refreshes the repository size, free space and queue
// metrics, and removes what finished aggregates left.
func (p *Proxy) housekeeping(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.housekeep(ctx); ctx.Err() == nil {
				p.housekeepFail.Observe(p.log, slog.LevelWarn, err,
					"proxy housekeeping failed; retrying every second, logged at most once a minute", "proxy housekeeping works again")
			}
		}
	}
}

func (p *Proxy) housekeep(ctx context.Context) error {
	n, err := p.repo.PendingBytes(ctx)
	if err != nil {
		return err
	}
	p.pending.Store(n)
	p.metrics.repositoryBytes.Set(float64(n))
	p.sampleFree()
	sums, err := p.repo.SummariseForwards(ctx)
	if err != nil {
		return err
	}
	p.metrics.setQueues(p.destinationNames(), sums, p.now())
	return nil
}

// sampleFree records and returns the space free on the data volume: -1
// without a data directory, the previous sample if statfs fails.
func (p *Proxy) sampleFree() int64 {
	if p.opt.DataDir == "" {
		return -1
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(p.opt.DataDir, &st); err != nil {
		return p.free.Load()
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	p.free.Store(free)
	return free
}

// cleanUp finishes deletions a crash interrupted: aggregates delivered
// everywhere whose rows were not yet removed, and the data of streams
// marked DELETED.
func (p *Proxy) cleanUp(ctx context.Context) error {
	if _, err := p.repo.FinishedAggregates(ctx); err != nil {
		return err
	}
	ss, err := p.repo.DeletedStreams(ctx, math.MaxInt32)
	if err != nil {
		return err
	}
	return p.removeStreams(ctx, ss)
}

// removeStreams removes the data of delivered (DELETED) streams, then
// their rows. A crash in between leaves rows that the next start removes;
// a small stream's pack goes with the last stream in it.
func (p *Proxy) removeStreams(ctx context.Context, ss []meta.Stream) error {
	ids, err := p.store.RemoveDeleted(ctx, ss)
	if err != nil {
		p.log.Error("cannot remove forwarded streams' data; the next start will", "err", err)
	}
	if err := p.repo.PurgeStreams(ctx, ids); err != nil {
		p.log.Error("cannot remove forwarded streams' rows; the next start will", "err", err)
		return err
	}
	return err
}

// warnUnknownDestinations names destinations that still have items but
// are no longer configured: those items stay until the destination comes
// back (or an operator deletes them).
func (p *Proxy) warnUnknownDestinations(ctx context.Context) {
	sums, err := p.repo.SummariseForwards(ctx)
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, n := range p.destinationNames() {
		known[n] = true
	}
	for _, s := range sums {
		if !known[s.Destination] {
			p.log.Warn("items are queued for a destination that is not configured; they wait until it is",
				"destination", s.Destination, "state", meta.QueueState(s.State, s.Retrying), "count", s.Count)
		}
	}
}

// Problems lists what makes the proxy not ready (for /readyz).
func (p *Proxy) Problems() []string {
	var out []string
	if err := p.Admit(); err != nil {
		out = append(out, err.Error())
	}
	return out
}
