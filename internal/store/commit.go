package store

import (
	"context"
	"fmt"
	"time"

	"github.com/weirhq/weir/internal/meta"
)

// request is one post's share of a group commit.
type request struct {
	create []*meta.Stream // rows to insert LOCKED (ids are set on return)
	unlock []*meta.Stream // rows whose files are complete and renamed
	dirs   []string       // directories whose new entries must be fsynced first
	delete []int64        // rows of aborted streams
	pack   []packItem     // small streams to write into the batch's pack and insert complete
	ctx    context.Context
	done   chan error
}

// maxBatch bounds one transaction so that a burst cannot make one commit
// arbitrarily large (and every post in it wait for all the others).
const maxBatch = 256

// submit hands a request to the committer and waits until it is durable.
func (s *Store) submit(ctx context.Context, r *request) error {
	r.ctx = ctx
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
func (s *Store) commitLoop() {
	defer close(s.done)
	batch := make([]*request, 0, maxBatch)
	for r := range s.commits {
		batch = append(batch[:0], r)
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
		s.commitBatch(batch)
	}
}

func (s *Store) commitBatch(batch []*request) {
	start := time.Now()
	err := s.apply(batch)
	if err != nil && len(batch) > 1 {
		// One bad request must not fail its neighbours: retry each alone.
		for _, r := range batch {
			r.done <- s.apply([]*request{r})
		}
	} else {
		for _, r := range batch {
			r.done <- err
		}
	}
	if m := s.opt.Metrics; m != nil {
		m.batchSize.Observe(float64(len(batch)))
		m.commitSeconds.Observe(time.Since(start).Seconds())
	}
}

// apply makes a set of requests durable: directory entries first, then the
// metadata transaction, so a committed UNLOCKED row always names a file
// that survives a crash.
func (s *Store) apply(batch []*request) error {
	var b meta.Batch
	seen := make(map[string]bool)
	for _, r := range batch {
		for _, d := range r.dirs {
			if seen[d] {
				continue
			}
			seen[d] = true
			if err := syncDir(d); err != nil {
				return err
			}
		}
		b.Create = append(b.Create, r.create...)
		b.Delete = append(b.Delete, r.delete...)
		b.Unlock = append(b.Unlock, r.unlock...)
	}
	var items []*packItem
	for _, r := range batch {
		for i := range r.pack {
			items = append(items, &r.pack[i])
		}
	}
	var pack string
	if len(items) > 0 {
		var err error
		if pack, err = s.writePack(items); err != nil {
			return err
		}
		for _, it := range items {
			b.Packed = append(b.Packed, it.row)
		}
	}
	now := s.opt.Now().UnixMilli()
	for _, row := range b.Unlock {
		row.Status = meta.Unlocked
		row.StatusMs = now
	}
	// The transaction is not tied to any one caller's context: callers
	// wait for the result whatever happens to their request.
	if err := s.repo.Apply(context.Background(), &b); err != nil {
		for _, r := range batch {
			for _, row := range r.unlock {
				row.Status = meta.Locked
			}
		}
		if pack != "" {
			s.removePack(pack, items)
		}
		return fmt.Errorf("commit %d streams: %w", len(b.Create)+len(b.Unlock)+len(b.Delete)+len(b.Packed), err)
	}
	return nil
}
