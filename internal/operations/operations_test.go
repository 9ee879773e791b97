package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/logtest"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// engines are the databases the tests run on: SQLite always, PostgreSQL
// when WEIR_TEST_POSTGRES_DSN is set (the subtest is skipped otherwise).
var engines = []struct {
	name string
	dsn  func(t *testing.T) string
}{
	{"sqlite", func(*testing.T) string { return "" }},
	{"postgres", func(t *testing.T) string { return metatest.PostgresDSN(t) }},
}

// db is one test database; open returns another repository on it (as
// another node would have).
type db struct {
	t       *testing.T
	dsn     string
	dataDir string
}

func (d db) open() *meta.Repo {
	d.t.Helper()
	r, err := meta.Open(context.Background(), d.dsn, d.dataDir, nil)
	if err != nil {
		d.t.Fatalf("open repo: %v", err)
	}
	d.t.Cleanup(func() { _ = r.Close() })
	return r
}

func forEachEngine(t *testing.T, fn func(t *testing.T, d db)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			fn(t, db{t: t, dsn: e.dsn(t), dataDir: t.TempDir()})
		})
	}
}

// fast are options for tests: short intervals so that heartbeats and polls
// happen within the test's time. The lease is long enough that a loaded
// machine (race detector, parallel tests, SQLite fsyncs) never lets it
// lapse under a running operation; tests of expiry shorten it.
func fast(repo Repo, node string) Options {
	return Options{Repo: repo, Node: node, Lease: 10 * time.Second, Heartbeat: 20 * time.Millisecond,
		Poll: 20 * time.Millisecond}
}

// shortLease is the lease of the tests that wait for one to lapse.
const shortLease = 800 * time.Millisecond

func fastShortLease(repo Repo, node string) Options {
	o := fast(repo, node)
	o.Lease = shortLease
	return o
}

func start(t *testing.T, opt Options, handlers map[string]Handler) *Service {
	t.Helper()
	s := New(opt)
	for k, h := range handlers {
		s.Register(k, h)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// waitFor polls the operation until cond holds or a generous deadline
// passes (a bound on hangs, never a measure of speed).
func waitFor(t *testing.T, s *Service, id, what string, cond func(meta.Operation) bool) meta.Operation {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		op, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if cond(op) {
			return op
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, op)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func final(op meta.Operation) bool { return op.State.Final() }

func TestProgressResultAndFailure(t *testing.T) {
	forEachEngine(t, func(t *testing.T, d db) {
		step := make(chan struct{})
		s := start(t, fast(d.open(), "node-1"), map[string]Handler{
			"count": func(ctx context.Context, run *Run) (any, error) {
				var req struct{ N int64 }
				if err := run.Decode(&req); err != nil {
					return nil, err
				}
				for i := range req.N {
					run.Progress(i, req.N)
					select {
					case <-step:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				run.Progress(req.N, req.N)
				return map[string]int64{"counted": req.N}, nil
			},
			"fail": func(context.Context, *Run) (any, error) { return nil, errors.New("the zip has no entries") },
			"panic": func(context.Context, *Run) (any, error) {
				var m map[string]int
				m["x"] = 1 // a handler bug
				return nil, nil
			},
		})
		ctx := context.Background()
		if _, err := s.Submit(ctx, "nope", "alice", nil); !errors.Is(err, ErrUnknownKind) {
			t.Fatalf("unknown kind: %v", err)
		}
		id, err := s.Submit(ctx, "count", "alice", map[string]int{"N": 3})
		if err != nil {
			t.Fatal(err)
		}
		op := waitFor(t, s, id, "running", func(op meta.Operation) bool { return op.State == meta.OpRunning })
		if op.Node != "node-1" || op.Owner != "alice" || op.Kind != "count" {
			t.Fatalf("running %+v", op)
		}
		for i := range int64(3) {
			waitFor(t, s, id, fmt.Sprintf("progress %d/3", i), func(op meta.Operation) bool { return op.Done == i && op.Total == 3 })
			step <- struct{}{}
		}
		op = waitFor(t, s, id, "finished", final)
		if op.State != meta.OpSucceeded || op.Result != `{"counted":3}` || op.Done != 3 || op.Total != 3 || op.FinishMs == 0 || op.LeaseMs != 0 {
			t.Fatalf("finished %+v", op)
		}

		id, _ = s.Submit(ctx, "fail", "bob", nil)
		op = waitFor(t, s, id, "failed", final)
		if op.State != meta.OpFailed || op.Error != "the zip has no entries" || op.Result != "{}" {
			t.Fatalf("failed %+v", op)
		}
		id, _ = s.Submit(ctx, "panic", "bob", nil)
		op = waitFor(t, s, id, "panicked", final)
		if op.State != meta.OpFailed || op.Error != "internal error; the server log has the details" {
			t.Fatalf("panicked %+v", op)
		}
		ops, err := s.List(ctx, meta.OperationFilter{Owner: "bob"})
		if err != nil || len(ops) != 2 {
			t.Fatalf("list bob: %v %v", ops, err)
		}
	})
}

// blocking is a handler that reports it started and runs until its
// context ends, then returns the cause.
func blocking(started chan<- string) Handler {
	return func(ctx context.Context, run *Run) (any, error) {
		run.Progress(1, 10)
		started <- run.Op.ID
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
}

func TestCancel(t *testing.T) {
	forEachEngine(t, func(t *testing.T, d db) {
		ctx := context.Background()
		started := make(chan string, 4)
		// Two nodes: one runs the operation, the other cancels it, so the
		// worker learns of the cancellation from its heartbeat.
		runner := start(t, fast(d.open(), "node-1"), map[string]Handler{"block": blocking(started)})
		other := New(fast(d.open(), "node-2"))
		other.Register("block", blocking(started)) // registered, never started: it only submits and cancels

		for _, canceller := range []*Service{runner, other} {
			id, err := other.Submit(ctx, "block", "alice", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := <-started; got != id {
				t.Fatalf("started %s, want %s", got, id)
			}
			op, err := canceller.Cancel(ctx, id)
			if err != nil || op.State != meta.OpCancelled {
				t.Fatalf("cancel: %+v %v", op, err)
			}
			// The worker stops and records nothing over the cancellation.
			waitFor(t, runner, id, "worker to let go", func(meta.Operation) bool {
				runner.mu.Lock()
				defer runner.mu.Unlock()
				return runner.running[id] == nil
			})
			if op, _ := runner.Get(ctx, id); op.State != meta.OpCancelled {
				t.Fatalf("after the worker stopped: %+v", op)
			}
			if _, err := canceller.Cancel(ctx, id); !errors.Is(err, meta.ErrFinal) {
				t.Fatalf("second cancel: %v", err)
			}
		}

		// A pending operation is cancelled before any worker takes it.
		parked := New(fast(d.open(), "node-3"))
		parked.Register("park", blocking(started))
		id, _ := parked.Submit(ctx, "park", "alice", nil)
		if op, err := parked.Cancel(ctx, id); err != nil || op.State != meta.OpCancelled {
			t.Fatalf("cancel pending: %+v %v", op, err)
		}
		parked.Start()
		t.Cleanup(parked.Close)
		time.Sleep(100 * time.Millisecond) // a few polls: nothing may claim it
		select {
		case got := <-started:
			t.Fatalf("cancelled pending operation %s ran", got)
		default:
		}
	})
}

// TestRestartResumes closes a service while its operation runs; a service
// started later on the same database (another node, or the same node after
// a restart) takes it over once the lease lapses and completes it.
func TestRestartResumes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, d db) {
		ctx := context.Background()
		for _, node2 := range []string{"node-2", "node-1"} {
			started := make(chan string, 1)
			s1 := New(fastShortLease(d.open(), "node-1"))
			s1.Register("work", func(ctx context.Context, run *Run) (any, error) {
				run.Progress(4, 10)
				started <- run.Op.ID
				<-ctx.Done()
				return nil, ctx.Err()
			})
			s1.Start()
			id, err := s1.Submit(ctx, "work", "alice", map[string]string{"file": "x.zip"})
			if err != nil {
				t.Fatal(err)
			}
			<-started
			waitFor(t, s1, id, "progress written", func(op meta.Operation) bool { return op.Done == 4 })
			s1.Close()
			op, _ := s1.Get(ctx, id)
			if op.State != meta.OpRunning || op.Node != "node-1" || op.LeaseMs == 0 {
				t.Fatalf("after Close: %+v", op)
			}
			closed := time.Now()

			var mu sync.Mutex
			var resumed []meta.Operation
			s2 := start(t, fastShortLease(d.open(), node2), map[string]Handler{"work": func(ctx context.Context, run *Run) (any, error) {
				mu.Lock()
				resumed = append(resumed, run.Op)
				mu.Unlock()
				var req struct{ File string }
				if err := run.Decode(&req); err != nil {
					return nil, err
				}
				run.Progress(10, 10)
				return map[string]string{"file": req.File}, nil
			}})
			op = waitFor(t, s2, id, "resumed operation to finish", final)
			if op.State != meta.OpSucceeded || op.Node != node2 || op.Result != `{"file":"x.zip"}` || op.Done != 10 {
				t.Fatalf("resumed: %+v", op)
			}
			mu.Lock()
			if len(resumed) != 1 || resumed[0].Done != 4 || resumed[0].Total != 10 {
				t.Fatalf("handler runs on the second service: %+v", resumed)
			}
			mu.Unlock()
			// Taken over only after the lease lapsed, not before.
			if d := time.UnixMilli(op.FinishMs).Sub(closed); d < shortLease/2 {
				t.Errorf("resumed %s after Close, before the lease (%s) lapsed", d, shortLease)
			}
			s2.Close()
		}
	})
}

// TestTwoNodes runs two services on one database: every operation runs
// exactly once.
func TestTwoNodes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, d db) {
		ctx := context.Background()
		var mu sync.Mutex
		runs := map[string][]string{}
		handler := func(node string) Handler {
			return func(ctx context.Context, run *Run) (any, error) {
				mu.Lock()
				runs[run.Op.ID] = append(runs[run.Op.ID], node)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				return map[string]string{"node": node}, nil
			}
		}
		a := start(t, fast(d.open(), "node-a"), map[string]Handler{"job": handler("node-a")})
		b := start(t, fast(d.open(), "node-b"), map[string]Handler{"job": handler("node-b")})
		var ids []string
		for i := range 30 {
			id, err := []*Service{a, b}[i%2].Submit(ctx, "job", "alice", i)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			op := waitFor(t, a, id, "job", final)
			var res struct{ Node string }
			if err := json.Unmarshal([]byte(op.Result), &res); err != nil || op.State != meta.OpSucceeded || res.Node != op.Node {
				t.Fatalf("job %+v", op)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if len(runs[id]) != 1 {
				t.Errorf("%s ran on %v", id, runs[id])
			}
		}
	})
}

// unanswering is a repository whose lease renewals get no answer while
// held is set: each returns only when its context ends, as a call to a
// PostgreSQL server cut off by a partition does (the connection stays
// open, nothing comes back).
type unanswering struct {
	Repo
	held atomic.Bool
}

func (u *unanswering) RenewOperation(ctx context.Context, id, node string, heldLease, newLease, done, total, nowMs int64) error {
	if u.held.Load() {
		<-ctx.Done()
		return fmt.Errorf("renew operation %s: %w", id, ctx.Err())
	}
	return u.Repo.RenewOperation(ctx, id, node, heldLease, newLease, done, total, nowMs)
}

// TestRenewalUnanswered: while the database does not answer the lease's
// renewals, the lease lapses and the operation is stopped on this node, as
// when renewals fail; another worker may take it over by then. Before the
// fix the renewal waited for ever (its context had no deadline), the
// heartbeat with it, and the operation went on running after its lease
// had lapsed.
func TestRenewalUnanswered(t *testing.T) {
	forEachEngine(t, func(t *testing.T, d db) {
		repo := &unanswering{Repo: d.open()}
		started := make(chan struct{})
		stopped := make(chan error, 1)
		s := start(t, fastShortLease(repo, "node-1"), map[string]Handler{
			"wait": func(ctx context.Context, r *Run) (any, error) {
				close(started)
				<-ctx.Done()
				stopped <- context.Cause(ctx)
				return nil, ctx.Err()
			},
		})
		if _, err := s.Submit(context.Background(), "wait", "alice", struct{}{}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the operation did not start")
		}
		repo.held.Store(true)
		// A bound on a hang, far above the lease: not a measure of speed.
		select {
		case cause := <-stopped:
			if !errors.Is(cause, errLost) {
				t.Errorf("stopped by %v, want the lease's loss", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the operation still runs 30 s after its renewals stopped being answered (lease %v)", shortLease)
		}
		repo.held.Store(false)
	})
}

// unclaimable is a repository whose claims fail while down is set, as
// when the database refuses connections.
type unclaimable struct {
	Repo
	down atomic.Bool
}

func (u *unclaimable) ClaimOperation(ctx context.Context, node string, kinds []string, nowMs, leaseMs int64) (meta.Operation, bool, error) {
	if u.down.Load() {
		return meta.Operation{}, false, errors.New("claim operation: failed to connect to the database: connection refused")
	}
	return u.Repo.ClaimOperation(ctx, node, kinds, nowMs, leaseMs)
}

// TestClaimFailuresLogged: while the database is down, the idle workers'
// failed claims are logged once (then at most once a minute), not once
// per worker per poll interval (an error every second by default, for as
// long as the outage lasted), and the recovery once; operations submitted
// meanwhile run when it is back.
func TestClaimFailuresLogged(t *testing.T) {
	forEachEngine(t, func(t *testing.T, d db) {
		repo := &unclaimable{Repo: d.open()}
		logs := &logtest.Counter{}
		opt := fast(repo, "node-1")
		opt.Log = slog.New(logs)
		repo.down.Store(true)
		ran := make(chan struct{})
		s := start(t, opt, map[string]Handler{
			"noop": func(context.Context, *Run) (any, error) { close(ran); return nil, nil },
		})
		// Many polls (20 ms each) of both workers fail meanwhile.
		time.Sleep(time.Second)
		if n := logs.Count("claim operation"); n != 1 {
			t.Errorf("%d failed claims logged during the outage, want 1", n)
		}
		repo.down.Store(false)
		if _, err := s.Submit(context.Background(), "noop", "alice", struct{}{}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ran:
		case <-time.After(20 * time.Second):
			t.Fatal("the operation did not run after the outage")
		}
		for deadline := time.Now().Add(20 * time.Second); logs.Count("claiming operations works again") != 1; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the recovery was logged %d times, want once", logs.Count("claiming operations works again"))
			}
		}
	})
}

// TestCancelElsewhereAfterClockStepsBack: a running operation's worker
// renews its lease every heartbeat, and a renewal is how it learns of a
// cancellation made on another node. After its clock stepped back an hour
// it skipped every renewal ("the clock has not moved on enough") until
// the clock came back to the lease: the operation went on for the hour
// after it was cancelled, and its progress was not written.
func TestCancelElsewhereAfterClockStepsBack(t *testing.T) {
	forEachEngine(t, func(t *testing.T, d db) {
		ctx := context.Background()
		var offset atomic.Int64
		optA := fast(d.open(), "node-a")
		optA.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		started, stopped := make(chan struct{}), make(chan struct{})
		a := start(t, optA, map[string]Handler{"job": func(ctx context.Context, run *Run) (any, error) {
			close(started)
			<-ctx.Done()
			close(stopped)
			return nil, ctx.Err()
		}})
		b := start(t, fast(d.open(), "node-b"), nil) // runs nothing
		id, err := a.Submit(ctx, "job", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		offset.Store(int64(-time.Hour))
		time.Sleep(100 * time.Millisecond) // a few heartbeats on the stepped clock
		if _, err := b.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Fatal("the operation was cancelled on another node and still runs 20 s later (heartbeat 20 ms)")
		}
	})
}
