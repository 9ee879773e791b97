package meta

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestNarrowingAndStatus(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			r := openRepo(t, ec.fresh(t))
			ctx := context.Background()
			var rows []*Stream
			for _, f := range []string{"FEED-A", "FEED-B", "FEED-C", "FEED-A"} {
				rows = append(rows, newStream(f, "n1", "r"))
			}
			apply(t, r, &Batch{Create: rows})
			apply(t, r, &Batch{Unlock: rows})

			feeds := func(f StreamFilter) []string {
				ss, err := r.ListStreams(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, s := range ss {
					out = append(out, s.Feed)
				}
				return out
			}
			if got := feeds(StreamFilter{FeedIn: []string{"FEED-A", "FEED-C"}}); !slices.Equal(got, []string{"FEED-A", "FEED-C", "FEED-A"}) {
				t.Fatalf("FeedIn A,C: %v", got)
			}
			if got := feeds(StreamFilter{FeedIn: []string{}}); len(got) != 0 {
				t.Fatalf("empty FeedIn matched %v", got)
			}
			if got := feeds(StreamFilter{FeedIn: []string{"FEED-A"}, Feed: "FEED-B"}); len(got) != 0 {
				t.Fatalf("narrowing must AND with the feed filter: %v", got)
			}

			id := rows[0].ID
			if err := r.SetStreamStatus(ctx, id, Deleted); err != nil {
				t.Fatal(err)
			}
			if s, _ := r.GetStream(ctx, id); s.Status != Deleted || s.StatusMs == 0 {
				t.Fatalf("after delete: %+v", s)
			}
			if err := r.SetStreamStatus(ctx, id, Deleted); err == nil {
				t.Fatal("deleting a deleted stream succeeded")
			}
			if err := r.SetStreamStatus(ctx, id, Unlocked); err != nil {
				t.Fatal(err)
			}
			if err := r.SetStreamStatus(ctx, 999999, Deleted); !errors.Is(err, ErrNotFound) {
				t.Fatalf("missing stream: %v", err)
			}
			if err := r.SetStreamStatus(ctx, id, Locked); err == nil {
				t.Fatal("locking a stream succeeded")
			}
			locked := newStream("FEED-A", "n1", "r")
			apply(t, r, &Batch{Create: []*Stream{locked}})
			if err := r.SetStreamStatus(ctx, locked.ID, Deleted); err == nil {
				t.Fatal("deleted a LOCKED stream")
			}
		})
	}
}
