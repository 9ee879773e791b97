package meta

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// location says where a test database lives: the arguments of Open.
type location struct {
	dsn, dataDir string
}

// engineCase is one engine the suite runs on; fresh returns the location of
// a new, empty database that is cleaned up when the test ends.
type engineCase struct {
	name  string
	fresh func(t *testing.T) location
}

var engineCases = []engineCase{
	{name: "sqlite", fresh: func(t *testing.T) location {
		return location{dataDir: t.TempDir()}
	}},
	{name: "postgres", fresh: func(t *testing.T) location {
		// Skips the test when WEIR_TEST_POSTGRES_DSN is empty.
		return location{dsn: metatest.PostgresDSN(t), dataDir: t.TempDir()}
	}},
}

// TestRepo runs the whole repository suite once per engine.
func TestRepo(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) { runSuite(t, ec) })
	}
}

func runSuite(t *testing.T, ec engineCase) {
	tests := []struct {
		name string
		fn   func(t *testing.T, loc location)
	}{
		{"Engine", testEngine},
		{"FeedCRUD", testFeedCRUD},
		{"ApplyCreate", testApplyCreate},
		{"ApplyUnlock", testApplyUnlock},
		{"UnlockNotLockedFailsBatch", testUnlockNotLockedFailsBatch},
		{"Delete", testDelete},
		{"ListStreams", testListStreams},
		{"LockedStreams", testLockedStreams},
		{"ApplyPacked", testApplyPacked},
		{"ReservedStreamIDs", testReservedStreamIDs},
		{"LogMark", testLogMark},
		{"StreamIDCollision", testStreamIDCollision},
		{"CommitLostAfterEarlierTry", testCommitLostAfterEarlierTry},
		{"HopReceipts", testHopReceipts},
		{"ForwardedPosts", testForwardedPosts},
		{"ConcurrentApply", testConcurrentApply},
		{"Reopen", testReopen},
		{"ConcurrentOpen", testConcurrentOpen},
		{"TwoRepos", testTwoRepos},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, ec.fresh(t))
		})
	}
}

func openRepo(t testing.TB, loc location) *Repo {
	t.Helper()
	r, err := Open(context.Background(), loc.dsn, loc.dataDir, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func apply(t testing.TB, r *Repo, b *Batch) {
	t.Helper()
	if err := r.Apply(context.Background(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func newStream(feedName, node, receipt string) *Stream {
	return &Stream{Feed: feedName, Type: "Raw Events", Node: node, ReceiptID: receipt}
}

func ids(ss []Stream) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func testEngine(t *testing.T, loc location) {
	r := openRepo(t, loc)
	want := "sqlite"
	if loc.dsn != "" {
		want = "postgres"
	}
	if got := r.Engine(); got != want {
		t.Errorf("Engine() = %q, want %q", got, want)
	}
	if err := r.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if r.Engine() != "postgres" {
		return
	}
	// The tables must land in the schema named by search_path in the DSN,
	// which is how tests (and operators) isolate weir's tables.
	u, err := url.Parse(loc.dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	var n int
	if err := r.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.tables
		WHERE table_schema = $1 AND table_name IN ('feeds', 'streams', 'schema_migrations')`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if schema == "" || n != 3 {
		t.Errorf("schema %q holds %d of the 3 tables", schema, n)
	}
}

func testFeedCRUD(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	f := feed.Feed{Name: "TEST-FEED", Status: feed.Receive, StreamType: "Raw Events",
		Encoding: "UTF-8", ContextEncoding: "UTF-8", Classification: "OFFICIAL", Description: "a feed"}
	if err := r.CreateFeed(ctx, f); err != nil {
		t.Fatalf("CreateFeed: %v", err)
	}
	got, err := r.GetFeed(ctx, "TEST-FEED")
	if err != nil {
		t.Fatalf("GetFeed: %v", err)
	}
	if got.CreateMs == 0 || got.UpdateMs != got.CreateMs {
		t.Errorf("CreateMs/UpdateMs = %d/%d, want set and equal", got.CreateMs, got.UpdateMs)
	}
	f.CreateMs, f.UpdateMs = got.CreateMs, got.UpdateMs
	f.Version = 1
	if got != f {
		t.Errorf("GetFeed = %+v, want %+v", got, f)
	}

	err = r.CreateFeed(ctx, feed.Feed{Name: "TEST-FEED", Status: feed.Drop})
	if !errors.Is(err, ErrExists) {
		t.Errorf("CreateFeed duplicate: err = %v, want ErrExists", err)
	}
	if _, err := r.GetFeed(ctx, "test-feed"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetFeed other case: err = %v, want ErrNotFound (names are exact)", err)
	}
	if _, err := r.GetFeed(ctx, "NOPE"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetFeed missing: err = %v, want ErrNotFound", err)
	}

	// Explicit times are kept.
	if err := r.CreateFeed(ctx, feed.Feed{Name: "OLD", Status: feed.Reject, CreateMs: 1000, UpdateMs: 2000}); err != nil {
		t.Fatalf("CreateFeed OLD: %v", err)
	}
	if got, _ := r.GetFeed(ctx, "OLD"); got.CreateMs != 1000 || got.UpdateMs != 2000 {
		t.Errorf("OLD times = %d/%d, want 1000/2000", got.CreateMs, got.UpdateMs)
	}

	// Byte-wise order on both engines, whatever the database locale.
	for _, n := range []string{"b-feed", "B_FEED", "A-FEED", "a_feed", "A_FEED", "Z"} {
		if err := r.CreateFeed(ctx, feed.Feed{Name: n, Status: feed.Receive}); err != nil {
			t.Fatalf("CreateFeed %s: %v", n, err)
		}
	}
	list, err := r.ListFeeds(ctx)
	if err != nil {
		t.Fatalf("ListFeeds: %v", err)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
	}
	want := []string{"A-FEED", "A_FEED", "B_FEED", "OLD", "TEST-FEED", "Z", "a_feed", "b-feed"}
	if !slices.Equal(names, want) {
		t.Errorf("ListFeeds names = %v, want %v", names, want)
	}

	upd := feed.Feed{Name: "OLD", Status: feed.Drop, StreamType: "Events", Encoding: "ISO-8859-1",
		ContextEncoding: "UTF-16", Classification: "SECRET", Description: "changed", CreateMs: 5, UpdateMs: 6}
	if err := r.UpdateFeed(ctx, upd); err != nil {
		t.Fatalf("UpdateFeed: %v", err)
	}
	got, err = r.GetFeed(ctx, "OLD")
	if err != nil {
		t.Fatalf("GetFeed after update: %v", err)
	}
	if got.CreateMs != 1000 {
		t.Errorf("CreateMs after update = %d, want 1000 (unchanged)", got.CreateMs)
	}
	if got.UpdateMs <= 2000 {
		t.Errorf("UpdateMs after update = %d, want now", got.UpdateMs)
	}
	upd.CreateMs, upd.UpdateMs = got.CreateMs, got.UpdateMs
	upd.Version = 2
	if got != upd {
		t.Errorf("after update = %+v, want %+v", got, upd)
	}
	if err := r.UpdateFeed(ctx, feed.Feed{Name: "NOPE"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateFeed missing: err = %v, want ErrNotFound", err)
	}
}

func testApplyCreate(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	b := &Batch{Create: []*Stream{
		newStream("F1", "node1", "r1"),
		{Feed: "F2", Type: "Events", Node: "node1", ReceiptID: "r2", CreateMs: 1234, EffectiveMs: 999},
		newStream("F1", "node2", "r3"),
	}}
	apply(t, r, b)
	var last int64
	for i, s := range b.Create {
		if s.ID <= last {
			t.Errorf("create %d: ID %d not above previous %d", i, s.ID, last)
		}
		last = s.ID
		if s.Status != Locked || s.CreateMs == 0 || s.StatusMs != s.CreateMs {
			t.Errorf("create %d: struct Status/CreateMs/StatusMs = %s/%d/%d", i, s.Status, s.CreateMs, s.StatusMs)
		}
		got, err := r.GetStream(ctx, s.ID)
		if err != nil {
			t.Fatalf("GetStream(%d): %v", s.ID, err)
		}
		if got.Status != Locked {
			t.Errorf("stream %d status %s, want LOCKED", s.ID, got.Status)
		}
		if got.Attributes == nil || got.Attributes.Len() != 0 {
			t.Errorf("stream %d attributes = %v, want empty non-nil", s.ID, got.Attributes)
		}
		got.Attributes = nil
		if want := *s; !reflect.DeepEqual(got, want) {
			t.Errorf("GetStream(%d) = %+v, want %+v", s.ID, got, want)
		}
	}
	if b.Create[1].CreateMs != 1234 || b.Create[1].EffectiveMs != 999 {
		t.Errorf("explicit times changed: %+v", b.Create[1])
	}

	// A later batch continues the one global sequence.
	b2 := &Batch{Create: []*Stream{newStream("F3", "node1", "r4")}}
	apply(t, r, b2)
	if b2.Create[0].ID <= last {
		t.Errorf("second batch ID %d not above %d", b2.Create[0].ID, last)
	}
	if _, err := r.GetStream(ctx, b2.Create[0].ID+1000); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetStream missing: err = %v, want ErrNotFound", err)
	}
	// An empty batch is a no-op.
	apply(t, r, &Batch{})
	apply(t, r, nil)
}

// attrJSON decodes a map's JSON into a Go map, to compare attributes
// independently of key order but sensitive to key case.
func attrJSON(t *testing.T, m *attr.Map) map[string]string {
	t.Helper()
	b, err := m.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	var out map[string]string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("attributes JSON %s: %v", b, err)
	}
	return out
}

func testApplyUnlock(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	s := newStream("F1", "node1", "rcpt-1")
	s.CreateMs = 1000
	apply(t, r, &Batch{Create: []*Stream{s}})

	a := new(attr.Map)
	a.Put("Feed", "F1")
	a.Put("X-Mixed-Case", "Value With Spaces")
	a.Put("lowercase", "l")
	a.Put("Unicode-Ké", "ünïcode \"quoted\" \\ and\nnewline")
	s.Parts, s.RawSize, s.FileSize, s.Attributes = 3, 123456, 789, a
	apply(t, r, &Batch{Unlock: []*Stream{s}})
	if s.Status != Unlocked || s.StatusMs <= 1000 {
		t.Errorf("struct after unlock: Status %s StatusMs %d", s.Status, s.StatusMs)
	}

	got, err := r.GetStream(ctx, s.ID)
	if err != nil {
		t.Fatalf("GetStream: %v", err)
	}
	if got.Status != Unlocked || got.StatusMs != s.StatusMs || got.CreateMs != 1000 ||
		got.Parts != 3 || got.RawSize != 123456 || got.FileSize != 789 {
		t.Errorf("after unlock = %+v", got)
	}
	wantAttrs := map[string]string{
		"Feed": "F1", "X-Mixed-Case": "Value With Spaces", "lowercase": "l",
		"Unicode-Ké": "ünïcode \"quoted\" \\ and\nnewline",
	}
	if gotAttrs := attrJSON(t, got.Attributes); !reflect.DeepEqual(gotAttrs, wantAttrs) {
		t.Errorf("attributes = %v, want %v (key case preserved)", gotAttrs, wantAttrs)
	}
	if v := got.Attributes.Value("x-mixed-case"); v != "Value With Spaces" {
		t.Errorf("Value(x-mixed-case) = %q", v)
	}

	// Created and unlocked in the same batch (same *Stream in both lists).
	s2 := newStream("F1", "node1", "rcpt-2")
	s2.Parts, s2.RawSize, s2.FileSize = 1, 10, 5
	apply(t, r, &Batch{Create: []*Stream{s2}, Unlock: []*Stream{s2}})
	got2, err := r.GetStream(ctx, s2.ID)
	if err != nil {
		t.Fatalf("GetStream s2: %v", err)
	}
	if s2.ID == 0 || got2.Status != Unlocked || got2.Parts != 1 || s2.Status != Unlocked {
		t.Errorf("create+unlock in one batch: struct %+v, row %+v", s2, got2)
	}
}

func testUnlockNotLockedFailsBatch(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	done := newStream("F1", "node1", "r1")
	apply(t, r, &Batch{Create: []*Stream{done}})
	apply(t, r, &Batch{Unlock: []*Stream{done}})

	victim := newStream("F1", "node1", "r-victim")
	apply(t, r, &Batch{Create: []*Stream{victim}})

	before, err := r.ListStreams(ctx, StreamFilter{})
	if err != nil {
		t.Fatal(err)
	}

	// The already unlocked stream sinks the whole batch: the creates, the
	// valid unlock and the delete all roll back.
	c1, c2 := newStream("F1", "node1", "r2"), newStream("F2", "node1", "r3")
	victim.Parts = 7
	again := *done
	err = r.Apply(ctx, &Batch{
		Create: []*Stream{c1, c2},
		Unlock: []*Stream{victim, &again},
		Delete: []int64{done.ID},
	})
	if err == nil {
		t.Fatal("Apply unlocking an UNLOCKED stream succeeded")
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("unlock stream %d", done.ID)) || !strings.Contains(err.Error(), "UNLOCKED") {
		t.Errorf("error does not say which stream and why: %v", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Errorf("error wraps ErrNotFound for an existing stream: %v", err)
	}
	if c1.ID != 0 || c2.ID != 0 || c1.Status != "" {
		t.Errorf("failed batch changed create structs: %+v %+v", c1, c2)
	}
	if victim.Status != "" && victim.Status != Locked {
		t.Errorf("failed batch changed unlock struct status to %s", victim.Status)
	}
	after, err := r.ListStreams(ctx, StreamFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(before), ids(after)) {
		t.Errorf("rows after failed batch %v, want %v", ids(after), ids(before))
	}
	if got, _ := r.GetStream(ctx, victim.ID); got.Status != Locked || got.Parts != 0 {
		t.Errorf("victim after failed batch = %+v, want still LOCKED", got)
	}

	// A missing stream fails the same way, wrapping ErrNotFound.
	err = r.Apply(ctx, &Batch{Create: []*Stream{newStream("F1", "n", "x")}, Unlock: []*Stream{{ID: 987654321}}})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("unlock missing: err = %v, want ErrNotFound", err)
	}
	if after2, _ := r.ListStreams(ctx, StreamFilter{}); len(after2) != len(before) {
		t.Errorf("rows after failed batch: %d, want %d", len(after2), len(before))
	}
}

func testDelete(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	b := &Batch{Create: []*Stream{newStream("F", "n", "a"), newStream("F", "n", "b"), newStream("F", "n", "c")}}
	apply(t, r, b)
	last := b.Create[2].ID
	// Deleting a missing id is not an error, so clean-up can be retried.
	apply(t, r, &Batch{Delete: []int64{b.Create[0].ID, last, last + 100}})
	for _, id := range []int64{b.Create[0].ID, last} {
		if _, err := r.GetStream(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetStream(%d) after delete: err = %v, want ErrNotFound", id, err)
		}
	}
	if _, err := r.GetStream(ctx, b.Create[1].ID); err != nil {
		t.Errorf("undeleted stream: %v", err)
	}
	// Ids are never reused, even the highest one after it is deleted.
	n := newStream("F", "n", "d")
	apply(t, r, &Batch{Create: []*Stream{n}})
	if n.ID <= last {
		t.Errorf("new ID %d reuses deleted ids (<= %d)", n.ID, last)
	}
}

func testListStreams(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	var all []*Stream
	for i := range 10 {
		feedName := "FEED-A"
		if i%2 == 1 {
			feedName = "FEED-B"
		}
		all = append(all, newStream(feedName, "n", fmt.Sprintf("rcpt-%d", i%3)))
	}
	apply(t, r, &Batch{Create: all})
	// Unlock 0, 1, 2, 3.
	apply(t, r, &Batch{Unlock: all[:4]})

	want := func(pred func(i int, s *Stream) bool) []int64 {
		var out []int64
		for i, s := range all {
			if pred(i, s) {
				out = append(out, s.ID)
			}
		}
		return out
	}
	cases := []struct {
		name string
		f    StreamFilter
		want []int64
	}{
		{"all", StreamFilter{}, want(func(int, *Stream) bool { return true })},
		{"feed", StreamFilter{Feed: "FEED-B"}, want(func(i int, _ *Stream) bool { return i%2 == 1 })},
		{"feed exact", StreamFilter{Feed: "feed-b"}, nil},
		{"status", StreamFilter{Status: Unlocked}, want(func(i int, _ *Stream) bool { return i < 4 })},
		{"status locked", StreamFilter{Status: Locked}, want(func(i int, _ *Stream) bool { return i >= 4 })},
		{"receipt", StreamFilter{ReceiptID: "rcpt-1"}, want(func(i int, _ *Stream) bool { return i%3 == 1 })},
		{"feed+status", StreamFilter{Feed: "FEED-A", Status: Unlocked}, want(func(i int, _ *Stream) bool { return i%2 == 0 && i < 4 })},
		{"after", StreamFilter{AfterID: all[6].ID}, want(func(i int, _ *Stream) bool { return i > 6 })},
		{"limit", StreamFilter{Limit: 3}, want(func(i int, _ *Stream) bool { return i < 3 })},
		{"all filters", StreamFilter{Feed: "FEED-A", Status: Locked, ReceiptID: "rcpt-0", AfterID: all[0].ID, Limit: 1},
			want(func(i int, _ *Stream) bool { return i == 6 })},
	}
	for _, c := range cases {
		got, err := r.ListStreams(ctx, c.f)
		if err != nil {
			t.Errorf("%s: ListStreams: %v", c.name, err)
			continue
		}
		if !slices.Equal(ids(got), c.want) {
			t.Errorf("%s: ids %v, want %v", c.name, ids(got), c.want)
		}
	}

	// Keyset pagination visits every row once, in order.
	var paged []int64
	var after int64
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		page, err := r.ListStreams(ctx, StreamFilter{AfterID: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 3 {
			t.Fatalf("page of %d rows, limit 3", len(page))
		}
		paged = append(paged, ids(page)...)
		after = page[len(page)-1].ID
	}
	if w := want(func(int, *Stream) bool { return true }); !slices.Equal(paged, w) {
		t.Errorf("paged ids %v, want %v", paged, w)
	}

	// Rows come back complete.
	got, err := r.ListStreams(ctx, StreamFilter{Status: Unlocked, Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("ListStreams: %v %v", got, err)
	}
	if got[0].Feed != "FEED-A" || got[0].ReceiptID != "rcpt-0" || got[0].Node != "n" || got[0].Attributes == nil {
		t.Errorf("listed stream incomplete: %+v", got[0])
	}
}

func testLockedStreams(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	a1, a2, a3 := newStream("F", "node-a", "1"), newStream("F", "node-a", "2"), newStream("F", "node-a", "3")
	b1 := newStream("F", "node-b", "4")
	apply(t, r, &Batch{Create: []*Stream{a1, b1, a2, a3}})
	apply(t, r, &Batch{Unlock: []*Stream{a2}})

	got, err := r.LockedStreams(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if w := []int64{a1.ID, a3.ID}; !slices.Equal(ids(got), w) {
		t.Errorf("LockedStreams(node-a) = %v, want %v", ids(got), w)
	}
	if got, _ := r.LockedStreams(ctx, "node-b"); !slices.Equal(ids(got), []int64{b1.ID}) {
		t.Errorf("LockedStreams(node-b) = %v, want [%d]", ids(got), b1.ID)
	}
	if got, _ := r.LockedStreams(ctx, "node-c"); len(got) != 0 {
		t.Errorf("LockedStreams(node-c) = %v, want none", ids(got))
	}
	if plan := queryPlan(t, r, lockedStreamsSQL, "node-a"); !strings.Contains(plan, "streams_locked") {
		t.Errorf("LockedStreams does not use the partial index streams_locked:\n%s", plan)
	}
}

// testApplyPacked: packed streams go in packedRows per statement, and
// every struct gets the id of its own row whatever order RETURNING gives
// them in: 2*2*32+5 streams with their places shuffled among two
// packs, then a batch where two streams claim one place (one row per
// statement), mixed with creates and unlocks in the same batches.
func testApplyPacked(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	mk := func(n int, place func(i int) (string, int64)) []*Stream {
		ss := make([]*Stream, n)
		for i := range ss {
			s := newStream("P", "node-a", fmt.Sprintf("r%03d", i))
			s.CreateMs, s.EffectiveMs, s.Parts, s.RawSize, s.FileSize = int64(1000+i), int64(2000+i), 1, int64(10*i), int64(i)
			s.Pack, s.PackOffset = place(i)
			s.Attributes = new(attr.Map)
			s.Attributes.Put("Seq", fmt.Sprint(i))
			ss[i] = s
		}
		return ss
	}
	check := func(ss []*Stream) {
		t.Helper()
		seen := map[int64]bool{}
		for i, s := range ss {
			if s.ID == 0 || seen[s.ID] || s.Status != Unlocked {
				t.Fatalf("stream %d: id %d (seen before: %v), status %s", i, s.ID, seen[s.ID], s.Status)
			}
			seen[s.ID] = true
			got, err := r.GetStream(ctx, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.ReceiptID != s.ReceiptID || got.Pack != s.Pack || got.PackOffset != s.PackOffset ||
				got.CreateMs != s.CreateMs || got.RawSize != s.RawSize || got.Status != Unlocked ||
				got.Attributes.Value("Seq") != fmt.Sprint(i) {
				t.Errorf("stream %d (id %d) reads back as %+v", i, s.ID, got)
			}
		}
	}

	n := 2*packedRows + 5
	perm := rand.Perm(n)
	ss := mk(n, func(i int) (string, int64) { return fmt.Sprintf("packs/%d", perm[i]%2), int64(perm[i]) * 100 })
	locked := newStream("P", "node-a", "locked")
	apply(t, r, &Batch{Create: []*Stream{locked}, Packed: ss})
	check(ss)

	dup := mk(3, func(int) (string, int64) { return "packs/dup", 0 })
	apply(t, r, &Batch{Unlock: []*Stream{locked}, Packed: dup})
	check(dup)
	if got, _ := r.GetStream(ctx, locked.ID); got.Status != Unlocked {
		t.Errorf("the stream unlocked with the packed batch is %s", got.Status)
	}
}

// testForwardedPosts: a post a trusted forwarder sent with a GUID is
// recorded with the receipt id its streams got (once, however many
// streams), found by forwarder and GUID only, kept at its first receipt id
// when stored twice, and pruned by age.
func testForwardedPosts(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	k := ForwardKey{Sender: "TOKEN:proxy-1", GUID: "g-1"}
	a := newStream("F", "node-a", "main-1")
	a.Pack, a.PackOffset, a.Forward = "packs/0", 0, k
	b := newStream("G", "node-a", "main-1") // the same post, another feed
	b.Pack, b.PackOffset, b.Forward = "packs/0", 100, k
	c := newStream("F", "node-a", "main-2") // no key: not recorded
	c.Pack, c.PackOffset = "packs/0", 200
	locked := newStream("F", "node-a", "main-3")
	apply(t, r, &Batch{Create: []*Stream{locked}})
	locked.Forward = ForwardKey{Sender: "TOKEN:proxy-1", GUID: "g-big"}
	apply(t, r, &Batch{Packed: []*Stream{a, b, c}, Unlock: []*Stream{locked}})

	lookup := func(k ForwardKey) string {
		t.Helper()
		rid, ok, err := r.ForwardedReceipt(ctx, k)
		if err != nil || ok != (rid != "") {
			t.Fatalf("ForwardedReceipt(%v) = %q %v %v", k, rid, ok, err)
		}
		return rid
	}
	for k, want := range map[ForwardKey]string{
		k: "main-1", {Sender: "TOKEN:proxy-1", GUID: "g-big"}: "main-3",
		{Sender: "TOKEN:proxy-2", GUID: "g-1"}: "", {Sender: "TOKEN:proxy-1", GUID: "g-2"}: "",
	} {
		if got := lookup(k); got != want {
			t.Errorf("ForwardedReceipt(%v) = %q, want %q", k, got, want)
		}
	}
	// Stored again (two sends that overlapped): the first receipt id stays.
	d := newStream("F", "node-a", "main-4")
	d.Pack, d.PackOffset, d.Forward = "packs/0", 300, k
	apply(t, r, &Batch{Packed: []*Stream{d}})
	if got := lookup(k); got != "main-1" {
		t.Errorf("after a second copy: %q, want main-1", got)
	}
	if n, err := r.PruneForwardedPosts(ctx, nowMs()-60_000); err != nil || n != 0 {
		t.Fatalf("prune of nothing old: %d %v", n, err)
	}
	if n, err := r.PruneForwardedPosts(ctx, nowMs()+1); err != nil || n != 2 {
		t.Fatalf("prune of everything: %d %v", n, err)
	}
	if got := lookup(k); got != "" {
		t.Errorf("after pruning: %q", got)
	}
}

// testHopReceipts: the receipt ids earlier hops gave a stream's parts are
// recorded with packed streams, repeats and all, found by a Receipt Id
// query through the index, and removed with their stream.
func testHopReceipts(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	a := newStream("P", "node-a", "main-1")
	a.Pack, a.PackOffset = "packs/0", 0
	// Two parts from one proxy post (a zip of two groups) share an id.
	a.HopReceiptIDs = []string{"edge-1", "proxy-1", "edge-1", "proxy-2"}
	b := newStream("P", "node-a", "main-1")
	b.Pack, b.PackOffset = "packs/0", 100
	b.HopReceiptIDs = []string{"edge-1"}
	c := newStream("P", "node-a", "main-1")
	c.Pack, c.PackOffset = "packs/0", 200
	apply(t, r, &Batch{Packed: []*Stream{a, b, c}})

	find := func(id string) []int64 {
		t.Helper()
		page, err := r.FindStreams(ctx, StreamQuery{Expr: mustExpr(t, tm("Receipt Id", "EQUALS", id))})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, s := range page.Streams {
			ids = append(ids, s.ID)
		}
		return ids
	}
	if got := find("edge-1"); !slices.Equal(got, []int64{a.ID, b.ID}) {
		t.Errorf("Receipt Id = edge-1 found %v, want %v", got, []int64{a.ID, b.ID})
	}
	if got := find("proxy-2"); !slices.Equal(got, []int64{a.ID}) {
		t.Errorf("Receipt Id = proxy-2 found %v, want %v", got, []int64{a.ID})
	}
	if got := find("main-1"); !slices.Equal(got, []int64{a.ID, b.ID, c.ID}) {
		t.Errorf("Receipt Id = main-1 (their own) found %v", got)
	}
	for rid, want := range map[string][]int64{"edge-1": {a.ID, b.ID}, "proxy-1": {a.ID}, "main-1": {a.ID, b.ID, c.ID}, "none": nil} {
		ss, err := r.ListStreams(ctx, StreamFilter{AnyReceiptID: rid})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, s := range ss {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ListStreams(AnyReceiptID %s) = %v, want %v", rid, got, want)
		}
	}
	count := func() int {
		t.Helper()
		var n int
		if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM stream_receipts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 4 {
		t.Errorf("%d rows in stream_receipts, want 4 (repeats kept once per stream)", n)
	}
	// A find by receipt id looks both sources up by index (PostgreSQL
	// walked every stream when the two were ORed): the streams' receipt_id
	// index, and stream_receipts' primary key (SQLite: SEARCH
	// stream_receipts USING PRIMARY KEY; PostgreSQL: stream_receipts_pkey).
	where, args := r.selection(mustExpr(t, tm("Receipt Id", "EQUALS", "edge-1")), nil, nil)
	plan := queryPlan(t, r, `SELECT id FROM streams WHERE `+where+` ORDER BY id`, args...)
	if !strings.Contains(plan, "streams_receipt_id") ||
		!strings.Contains(plan, "SEARCH stream_receipts USING PRIMARY KEY") && !strings.Contains(plan, "stream_receipts_pkey") {
		t.Errorf("a find by receipt id does not use the indexes:\n%s", plan)
	}
	apply(t, r, &Batch{Delete: []int64{a.ID}})
	if n := count(); n != 1 {
		t.Errorf("%d rows in stream_receipts after deleting the stream with 3, want 1", n)
	}
}

// queryPlan returns the engine's plan for q as text. On PostgreSQL
// sequential scans are discouraged for the statement (SET LOCAL in a
// transaction that is rolled back), as a tiny test table would otherwise
// be scanned whatever indexes exist: the plan shows which index the
// planner can use, not which it prefers at this size.
func queryPlan(t *testing.T, r *Repo, q string, args ...any) string {
	t.Helper()
	ctx := t.Context()
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	explain := "EXPLAIN QUERY PLAN "
	if r.Engine() == enginePostgres {
		explain = "EXPLAIN "
		if _, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := tx.QueryContext(ctx, explain+q, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	var b strings.Builder
	for _, vals := range metatest.Rows(t, rows) {
		fmt.Fprintln(&b, vals...)
	}
	return b.String()
}

// writeConcurrently runs workers goroutines, each applying batches batches of
// size creates plus unlocks of its previous batch's creates, spread over the
// given repos, and returns every id created.
func writeConcurrently(t *testing.T, repos []*Repo, workers, batches, size int) []int64 {
	t.Helper()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		all    []int64
		errsMu sync.Mutex
		errs   []error
	)
	for w := range workers {
		r := repos[w%len(repos)]
		wg.Go(func() {
			var prev []*Stream
			var mine []int64
			for i := range batches {
				b := &Batch{Unlock: prev}
				for j := range size {
					b.Create = append(b.Create, newStream(fmt.Sprintf("F%d", w), fmt.Sprintf("node%d", w), fmt.Sprintf("%d-%d-%d", w, i, j)))
				}
				if err := r.Apply(context.Background(), b); err != nil {
					errsMu.Lock()
					errs = append(errs, fmt.Errorf("worker %d batch %d: %w", w, i, err))
					errsMu.Unlock()
					return
				}
				for _, s := range b.Create {
					mine = append(mine, s.ID)
				}
				prev = b.Create
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	return all
}

func checkUnique(t *testing.T, r *Repo, created []int64, want int) {
	t.Helper()
	if len(created) != want {
		t.Fatalf("created %d streams, want %d", len(created), want)
	}
	seen := map[int64]bool{}
	for _, id := range created {
		if seen[id] {
			t.Errorf("id %d handed out twice", id)
		}
		seen[id] = true
	}
	rows, err := r.ListStreams(context.Background(), StreamFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != want {
		t.Errorf("%d rows stored, want %d", len(rows), want)
	}
	for _, s := range rows {
		if !seen[s.ID] {
			t.Errorf("stored id %d was not returned to any writer", s.ID)
		}
	}
}

func testConcurrentApply(t *testing.T, loc location) {
	r := openRepo(t, loc)
	const workers, batches, size = 8, 15, 4
	created := writeConcurrently(t, []*Repo{r}, workers, batches, size)
	checkUnique(t, r, created, workers*batches*size)
	// Every batch but each worker's last was unlocked by its successor.
	locked, err := r.ListStreams(context.Background(), StreamFilter{Status: Locked})
	if err != nil {
		t.Fatal(err)
	}
	if len(locked) != workers*size {
		t.Errorf("%d locked streams, want %d", len(locked), workers*size)
	}
}

func testReopen(t *testing.T, loc location) {
	ctx := t.Context()
	r1, err := Open(ctx, loc.dsn, loc.dataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r1.CreateFeed(ctx, feed.Feed{Name: "KEEP", Status: feed.Receive}); err != nil {
		t.Fatal(err)
	}
	s := newStream("KEEP", "n", "r")
	if err := r1.Apply(ctx, &Batch{Create: []*Stream{s}}); err != nil {
		t.Fatal(err)
	}
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		r := openRepo(t, loc)
		if _, err := r.GetFeed(ctx, "KEEP"); err != nil {
			t.Errorf("feed lost on reopen: %v", err)
		}
		if got, err := r.GetStream(ctx, s.ID); err != nil || got.ReceiptID != "r" {
			t.Errorf("stream lost on reopen: %+v %v", got, err)
		}
		var n int
		if err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if ms, _ := loadMigrations(r.engine); n != len(ms) {
			t.Errorf("schema_migrations has %d rows, want %d", n, len(ms))
		}
	}
}

// testConcurrentOpen starts several repositories on one empty database at
// once, as several processes might: migrations must run exactly once.
func testConcurrentOpen(t *testing.T, loc location) {
	const n = 4
	repos := make([]*Repo, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { repos[i], errs[i] = Open(context.Background(), loc.dsn, loc.dataDir, nil) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { _ = repos[i].Close() })
	}
	if t.Failed() {
		return
	}
	var count int
	if err := repos[0].db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM schema_migrations`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if ms, _ := loadMigrations(repos[0].engine); count != len(ms) {
		t.Errorf("schema_migrations has %d rows, want %d", count, len(ms))
	}
}

// testTwoRepos opens one database twice, as the server and an admin CLI
// would, and writes through both at once.
func testTwoRepos(t *testing.T, loc location) {
	server, admin := openRepo(t, loc), openRepo(t, loc)
	var (
		wg       sync.WaitGroup
		created  []int64
		adminErr error
	)
	wg.Go(func() {
		created = writeConcurrently(t, []*Repo{server, admin}, 4, 10, 4)
	})
	wg.Go(func() {
		for i := range 20 {
			name := fmt.Sprintf("ADMIN-%02d", i)
			if err := admin.CreateFeed(context.Background(), feed.Feed{Name: name, Status: feed.Receive}); err != nil {
				adminErr = err
				return
			}
			if err := admin.UpdateFeed(context.Background(), feed.Feed{Name: name, Status: feed.Reject}); err != nil {
				adminErr = err
				return
			}
		}
	})
	wg.Wait()
	if adminErr != nil {
		t.Fatalf("admin writes: %v", adminErr)
	}
	checkUnique(t, admin, created, 4*10*4)
	feeds, err := server.ListFeeds(t.Context())
	if err != nil || len(feeds) != 20 {
		t.Errorf("server sees %d feeds (%v), want 20", len(feeds), err)
	}
}

func TestOpenRejectsUnknownDSN(t *testing.T) {
	for _, dsn := range []string{"mysql://u:secret@h/db", "host=localhost user=postgres password=secret", "sqlite://x"} {
		_, err := Open(t.Context(), dsn, t.TempDir(), nil)
		if err == nil {
			t.Errorf("Open(%q) succeeded", dsn)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("error leaks the DSN: %v", err)
		}
	}
	if _, err := Open(t.Context(), "", "", nil); err == nil {
		t.Error("Open with neither DSN nor data dir succeeded")
	}
}

// TestSQLiteDurability checks the pragmas every pooled connection runs with:
// receipts promise that a committed batch survives power loss.
func TestSQLiteDurability(t *testing.T) {
	r := openRepo(t, location{dataDir: t.TempDir()})
	ctx := t.Context()
	// Hold several connections at once so the check covers more than one.
	var conns []interface{ Close() error }
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range 3 {
		c, err := r.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var mode string
		var syncLevel, busy, fk int
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncLevel); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || syncLevel != 2 || busy != 10000 || fk != 1 {
			t.Errorf("journal_mode=%s synchronous=%d busy_timeout=%d foreign_keys=%d, want wal 2 10000 1", mode, syncLevel, busy, fk)
		}
	}
}

// TestSQLiteDataDirPath checks an awkward data directory: created when
// missing, and characters that mean something in a URI are taken literally.
func TestSQLiteDataDirPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new dir", "a?b#c%20d&e")
	r := openRepo(t, location{dataDir: dir})
	if err := r.CreateFeed(t.Context(), feed.Feed{Name: "F", Status: feed.Receive}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "weir.db"))
	if err != nil {
		t.Fatalf("database not at the literal path: %v", err)
	}
	if fi.Size() == 0 && !fileExists(filepath.Join(dir, "weir.db-wal")) {
		t.Error("database file empty and no WAL")
	}
	di, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := di.Mode().Perm(); perm&0o027 != 0 {
		t.Errorf("data dir mode %v, want at most 0750", perm)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// BenchmarkApply measures the group committer's steady state on SQLite: each
// batch creates 32 streams and unlocks the 32 created by the batch before.
func BenchmarkApply(b *testing.B) {
	r := openRepo(b, location{dataDir: b.TempDir()})
	ctx := context.Background()
	mk := func() []*Stream {
		ss := make([]*Stream, 32)
		for i := range ss {
			ss[i] = newStream("BENCH", "node1", "rcpt")
		}
		return ss
	}
	prev := mk()
	apply(b, r, &Batch{Create: prev})
	a := new(attr.Map)
	a.Put("Feed", "BENCH")
	a.Put("System", "Bench")
	a.Put("Compression", "GZIP")
	n := 0
	for b.Loop() {
		n++
		for _, s := range prev {
			s.Parts, s.RawSize, s.FileSize, s.Attributes = 1, 4096, 1024, a
		}
		next := mk()
		if err := r.Apply(ctx, &Batch{Create: next, Unlock: prev}); err != nil {
			b.Fatal(err)
		}
		prev = next
	}
	b.ReportMetric(float64(n*64)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkApplyPacked measures the small-post path on SQLite: each batch
// inserts 8 complete packed streams (a group commit at 1 KiB posts holds
// about 7), with the attributes a post carries.
func BenchmarkApplyPacked(b *testing.B) {
	r := openRepo(b, location{dataDir: b.TempDir()})
	ctx := context.Background()
	a := new(attr.Map)
	for _, k := range []string{"Feed", "System", "Environment", "Compression", "GUID", "ReceiptId", "RemoteAddress", "RemoteHost"} {
		a.Put(k, "value-of-"+k)
	}
	off := int64(0)
	n := 0
	for b.Loop() {
		ss := make([]*Stream, 8)
		for i := range ss {
			s := newStream("BENCH", "node1", "rcpt")
			s.Parts, s.RawSize, s.FileSize, s.Attributes = 1, 1024, 700, a
			s.Pack, s.PackOffset = "packs/0", off
			off += 700
			ss[i] = s
		}
		if err := r.Apply(ctx, &Batch{Packed: ss}); err != nil {
			b.Fatal(err)
		}
		n += len(ss)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
}

// TestSQLiteTwoProcessesReadThenWrite runs read-then-write transactions
// through two repositories on one file, as server and admin CLI would. With
// deferred transactions both could hold a read snapshot and then fail to
// upgrade to a write lock (SQLITE_BUSY that busy_timeout cannot resolve);
// _txlock=immediate takes the write lock at BEGIN so they queue instead.
func TestSQLiteTwoProcessesReadThenWrite(t *testing.T) {
	loc := location{dataDir: t.TempDir()}
	repos := []*Repo{openRepo(t, loc), openRepo(t, loc)}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range 4 {
		r := repos[w%2]
		wg.Go(func() {
			for i := range 25 {
				err := r.withTx(context.Background(), func(tx *sql.Tx) error {
					var n int
					if err := tx.QueryRow(`SELECT COUNT(*) FROM feeds`).Scan(&n); err != nil {
						return err
					}
					_, err := tx.Exec(`INSERT INTO feeds (name, status, create_ms, update_ms) VALUES ($1, 'RECEIVE', $2, $2)`,
						fmt.Sprintf("W%d-%d", w, i), n)
					return err
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if feeds, err := repos[0].ListFeeds(t.Context()); err != nil || len(feeds) != 100 {
		t.Errorf("%d feeds (%v), want 100", len(feeds), err)
	}
}

func TestIsReferenceType(t *testing.T) {
	for typ, want := range map[string]bool{
		"Raw Reference": true, "Reference": true, "Test Reference": true, "raw reference": true,
		"Raw Events": false, "Events": false, "Records": false, "Meta Data": false, "": false,
		"NotReference": false, "Reference Data": false,
	} {
		if got := IsReferenceType(typ); got != want {
			t.Errorf("IsReferenceType(%q) = %v, want %v", typ, got, want)
		}
	}
}

// reserveIDs reserves n stream ids and returns them, each.
func reserveIDs(t *testing.T, r *Repo, n int) []int64 {
	t.Helper()
	rs, err := r.ReserveStreamIDs(t.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, g := range rs {
		for id := g.First; id <= g.Last; id++ {
			ids = append(ids, id)
		}
	}
	return ids
}

// testReservedStreamIDs: ids reserved are given to no insert, in a fresh
// database and after rows; streams inserted with them keep them, a second
// insert of one leaves the first row as it is, and the next insert and
// the next reservation come after them.
func testReservedStreamIDs(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	reserved := reserveIDs(t, r, 10)
	if len(reserved) != 10 {
		t.Fatalf("reserved %v, want 10 ids", reserved)
	}
	plain := newStream("FEED-A", "n1", "r-plain")
	apply(t, r, &Batch{Create: []*Stream{plain}})
	if slices.Contains(reserved, plain.ID) || plain.ID < reserved[9] {
		t.Fatalf("an insert took id %d, reserved %v", plain.ID, reserved)
	}
	// Packed and LOCKED rows with reserved ids.
	packed := newStream("FEED-A", "n1", "r-packed")
	packed.ID, packed.Pack, packed.PackOffset, packed.StatusMs = reserved[3], "packs/p1.wpk", 100, 12345
	locked := newStream("FEED-A", "n1", "r-locked")
	locked.ID = reserved[4]
	apply(t, r, &Batch{Packed: []*Stream{packed}, Create: []*Stream{locked}})
	if packed.ID != reserved[3] || locked.ID != reserved[4] {
		t.Fatalf("ids %d %d, want %d %d", packed.ID, locked.ID, reserved[3], reserved[4])
	}
	got, err := r.GetStream(ctx, reserved[3])
	if err != nil || got.ReceiptID != "r-packed" || got.Status != Unlocked || got.StatusMs != 12345 || got.PackOffset != 100 {
		t.Fatalf("packed row %+v %v", got, err)
	}
	// Again, as a replay would (the stream's place since moved by a
	// compaction, say): the row stays as it is.
	again := *packed
	again.PackOffset = 999
	apply(t, r, &Batch{Packed: []*Stream{&again}})
	if got, err := r.GetStream(ctx, reserved[3]); err != nil || got.ReceiptID != "r-packed" || got.PackOffset != 100 {
		t.Fatalf("row after a second insert %+v %v", got, err)
	}
	next, err := r.ReserveStreamIDs(ctx, 5)
	if err != nil || len(next) == 0 || next[0].First <= plain.ID {
		t.Fatalf("second reservation %v %v, after id %d", next, err, plain.ID)
	}
	later := newStream("FEED-A", "n1", "r-later")
	apply(t, r, &Batch{Create: []*Stream{later}})
	if later.ID <= next[len(next)-1].Last {
		t.Fatalf("an insert after the second reservation took %d, reserved %v", later.ID, next)
	}
}

// testLogMark: a node's mark is absent until a batch records one, then is
// the last recorded; each node has its own; log packs are numbered in the
// order they are opened, and those before the mark's are forgotten when
// it moves.
func testLogMark(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	if m, ok, err := r.LogMark(ctx, "n1"); err != nil || ok || m.Pack != "" {
		t.Fatalf("mark of a new node: %+v %v %v", m, ok, err)
	}
	var seqs []int64
	for i, p := range []string{"packs/a.wpk", "packs/b.wpk", "packs/c.wpk"} {
		seq, err := r.OpenLogPack(ctx, "n1", p, int64(10*i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if other, err := r.OpenLogPack(ctx, "n2", "packs/x.wpk", 0); err != nil || other != 1 {
		t.Fatalf("another node's first log pack: %d %v", other, err)
	}
	if seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
		t.Fatalf("log pack numbers %v", seqs)
	}
	apply(t, r, &Batch{Mark: &LogMark{Node: "n1", Seq: 1, Pack: "packs/a.wpk", End: 10}})
	apply(t, r, &Batch{Mark: &LogMark{Node: "n2", Seq: 1, Pack: "packs/x.wpk", End: 7}})
	if lp, err := r.LogPacks(ctx, "n1", 1); err != nil || len(lp) != 3 || lp[1].Pack != "packs/b.wpk" || lp[1].PrevEnd != 10 {
		t.Fatalf("log packs of n1: %+v %v", lp, err)
	}
	apply(t, r, &Batch{Create: []*Stream{newStream("FEED-A", "n1", "r1")}, Mark: &LogMark{Node: "n1", Seq: 3, Pack: "packs/c.wpk", End: 20}})
	if m, ok, err := r.LogMark(ctx, "n1"); err != nil || !ok || m != (LogMark{Node: "n1", Seq: 3, Pack: "packs/c.wpk", End: 20}) {
		t.Fatalf("mark of n1: %+v %v %v", m, ok, err)
	}
	if m, ok, err := r.LogMark(ctx, "n2"); err != nil || !ok || m.Pack != "packs/x.wpk" || m.End != 7 {
		t.Fatalf("mark of n2: %+v %v %v", m, ok, err)
	}
	if lp, err := r.LogPacks(ctx, "n1", 0); err != nil || len(lp) != 1 || lp[0].Seq != 3 {
		t.Fatalf("log packs of n1 after the mark moved: %+v %v", lp, err)
	}
	if next, err := r.OpenLogPack(ctx, "n1", "packs/d.wpk", 20); err != nil || next != 4 {
		t.Fatalf("the next log pack: %d %v", next, err)
	}
	if !r.markCommitted(ctx, LogMark{Node: "n1", Seq: 3, Pack: "packs/c.wpk", End: 20}) || r.markCommitted(ctx, LogMark{Node: "n1", Seq: 3, Pack: "packs/c.wpk", End: 30}) {
		t.Error("markCommitted does not tell the recorded mark from another")
	}
}

// testStreamIDCollision: a packed stream inserted with an id another
// stream's row has is an error, not a silent no-op; AdvanceStreamIDs moves
// the ids past rows inserted with ids the database did not give.
func testStreamIDCollision(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	first, err := r.ReserveStreamIDs(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := first[0].First
	a := newStream("FEED-A", "n1", "r-a")
	a.ID, a.Pack, a.PackOffset = id, "packs/p.wpk", 0
	apply(t, r, &Batch{Packed: []*Stream{a}})
	b := newStream("FEED-A", "n1", "r-b")
	b.ID, b.Pack, b.PackOffset = id, "packs/p.wpk", 500
	if err := r.Apply(ctx, &Batch{Packed: []*Stream{b}}); err == nil || !strings.Contains(err.Error(), "another stream's") {
		t.Fatalf("a second stream with id %d: %v", id, err)
	}
	// Rows with ids far past the counter (a log replayed into a database
	// restored from an older backup): the counter moves past them.
	far := newStream("FEED-A", "n1", "r-far")
	far.ID, far.Pack, far.PackOffset = id+1000, "packs/p.wpk", 900
	apply(t, r, &Batch{Packed: []*Stream{far}})
	if err := r.AdvanceStreamIDs(ctx, far.ID); err != nil {
		t.Fatal(err)
	}
	next, err := r.ReserveStreamIDs(ctx, 1)
	if err != nil || next[0].First <= far.ID {
		t.Fatalf("reserved %v (%v) after a row with id %d", next, err, far.ID)
	}
	plain := newStream("FEED-A", "n1", "r-plain")
	apply(t, r, &Batch{Create: []*Stream{plain}})
	if plain.ID <= far.ID {
		t.Fatalf("an insert took id %d after a row with id %d", plain.ID, far.ID)
	}
}

// testCommitLostAfterEarlierTry: a batch retried with more rows after an
// earlier try of its first rows committed (its answer lost) is not taken
// for committed when its own commit is lost: its first row is there, but
// its mark is not. (Apply took the first row's presence for the batch's.)
func testCommitLostAfterEarlierTry(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ids := reserveIDs(t, r, 2)
	r1 := newStream("FEED-A", "n1", "r1")
	r1.ID, r1.Pack, r1.PackOffset = ids[0], "packs/p.wpk", 10
	apply(t, r, &Batch{Packed: []*Stream{r1}, Mark: &LogMark{Node: "n1", Seq: 1, Pack: "packs/p.wpk", End: 100}})
	again := *r1
	r2 := newStream("FEED-A", "n1", "r2")
	r2.ID, r2.Pack, r2.PackOffset = ids[1], "packs/p.wpk", 110
	r.loseCommit = func() bool { return true }
	err := r.Apply(ctx, &Batch{Packed: []*Stream{&again, r2}, Mark: &LogMark{Node: "n1", Seq: 1, Pack: "packs/p.wpk", End: 200}})
	r.loseCommit = nil
	if err == nil || !errors.Is(err, ErrCommitUnknown) {
		t.Fatalf("Apply of a batch that rolled back: %v, want the commit in doubt", err)
	}
	if _, err := r.GetStream(ctx, ids[1]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("row %d of the rolled-back batch: %v", ids[1], err)
	}
	// A lost answer of a commit that happened is found committed.
	r3 := newStream("FEED-A", "n1", "r3")
	r3.ID, r3.Pack, r3.PackOffset = ids[1], "packs/p.wpk", 110
	apply(t, r, &Batch{Packed: []*Stream{r3}, Mark: &LogMark{Node: "n1", Seq: 1, Pack: "packs/p.wpk", End: 200}})
	if !r.markCommitted(ctx, LogMark{Node: "n1", Seq: 1, Pack: "packs/p.wpk", End: 200}) {
		t.Fatal("the mark of a committed batch is not found")
	}
}
