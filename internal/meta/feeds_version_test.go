package meta

import (
	"errors"
	"slices"
	"testing"

	"github.com/weirhq/weir/internal/feed"
)

// TestVersions runs the optimistic-locking, feed deletion and user update
// tests once per engine.
func TestVersions(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, loc location)
	}{
		{"FeedVersion", testFeedVersion},
		{"FeedVersionConcurrent", testFeedVersionConcurrent},
		{"DeleteFeed", testDeleteFeed},
		{"CreateFreshFeed", testCreateFreshFeed},
		{"UserVersion", testUserVersion},
		{"DeleteUser", testDeleteUser},
		{"ReceiptRules", testReceiptRules},
	}
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, ec.fresh(t))
				})
			}
		})
	}
}

func testFeedVersion(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	// A version passed to CreateFeed is ignored: every feed starts at 1.
	if err := r.CreateFeed(ctx, feed.Feed{Name: "F", Status: feed.Receive, Classification: "C", Version: 7, CreateMs: 1000}); err != nil {
		t.Fatal(err)
	}
	got, err := r.GetFeed(ctx, "F")
	if err != nil || got.Version != 1 {
		t.Fatalf("new feed: version %d, %v; want 1", got.Version, err)
	}

	upd := got
	upd.Status, upd.Description, upd.CreateMs = feed.Reject, "changed", 5
	after, err := r.UpdateFeedVersion(ctx, upd, 1)
	if err != nil {
		t.Fatalf("UpdateFeedVersion at the current version: %v", err)
	}
	if after.Version != 2 || after.Status != feed.Reject || after.Description != "changed" ||
		after.Classification != "C" || after.CreateMs != 1000 || after.UpdateMs <= 1000 {
		t.Fatalf("after update: %+v", after)
	}
	if stored, _ := r.GetFeed(ctx, "F"); stored != after {
		t.Fatalf("returned %+v, stored %+v", after, stored)
	}

	// The version read before that update is now stale: refused, with the
	// current version, and nothing changes.
	stale := got
	stale.Status = feed.Drop
	_, err = r.UpdateFeedVersion(ctx, stale, 1)
	var se *StaleError
	if !errors.As(err, &se) || !errors.Is(err, ErrStale) || errors.Is(err, ErrNotFound) || se.Current != 2 || se.Want != 1 {
		t.Fatalf("stale update: %v (%+v), want a StaleError at 2", err, se)
	}
	if stored, _ := r.GetFeed(ctx, "F"); stored != after {
		t.Fatalf("stale update changed the feed: %+v", stored)
	}
	// A version ahead of the stored one is stale too, not a way to skip.
	if _, err := r.UpdateFeedVersion(ctx, stale, 9); !errors.Is(err, ErrStale) {
		t.Fatalf("future version: %v, want ErrStale", err)
	}

	// Missing is not stale.
	_, err = r.UpdateFeedVersion(ctx, feed.Feed{Name: "NOPE", Status: feed.Receive}, 1)
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
		t.Fatalf("missing feed: %v, want ErrNotFound only", err)
	}
	if _, err := r.UpdateFeedVersion(ctx, upd, 0); err == nil {
		t.Fatal("version 0 accepted")
	}

	// The unconditional update (the admin command's) still counts, so that
	// a client holding version 2 learns of it.
	upd.Description = "by the admin command"
	if err := r.UpdateFeed(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if stored, _ := r.GetFeed(ctx, "F"); stored.Version != 3 || stored.Description != "by the admin command" {
		t.Fatalf("after UpdateFeed: %+v", stored)
	}
	if _, err := r.UpdateFeedVersion(ctx, upd, 2); !errors.Is(err, ErrStale) {
		t.Fatalf("update at the version before UpdateFeed: %v, want ErrStale", err)
	}
	list, err := r.ListFeeds(ctx)
	if err != nil || len(list) != 1 || list[0].Version != 3 {
		t.Fatalf("ListFeeds: %+v %v", list, err)
	}
}

// testFeedVersionConcurrent: writers that all read version 1 race; exactly
// one wins, whatever the engine's isolation.
func testFeedVersionConcurrent(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	other := openRepo(t, loc) // a second process
	if err := r.CreateFeed(ctx, feed.Feed{Name: "RACE", Status: feed.Receive}); err != nil {
		t.Fatal(err)
	}
	won, stale := versionRace(t, r, other, func(repo *Repo) error {
		_, err := repo.UpdateFeedVersion(ctx, feed.Feed{Name: "RACE", Status: feed.Reject, Description: "w"}, 1)
		return err
	})
	if won != 1 || stale != raceWriters-1 {
		t.Fatalf("%d won, %d stale; want 1 and %d", won, stale, raceWriters-1)
	}
	if got, _ := r.GetFeed(ctx, "RACE"); got.Version != 2 {
		t.Fatalf("version %d after one winning update, want 2", got.Version)
	}
}

func testDeleteFeed(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	for _, n := range []string{"LIVE", "EMPTY", "GONE-DATA"} {
		if err := r.CreateFeed(ctx, feed.Feed{Name: n, Status: feed.Receive}); err != nil {
			t.Fatal(err)
		}
	}
	locked := newStream("LIVE", "n", "a")
	unlocked := newStream("LIVE", "n", "b")
	deleted := newStream("GONE-DATA", "n", "c")
	apply(t, r, &Batch{Create: []*Stream{locked, unlocked, deleted}})
	apply(t, r, &Batch{Unlock: []*Stream{unlocked, deleted}})
	if err := r.SetStreamStatus(ctx, deleted.ID, Deleted); err != nil {
		t.Fatal(err)
	}
	u := mustUser(t, r, "alice", false)
	for _, f := range []string{"LIVE", "EMPTY", "GONE-DATA", "NOT-A-FEED"} {
		if err := r.SetFeedLevel(ctx, "alice", f, 20); err != nil {
			t.Fatal(err)
		}
	}

	// A stream being written counts as much as a complete one.
	live, err := r.DeleteFeed(ctx, "LIVE", false)
	if !errors.Is(err, ErrInUse) || live != 2 {
		t.Fatalf("delete feed with streams: %d, %v; want 2 and ErrInUse", live, err)
	}
	if _, err := r.GetFeed(ctx, "LIVE"); err != nil {
		t.Fatalf("refused delete removed the feed: %v", err)
	}
	// Only DELETED streams: no data left to orphan.
	if live, err := r.DeleteFeed(ctx, "GONE-DATA", false); err != nil || live != 0 {
		t.Fatalf("delete feed with only deleted streams: %d, %v", live, err)
	}
	if live, err := r.DeleteFeed(ctx, "EMPTY", false); err != nil || live != 0 {
		t.Fatalf("delete empty feed: %d, %v", live, err)
	}
	// Forced: the feed goes, its streams stay.
	if live, err := r.DeleteFeed(ctx, "LIVE", true); err != nil || live != 2 {
		t.Fatalf("forced delete: %d, %v", live, err)
	}
	for _, n := range []string{"LIVE", "EMPTY", "GONE-DATA"} {
		if _, err := r.GetFeed(ctx, n); !errors.Is(err, ErrNotFound) {
			t.Errorf("feed %s after delete: %v", n, err)
		}
	}
	for _, id := range []int64{locked.ID, unlocked.ID, deleted.ID} {
		if _, err := r.GetStream(ctx, id); err != nil {
			t.Errorf("stream %d after feed delete: %v", id, err)
		}
	}
	// Permissions on deleted feeds go; others (a feed not created yet) stay.
	_, feeds, err := r.EffectivePermissions(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(feeds) != 1 || feeds["NOT-A-FEED"] != 20 {
		t.Fatalf("permissions after deleting feeds: %v", feeds)
	}
	if _, err := r.DeleteFeed(ctx, "LIVE", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete missing feed: %v, want ErrNotFound", err)
	}
	// A feed re-created under the name starts afresh, at version 1.
	if err := r.CreateFeed(ctx, feed.Feed{Name: "LIVE", Status: feed.Receive}); err != nil {
		t.Fatal(err)
	}
	if f, _ := r.GetFeed(ctx, "LIVE"); f.Version != 1 {
		t.Fatalf("re-created feed at version %d", f.Version)
	}
}

// testCreateFreshFeed: a name that streams of any status still carry (of a
// deleted feed, or received without one) cannot be created fresh, so that
// whoever creates it does not inherit them; CreateFeed still can.
func testCreateFreshFeed(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	for _, n := range []string{"KEPT", "GONE", "EMPTY"} {
		if err := r.CreateFeed(ctx, feed.Feed{Name: n, Status: feed.Receive}); err != nil {
			t.Fatal(err)
		}
	}
	kept := newStream("KEPT", "n", "a")
	gone := newStream("GONE", "n", "b")
	orphan := newStream("NEVER-A-FEED", "n", "c") // as RECEIVE_ALL stores
	apply(t, r, &Batch{Create: []*Stream{kept, gone, orphan}})
	apply(t, r, &Batch{Unlock: []*Stream{kept, gone}})
	if err := r.SetStreamStatus(ctx, gone.ID, Deleted); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateFreshFeed(ctx, feed.Feed{Name: "KEPT", Status: feed.Receive}); !errors.Is(err, ErrExists) {
		t.Fatalf("fresh feed over an existing one: %v, want ErrExists", err)
	}
	for _, n := range []string{"KEPT", "GONE", "EMPTY"} {
		if _, err := r.DeleteFeed(ctx, n, true); err != nil {
			t.Fatal(err)
		}
	}
	for n, want := range map[string]bool{"KEPT": true, "GONE": true, "NEVER-A-FEED": true, "EMPTY": false, "NEW": false} {
		if has, err := r.FeedNameHasStreams(ctx, n); err != nil || has != want {
			t.Errorf("FeedNameHasStreams(%s) = %v, %v; want %v", n, has, err, want)
		}
		err := r.CreateFreshFeed(ctx, feed.Feed{Name: n, Status: feed.Receive})
		switch {
		case want && !errors.Is(err, ErrEarlierStreams):
			t.Errorf("fresh feed %s over earlier streams: %v, want ErrEarlierStreams", n, err)
		case !want && err != nil:
			t.Errorf("fresh feed %s: %v", n, err)
		}
		if _, err := r.GetFeed(ctx, n); want != errors.Is(err, ErrNotFound) {
			t.Errorf("feed %s after CreateFreshFeed: %v", n, err)
		}
	}
	// CreateFeed (an administrator's) takes the name and its streams.
	if err := r.CreateFeed(ctx, feed.Feed{Name: "GONE", Status: feed.Receive}); err != nil {
		t.Fatal(err)
	}
}

func testUserVersion(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	alice := mustUser(t, r, "alice", false)
	mustUser(t, r, "bob", false)
	g := mustUser(t, r, "g", true)
	h := mustUser(t, r, "h", true)

	got, err := r.GetVersionedUser(ctx, "alice")
	if err != nil || got.Version != 1 || got.User != alice {
		t.Fatalf("GetVersionedUser: %+v %v", got, err)
	}
	after, err := r.UpdateUserVersion(ctx, "alice", "Alice A", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version != 2 || after.DisplayName != "Alice A" || after.Enabled || after.ID != alice.ID || after.CreateMs != alice.CreateMs {
		t.Fatalf("after update: %+v", after)
	}
	_, err = r.UpdateUserVersion(ctx, "alice", "stale", true, 1)
	var se *StaleError
	if !errors.As(err, &se) || se.Current != 2 || errors.Is(err, ErrNotFound) {
		t.Fatalf("stale: %v", err)
	}
	if u, _ := r.GetVersionedUser(ctx, "alice"); u != after {
		t.Fatalf("stale update changed the user: %+v", u)
	}
	if _, err := r.UpdateUserVersion(ctx, "nobody", "x", true, 1); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
		t.Fatalf("missing: %v", err)
	}
	// Memberships and grants are not part of the user's version.
	if err := r.AddMember(ctx, "g", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := r.AddMember(ctx, "h", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := r.AddMember(ctx, "h", "g"); err != nil {
		t.Fatal(err)
	}
	if u, _ := r.GetVersionedUser(ctx, "alice"); u.Version != 2 {
		t.Fatalf("membership changed the version: %d", u.Version)
	}

	all, err := r.ListVersionedUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range all {
		names = append(names, u.Name)
		if u.Name == "alice" && u.Version != 2 {
			t.Errorf("listed alice at %d", u.Version)
		}
	}
	if !slices.Equal(names, []string{"alice", "bob", "g", "h"}) {
		t.Fatalf("ListVersionedUsers: %v", names)
	}
	groups, err := r.DirectGroups(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || !slices.Equal(groups["alice"], []string{g.Name, h.Name}) || !slices.Equal(groups["g"], []string{"h"}) {
		t.Fatalf("DirectGroups: %v", groups)
	}
	one, err := r.DirectGroups(ctx, "g")
	if err != nil || len(one) != 1 || !slices.Equal(one["g"], []string{"h"}) {
		t.Fatalf("DirectGroups(g): %v %v", one, err)
	}
}

func testDeleteUser(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	alice := mustUser(t, r, "alice", false)
	mustUser(t, r, "g", true)
	if err := r.AddMember(ctx, "g", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := r.GrantApp(ctx, "alice", "Data - View"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetFeedLevel(ctx, "alice", "F", 20); err != nil {
		t.Fatal(err)
	}
	k, err := r.CreateAPIKey(ctx, APIKey{Prefix: "sak_0000000001_", Hash: "h1", OwnerID: alice.ID, Name: "k", ExpiresMs: 1 << 50, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetUser(ctx, "alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted user: %v", err)
	}
	if _, err := r.GetAPIKey(ctx, k.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted user's key: %v", err)
	}
	if _, _, err := r.APIKeyByHash(ctx, "h1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted user's key by hash: %v", err)
	}
	if m, err := r.Members(ctx, "g"); err != nil || len(m) != 0 {
		t.Fatalf("group members after delete: %v %v", m, err)
	}
	// The rows that held its grants are gone (not just unreachable): a
	// new user of the same name starts with nothing.
	again := mustUser(t, r, "alice", false)
	app, feeds, err := r.EffectivePermissions(ctx, again.ID)
	if err != nil || len(app) != 0 || len(feeds) != 0 {
		t.Fatalf("re-created user holds %v %v (%v)", app, feeds, err)
	}
	var n int
	if err := r.db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM app_permissions) + (SELECT COUNT(*) FROM feed_permissions)
		+ (SELECT COUNT(*) FROM group_members)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d grant rows left (%v)", n, err)
	}
	if err := r.DeleteUser(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
}
