package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/weirhq/weir/internal/meta"
)

// Stream ids are given to packed streams by the store as it writes them to
// its log, from blocks it reserves in the database beforehand (see
// meta.Repo.ReserveStreamIDs), so that a post's record names its rows'
// ids and the post can be answered before they are inserted. A block is
// reserved ahead, on a goroutine of its own, when the one in use is half
// gone: a post waits for a reservation only when ids run out faster than
// one takes (or the database does not answer).

// Reservations grow and shrink with the rate of posts: one is to last a
// second or a few, from minBlock to maxBlock ids. A small one keeps ids in
// the order streams arrive across the nodes sharing a database, and wastes
// few at a stop (ids not used are a gap); a big one costs a busy node one
// reservation every few seconds.
const (
	minBlock = 64
	maxBlock = 16384
)

// idSource hands out reserved stream ids in increasing order.
type idSource struct {
	reserve func(ctx context.Context, n int) ([]meta.IDRange, error)
	timeout time.Duration // bounds a reservation the caller waits for; 0: none

	mu       sync.Mutex
	free     []meta.IDRange
	n        int64 // ids in free
	block    int   // the size of the next reservation
	last     time.Time
	pending  bool  // a reservation ahead is under way
	lastErr  error // of the last reservation ahead, until one succeeds
	reserved chan struct{}
}

func newIDSource(reserve func(ctx context.Context, n int) ([]meta.IDRange, error), timeout time.Duration) *idSource {
	return &idSource{reserve: reserve, timeout: timeout, block: minBlock, reserved: make(chan struct{})}
}

// size returns the size of the next reservation, from how long the last
// one lasted. Called with mu held.
func (s *idSource) size() int {
	now := time.Now()
	switch lasted := now.Sub(s.last); {
	case s.last.IsZero():
	case lasted < time.Second:
		s.block = min(2*s.block, maxBlock)
	case lasted > 10*time.Second:
		s.block = max(s.block/2, minBlock)
	}
	s.last = now
	return s.block
}

// take returns n ids, reserving more (and waiting for them) when fewer are
// left, and starting a reservation ahead when fewer than half a block are.
func (s *idSource) take(n int) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.n < int64(n) {
		if err := s.reserveLocked(max(n, s.size())); err != nil {
			return nil, err
		}
	}
	out := make([]int64, 0, n)
	for len(out) < n {
		r := &s.free[0]
		for r.First <= r.Last && len(out) < n {
			out = append(out, r.First)
			r.First++
		}
		if r.First > r.Last {
			s.free = s.free[1:]
		}
	}
	s.n -= int64(n)
	if s.n < int64(s.block/2) && !s.pending {
		s.pending = true
		go s.ahead(s.size())
	}
	return out, nil
}

// reserveLocked reserves n ids now, with s.mu held: the caller has none
// to give. A reservation ahead under way is waited for first.
func (s *idSource) reserveLocked(n int) error {
	if s.pending {
		ch := s.reserved
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
		if s.n >= int64(n) || s.lastErr == nil {
			return nil
		}
	}
	rs, err := s.reserveBounded(n)
	if err != nil {
		return fmt.Errorf("no stream ids: %w", err)
	}
	s.add(rs)
	return nil
}

// reserveBounded reserves n ids, waiting at most s.timeout.
func (s *idSource) reserveBounded(n int) ([]meta.IDRange, error) {
	ctx := context.Background()
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return s.reserve(ctx, n)
}

func (s *idSource) add(rs []meta.IDRange) {
	for _, r := range rs {
		s.free = append(s.free, r)
		s.n += r.Last - r.First + 1
	}
}

// ahead reserves n ids before those in hand run out.
func (s *idSource) ahead(n int) {
	rs, err := s.reserveBounded(n)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = false
	s.lastErr = err
	if err == nil {
		s.add(rs)
	}
	close(s.reserved)
	s.reserved = make(chan struct{})
}
