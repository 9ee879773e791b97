package meta

import (
	"errors"
	"slices"
	"testing"
)

// TestCompactPackRepo: the compaction of a pack in the database (see
// compact.go): the claim of its purgeable streams, the list of those that
// stay, the recorded pack removals, and the transaction that repoints the
// staying rows and deletes the claimed ones, or changes nothing if the
// pack's rows are not those copied.
func TestCompactPackRepo(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			r := openRepo(t, ec.fresh(t))
			ctx := t.Context()
			ids := pgPacked(t, r, "n1", "packs/A", 4)
			pgDelete(t, r, 10, ids[0], ids[1]) // purgeable before 100
			pgDelete(t, r, 200, ids[3])        // deleted too recently
			claimed, err := r.ClaimPackDeleted(ctx, "packs/A", 100)
			if err != nil || !slices.Equal(sorted(claimed), ids[:2]) {
				t.Fatalf("ClaimPackDeleted = %v, %v; want %v", claimed, err, ids[:2])
			}
			if err := r.SetStreamStatus(ctx, ids[0], Unlocked); !errors.Is(err, ErrPurging) {
				t.Fatalf("restore of a claimed stream: %v", err)
			}
			staying, err := r.PackStaying(ctx, "packs/A")
			if err != nil || len(staying) != 2 || staying[0] != (PackMove{ID: ids[2], Offset: 200, Size: 100}) || staying[1].ID != ids[3] {
				t.Fatalf("PackStaying = %+v, %v", staying, err)
			}
			if err := r.AddPackRemoval(ctx, "n1", "packs/B"); err != nil {
				t.Fatal(err)
			}
			removals := func(node string, want ...string) {
				t.Helper()
				got, err := r.PackRemovals(ctx, node)
				if err != nil || !slices.Equal(got, want) {
					t.Fatalf("PackRemovals(%s) = %v, %v; want %v", node, got, err, want)
				}
			}
			removals("n1", "packs/B")
			removals("n2")
			staying[0].NewOffset, staying[1].NewOffset = 0, 100
			// A staying row left out, or one not in the pack: nothing changes.
			for _, moves := range [][]PackMove{staying[:1], append(slices.Clone(staying), PackMove{ID: ids[2] + 100})} {
				if err := r.CompactPack(ctx, "n1", "packs/A", "packs/B", moves, claimed); !errors.Is(err, ErrPackChanged) {
					t.Fatalf("CompactPack with %+v: %v", moves, err)
				}
				for _, id := range ids {
					if s, err := r.GetStream(ctx, id); err != nil || s.Pack != "packs/A" {
						t.Fatalf("stream %d after a failed CompactPack: %+v, %v", id, s, err)
					}
				}
				removals("n1", "packs/B")
			}
			if err := r.CompactPack(ctx, "n1", "packs/A", "packs/B", staying, claimed); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids[:2] {
				if _, err := r.GetStream(ctx, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("purged stream %d: %v", id, err)
				}
			}
			for i, id := range ids[2:] {
				s, err := r.GetStream(ctx, id)
				if err != nil || s.Pack != "packs/B" || s.PackOffset != int64(100*i) || s.FileSize != 100 {
					t.Errorf("moved stream %d: %+v, %v", id, s, err)
				}
			}
			if s, _ := r.GetStream(ctx, ids[3]); s.Status != Deleted {
				t.Errorf("recently deleted stream is %s", s.Status)
			}
			removals("n1", "packs/A")
			if err := r.DonePackRemoval(ctx, "packs/A"); err != nil {
				t.Fatal(err)
			}
			removals("n1")
		})
	}
}

func sorted(ids []int64) []int64 {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}
