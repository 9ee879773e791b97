package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
)

// request is one post's share of a group commit.
type request struct {
	create []*meta.Stream       // rows to insert LOCKED (ids are set on return)
	unlock []*meta.Stream       // rows whose files are complete and renamed
	dirs   []string             // directories whose new entries must be fsynced first
	delete []int64              // rows of aborted streams
	forget []meta.ForwardedPost // forwarded posts of a post whose commit failed
	pack   []packItem           // small streams to write into the batch's pack and insert complete
	at     time.Time            // when it was submitted
	ctx    context.Context
	done   chan error
}

// maxBatch bounds one transaction so that a burst cannot make one commit
// arbitrarily large (and every post in it wait for all the others).
const maxBatch = 256

// submit hands a request to the committer and waits until it is durable.
func (s *Store) submit(ctx context.Context, r *request) error {
	r.ctx = ctx
	r.at = time.Now()
	r.done = make(chan error, 1)
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	s.commits <- r
	s.closeMu.RUnlock()
	// The committer always answers; a cancelled caller must still wait so
	// that it never mistakes an in-flight commit for a failed one.
	return <-r.done
}

// commitLoop is the group committer. It takes whatever requests queued up
// while the previous commit ran and commits them together: no timer, so an
// idle server commits at once and a busy one batches naturally.
//
// It is a pipeline of two stages, so that the two waits for the disk
// overlap: while one batch's transaction commits (stage two), the next
// batch's directories and pack are written and fsynced (stage one). A
// batch's rows are still committed only after its files are durable.
func (s *Store) commitLoop() {
	defer close(s.done)
	written := make(chan *staged, 2)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for st := range written {
			// Batches that were staged while the last transaction ran
			// share the next one: the stage that waits longer sets the
			// pace, and merging lets the transactions keep up.
		more:
			for len(st.batch) < maxBatch {
				select {
				case next, ok := <-written:
					if !ok {
						break more
					}
					if st.err != nil || next.err != nil {
						// A failed stage one is retried request by
						// request, alone.
						s.finish(st)
						st = next
						continue
					}
					st = merge(st, next)
				default:
					break more
				}
			}
			s.finish(st)
		}
	}()
	for r := range s.commits {
		batch := make([]*request, 1, maxBatch)
		batch[0] = r
	fill:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.commits:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		written <- s.stage(batch)
	}
	close(written)
	<-applied
	s.packMu.Lock()
	s.closePack()
	s.packMu.Unlock()
}

// staged is a batch whose files are durable (or failed to be), waiting for
// its transaction.
type staged struct {
	batch  []*request
	b      meta.Batch
	writes []stagedPack // where its small streams went
	start  time.Time
	oldest time.Time // its longest-waiting request's submission
	err    error     // from stage one
}

// stagedPack is one pack write of a staged batch and its streams.
type stagedPack struct {
	w     packWrite
	items []*packItem
}

// merge makes one staged batch of two whose stage one succeeded.
func merge(a, b *staged) *staged {
	a.batch = append(a.batch, b.batch...)
	a.b.Create = append(a.b.Create, b.b.Create...)
	a.b.Delete = append(a.b.Delete, b.b.Delete...)
	a.b.Forget = append(a.b.Forget, b.b.Forget...)
	a.b.Unlock = append(a.b.Unlock, b.b.Unlock...)
	a.b.Packed = append(a.b.Packed, b.b.Packed...)
	a.writes = append(a.writes, b.writes...)
	if b.oldest.Before(a.oldest) {
		a.oldest = b.oldest
	}
	return a
}

// finish commits a staged batch's transaction and answers its requests.
func (s *Store) finish(st *staged) {
	err := st.err
	if err == nil {
		err = s.commitRows(st)
	}
	if err == nil {
		s.retryLeftovers()
	}
	// Counted before any request is answered, so that whoever reads the
	// metric after its answer finds its batch in it.
	if m := s.opt.Metrics; m != nil {
		m.batchSize.Observe(float64(len(st.batch)))
	}
	if err != nil && len(st.batch) > 1 && !meta.IsUnavailable(err) {
		// One bad request must not fail its neighbours: retry each alone.
		// Not when the database is unreachable: no request is to blame,
		// and each retry would wait for it again.
		for _, r := range st.batch {
			r.done <- s.apply([]*request{r})
		}
	} else {
		for _, r := range st.batch {
			r.done <- err
		}
	}
	if m := s.opt.Metrics; m != nil {
		m.commitSeconds.Observe(time.Since(st.start).Seconds())
	}
}

// apply makes a set of requests durable, both stages at once.
func (s *Store) apply(batch []*request) error {
	st := s.stage(batch)
	if st.err != nil {
		return st.err
	}
	return s.commitRows(st)
}

// stage is stage one: the directory entries of the batch's own-file
// streams and its pack are made durable, so that a committed UNLOCKED row
// always names a file that survives a crash.
func (s *Store) stage(batch []*request) *staged {
	st := &staged{batch: batch, start: time.Now(), oldest: batch[0].at}
	seen := make(map[string]bool)
	for _, r := range batch {
		if r.at.Before(st.oldest) {
			st.oldest = r.at
		}
		for _, d := range r.dirs {
			if seen[d] {
				continue
			}
			seen[d] = true
			if err := fsutil.SyncDir(d); err != nil {
				st.err = err
				return st
			}
		}
		st.b.Create = append(st.b.Create, r.create...)
		st.b.Delete = append(st.b.Delete, r.delete...)
		st.b.Forget = append(st.b.Forget, r.forget...)
		st.b.Unlock = append(st.b.Unlock, r.unlock...)
	}
	var items []*packItem
	for _, r := range batch {
		for i := range r.pack {
			items = append(items, &r.pack[i])
		}
	}
	if len(items) > 0 {
		w, err := s.writePack(items)
		if err != nil {
			st.err = err
			return st
		}
		st.writes = append(st.writes, stagedPack{w: w, items: items})
		for _, it := range items {
			st.b.Packed = append(st.b.Packed, it.row)
		}
	}
	return st
}

// commitRows is stage two: the batch's rows, in one transaction.
func (s *Store) commitRows(st *staged) error {
	now := s.opt.Now().UnixMilli()
	for _, row := range st.b.Unlock {
		row.Status = meta.Unlocked
		row.StatusMs = now
	}
	// The transaction is not tied to any one caller's context: callers
	// wait for the result whatever happens to their request. Its deadline
	// counts from the submission of the batch's longest-waiting request,
	// so that batches queued behind a transaction the database never
	// answered fail at once rather than each waiting the timeout again.
	ctx := context.Background()
	if t := s.opt.CommitTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, st.oldest.Add(t))
		defer cancel()
	}
	err := s.repo.Apply(ctx, &st.b)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("the metadata database did not commit within %v (%w): %w", s.opt.CommitTimeout, ctx.Err(), err)
	}
	// A commit in doubt (its answer lost, meta.ErrCommitUnknown) may have
	// committed rows that name the batch's bytes: they stay in the pack.
	failed := err != nil && !errors.Is(err, meta.ErrCommitUnknown)
	for _, p := range st.writes {
		s.packDone(p.w, p.items, failed)
	}
	if err != nil {
		for _, row := range st.b.Unlock {
			row.Status = meta.Locked
		}
		b := &st.b
		return fmt.Errorf("commit %d streams: %w", len(b.Create)+len(b.Unlock)+len(b.Delete)+len(b.Packed), err)
	}
	return nil
}

// leftovers are the rows and forwarded posts of aborted posts whose
// removal failed (the metadata database was unavailable when the post
// failed): LOCKED rows whose files are gone, which only the next start's
// recovery removed, however soon the database came back.
type leftovers struct {
	mu       sync.Mutex
	ids      []int64
	forget   []meta.ForwardedPost
	retrying bool
}

// keepLeftovers remembers an aborted post's rows whose removal failed.
func (s *Store) keepLeftovers(ids []int64, forget []meta.ForwardedPost) {
	l := &s.left
	l.mu.Lock()
	l.ids = append(l.ids, ids...)
	l.forget = append(l.forget, forget...)
	l.mu.Unlock()
}

// retryLeftovers removes the leftovers, if any, now that a commit has
// succeeded (the database answers again). It runs on the committer's
// goroutine, which must not wait for a request of its own: the removal is
// submitted from another. A removal that fails is tried again after a
// delay (1 s, doubling up to 30 s) until it succeeds or the store closes,
// not only after the next commit: the first try after an outage can meet
// a connection the outage broke, and no post may come to commit again.
func (s *Store) retryLeftovers() {
	l := &s.left
	l.mu.Lock()
	if l.retrying || (len(l.ids) == 0 && len(l.forget) == 0) {
		l.mu.Unlock()
		return
	}
	l.retrying = true
	l.mu.Unlock()
	go func() {
		delay := time.Second
		for {
			l.mu.Lock()
			ids, forget := l.ids, l.forget
			l.ids, l.forget = nil, nil
			if len(ids) == 0 && len(forget) == 0 {
				l.retrying = false
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
			err := s.submit(context.Background(), &request{delete: ids, forget: forget})
			if err == nil {
				s.opt.Logger.Info("removed the rows of posts aborted while the metadata database was unavailable", "ids", ids, "forwardedPosts", len(forget))
				continue // any that failed meanwhile
			}
			l.mu.Lock()
			l.ids = append(l.ids, ids...)
			l.forget = append(l.forget, forget...)
			l.mu.Unlock()
			if errors.Is(err, ErrClosed) {
				break
			}
			s.opt.Logger.Warn("cannot remove the rows of aborted posts yet; trying again", "ids", ids, "in", delay.String(), "err", err)
			select {
			case <-time.After(delay):
			case <-s.done:
			}
			delay = min(2*delay, 30*time.Second)
		}
		l.mu.Lock()
		l.retrying = false
		l.mu.Unlock()
	}()
}
