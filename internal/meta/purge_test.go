package meta

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestPurge runs the tests of the purge of deleted streams (purge.go) once
// per engine.
func TestPurge(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			tests := []struct {
				name string
				fn   func(t *testing.T, loc location)
			}{
				{"DeletedStreamsBefore", testPurgeDeletedStreamsBefore},
				{"ClaimStopsRestore", testPurgeClaimStopsRestore},
				{"ClaimPack", testPurgeClaimPack},
				{"ClaimPackRacesRestore", testPurgeClaimPackRacesRestore},
				{"Plans", testPurgePlans},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, ec.fresh(t))
				})
			}
		})
	}
}

// pgDeleted creates n UNLOCKED streams of node and deletes them, their
// status times set to ms.
func pgDeleted(t *testing.T, r *Repo, node string, n int, ms int64) []int64 {
	t.Helper()
	ss := make([]*Stream, n)
	for i := range ss {
		ss[i] = newStream("FEED-P", node, fmt.Sprintf("r-%s-%d", node, i))
	}
	apply(t, r, &Batch{Create: ss, Unlock: ss})
	out := make([]int64, n)
	for i, s := range ss {
		if err := r.SetStreamStatus(t.Context(), s.ID, Deleted); err != nil {
			t.Fatal(err)
		}
		pxSetStatusMs(t, r, s.ID, ms)
		out[i] = s.ID
	}
	return out
}

// pgPacked inserts n complete streams of node in pack.
func pgPacked(t *testing.T, r *Repo, node, pack string, n int) []int64 {
	t.Helper()
	ss := make([]*Stream, n)
	for i := range ss {
		ss[i] = newStream("FEED-P", node, fmt.Sprintf("p-%s-%d", pack, i))
		ss[i].Pack, ss[i].PackOffset, ss[i].FileSize = pack, int64(100*i), 100
	}
	apply(t, r, &Batch{Packed: ss})
	out := make([]int64, n)
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func pgDelete(t *testing.T, r *Repo, ms int64, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		if err := r.SetStreamStatus(t.Context(), id, Deleted); err != nil {
			t.Fatal(err)
		}
		pxSetStatusMs(t, r, id, ms)
	}
}

// testPurgeDeletedStreamsBefore: only the node's streams deleted before
// the cutoff (and claimed ones) are listed, oldest deletion first, page by
// page.
func testPurgeDeletedStreamsBefore(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	old := pgDeleted(t, r, "n1", 5, 1000)
	older := pgDeleted(t, r, "n1", 2, 500)
	pgDeleted(t, r, "n1", 2, 5000)   // too recent
	pgDeleted(t, r, "n2", 3, 500)    // another node's
	pxStreams(t, r, "FEED-P", 2, 10) // live
	claimed, err := r.ClaimPurge(ctx, "n1", []int64{old[4]}, 2000)
	if err != nil || !slices.Equal(claimed, []int64{old[4]}) {
		t.Fatalf("ClaimPurge = %v, %v", claimed, err)
	}
	want := append([]int64{old[4]}, older...) // claimed first, then by deletion time
	want = append(want, old[:4]...)
	var got []int64
	cur := PurgeStart
	for page := 0; ; page++ {
		ss, next, err := r.DeletedStreamsBefore(ctx, "n1", 2000, cur, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			if s.Node != "n1" || s.Status != Deleted || s.Attributes != nil {
				t.Errorf("listed %+v", s)
			}
			if s.ID == old[4] && s.StatusMs != 1000 {
				t.Errorf("claimed stream's status time %d, want the time it was deleted (1000)", s.StatusMs)
			}
			got = append(got, s.ID)
		}
		if len(ss) < 3 {
			break
		}
		if page > 5 {
			t.Fatal("paging does not end")
		}
		cur = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("DeletedStreamsBefore pages = %v, want %v", got, want)
	}
	if ss, _, err := r.DeletedStreamsBefore(ctx, "n3", 1<<62, PurgeStart, 100); err != nil || len(ss) != 0 {
		t.Fatalf("another node's list: %v, %v", ids(ss), err)
	}
}

// testPurgeClaimStopsRestore: a claimed stream is not restored, by id or
// in bulk, and reads back with the time it was deleted; an unclaimed one is.
func testPurgeClaimStopsRestore(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ds := pgDeleted(t, r, "n1", 4, 1000)
	recent := pgDeleted(t, r, "n1", 1, 3000)
	other := pgDeleted(t, r, "n2", 1, 1000)
	packed := pgPacked(t, r, "n1", "packs/n1-1.wpk", 1)
	pgDelete(t, r, 1000, packed...)
	// ds[3] is not asked for; recent is too new; other is another node's;
	// a packed stream goes with its pack (ClaimPack), not alone.
	claimed, err := r.ClaimPurge(ctx, "n1", []int64{ds[0], ds[1], ds[2], recent[0], other[0], packed[0]}, 2000)
	slices.Sort(claimed)
	if err != nil || !slices.Equal(claimed, ds[:3]) {
		t.Fatalf("ClaimPurge = %v, %v; want %v", claimed, err, ds[:3])
	}
	// Claiming again (a purge after a crash) claims the same.
	if again, err := r.ClaimPurge(ctx, "n1", ds[:3], 2000); err != nil || len(again) != 3 {
		t.Fatalf("ClaimPurge again = %v, %v", again, err)
	}
	err = r.SetStreamStatus(ctx, ds[0], Unlocked)
	if !errors.Is(err, ErrPurging) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("restore of a claimed stream: %v", err)
	}
	got, err := r.GetStream(ctx, ds[0])
	if err != nil || got.Status != Deleted || got.StatusMs != 1000 {
		t.Fatalf("claimed stream %+v, %v; want DELETED at 1000", got, err)
	}
	all := mustExpr(t, opn("AND", tm("Id", "GREATER_THAN", "0")))
	c, err := r.CountStatusChange(ctx, all, nil, Unlocked)
	if err != nil || c.Changed != 4 { // ds[3], recent, other, packed
		t.Fatalf("dry-run restore: %+v, %v; want 4 to change", c, err)
	}
	c, err = r.UpdateStatusWhere(ctx, all, nil, Unlocked)
	if err != nil || c.Changed != 4 {
		t.Fatalf("bulk restore: %+v, %v; want 4 changed", c, err)
	}
	for _, id := range ds[:3] {
		if got, err := r.GetStream(ctx, id); err != nil || got.Status != Deleted {
			t.Errorf("claimed stream %d after a bulk restore: %+v, %v", id, got, err)
		}
	}
	if got, err := r.GetStream(ctx, ds[3]); err != nil || got.Status != Unlocked {
		t.Errorf("unclaimed stream after a bulk restore: %+v, %v", got, err)
	}
	if err := r.PurgeStreams(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	if err := r.SetStreamStatus(ctx, ds[0], Unlocked); !errors.Is(err, ErrNotFound) {
		t.Fatalf("restore of a purged stream: %v", err)
	}
}

// testPurgeClaimPack: a pack is claimed whole only when every stream in it
// was deleted before the cutoff; otherwise nothing in it is claimed.
func testPurgeClaimPack(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	const pack = "packs/2024/01/01/n1-7.wpk"
	ps := pgPacked(t, r, "n1", pack, 3)
	other := pgPacked(t, r, "n1", "packs/2024/01/01/n1-8.wpk", 1)
	pgDelete(t, r, 1000, ps[0], ps[1], other[0])
	restorable := func(id int64) {
		t.Helper()
		if err := r.SetStreamStatus(ctx, id, Unlocked); err != nil {
			t.Fatalf("restore %d: %v", id, err)
		}
		pgDelete(t, r, 1000, id)
	}
	if got, err := r.ClaimPack(ctx, pack, 2000); err != nil || got != nil {
		t.Fatalf("ClaimPack with a live stream = %v, %v", got, err)
	}
	restorable(ps[0])
	pgDelete(t, r, 3000, ps[2])
	if got, err := r.ClaimPack(ctx, pack, 2000); err != nil || got != nil {
		t.Fatalf("ClaimPack with a recently deleted stream = %v, %v", got, err)
	}
	restorable(ps[1])
	pxSetStatusMs(t, r, ps[2], 1500)
	got, err := r.ClaimPack(ctx, pack, 2000)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, ps) {
		t.Fatalf("ClaimPack of a pack deleted whole = %v, %v; want %v", got, err, ps)
	}
	if err := r.SetStreamStatus(ctx, ps[1], Unlocked); !errors.Is(err, ErrPurging) {
		t.Fatalf("restore of a stream of a claimed pack: %v", err)
	}
	if again, err := r.ClaimPack(ctx, pack, 2000); err != nil || len(again) != 3 {
		t.Fatalf("ClaimPack again = %v, %v", again, err)
	}
	// The other pack's stream was not touched.
	restorable(other[0])
}

// testPurgeClaimPackRacesRestore: a restore racing with the claim of its
// pack either wins (and the pack is not claimed) or loses (the restore is
// refused): never both, never neither.
func testPurgeClaimPackRacesRestore(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	for i := range 40 {
		pack := fmt.Sprintf("packs/2024/01/01/n1-%d.wpk", i)
		ps := pgPacked(t, r, "n1", pack, 3)
		pgDelete(t, r, 1000, ps...)
		var wg sync.WaitGroup
		var claimed []int64
		var claimErr, restoreErr error
		wg.Add(2)
		go func() { defer wg.Done(); claimed, claimErr = r.ClaimPack(ctx, pack, 2000) }()
		go func() { defer wg.Done(); restoreErr = r.SetStreamStatus(ctx, ps[i%3], Unlocked) }()
		wg.Wait()
		if claimErr != nil {
			t.Fatal(claimErr)
		}
		got, err := r.GetStream(ctx, ps[i%3])
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case restoreErr == nil && claimed == nil && got.Status == Unlocked:
		case errors.Is(restoreErr, ErrPurging) && len(claimed) == 3 && got.Status == Deleted:
		default:
			t.Fatalf("round %d: claim %v, restore %v, stream %s", i, claimed, restoreErr, got.Status)
		}
	}
}

// testPurgePlans: the claims find their rows by index, not by walking the
// table or every DELETED row (streams_status_ms). ClaimPack runs for each
// pack a purge batch names, under the store's pack lock and on the
// database's writer, and ClaimPurge for each batch: SQLite scanned the
// whole table for a pack's rows (the partial index streams_pack was not
// used for a plain pack = $1) and, for the claims, every stream DELETED
// before the cutoff (after a backlog, most of the table).
func testPurgePlans(t *testing.T, loc location) {
	r := openRepo(t, loc)
	pack := "packs/2024/01/01/n1-7.wpk"
	for _, q := range []struct {
		name, sql string
		args      []any
		want      string
	}{
		{"count a pack's rows to keep", r.packKeepSQL(), []any{pack, string(Deleted), 1000}, "streams_pack"},
		{"claim a pack", r.claimPackSQL(), []any{pack, string(Deleted), 1000}, "streams_pack"},
	} {
		if plan := queryPlan(t, r, q.sql, q.args...); !strings.Contains(plan, q.want) || strings.Contains(plan, "SCAN streams") {
			t.Errorf("%s: does not use %s:\n%s", q.name, q.want, plan)
		}
	}
	args := []any{string(Deleted), 1000, "n1", "[1,2,3]"}
	plan := queryPlan(t, r, r.claimPurgeSQL(r.placeholder(args, true)), args...)
	if r.Engine() == engineSQLite && (!strings.Contains(plan, "PRIMARY KEY") || strings.Contains(plan, "streams_status_ms")) {
		t.Errorf("claim streams by id: not by rowid:\n%s", plan)
	}
	t.Logf("claim streams by id:\n%s", plan)
}
