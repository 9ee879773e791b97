package meta

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/weirhq/weir/internal/feed"
)

// feedCacheMax bounds a FeedCache: past it the cache starts again empty,
// so senders naming endless distinct feeds cannot grow it.
const feedCacheMax = 4096

// FeedCache answers the receive path's feed lookups from memory. Every post
// needs its feed (status, default type), and asking the database each time
// cost about a sixth of a small post's CPU.
//
// A change made through this process's Repo (the API, a generated feed)
// applies to the next lookup: every feed write bumps the Repo's feed
// generation, and an entry read under an older generation is not used.
// A change made by another process (`weir admin feed update` beside a
// running server, another node on the same PostgreSQL) applies once the
// entry is older than the TTL. Unknown feeds are cached too, as unknown.
type FeedCache struct {
	repo *Repo
	ttl  time.Duration
	now  func() time.Time

	mu sync.Mutex
	m  map[string]cachedFeed
}

type cachedFeed struct {
	f   feed.Feed
	err error // nil or an error wrapping ErrNotFound
	gen uint64
	at  time.Time
}

// NewFeedCache caches repo's feeds for ttl; a ttl of zero or less caches
// nothing (every lookup asks the database).
func NewFeedCache(repo *Repo, ttl time.Duration) *FeedCache {
	return &FeedCache{repo: repo, ttl: ttl, now: time.Now, m: make(map[string]cachedFeed)}
}

// GetFeed is Repo.GetFeed, answered from memory while the answer is fresh.
func (c *FeedCache) GetFeed(ctx context.Context, name string) (feed.Feed, error) {
	if c.ttl <= 0 {
		return c.repo.GetFeed(ctx, name)
	}
	gen := c.repo.feedGen.Load()
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if ok && e.gen == gen && now.Sub(e.at) < c.ttl {
		return e.f, e.err
	}
	f, err := c.repo.GetFeed(ctx, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return f, err // a failed lookup is not an answer to keep
	}
	c.mu.Lock()
	if len(c.m) >= feedCacheMax {
		clear(c.m)
	}
	// gen was read before the query: if a write happened since, the entry
	// is already stale and the next lookup asks again.
	c.m[name] = cachedFeed{f: f, err: err, gen: gen, at: now}
	c.mu.Unlock()
	return f, err
}

// CreateFeed is Repo.CreateFeed (which makes cached answers stale).
func (c *FeedCache) CreateFeed(ctx context.Context, f feed.Feed) error {
	return c.repo.CreateFeed(ctx, f)
}
