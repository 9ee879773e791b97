package meta

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
)

// TestAccess runs the users, groups, permissions and API key repository
// tests once per engine, like TestRepo.
func TestAccess(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, loc location)
	}{
		{"Users", testUsers},
		{"Membership", testMembership},
		{"ConcurrentMembershipNoCycle", testConcurrentMembershipNoCycle},
		{"Permissions", testPermissions},
		{"APIKeys", testAPIKeys},
		{"BootstrapAdmin", testBootstrapAdmin},
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

func mustUser(t *testing.T, r *Repo, name string, group bool) User {
	t.Helper()
	u, err := r.CreateUser(t.Context(), User{Name: name, DisplayName: "D " + name, Group: group, Enabled: true})
	if err != nil {
		t.Fatalf("CreateUser %s: %v", name, err)
	}
	return u
}

func names(us []User) []string {
	out := []string{}
	for _, u := range us {
		out = append(out, u.Name)
	}
	return out
}

func testUsers(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	if has, err := r.HasUsers(ctx); err != nil || has {
		t.Fatalf("HasUsers on empty = %v, %v; want false", has, err)
	}
	bob := mustUser(t, r, "bob", false)
	if bob.ID == 0 || bob.CreateMs == 0 || bob.UpdateMs != bob.CreateMs || !bob.Enabled || bob.Group {
		t.Errorf("created %+v", bob)
	}
	got, err := r.GetUser(ctx, "bob")
	if err != nil || got != bob {
		t.Errorf("GetUser = %+v, %v; want %+v", got, err, bob)
	}
	if got, err := r.GetUserByID(ctx, bob.ID); err != nil || got != bob {
		t.Errorf("GetUserByID = %+v, %v; want %+v", got, err, bob)
	}
	if _, err := r.CreateUser(ctx, User{Name: "bob", Group: true}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate CreateUser: %v, want ErrExists", err)
	}
	if _, err := r.GetUser(ctx, "Bob"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetUser other case: %v, want ErrNotFound (names are exact)", err)
	}
	if _, err := r.GetUserByID(ctx, 9999); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetUserByID missing: %v, want ErrNotFound", err)
	}
	if has, err := r.HasUsers(ctx); err != nil || !has {
		t.Errorf("HasUsers = %v, %v; want true", has, err)
	}
	for _, n := range []string{"b-user", "B_USER", "admins", "Z"} {
		mustUser(t, r, n, n == "admins")
	}
	list, err := r.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"B_USER", "Z", "admins", "b-user", "bob"}; !slices.Equal(names(list), want) {
		t.Errorf("ListUsers = %v, want %v (byte-wise)", names(list), want)
	}
	if !list[2].Group || list[4].Group {
		t.Errorf("group flags wrong: %+v", list)
	}

	if err := r.SetUserEnabled(ctx, "bob", false); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.GetUser(ctx, "bob"); got.Enabled || got.UpdateMs < bob.UpdateMs {
		t.Errorf("after disable: %+v", got)
	}
	if err := r.SetUserEnabled(ctx, "nobody", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetUserEnabled missing: %v, want ErrNotFound", err)
	}
}

func testMembership(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	alice := mustUser(t, r, "alice", false)
	for _, g := range []string{"A", "B", "C", "D"} {
		mustUser(t, r, g, true)
	}

	// alice in B in A, and in C; adding alice to B twice is idempotent.
	for _, m := range [][2]string{{"B", "alice"}, {"A", "B"}, {"C", "alice"}, {"B", "alice"}} {
		if err := r.AddMember(ctx, m[0], m[1]); err != nil {
			t.Fatalf("AddMember %v: %v", m, err)
		}
	}
	anc, err := r.Ancestors(ctx, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A", "B", "C"}; !slices.Equal(names(anc), want) {
		t.Errorf("Ancestors(alice) = %v, want %v", names(anc), want)
	}
	if m, err := r.Members(ctx, "B"); err != nil || !slices.Equal(names(m), []string{"alice"}) {
		t.Errorf("Members(B) = %v, %v", names(m), err)
	}
	if m, err := r.Members(ctx, "A"); err != nil || !slices.Equal(names(m), []string{"B"}) {
		t.Errorf("Members(A) = %v, %v", names(m), err)
	}

	// Cycles: self, direct, and through two levels.
	for _, m := range [][2]string{{"A", "A"}, {"B", "A"}} {
		if err := r.AddMember(ctx, m[0], m[1]); !errors.Is(err, ErrCycle) {
			t.Errorf("AddMember(%s, %s) = %v, want ErrCycle", m[0], m[1], err)
		}
	}
	if err := r.AddMember(ctx, "D", "A"); err != nil {
		t.Fatal(err)
	}
	if err := r.AddMember(ctx, "B", "D"); !errors.Is(err, ErrCycle) {
		t.Errorf("AddMember(B, D) with D > A > B: %v, want ErrCycle", err)
	}
	// A disabled group still counts for cycles: re-enabling it must not
	// reveal a cycle.
	if err := r.SetUserEnabled(ctx, "A", false); err != nil {
		t.Fatal(err)
	}
	if err := r.AddMember(ctx, "B", "D"); !errors.Is(err, ErrCycle) {
		t.Errorf("AddMember(B, D) with A disabled: %v, want ErrCycle", err)
	}
	// ...but grants nothing: alice's ancestors stop below it.
	anc, _ = r.Ancestors(ctx, alice.ID)
	if want := []string{"B", "C"}; !slices.Equal(names(anc), want) {
		t.Errorf("Ancestors(alice) with A disabled = %v, want %v", names(anc), want)
	}
	if err := r.SetUserEnabled(ctx, "A", true); err != nil {
		t.Fatal(err)
	}

	if err := r.AddMember(ctx, "A", "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("AddMember unknown member: %v, want ErrNotFound", err)
	}
	if err := r.AddMember(ctx, "nobody", "alice"); !errors.Is(err, ErrNotFound) {
		t.Errorf("AddMember unknown group: %v, want ErrNotFound", err)
	}

	if err := r.RemoveMember(ctx, "B", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveMember(ctx, "B", "alice"); err != nil {
		t.Errorf("RemoveMember twice: %v, want nil", err)
	}
	if err := r.RemoveMember(ctx, "B", "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RemoveMember unknown: %v, want ErrNotFound", err)
	}
	anc, _ = r.Ancestors(ctx, alice.ID)
	if want := []string{"C"}; !slices.Equal(names(anc), want) {
		t.Errorf("Ancestors(alice) after removal = %v, want %v", names(anc), want)
	}
}

// testConcurrentMembershipNoCycle races opposite additions through two
// repositories (two processes, or two nodes): exactly one of each pair may
// win, or the graph would hold a cycle.
func testConcurrentMembershipNoCycle(t *testing.T, loc location) {
	ctx := t.Context()
	r1, r2 := openRepo(t, loc), openRepo(t, loc)
	const pairs = 8
	for i := range pairs {
		mustUser(t, r1, fmt.Sprintf("G%d", i), true)
		mustUser(t, r1, fmt.Sprintf("H%d", i), true)
	}
	errs := make([][2]error, pairs)
	var wg sync.WaitGroup
	for i := range pairs {
		g, h := fmt.Sprintf("G%d", i), fmt.Sprintf("H%d", i)
		wg.Go(func() { errs[i][0] = r1.AddMember(ctx, g, h) })
		wg.Go(func() { errs[i][1] = r2.AddMember(ctx, h, g) })
	}
	wg.Wait()
	for i, e := range errs {
		ok := 0
		for _, err := range e {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, ErrCycle):
				t.Errorf("pair %d: unexpected error %v", i, err)
			}
		}
		if ok != 1 {
			t.Errorf("pair %d: %d of the two opposite memberships succeeded (%v), want exactly 1", i, ok, e)
		}
	}
}

func testPermissions(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	alice := mustUser(t, r, "alice", false)
	bob := mustUser(t, r, "bob", false)
	mustUser(t, r, "A", true)
	mustUser(t, r, "B", true)
	for _, m := range [][2]string{{"B", "alice"}, {"A", "B"}} {
		if err := r.AddMember(ctx, m[0], m[1]); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name, perm string
	}{{"A", "Data - View"}, {"B", "Manage Feeds"}, {"alice", "Data - View"}, {"bob", "Manage Users"}, {"alice", "Data - Export"}}
	for _, s := range steps {
		if err := r.GrantApp(ctx, s.name, s.perm); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.GrantApp(ctx, "alice", "Data - Export"); err != nil {
		t.Errorf("GrantApp twice: %v, want nil", err)
	}
	if err := r.GrantApp(ctx, "nobody", "Data - View"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GrantApp unknown user: %v, want ErrNotFound", err)
	}
	levels := []struct {
		name, feed string
		level      int
	}{
		{"A", "F1", 20}, {"B", "F1", 40}, {"alice", "F1", 10}, // max over ancestors: 40
		{"A", "F2", 50}, {"alice", "F3", 30}, {"bob", "F4", 20},
		{"alice", "F3", 20},             // replaces 30
		{"A", "F5", 10}, {"A", "F5", 0}, // removed
	}
	for _, l := range levels {
		if err := r.SetFeedLevel(ctx, l.name, l.feed, l.level); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetFeedLevel(ctx, "nobody", "F1", 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetFeedLevel unknown user: %v, want ErrNotFound", err)
	}

	app, feeds, err := r.EffectivePermissions(ctx, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Data - Export", "Data - View", "Manage Feeds"}; !slices.Equal(app, want) {
		t.Errorf("alice app = %v, want %v", app, want)
	}
	if want := map[string]int{"F1": 40, "F2": 50, "F3": 20}; !maps.Equal(feeds, want) {
		t.Errorf("alice feeds = %v, want %v", feeds, want)
	}
	app, feeds, _ = r.EffectivePermissions(ctx, bob.ID)
	if !slices.Equal(app, []string{"Manage Users"}) || !maps.Equal(feeds, map[string]int{"F4": 20}) {
		t.Errorf("bob = %v %v", app, feeds)
	}
	app, feeds, err = r.Grants(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(app, []string{"Data - Export", "Data - View"}) || !maps.Equal(feeds, map[string]int{"F1": 10, "F3": 20}) {
		t.Errorf("alice direct = %v %v", app, feeds)
	}
	if _, _, err := r.Grants(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Grants unknown: %v, want ErrNotFound", err)
	}

	// A disabled group grants nothing, and neither do the groups above it
	// when reached only through it.
	if err := r.SetUserEnabled(ctx, "B", false); err != nil {
		t.Fatal(err)
	}
	app, feeds, _ = r.EffectivePermissions(ctx, alice.ID)
	if !slices.Equal(app, []string{"Data - Export", "Data - View"}) || !maps.Equal(feeds, map[string]int{"F1": 10, "F3": 20}) {
		t.Errorf("alice with B disabled = %v %v", app, feeds)
	}
	if err := r.SetUserEnabled(ctx, "B", true); err != nil {
		t.Fatal(err)
	}

	if err := r.RevokeApp(ctx, "B", "Manage Feeds"); err != nil {
		t.Fatal(err)
	}
	if err := r.RevokeApp(ctx, "B", "Manage Feeds"); err != nil {
		t.Errorf("RevokeApp twice: %v, want nil", err)
	}
	if err := r.RevokeApp(ctx, "nobody", "Manage Feeds"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeApp unknown: %v, want ErrNotFound", err)
	}
	app, _, _ = r.EffectivePermissions(ctx, alice.ID)
	if want := []string{"Data - Export", "Data - View"}; !slices.Equal(app, want) {
		t.Errorf("alice app after revoke = %v, want %v", app, want)
	}

	// A user with nothing gets empty, non-nil answers.
	carol := mustUser(t, r, "carol", false)
	app, feeds, err = r.EffectivePermissions(ctx, carol.ID)
	if err != nil || app == nil || feeds == nil || len(app)+len(feeds) != 0 {
		t.Errorf("carol = %#v %#v %v", app, feeds, err)
	}
}

func testAPIKeys(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	alice := mustUser(t, r, "alice", false)
	bob := mustUser(t, r, "bob", false)
	k1, err := r.CreateAPIKey(ctx, APIKey{Prefix: "sak_0000000001_", Hash: "h1", OwnerID: alice.ID,
		Name: "ci", Comments: "for CI", ExpiresMs: 5000, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if k1.ID == 0 || k1.Owner != "alice" || k1.CreateMs == 0 {
		t.Errorf("created %+v", k1)
	}
	if _, err := r.CreateAPIKey(ctx, APIKey{Prefix: "p", Hash: "h2", OwnerID: alice.ID, Name: "ci", ExpiresMs: 1}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate name: %v, want ErrExists", err)
	}
	if _, err := r.CreateAPIKey(ctx, APIKey{Prefix: "p", Hash: "h1", OwnerID: bob.ID, Name: "other", ExpiresMs: 1}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate hash: %v, want ErrExists", err)
	}
	if _, err := r.CreateAPIKey(ctx, APIKey{Prefix: "p", Hash: "h3", OwnerID: 9999, Name: "x", ExpiresMs: 1}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown owner: %v, want ErrNotFound", err)
	}
	k2, err := r.CreateAPIKey(ctx, APIKey{Prefix: "sak_0000000002_", Hash: "h2", OwnerID: bob.ID, Name: "ci", ExpiresMs: 6000, CreateMs: 42})
	if err != nil {
		t.Fatalf("same name, other owner: %v", err)
	}
	if k2.CreateMs != 42 || k2.Enabled {
		t.Errorf("k2 = %+v", k2)
	}

	got, owner, err := r.APIKeyByHash(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if got != k1 || owner != alice {
		t.Errorf("APIKeyByHash = %+v %+v, want %+v %+v", got, owner, k1, alice)
	}
	if _, _, err := r.APIKeyByHash(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("APIKeyByHash unknown: %v, want ErrNotFound", err)
	}
	if got, err := r.GetAPIKey(ctx, k2.ID); err != nil || got != k2 {
		t.Errorf("GetAPIKey = %+v %v, want %+v", got, err, k2)
	}
	if _, err := r.GetAPIKey(ctx, 9999); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetAPIKey unknown: %v, want ErrNotFound", err)
	}

	all, err := r.ListAPIKeys(ctx, "")
	if err != nil || len(all) != 2 || all[0] != k1 || all[1] != k2 {
		t.Errorf("ListAPIKeys all = %+v %v", all, err)
	}
	mine, err := r.ListAPIKeys(ctx, "bob")
	if err != nil || len(mine) != 1 || mine[0] != k2 {
		t.Errorf("ListAPIKeys bob = %+v %v", mine, err)
	}
	if _, err := r.ListAPIKeys(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ListAPIKeys unknown owner: %v, want ErrNotFound", err)
	}
	carol := mustUser(t, r, "carol", false)
	if none, err := r.ListAPIKeys(ctx, carol.Name); err != nil || len(none) != 0 {
		t.Errorf("ListAPIKeys carol = %v %v", none, err)
	}

	if err := r.SetAPIKeyEnabled(ctx, k2.ID, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.GetAPIKey(ctx, k2.ID); !got.Enabled {
		t.Error("k2 not enabled")
	}
	if err := r.SetAPIKeyEnabled(ctx, 9999, true); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetAPIKeyEnabled unknown: %v, want ErrNotFound", err)
	}

	// Touch writes at most once per interval.
	touches := []struct {
		now  int64
		want bool
	}{{100_000, true}, {100_000, false}, {159_999, false}, {160_000, true}, {160_001, false}}
	for _, tc := range touches {
		wrote, err := r.TouchAPIKey(ctx, k1.ID, tc.now, 60_000)
		if err != nil || wrote != tc.want {
			t.Errorf("TouchAPIKey at %d = %v %v, want %v", tc.now, wrote, err, tc.want)
		}
	}
	if got, _ := r.GetAPIKey(ctx, k1.ID); got.LastUsedMs != 160_000 {
		t.Errorf("LastUsedMs = %d, want 160000", got.LastUsedMs)
	}

	if err := r.DeleteAPIKey(ctx, k1.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteAPIKey(ctx, k1.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteAPIKey twice: %v, want ErrNotFound", err)
	}
	if _, _, err := r.APIKeyByHash(ctx, "h1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted key still found: %v", err)
	}
}

func testBootstrapAdmin(t *testing.T, loc location) {
	ctx := t.Context()
	const n = 4
	repos := make([]*Repo, n)
	for i := range repos {
		repos[i] = openRepo(t, loc)
	}
	created := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			created[i], errs[i] = repos[i].BootstrapAdmin(ctx,
				User{Name: "admin", DisplayName: "Administrator", Enabled: true},
				"Administrator",
				APIKey{Prefix: "p", Hash: fmt.Sprintf("hash%d", i), Name: "bootstrap", ExpiresMs: 1, Enabled: true})
		})
	}
	wg.Wait()
	wins := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("BootstrapAdmin %d: %v", i, errs[i])
		}
		if created[i] {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d bootstraps created an administrator, want 1", wins)
	}
	users, _ := repos[0].ListUsers(ctx)
	if len(users) != 1 || users[0].Name != "admin" || users[0].DisplayName != "Administrator" || users[0].CreateMs == 0 {
		t.Fatalf("users = %+v", users)
	}
	app, _, _ := repos[0].EffectivePermissions(ctx, users[0].ID)
	if !slices.Equal(app, []string{"Administrator"}) {
		t.Errorf("admin permissions = %v", app)
	}
	keys, _ := repos[0].ListAPIKeys(ctx, "admin")
	if len(keys) != 1 || keys[0].OwnerID != users[0].ID || keys[0].CreateMs == 0 {
		t.Errorf("admin keys = %+v", keys)
	}
	// Once any user exists, nothing happens.
	again, err := repos[0].BootstrapAdmin(ctx, User{Name: "admin2", Enabled: true}, "Administrator",
		APIKey{Prefix: "p", Hash: "other", Name: "bootstrap", ExpiresMs: 1})
	if err != nil || again {
		t.Errorf("second BootstrapAdmin = %v %v, want false", again, err)
	}
}
