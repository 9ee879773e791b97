package meta

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/attr"
)

// TestDataFeedKeys runs the data feed key repository tests once per engine,
// with the same runner and fresh databases as TestRepo.
func TestDataFeedKeys(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			tests := []struct {
				name string
				fn   func(t *testing.T, loc location)
			}{
				{"CreateGet", testDataFeedKeyCreateGet},
				{"ListAndForAccount", testDataFeedKeyList},
				{"Revoke", testDataFeedKeyRevoke},
				{"CreateRejects", testDataFeedKeyCreateRejects},
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

func attrsOf(kv ...string) *attr.Map {
	m := new(attr.Map)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Put(kv[i], kv[i+1])
	}
	return m
}

func newDataFeedKey(account, hint string) *DataFeedKey {
	return &DataFeedKey{Account: account, Hint: hint, Hash: "h-" + hint, Salt: "s-" + hint,
		Algorithm: "ARGON2", Lookup: "l-" + hint, ExpiresMs: 4102444800000}
}

// sameKey compares keys including their attributes, which are a pointer.
func sameKey(t *testing.T, got, want DataFeedKey) {
	t.Helper()
	ga, wa := got.Attributes.Sorted(), want.Attributes.Sorted()
	got.Attributes, want.Attributes = nil, nil
	if got != want || !slices.Equal(ga, wa) {
		t.Errorf("key = %+v %v, want %+v %v", got, ga, want, wa)
	}
}

func testDataFeedKeyCreateGet(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	k := newDataFeedKey("1000", "abcdef")
	k.Attributes = attrsOf("System", "EXAMPLE", "Environment", "PROD")
	if err := r.CreateDataFeedKey(ctx, k); err != nil {
		t.Fatalf("CreateDataFeedKey: %v", err)
	}
	if k.ID <= 0 || k.CreateMs == 0 {
		t.Fatalf("after create ID/CreateMs = %d/%d, want both set", k.ID, k.CreateMs)
	}
	got, err := r.GetDataFeedKey(ctx, k.ID)
	if err != nil {
		t.Fatalf("GetDataFeedKey: %v", err)
	}
	sameKey(t, got, *k)

	// Explicit CreateMs is kept; nil attributes read back as an empty map.
	k2 := newDataFeedKey("1000", "second")
	k2.CreateMs = 1234
	k2.Algorithm, k2.Salt = "BCRYPT_2A", ""
	if err := r.CreateDataFeedKey(ctx, k2); err != nil {
		t.Fatalf("CreateDataFeedKey 2: %v", err)
	}
	if k2.ID <= k.ID || k2.CreateMs != 1234 {
		t.Errorf("second key ID/CreateMs = %d/%d, want > %d / 1234", k2.ID, k2.CreateMs, k.ID)
	}
	got2, err := r.GetDataFeedKey(ctx, k2.ID)
	if err != nil {
		t.Fatalf("GetDataFeedKey 2: %v", err)
	}
	if got2.Attributes == nil || got2.Attributes.Len() != 0 {
		t.Errorf("attributes = %v, want empty non-nil", got2.Attributes)
	}
	k2.Attributes = new(attr.Map)
	sameKey(t, got2, *k2)

	if _, err := r.GetDataFeedKey(ctx, k2.ID+100); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetDataFeedKey missing: err = %v, want ErrNotFound", err)
	}
}

func testDataFeedKeyList(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	var created []*DataFeedKey
	for i, acc := range []string{"B", "A", "B", "b", "A"} {
		k := newDataFeedKey(acc, string(rune('a'+i)))
		if err := r.CreateDataFeedKey(ctx, k); err != nil {
			t.Fatalf("CreateDataFeedKey: %v", err)
		}
		created = append(created, k)
	}
	if err := r.RevokeDataFeedKey(ctx, created[2].ID); err != nil {
		t.Fatalf("RevokeDataFeedKey: %v", err)
	}
	idsOf := func(ks []DataFeedKey) []int64 {
		var out []int64
		for _, k := range ks {
			out = append(out, k.ID)
		}
		return out
	}
	all, err := r.ListDataFeedKeys(ctx, "")
	if err != nil {
		t.Fatalf("ListDataFeedKeys: %v", err)
	}
	want := []int64{created[0].ID, created[1].ID, created[2].ID, created[3].ID, created[4].ID}
	if !slices.Equal(idsOf(all), want) {
		t.Errorf("list all ids = %v, want %v (by id, revoked included)", idsOf(all), want)
	}
	if all[2].RevokedMs == 0 {
		t.Errorf("revoked key listed with RevokedMs 0")
	}
	bs, err := r.ListDataFeedKeys(ctx, "B")
	if err != nil {
		t.Fatalf("ListDataFeedKeys B: %v", err)
	}
	if want := []int64{created[0].ID, created[2].ID}; !slices.Equal(idsOf(bs), want) {
		t.Errorf("list B ids = %v, want %v (exact account, revoked included)", idsOf(bs), want)
	}
	live, err := r.DataFeedKeysForAccount(ctx, "B")
	if err != nil {
		t.Fatalf("DataFeedKeysForAccount: %v", err)
	}
	if want := []int64{created[0].ID}; !slices.Equal(idsOf(live), want) {
		t.Errorf("keys for B = %v, want %v (not revoked, not other case)", idsOf(live), want)
	}
	none, err := r.DataFeedKeysForAccount(ctx, "nobody")
	if err != nil || len(none) != 0 {
		t.Errorf("keys for unknown account = %v, %v; want none", none, err)
	}

	// By lookup: exactly that key, not when revoked, nothing for "" (the
	// keys created before lookups were stored).
	byLookup, err := r.DataFeedKeysByLookup(ctx, "l-b")
	if err != nil {
		t.Fatalf("DataFeedKeysByLookup: %v", err)
	}
	if want := []int64{created[1].ID}; !slices.Equal(idsOf(byLookup), want) {
		t.Errorf("keys by lookup l-b = %v, want %v", idsOf(byLookup), want)
	}
	sameKey(t, byLookup[0], *created[1])
	old := newDataFeedKey("A", "old")
	old.Lookup = ""
	if err := r.CreateDataFeedKey(ctx, old); err != nil {
		t.Fatalf("CreateDataFeedKey: %v", err)
	}
	if plan := queryPlan(t, r, dataFeedKeysByLookupSQL, "l-b"); !strings.Contains(plan, "datafeed_keys_lookup") {
		t.Errorf("a lookup does not use the index datafeed_keys_lookup:\n%s", plan)
	}
	for _, l := range []string{"l-c", "", "l-nothing"} {
		if ks, err := r.DataFeedKeysByLookup(ctx, l); err != nil || len(ks) != 0 {
			t.Errorf("keys by lookup %q = %v, %v; want none", l, idsOf(ks), err)
		}
	}
}

func testDataFeedKeyRevoke(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)

	k := newDataFeedKey("1000", "revoke")
	if err := r.CreateDataFeedKey(ctx, k); err != nil {
		t.Fatalf("CreateDataFeedKey: %v", err)
	}
	if err := r.RevokeDataFeedKey(ctx, k.ID); err != nil {
		t.Fatalf("RevokeDataFeedKey: %v", err)
	}
	got, err := r.GetDataFeedKey(ctx, k.ID)
	if err != nil {
		t.Fatalf("GetDataFeedKey: %v", err)
	}
	if got.RevokedMs == 0 {
		t.Fatalf("RevokedMs = 0 after revoke")
	}
	// Revoking again succeeds and keeps the first time.
	if err := r.RevokeDataFeedKey(ctx, k.ID); err != nil {
		t.Errorf("second revoke: %v", err)
	}
	again, _ := r.GetDataFeedKey(ctx, k.ID)
	if again.RevokedMs != got.RevokedMs {
		t.Errorf("RevokedMs changed from %d to %d on second revoke", got.RevokedMs, again.RevokedMs)
	}
	if err := r.RevokeDataFeedKey(ctx, k.ID+100); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoke missing: err = %v, want ErrNotFound", err)
	}
	if ks, err := r.DataFeedKeysForAccount(ctx, "1000"); err != nil || len(ks) != 0 {
		t.Errorf("keys for account after revoke = %v, %v; want none", ks, err)
	}
}

func testDataFeedKeyCreateRejects(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	for name, mutate := range map[string]func(k *DataFeedKey){
		"blank account": func(k *DataFeedKey) { k.Account = " " },
		"no hash":       func(k *DataFeedKey) { k.Hash = "" },
		"no algorithm":  func(k *DataFeedKey) { k.Algorithm = "" },
		"no expiry":     func(k *DataFeedKey) { k.ExpiresMs = 0 },
	} {
		k := newDataFeedKey("1000", "x")
		mutate(k)
		if err := r.CreateDataFeedKey(ctx, k); err == nil {
			t.Errorf("%s: CreateDataFeedKey succeeded", name)
		} else if k.ID != 0 {
			t.Errorf("%s: ID set to %d on failure", name, k.ID)
		}
	}
	if ks, _ := r.ListDataFeedKeys(ctx, ""); len(ks) != 0 {
		t.Errorf("rejected keys were stored: %v", ks)
	}
}
