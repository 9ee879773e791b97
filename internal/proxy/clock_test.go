package proxy

import (
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// clocks is a wall clock that a test steps at will and a monotonic one
// that only moves forward, for Options.Now and Options.Monotonic.
type clocks struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

func (c *clocks) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *clocks) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// step moves the wall clock by d (back if negative) without time passing.
func (c *clocks) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// pass lets d pass: both clocks move.
func (c *clocks) pass(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.mono += d
}

func openRepo(t *testing.T) *meta.Repo {
	t.Helper()
	repo, err := meta.Open(t.Context(), "", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	return repo
}

// addStream commits a complete stream; the database gives it the real
// clock's time as its status time.
func addStream(t *testing.T, repo *meta.Repo, feed string) int64 {
	t.Helper()
	s := &meta.Stream{Feed: feed, Type: "Raw Events", Node: "n1", Pack: "packs/x.wpk", RawSize: 10, FileSize: 10, Parts: 1}
	if err := repo.Apply(t.Context(), &meta.Batch{Packed: []*meta.Stream{s}}); err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func openAggregates(t *testing.T, repo *meta.Repo) []meta.Aggregate {
	t.Helper()
	as, err := repo.OpenAggregates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return as
}

func aggregatorFor(repo *meta.Repo, c *clocks, freq time.Duration) *aggregator {
	p := New(Options{Repo: repo, Now: c.Now, Monotonic: c.Monotonic,
		Aggregator: config.Aggregator{Enabled: true, MaxItemsPerAggregate: 1000, MaxUncompressedByteSize: 1 << 30,
			AggregationFrequency: config.Duration(freq)}})
	return p.agg
}

// TestAggregatorAfterClockStepsBack: the clock reads an hour ahead (an
// operator's mistake), then is set right. Streams completed after that
// have status times before the scan's start (the last pass's time less
// 3 s), and the full scan that would find them was due a minute after the
// last one by the same clock: they waited an hour to be aggregated.
func TestAggregatorAfterClockStepsBack(t *testing.T) {
	repo := openRepo(t)
	c := &clocks{wall: time.Now().Add(time.Hour)}
	g := aggregatorFor(repo, c, 10*time.Second)
	ctx := t.Context()
	if _, err := g.pass(ctx); err != nil { // the first pass scans everything
		t.Fatal(err)
	}
	c.pass(time.Second)
	if _, err := g.pass(ctx); err != nil {
		t.Fatal(err)
	}
	c.step(-time.Hour)
	addStream(t, repo, "F1")
	c.pass(time.Second)
	if _, err := g.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if as := openAggregates(t, repo); len(as) != 1 || as[0].Items != 1 {
		t.Fatalf("open aggregates after the clock stepped back an hour and a stream came: %+v, want one of 1 item", as)
	}
}

// TestAggregateClosesByAgeAfterClockStepsBack: an aggregate's age was its
// creation time by the clock subtracted from the clock's time now; after
// the clock stepped back an hour it stayed open for the hour and then
// aggregationFrequency, with its streams waiting. The same after a restart
// with the clock earlier than the aggregate's creation.
func TestAggregateClosesByAgeAfterClockStepsBack(t *testing.T) {
	const freq = 10 * time.Second
	repo := openRepo(t)
	c := &clocks{wall: time.Now()}
	g := aggregatorFor(repo, c, freq)
	ctx := t.Context()
	addStream(t, repo, "F1")
	if _, err := g.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if as := openAggregates(t, repo); len(as) != 1 {
		t.Fatalf("open aggregates: %+v, want 1", as)
	}
	c.step(-time.Hour)
	c.pass(freq / 2)
	if _, err := g.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if as := openAggregates(t, repo); len(as) != 1 {
		t.Fatalf("half its time: %d open aggregates, want 1", len(as))
	}
	c.pass(freq / 2)
	if _, err := g.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if as := openAggregates(t, repo); len(as) != 0 {
		t.Fatalf("aggregationFrequency after it was created, with the clock stepped back an hour: %d aggregates still open, want 0", len(as))
	}

	// A restart: an aggregate opened 2 s before the stop, and a clock an
	// hour earlier at the start. It closes aggregationFrequency after the
	// start at the latest.
	addStream(t, repo, "F2")
	if _, err := g.pass(ctx); err != nil {
		t.Fatal(err)
	}
	c.pass(2 * time.Second)
	c2 := &clocks{wall: c.Now().Add(-time.Hour)}
	g2 := aggregatorFor(repo, c2, freq)
	if _, err := g2.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if as := openAggregates(t, repo); len(as) != 1 {
		t.Fatalf("after the restart: %d open aggregates, want 1", len(as))
	}
	c2.pass(freq)
	if _, err := g2.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if as := openAggregates(t, repo); len(as) != 0 {
		t.Fatalf("aggregationFrequency after a start with the clock an hour earlier: %d aggregates still open, want 0", len(as))
	}
}

// TestForwardAfterClockStepsBack: an aggregate's turn (next_ms) is a time
// by the clock: when it closed, or its last failure plus the retry delay.
// After the clock stepped back an hour, a retry due in 10 s waited the
// hour; so did an aggregate closed just before the step, and after a
// restart with the clock set back, the whole queue.
func TestForwardAfterClockStepsBack(t *testing.T) {
	repo := openRepo(t)
	ctx := t.Context()
	c := &clocks{wall: time.Now()}
	dest := &countingDest{refuse: true}
	q := config.Queue{ForwardThreadCount: 2, RetryDelay: config.Duration(10 * time.Second),
		MaxRetryDelay: config.Duration(10 * time.Minute), RetryDelayGrowthFactor: 2, MaxRetryAge: config.Duration(7 * 24 * time.Hour)}
	p := New(Options{Repo: repo, Now: c.Now, Monotonic: c.Monotonic})
	f := newForwarder(p, dest, q)
	closeAggregate := func(feed string) {
		t.Helper()
		id := addStream(t, repo, feed)
		a := &meta.Aggregate{Feed: feed, Type: "Raw Events", GUID: newGUID(), Open: true, Items: 1, Bytes: 10,
			CreateMs: c.Now().UnixMilli(), CloseMs: c.Now().UnixMilli()}
		if err := repo.ApplyAggregation(ctx, &meta.AggregationBatch{New: []*meta.Aggregate{a},
			Items: []meta.AggregateItem{{Aggregate: a, StreamID: id}}, Close: []*meta.Aggregate{a},
			Destinations: []string{dest.Name()}}); err != nil {
			t.Fatal(err)
		}
	}
	dispatch := func(f *forwarder, want int64, why string) {
		t.Helper()
		if _, err := f.dispatch(ctx); err != nil {
			t.Fatal(err)
		}
		f.wg.Wait()
		if n := dest.sends.Load(); n != want {
			t.Fatalf("%s: %d sends, want %d", why, n, want)
		}
	}

	closeAggregate("F1")
	dispatch(f, 1, "a closed aggregate")
	c.pass(time.Second)
	dispatch(f, 1, "a second later (its retry is due in 10 s)")
	c.step(-time.Hour)
	dispatch(f, 2, "the clock stepped back an hour: its retry")

	closeAggregate("F2") // closed now, queued for now
	c.step(-time.Hour)
	dispatch(f, 4, "another hour back: the retry and the newly closed aggregate")

	// A restart with the clock two hours earlier still.
	c.step(-2 * time.Hour)
	f2 := newForwarder(p, dest, q)
	dispatch(f2, 6, "a start with the clock two hours earlier")
	c.pass(time.Second)
	dispatch(f2, 6, "a second later: no retry is due")
}
