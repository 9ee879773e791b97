// Package operations runs accepted-then-poll work: a caller submits an
// operation (a kind, an owner and a JSON request) and gets its id at once;
// workers on any node claim it from the operations table, run the kind's
// handler, report progress and record the result or the error there. Any
// node can answer for any operation because all of its state is in the
// database.
//
// A worker holds an operation with a lease that it renews while the
// handler runs. When a node stops (Close) or dies, its running operations
// keep their lease; once it lapses, a worker on any node claims them again
// and runs the handler from the start, so handlers must be safe to re-run.
package operations

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/repeatlog"
)

// Handler runs one operation. It returns the result (encoded as JSON) or
// an error, which fails the operation with the error's text, so the text
// should tell the owner what went wrong. ctx ends when the operation is
// cancelled, the worker loses its claim, or the service closes; what the
// handler returns then is discarded.
type Handler func(ctx context.Context, run *Run) (result any, err error)

// Repo is the part of the metadata repository the service needs.
type Repo interface {
	CreateOperation(ctx context.Context, op *meta.Operation) error
	GetOperation(ctx context.Context, id string) (meta.Operation, error)
	ListOperations(ctx context.Context, f meta.OperationFilter) ([]meta.Operation, error)
	ClaimOperation(ctx context.Context, node string, kinds []string, nowMs, leaseMs int64) (meta.Operation, bool, error)
	RenewOperation(ctx context.Context, id, node string, heldLease, newLease, done, total, nowMs int64) error
	FinishOperation(ctx context.Context, id, node string, heldLease int64, state meta.OpState, result, errText string, done, total, nowMs int64) error
	CancelOperation(ctx context.Context, id string, nowMs int64) (meta.Operation, error)
}

// Options configures a Service. Zero durations take the defaults.
type Options struct {
	Repo    Repo
	Node    string // this node's name, recorded on the operations it runs
	Workers int    // operations run at once on this node; default 2
	// Lease is how long a claim lasts without renewal: how long a stopped
	// or dead node's operations wait before another worker takes them
	// over. Default 30s.
	Lease time.Duration
	// Heartbeat is how often a running operation's progress is written and
	// its lease renewed; it also bounds how long a cancellation on another
	// node takes to stop it. Default 1s; at most Lease/3.
	Heartbeat time.Duration
	// Poll is how often an idle worker looks for work that was not
	// submitted through this service (other nodes, lapsed leases).
	// Default 2s.
	Poll time.Duration
	Log  *slog.Logger
	Now  func() time.Time
}

// Service submits, reports and runs operations.
type Service struct {
	opt      Options
	handlers map[string]Handler
	kinds    []string
	wake     chan struct{}

	ctx     context.Context // ends at Close, with cause errClosing
	stop    context.CancelCauseFunc
	wg      sync.WaitGroup
	started bool

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // operations running here, to cancel without waiting for a heartbeat

	claimLog *repeatlog.Failures // what the workers logged of failed claims
}

// claimLogInterval is the least time between two logged failures of the
// claims, while they keep failing: every worker polls every Poll (2 s), so
// a database that is down for an hour logged an error per worker every
// 2 s.
const claimLogInterval = time.Minute

// Errors a Handler's context can end with (context.Cause).
var (
	ErrCancelled = errors.New("operation cancelled")
	errLost      = errors.New("operation claimed by another worker")
	errClosing   = errors.New("operations service closing")
)

// ErrUnknownKind is returned by Submit for a kind without a handler.
var ErrUnknownKind = errors.New("unknown operation kind")

// New makes a service; Register the kinds it runs, then Start it.
func New(opt Options) *Service {
	if opt.Workers <= 0 {
		opt.Workers = 2
	}
	if opt.Lease <= 0 {
		opt.Lease = 30 * time.Second
	}
	if opt.Heartbeat <= 0 {
		opt.Heartbeat = time.Second
	}
	// A few renewals fit in a lease, so one slow database write does not
	// let the lease lapse under a running operation.
	opt.Heartbeat = min(opt.Heartbeat, opt.Lease/3)
	if opt.Poll <= 0 {
		opt.Poll = 2 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	ctx, stop := context.WithCancelCause(context.Background())
	return &Service{opt: opt, handlers: map[string]Handler{}, wake: make(chan struct{}, 1),
		ctx: ctx, stop: stop, running: map[string]context.CancelCauseFunc{},
		claimLog: repeatlog.New(claimLogInterval)}
}

// Register sets the handler of a kind. It must be called before Start.
func (s *Service) Register(kind string, h Handler) {
	if s.started {
		panic("operations: Register after Start")
	}
	if _, ok := s.handlers[kind]; !ok {
		s.kinds = append(s.kinds, kind)
	}
	s.handlers[kind] = h
}

// Start starts the workers.
func (s *Service) Start() {
	if s.started {
		return
	}
	s.started = true
	for range s.opt.Workers {
		s.wg.Go(s.work)
	}
}

// Close stops the workers and waits for them. Operations running here are
// interrupted but keep their state and lease: after the lease lapses a
// worker (on any node, this one after a restart) runs them again.
func (s *Service) Close() {
	s.stop(errClosing)
	s.wg.Wait()
}

// NewID returns a new operation id: a random (version 4) UUID.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Submit stores a new PENDING operation with a new id and wakes a worker.
func (s *Service) Submit(ctx context.Context, kind, owner string, request any) (string, error) {
	id := NewID()
	return id, s.SubmitID(ctx, id, kind, owner, request)
}

// SubmitID is Submit with an id the caller chose (with NewID), for work
// that must know its id before it is submitted, such as a staged upload.
func (s *Service) SubmitID(ctx context.Context, id, kind, owner string, request any) error {
	if _, ok := s.handlers[kind]; !ok {
		return fmt.Errorf("submit %q operation: %w", kind, ErrUnknownKind)
	}
	req, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("submit %s operation: encode request: %w", kind, err)
	}
	op := &meta.Operation{ID: id, Kind: kind, Owner: owner, Request: string(req), CreateMs: s.opt.Now().UnixMilli()}
	if err := s.opt.Repo.CreateOperation(ctx, op); err != nil {
		return fmt.Errorf("submit %s operation: %w", kind, err)
	}
	s.signal()
	return nil
}

// signal wakes one idle worker, if any is waiting; the buffered channel
// keeps one wake-up for a worker that is about to wait.
func (s *Service) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Get returns an operation (wrapping meta.ErrNotFound when there is none).
func (s *Service) Get(ctx context.Context, id string) (meta.Operation, error) {
	return s.opt.Repo.GetOperation(ctx, id)
}

// List returns the operations of owner ("" for everyone's), newest first.
func (s *Service) List(ctx context.Context, f meta.OperationFilter) ([]meta.Operation, error) {
	return s.opt.Repo.ListOperations(ctx, f)
}

// Cancel cancels a PENDING or RUNNING operation. One running on this node
// stops at once; one running elsewhere at its worker's next heartbeat.
// A finished operation gives an error wrapping meta.ErrFinal.
func (s *Service) Cancel(ctx context.Context, id string) (meta.Operation, error) {
	op, err := s.opt.Repo.CancelOperation(ctx, id, s.opt.Now().UnixMilli())
	if err != nil {
		return op, err
	}
	s.mu.Lock()
	cancel := s.running[id]
	s.mu.Unlock()
	if cancel != nil {
		cancel(ErrCancelled)
	}
	return op, nil
}

// work is one worker: claim, run, repeat; wait for a wake-up or the poll
// interval when there is nothing to claim.
func (s *Service) work() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if s.ctx.Err() != nil {
			return
		}
		now := s.opt.Now()
		op, ok, err := s.opt.Repo.ClaimOperation(s.ctx, s.opt.Node, s.kinds, now.UnixMilli(), now.Add(s.opt.Lease).UnixMilli())
		if s.ctx.Err() == nil {
			s.claimLog.Observe(s.opt.Log, slog.LevelError, err,
				"claim operation; trying again every poll interval, logged at most once a minute",
				"claiming operations works again")
		}
		if ok {
			// There may be more: let an idle worker look too.
			s.signal()
			s.run(op)
			continue
		}
		timer.Reset(s.opt.Poll)
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// Run is a running operation as its handler sees it.
type Run struct {
	Op    meta.Operation // as claimed
	done  atomic.Int64
	total atomic.Int64
}

// Progress reports how much of the work is done, in any unit that both
// numbers share. It is written to the operation at the next heartbeat.
func (r *Run) Progress(done, total int64) {
	r.done.Store(done)
	r.total.Store(total)
}

// Decode decodes the operation's request into v.
func (r *Run) Decode(v any) error {
	if err := json.Unmarshal([]byte(r.Op.Request), v); err != nil {
		return fmt.Errorf("operation %s: decode %s request: %w", r.Op.ID, r.Op.Kind, err)
	}
	return nil
}

// run runs one claimed operation to its end, or until the service closes,
// the operation is cancelled or the claim is lost.
func (s *Service) run(op meta.Operation) {
	log := s.opt.Log.With("operation", op.ID, "kind", op.Kind, "owner", op.Owner)
	log.Info("operation started", "done", op.Done, "total", op.Total)
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	s.mu.Lock()
	s.running[op.ID] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, op.ID)
		s.mu.Unlock()
	}()

	r := &Run{Op: op}
	lease := op.LeaseMs // the claim's token: every write is conditional on it
	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	go func() {
		defer close(hbStopped)
		lease = s.heartbeat(ctx, cancel, r, lease, hbDone, log)
	}()

	start := s.opt.Now()
	result, err := s.call(ctx, op, r, log)
	close(hbDone)
	<-hbStopped

	if err != nil && ctx.Err() != nil {
		// Interrupted: the outcome belongs to whoever holds the operation
		// now (a cancellation, another worker, or this node after restart).
		log.Info("operation interrupted", "cause", context.Cause(ctx).Error(), "durationMs", s.opt.Now().Sub(start).Milliseconds())
		return
	}
	state, res, errText := meta.OpSucceeded, "", ""
	if err != nil {
		state, errText = meta.OpFailed, err.Error()
	} else {
		b, merr := json.Marshal(result)
		if merr != nil {
			state, errText = meta.OpFailed, "the operation's result cannot be recorded: "+merr.Error()
		} else {
			res = string(b)
		}
	}
	done, total := r.done.Load(), r.total.Load()
	// The work is done even if the service is closing now: record it
	// rather than make another worker do it again.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer fcancel()
	if ferr := s.opt.Repo.FinishOperation(fctx, op.ID, s.opt.Node, lease, state, res, errText, done, total, s.opt.Now().UnixMilli()); ferr != nil {
		if errors.Is(ferr, meta.ErrLeaseLost) {
			log.Warn("operation finished, but it was cancelled or taken over meanwhile; its outcome is not recorded", "state", state)
			return
		}
		log.Error("record operation outcome", "err", ferr)
		return
	}
	log.Info("operation finished", "state", state, "error", errText, "done", done, "total", total,
		"durationMs", s.opt.Now().Sub(start).Milliseconds())
}

// call runs the handler, turning a panic into a failure.
func (s *Service) call(ctx context.Context, op meta.Operation, r *Run, log *slog.Logger) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("operation handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result, err = nil, errors.New("internal error; the server log has the details")
		}
	}()
	return s.handlers[op.Kind](ctx, r)
}

// heartbeat renews the lease and writes progress every Heartbeat until
// stop closes, and returns the lease token last written. When the renewal
// finds the operation no longer held (cancelled or taken over), or the
// lease has lapsed because renewals kept failing, it cancels the handler.
func (s *Service) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, r *Run, lease int64, stop <-chan struct{}, log *slog.Logger) int64 {
	t := time.NewTicker(s.opt.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return lease
		case <-ctx.Done():
			return lease
		case <-t.C:
		}
		now := s.opt.Now()
		// Renewed even when the clock reads earlier than the lease's start
		// (it stepped back): the renewal is also how a cancellation on
		// another node is noticed and progress written. The lease then
		// keeps its end, which is later still.
		next := max(now.Add(s.opt.Lease).UnixMilli(), lease)
		// Bounded: a database that stops answering without closing the
		// connection (a partition) held the renewal, and this loop with
		// it, until TCP gave up, so the lease lapsed unnoticed and another
		// worker could run the operation while this one still did. A
		// renewal that gets no answer within a third of the lease fails
		// like any other, and the lease's lapse stops the operation.
		rctx, rcancel := context.WithTimeout(ctx, s.opt.Lease/3)
		err := s.opt.Repo.RenewOperation(rctx, r.Op.ID, s.opt.Node, lease, next, r.done.Load(), r.total.Load(), now.UnixMilli())
		rcancel()
		switch {
		case err == nil:
			lease = next
		case errors.Is(err, meta.ErrLeaseLost):
			cause := errLost
			gctx, gcancel := context.WithTimeout(ctx, s.opt.Lease/3)
			op, gerr := s.opt.Repo.GetOperation(gctx, r.Op.ID)
			gcancel()
			if gerr == nil && op.State == meta.OpCancelled {
				cause = ErrCancelled
			}
			cancel(cause)
			return lease
		case ctx.Err() != nil:
			return lease
		default:
			log.Warn("renew operation lease", "err", err)
			if now.UnixMilli() >= lease {
				// Another worker may have claimed it by now: stop rather
				// than run it twice at once.
				log.Error("operation lease lapsed while renewals failed; stopping it here")
				cancel(errLost)
				return lease
			}
		}
	}
}
