package meta

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/feed"
)

// TestFeedCache: changes through the cached Repo apply at once; changes by
// another Repo on the same database (another process) apply after the TTL;
// unknown feeds are cached as unknown; the cache stays bounded.
func TestFeedCache(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			ctx := context.Background()
			loc := ec.fresh(t)
			r := openRepo(t, loc)
			other := openRepo(t, loc) // as `weir admin` beside a server

			now := time.Unix(1_700_000_000, 0)
			c := NewFeedCache(r, time.Second)
			c.now = func() time.Time { return now }

			status := func(name string) string {
				t.Helper()
				f, err := c.GetFeed(ctx, name)
				switch {
				case errors.Is(err, ErrNotFound):
					return "unknown"
				case err != nil:
					t.Fatalf("GetFeed(%q): %v", name, err)
				}
				return string(f.Status)
			}

			if got := status("CACHE-A"); got != "unknown" {
				t.Fatalf("before creation: %s", got)
			}
			// Created in this process: seen at once, although "unknown" is cached.
			if err := c.CreateFeed(ctx, feed.Feed{Name: "CACHE-A", Status: feed.Receive}.WithDefaults()); err != nil {
				t.Fatal(err)
			}
			if got := status("CACHE-A"); got != "RECEIVE" {
				t.Fatalf("after creating through the cache: %s, want RECEIVE", got)
			}
			f, err := r.GetFeed(ctx, "CACHE-A")
			if err != nil {
				t.Fatal(err)
			}
			f.Status = feed.Reject
			if _, err := r.UpdateFeedVersion(ctx, f, f.Version); err != nil {
				t.Fatal(err)
			}
			if got := status("CACHE-A"); got != "REJECT" {
				t.Fatalf("after an update in this process: %s, want REJECT", got)
			}

			// Changed by another process: the cached answer holds until the TTL.
			f.Status = feed.Drop
			if err := other.UpdateFeed(ctx, f); err != nil {
				t.Fatal(err)
			}
			if got := status("CACHE-A"); got != "REJECT" {
				t.Fatalf("within the TTL of another process's change: %s, want the cached REJECT", got)
			}
			now = now.Add(time.Second)
			if got := status("CACHE-A"); got != "DROP" {
				t.Fatalf("after the TTL: %s, want DROP", got)
			}
			if _, err := other.DeleteFeed(ctx, "CACHE-A", false); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Second)
			if got := status("CACHE-A"); got != "unknown" {
				t.Fatalf("after another process deleted it and the TTL passed: %s", got)
			}

			// Bounded: many distinct names never grow it past its limit.
			for i := range feedCacheMax + 10 {
				status(fmt.Sprintf("NO-SUCH-%d", i))
			}
			c.mu.Lock()
			n := len(c.m)
			c.mu.Unlock()
			if n > feedCacheMax {
				t.Errorf("cache holds %d entries, limit %d", n, feedCacheMax)
			}

			// TTL 0: no caching at all.
			off := NewFeedCache(r, 0)
			if err := other.CreateFeed(ctx, feed.Feed{Name: "CACHE-B"}.WithDefaults()); err != nil {
				t.Fatal(err)
			}
			if _, err := off.GetFeed(ctx, "CACHE-B"); err != nil {
				t.Fatalf("uncached lookup of a feed another process created: %v", err)
			}
		})
	}
}
