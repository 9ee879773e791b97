package proxy

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/logtest"
	"github.com/weirhq/weir/internal/meta"
)

// countingDest counts the sends that reach it, and accepts them all or,
// with refuse, answers every one 503.
type countingDest struct {
	sends  atomic.Int64
	refuse bool
}

func (d *countingDest) Name() string               { return "counting" }
func (d *countingDest) Target() string             { return "nowhere" }
func (d *countingDest) Live(context.Context) error { return nil }
func (d *countingDest) HasLiveness() bool          { return false }
func (d *countingDest) Send(context.Context, meta.Aggregate, *attr.Map, func(io.Writer) error) Outcome {
	d.sends.Add(1)
	if d.refuse {
		return Outcome{HTTPStatus: 503, Message: "busy"}
	}
	return Outcome{OK: true}
}

// TestSendWaitsWhenTheQueueCannotBeRead: when an aggregate's streams
// cannot be listed nothing is recorded, so the aggregate stays due; the
// send must hold its worker a while before it ends (and wakes the
// dispatcher), or the forwarder would retry as fast as the database fails.
// It gives up waiting when the proxy stops.
func TestSendWaitsWhenTheQueueCannotBeRead(t *testing.T) {
	repo, err := meta.Open(t.Context(), "", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Close(); err != nil { // every query fails from now on
		t.Fatal(err)
	}
	dest := &countingDest{}
	p := New(Options{Repo: repo})
	f := newForwarder(p, dest, config.Queue{ForwardThreadCount: 1})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.send(ctx, meta.Forward{Aggregate: meta.Aggregate{ID: 1, Feed: "F"}, Destination: dest.Name()})
	}()
	select {
	case <-done:
		t.Fatal("send returned at once after failing to list the aggregate's streams")
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("send did not end when the proxy stopped")
	}
	if n := dest.sends.Load(); n != 0 {
		t.Errorf("%d sends reached the destination without the aggregate's streams", n)
	}
}

// TestDatabaseDownLoggedOnce: while the database is down, the proxy's
// tasks that retry every second or so (aggregation, each forwarder's
// queue reads, housekeeping) log their failure once, not once a try.
func TestDatabaseDownLoggedOnce(t *testing.T) {
	repo, err := meta.Open(t.Context(), "", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Close(); err != nil { // every query fails from now on
		t.Fatal(err)
	}
	logs := &logtest.Counter{}
	p := New(Options{Repo: repo, Log: slog.New(logs),
		Aggregator: config.Aggregator{AggregationFrequency: config.Duration(100 * time.Millisecond)}})
	f := newForwarder(p, &countingDest{}, config.Queue{ForwardThreadCount: 1})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context){p.agg.run, f.run, p.housekeeping} {
		wg.Go(func() { run(ctx) })
	}
	// Tries meanwhile: aggregation every 25 ms, the queue every 2 s,
	// housekeeping every second.
	time.Sleep(4500 * time.Millisecond)
	cancel()
	wg.Wait()
	for _, m := range []string{"aggregation failed", "forwarding: cannot read the queue", "proxy housekeeping failed"} {
		if n := logs.Count(m); n != 1 {
			t.Errorf("%q logged %d times in 4.5 s, want once", m, n)
		}
	}
}
