package access

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/auth/token"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// The service plugs into /datafeed token authentication.
var _ token.APIKeyVerifier = (*Service)(nil)

// location is where a test database lives: the arguments of meta.Open.
type location struct{ dsn, dataDir string }

var engines = []struct {
	name  string
	fresh func(t *testing.T) location
}{
	{"sqlite", func(t *testing.T) location { return location{dataDir: t.TempDir()} }},
	// Skips the test when WEIR_TEST_POSTGRES_DSN is empty.
	{"postgres", func(t *testing.T) location { return location{dsn: metatest.PostgresDSN(t), dataDir: t.TempDir()} }},
}

// clock is an injectable time source that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one test's database, clock and service.
type env struct {
	loc  location
	repo *meta.Repo
	clk  *clock
	svc  *Service
}

const testMaxExpiry = 30 * 24 * time.Hour

func openRepo(t *testing.T, loc location) *meta.Repo {
	t.Helper()
	r, err := meta.Open(context.Background(), loc.dsn, loc.dataDir, nil)
	if err != nil {
		t.Fatalf("meta.Open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newEnv(t *testing.T, loc location) *env {
	t.Helper()
	r := openRepo(t, loc)
	clk := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	return &env{loc: loc, repo: r, clk: clk, svc: New(r, testMaxExpiry, clk.Now)}
}

// TestService runs the service suite once per engine.
func TestService(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, loc location)
	}{
		{"UsersAndValidation", testUsersAndValidation},
		{"NestedGroups", testNestedGroups},
		{"Administrator", testAdministrator},
		{"PrincipalFor", testPrincipalFor},
		{"CreateAPIKey", testCreateAPIKey},
		{"AuthenticateReasons", testAuthenticateReasons},
		{"PlaintextNeverStored", testPlaintextNeverStored},
		{"LastUsed", testLastUsed},
		{"VerifyAPIKey", testVerifyAPIKey},
		{"Bootstrap", testBootstrap},
		{"BootstrapConcurrent", func(t *testing.T, loc location) { testBootstrapConcurrent(t, loc, false) }},
		{"BootstrapConcurrentSharedDir", func(t *testing.T, loc location) { testBootstrapConcurrent(t, loc, true) }},
		{"BootstrapStaleFile", testBootstrapStaleFile},
	}
	for _, ec := range engines {
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

var keyRE = regexp.MustCompile(`^sak_[0-9a-f]{10}_[A-HJ-NP-Za-km-z1-9]{128}$`)

func TestKeyFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		k, err := generateKey()
		if err != nil {
			t.Fatal(err)
		}
		if !keyRE.MatchString(k) {
			t.Fatalf("key %q does not match %s", k, keyRE)
		}
		if checksum(k[15:]) != k[4:14] {
			t.Fatalf("checksum of %q is wrong", k)
		}
		if !wellFormed(k) {
			t.Fatalf("wellFormed(%q) = false", k)
		}
		if seen[k] {
			t.Fatal("duplicate key")
		}
		seen[k] = true
	}

	k, _ := generateKey()
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}
	bad := map[string]string{
		"checksum changed":       flip(k, 5),
		"secret changed":         flip(k, 100),
		"upper-case checksum":    k[:4] + strings.ToUpper(k[4:14]) + k[14:],
		"non-Base58 0":           k[:20] + "0" + k[21:],
		"non-Base58 l":           k[:20] + "l" + k[21:],
		"short":                  k[:len(k)-1],
		"long":                   k + "a",
		"wrong prefix":           "sdk_" + k[4:],
		"missing separator":      k[:14] + "-" + k[15:],
		"empty":                  "",
		"data feed key":          "sdk_" + k[15:],
		"jwt":                    "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
		"valid with space":       k + " ",
		"checksum not hex (g-z)": k[:4] + "ggggggggggg"[:10] + k[14:],
	}
	if strings.ToUpper(k[4:14]) == k[4:14] {
		delete(bad, "upper-case checksum") // all digits: nothing to upper-case
	}
	for name, s := range bad {
		if wellFormed(s) {
			t.Errorf("%s: wellFormed(%q) = true", name, s)
		}
	}
	if !LooksLikeAPIKey(k) || LooksLikeAPIKey("eyJhbGciOi") {
		t.Error("LooksLikeAPIKey wrong")
	}
}

// TestMalformedTouchesNoDatabase authenticates against a closed database:
// a malformed key must be refused before any query, and a well-formed one
// must reach the database (proving the test would notice a query).
func TestMalformedTouchesNoDatabase(t *testing.T) {
	r, err := meta.Open(t.Context(), "", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	s := New(r, 0, nil)
	k, _ := generateKey()
	wrongSum := k[:4] + "0000000000" + k[14:]
	if k[4:14] == "0000000000" {
		t.Skip("checksum happens to be zero")
	}
	for raw, reason := range map[string]string{wrongSum: ReasonMalformed, "Bearer " + wrongSum: ReasonMalformed,
		"": ReasonMissing, "   ": ReasonMissing, "Bearer ": ReasonMissing, "not-a-key": ReasonMalformed} {
		_, err := s.Authenticate(t.Context(), raw)
		var ae *AuthError
		if !errors.As(err, &ae) || ae.Reason != reason {
			t.Errorf("Authenticate(%q) = %v, want reason %q", raw, err, reason)
		}
	}
	_, err = s.Authenticate(t.Context(), k)
	var ae *AuthError
	if err == nil || errors.As(err, &ae) {
		t.Errorf("well-formed key on a closed database: %v, want a database error", err)
	}
}

func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want Level
	}{{"USE", Use}, {"view", View}, {" Edit ", Edit}, {"DELETE", Delete}, {"owner", Owner}, {"NONE", None}} {
		got, err := ParseLevel(tc.s)
		if err != nil || got != tc.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
	if _, err := ParseLevel("READ"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseLevel(READ) = %v, want ErrInvalid", err)
	}
	if !(Use < View && View < Edit && Edit < Delete && Delete < Owner) || Use != 10 || Owner != 50 {
		t.Error("level order or values wrong")
	}
	if Owner.String() != "OWNER" || Level(7).String() != "Level(7)" {
		t.Error("String wrong")
	}
	b, err := View.MarshalText()
	var l Level
	if err != nil || string(b) != "VIEW" || l.UnmarshalText([]byte("edit")) != nil || l != Edit {
		t.Errorf("text round trip: %q %v %v", b, err, l)
	}
	if len(Permissions()) != 11 || Permissions()[0] != Administrator {
		t.Errorf("Permissions() = %v", Permissions())
	}
	p := Permissions()
	p[0] = "changed"
	if Permissions()[0] != Administrator {
		t.Error("Permissions() shares its slice")
	}
	if got, err := ParsePermission("data - view"); err != nil || got != DataView {
		t.Errorf("ParsePermission = %q %v", got, err)
	}
	if _, err := ParsePermission("Data View"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParsePermission(Data View) = %v, want ErrInvalid", err)
	}
}

func testUsersAndValidation(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	s := e.svc
	u, err := s.CreateUser(ctx, "alice", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if u.DisplayName != "alice" || !u.Enabled || u.Group || u.CreateMs != e.clk.Now().UnixMilli() {
		t.Errorf("created %+v", u)
	}
	if _, err := s.CreateUser(ctx, "alice", "Alice", false); !errors.Is(err, meta.ErrExists) {
		t.Errorf("duplicate: %v, want meta.ErrExists", err)
	}
	for _, bad := range []string{"", " alice", "alice ", "a\nb", "a\x00b", strings.Repeat("x", 256), "\xff"} {
		if _, err := s.CreateUser(ctx, bad, "", false); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateUser(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.CreateUser(ctx, "ops", "Operations", true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetUser(ctx, "ops"); err != nil || !got.Group || got.DisplayName != "Operations" {
		t.Errorf("GetUser(ops) = %+v %v", got, err)
	}
	if _, err := s.GetUser(ctx, "nobody"); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetUser(nobody) = %v, want meta.ErrNotFound", err)
	}
	if list, err := s.ListUsers(ctx); err != nil || len(list) != 2 {
		t.Errorf("ListUsers = %v %v", list, err)
	}

	if err := s.AddMember(ctx, "alice", "ops"); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddMember into a user: %v, want ErrInvalid", err)
	}
	if err := s.AddMember(ctx, "ops", "ops"); !errors.Is(err, ErrInvalid) || !errors.Is(err, meta.ErrCycle) {
		t.Errorf("AddMember self: %v, want ErrInvalid and meta.ErrCycle", err)
	}
	if err := s.AddMember(ctx, "nogroup", "alice"); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("AddMember unknown group: %v, want meta.ErrNotFound", err)
	}
	if err := s.AddMember(ctx, "ops", "nobody"); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("AddMember unknown member: %v, want meta.ErrNotFound", err)
	}
	if err := s.GrantApp(ctx, "alice", "data - view"); !errors.Is(err, ErrInvalid) {
		t.Errorf("GrantApp wrong case: %v, want ErrInvalid (names are exact)", err)
	}
	if err := s.GrantApp(ctx, "alice", "Superuser"); !errors.Is(err, ErrInvalid) {
		t.Errorf("GrantApp unknown: %v, want ErrInvalid", err)
	}
	if err := s.RevokeApp(ctx, "alice", "Superuser"); !errors.Is(err, ErrInvalid) {
		t.Errorf("RevokeApp unknown: %v, want ErrInvalid", err)
	}
	if err := s.GrantApp(ctx, "nobody", DataView); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GrantApp unknown user: %v, want meta.ErrNotFound", err)
	}
	if err := s.SetFeedLevel(ctx, "alice", "F", Level(25)); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetFeedLevel(25): %v, want ErrInvalid", err)
	}
	if err := s.SetFeedLevel(ctx, "alice", "", View); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetFeedLevel empty feed: %v, want ErrInvalid", err)
	}
	if err := s.SetEnabled(ctx, "nobody", false); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("SetEnabled unknown: %v, want meta.ErrNotFound", err)
	}
	if _, err := s.Members(ctx, "nobody"); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("Members unknown: %v, want meta.ErrNotFound", err)
	}
}

func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

func principal(t *testing.T, s *Service, name string) *Principal {
	t.Helper()
	p, err := s.PrincipalFor(t.Context(), name)
	if err != nil {
		t.Fatalf("PrincipalFor(%s): %v", name, err)
	}
	return p
}

func feedsOf(p *Principal, min Level) []string {
	all, fs := p.Feeds(min)
	if all {
		return []string{"*"}
	}
	return fs
}

func testNestedGroups(t *testing.T, loc location) {
	ctx := t.Context()
	s := newEnv(t, loc).svc
	for _, u := range []struct {
		name  string
		group bool
	}{{"alice", false}, {"bob", false}, {"A", true}, {"B", true}} {
		if _, err := s.CreateUser(ctx, u.name, "", u.group); err != nil {
			t.Fatal(err)
		}
	}
	// alice is in B, which is in A: A's permissions apply to alice.
	mustDo(t,
		s.AddMember(ctx, "B", "alice"),
		s.AddMember(ctx, "A", "B"),
		s.GrantApp(ctx, "A", DataView),
		s.GrantApp(ctx, "B", DataExport),
		s.SetFeedLevel(ctx, "A", "F-A", Edit),
		s.SetFeedLevel(ctx, "A", "F-SHARED", View),
		s.SetFeedLevel(ctx, "B", "F-SHARED", Delete),
		s.SetFeedLevel(ctx, "alice", "F-SHARED", Use),
		s.SetFeedLevel(ctx, "alice", "F-ALICE", Use),
		s.SetFeedLevel(ctx, "bob", "F-BOB", Owner),
	)
	// Cycles are refused, directly and through B.
	if err := s.AddMember(ctx, "B", "A"); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddMember(B, A) = %v, want ErrInvalid", err)
	}
	if err := s.AddMember(ctx, "alice", "A"); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddMember(alice, A) = %v, want ErrInvalid (alice is a user)", err)
	}

	p := principal(t, s, "alice")
	if !p.Has(DataView) || !p.Has(DataExport) || p.Has(DataDelete) || p.Has(Administrator) || p.IsAdmin() {
		t.Errorf("alice permissions = %v", p.Permissions())
	}
	if want := []string{DataExport, DataView}; !slices.Equal(p.Permissions(), want) {
		t.Errorf("alice Permissions() = %v, want %v", p.Permissions(), want)
	}
	for feed, want := range map[string]Level{"F-A": Edit, "F-SHARED": Delete, "F-ALICE": Use, "F-BOB": None, "OTHER": None} {
		if got := p.FeedLevel(feed); got != want {
			t.Errorf("alice FeedLevel(%s) = %v, want %v", feed, got, want)
		}
	}
	for min, want := range map[Level][]string{
		None:   {"F-A", "F-ALICE", "F-SHARED"}, // below Use counts as Use
		Use:    {"F-A", "F-ALICE", "F-SHARED"},
		View:   {"F-A", "F-SHARED"},
		Edit:   {"F-A", "F-SHARED"},
		Delete: {"F-SHARED"},
		Owner:  {},
	} {
		if got := feedsOf(p, min); !slices.Equal(got, want) {
			t.Errorf("alice Feeds(%v) = %v, want %v", min, got, want)
		}
	}
	if g, err := s.Groups(ctx, "alice"); err != nil || len(g) != 2 || g[0].Name != "A" || g[1].Name != "B" {
		t.Errorf("Groups(alice) = %v %v", g, err)
	}
	if m, err := s.Members(ctx, "A"); err != nil || len(m) != 1 || m[0].Name != "B" {
		t.Errorf("Members(A) = %v %v", m, err)
	}
	if g, err := s.DirectGrants(ctx, "B"); err != nil || !slices.Equal(g.Permissions, []string{DataExport}) || g.Feeds["F-SHARED"] != Delete || len(g.Feeds) != 1 {
		t.Errorf("DirectGrants(B) = %+v %v", g, err)
	}

	pb := principal(t, s, "bob")
	if pb.Has(DataView) || pb.FeedLevel("F-A") != None || pb.FeedLevel("F-BOB") != Owner {
		t.Errorf("bob = %v %v", pb.Permissions(), feedsOf(pb, Use))
	}
	if got := feedsOf(pb, View); !slices.Equal(got, []string{"F-BOB"}) {
		t.Errorf("bob Feeds(View) = %v", got)
	}

	// Disabling B withdraws B's and (reached only through B) A's grants.
	mustDo(t, s.SetEnabled(ctx, "B", false))
	p = principal(t, s, "alice")
	if p.Has(DataView) || p.Has(DataExport) || p.FeedLevel("F-SHARED") != Use {
		t.Errorf("alice with B disabled = %v, F-SHARED %v", p.Permissions(), p.FeedLevel("F-SHARED"))
	}
	mustDo(t, s.SetEnabled(ctx, "B", true))

	// Leaving B loses A's grants too; None removes a feed grant.
	mustDo(t, s.RemoveMember(ctx, "B", "alice"), s.SetFeedLevel(ctx, "alice", "F-ALICE", None))
	p = principal(t, s, "alice")
	if len(p.Permissions()) != 0 || !slices.Equal(feedsOf(p, Use), []string{"F-SHARED"}) {
		t.Errorf("alice after leaving B = %v %v", p.Permissions(), feedsOf(p, Use))
	}
	mustDo(t, s.AddMember(ctx, "B", "alice"), s.RevokeApp(ctx, "A", DataView))
	p = principal(t, s, "alice")
	if p.Has(DataView) || !p.Has(DataExport) {
		t.Errorf("alice after revoking A's Data - View = %v", p.Permissions())
	}
}

func testAdministrator(t *testing.T, loc location) {
	ctx := t.Context()
	s := newEnv(t, loc).svc
	_, err1 := s.CreateUser(ctx, "root", "", false)
	_, err2 := s.CreateUser(ctx, "admins", "", true)
	mustDo(t, err1, err2, s.AddMember(ctx, "admins", "root"), s.GrantApp(ctx, "admins", Administrator),
		s.SetFeedLevel(ctx, "root", "F1", Use))
	p := principal(t, s, "root")
	if !p.IsAdmin() {
		t.Fatal("root is not an administrator through admins")
	}
	for _, perm := range append(Permissions(), "Something Unknown") {
		if !p.Has(perm) {
			t.Errorf("administrator lacks %q", perm)
		}
	}
	if !slices.Equal(p.Permissions(), func() []string { ps := Permissions(); slices.Sort(ps); return ps }()) {
		t.Errorf("administrator Permissions() = %v", p.Permissions())
	}
	for _, f := range []string{"F1", "ANY-FEED", ""} {
		if p.FeedLevel(f) != Owner {
			t.Errorf("administrator FeedLevel(%q) = %v, want OWNER", f, p.FeedLevel(f))
		}
	}
	if all, feeds := p.Feeds(Owner); !all || feeds != nil {
		t.Errorf("administrator Feeds = %v %v, want all", all, feeds)
	}
}

func testPrincipalFor(t *testing.T, loc location) {
	ctx := t.Context()
	s := newEnv(t, loc).svc
	_, err1 := s.CreateUser(ctx, "alice", "Alice A", false)
	_, err2 := s.CreateUser(ctx, "grp", "", true)
	mustDo(t, err1, err2)
	p := principal(t, s, "alice")
	if p.User.Name != "alice" || p.User.DisplayName != "Alice A" || p.APIKeyID != 0 {
		t.Errorf("principal = %+v", p)
	}
	for name, reason := range map[string]string{"nobody": ReasonUnknown, "grp": ReasonUnknown} {
		_, err := s.PrincipalFor(ctx, name)
		var ae *AuthError
		if !errors.As(err, &ae) || ae.Reason != reason {
			t.Errorf("PrincipalFor(%s) = %v, want reason %s", name, err, reason)
		}
	}
	mustDo(t, s.SetEnabled(ctx, "alice", false))
	_, err := s.PrincipalFor(ctx, "alice")
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Reason != ReasonDisabled {
		t.Errorf("PrincipalFor(disabled) = %v, want reason disabled", err)
	}
}

func testCreateAPIKey(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	s := e.svc
	_, err1 := s.CreateUser(ctx, "alice", "", false)
	_, err2 := s.CreateUser(ctx, "grp", "", true)
	mustDo(t, err1, err2)
	now := e.clk.Now()

	plain, k, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice", Comments: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	if !keyRE.MatchString(plain) {
		t.Errorf("plaintext %q has the wrong format", plain)
	}
	if k.ID == 0 || k.Prefix != plain[:15] || k.Owner != "alice" || !k.Enabled || k.Comments != "laptop" ||
		k.Hash != "" || k.LastUsedMs != 0 || k.CreateMs != now.UnixMilli() {
		t.Errorf("stored = %+v", k)
	}
	if k.Name != plain[:14] {
		t.Errorf("default name = %q, want the prefix %q", k.Name, plain[:14])
	}
	if want := now.Add(testMaxExpiry).UnixMilli(); k.ExpiresMs != want {
		t.Errorf("default expiry = %d, want now + max = %d", k.ExpiresMs, want)
	}

	// Exactly the maximum is allowed; a millisecond more, the past and now are not.
	if _, k2, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice", Name: "max", Expires: now.Add(testMaxExpiry)}); err != nil || k2.Name != "max" {
		t.Errorf("expiry at the maximum: %v", err)
	}
	for name, exp := range map[string]time.Time{
		"beyond max": now.Add(testMaxExpiry + time.Millisecond),
		"past":       now.Add(-time.Hour),
		"now":        now,
	} {
		if _, _, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice", Name: name, Expires: exp}); !errors.Is(err, ErrInvalid) {
			t.Errorf("expiry %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, _, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice", Name: "max"}); !errors.Is(err, meta.ErrExists) {
		t.Errorf("duplicate name: %v, want meta.ErrExists", err)
	}
	if _, _, err := s.CreateAPIKey(ctx, NewKey{Owner: "grp"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("group owner: %v, want ErrInvalid", err)
	}
	if _, _, err := s.CreateAPIKey(ctx, NewKey{Owner: "nobody"}); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("unknown owner: %v, want meta.ErrNotFound", err)
	}
	if _, _, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice", Name: "bad\nname"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad name: %v, want ErrInvalid", err)
	}

	list, err := s.ListAPIKeys(ctx, "alice")
	if err != nil || len(list) != 2 || list[0].ID != k.ID || list[1].Name != "max" {
		t.Fatalf("ListAPIKeys = %+v %v", list, err)
	}
	all, _ := s.ListAPIKeys(ctx, "")
	for _, l := range append(list, all...) {
		if l.Hash != "" {
			t.Errorf("listing carries the hash: %+v", l)
		}
	}
	if got, err := s.GetAPIKey(ctx, k.ID); err != nil || got.Hash != "" || got.Owner != "alice" {
		t.Errorf("GetAPIKey = %+v %v", got, err)
	}
}

func authReason(t *testing.T, s *Service, raw string) string {
	t.Helper()
	p, err := s.Authenticate(t.Context(), raw)
	if err == nil {
		return "ok:" + p.User.Name
	}
	var ae *AuthError
	if !errors.As(err, &ae) {
		t.Fatalf("Authenticate: non-auth error %v", err)
	}
	return ae.Reason
}

func testAuthenticateReasons(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	s := e.svc
	_, err := s.CreateUser(ctx, "alice", "", false)
	mustDo(t, err, s.GrantApp(ctx, "alice", DataView), s.SetFeedLevel(ctx, "alice", "F1", View))
	plain, k, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice", Expires: e.clk.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	p, err := s.Authenticate(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	if p.User.Name != "alice" || p.APIKeyID != k.ID || !p.Has(DataView) || p.FeedLevel("F1") != View {
		t.Errorf("principal = %+v %v", p.User, p.Permissions())
	}
	for _, raw := range []string{"Bearer " + plain, "bearer  " + plain + " ", " " + plain} {
		if got := authReason(t, s, raw); got != "ok:alice" {
			t.Errorf("Authenticate(%q) = %s", raw, got)
		}
	}

	other, _ := generateKey()
	steps := []struct {
		name, raw string
		change    func()
		want      string
	}{
		{"missing", "", nil, ReasonMissing},
		{"malformed", plain[:len(plain)-1], nil, ReasonMalformed},
		{"unknown", other, nil, ReasonUnknown},
		{"disabled", plain, func() { mustDo(t, s.SetAPIKeyEnabled(ctx, k.ID, false)) }, ReasonDisabled},
		{"re-enabled", plain, func() { mustDo(t, s.SetAPIKeyEnabled(ctx, k.ID, true)) }, "ok:alice"},
		{"owner disabled", plain, func() { mustDo(t, s.SetEnabled(ctx, "alice", false)) }, ReasonOwnerDisabled},
		{"owner re-enabled", plain, func() { mustDo(t, s.SetEnabled(ctx, "alice", true)) }, "ok:alice"},
		{"just before expiry", plain, func() { e.clk.Add(time.Hour - time.Millisecond) }, "ok:alice"},
		{"expired", plain, func() { e.clk.Add(time.Millisecond) }, ReasonExpired},
		{"deleted", plain, func() { mustDo(t, s.DeleteAPIKey(ctx, k.ID)) }, ReasonUnknown},
	}
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		if got := authReason(t, s, st.raw); got != st.want {
			t.Errorf("%s: got %s, want %s", st.name, got, st.want)
		}
	}
	// Messages speak only of the caller's own credential.
	_, err = s.Authenticate(ctx, other)
	if msg := err.Error(); !strings.Contains(msg, "not recognised") || strings.Contains(msg, other) {
		t.Errorf("unknown key message %q", msg)
	}
	if err := s.SetAPIKeyEnabled(ctx, k.ID, true); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("SetAPIKeyEnabled deleted: %v, want meta.ErrNotFound", err)
	}
	if err := s.DeleteAPIKey(ctx, k.ID); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("DeleteAPIKey twice: %v, want meta.ErrNotFound", err)
	}
}

// rawDB opens the test database directly, bypassing meta.
func rawDB(t *testing.T, loc location) *sql.DB {
	t.Helper()
	var (
		db  *sql.DB
		err error
	)
	if loc.dsn != "" {
		db, err = sql.Open("pgx", loc.dsn)
	} else {
		db, err = sql.Open("sqlite", filepath.Join(loc.dataDir, "weir.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func testPlaintextNeverStored(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	s := e.svc
	_, err := s.CreateUser(ctx, "alice", "", false)
	mustDo(t, err)
	var keys []string
	for i := range 3 {
		plain, _, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice", Name: fmt.Sprint("k", i)})
		mustDo(t, err)
		keys = append(keys, plain)
		if _, err := s.Authenticate(ctx, plain); err != nil {
			t.Fatal(err)
		}
	}
	// Every column of every row, as text.
	rows, err := rawDB(t, loc).QueryContext(ctx, `SELECT * FROM api_keys`)
	if err != nil {
		t.Fatal(err)
	}
	var dump strings.Builder
	all := metatest.Rows(t, rows)
	for _, vals := range all {
		for _, v := range vals {
			fmt.Fprintf(&dump, "%v|%s|", v, v)
		}
		dump.WriteString("\n")
	}
	if n := len(all); n != 3 {
		t.Fatalf("%d rows", n)
	}
	for _, k := range keys {
		if strings.Contains(dump.String(), k[15:47]) {
			t.Errorf("api_keys holds the secret of %s...", k[:15])
		}
		if !strings.Contains(dump.String(), hashKey(k)) {
			t.Errorf("api_keys lacks the hash of %s...", k[:15])
		}
	}
	// On SQLite, the database files themselves (main file and WAL) must not
	// hold the secret anywhere either.
	if loc.dsn == "" {
		files, _ := filepath.Glob(filepath.Join(loc.dataDir, "weir.db*"))
		var all []byte
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		for _, k := range keys {
			if bytes.Contains(all, []byte(k[15:47])) {
				t.Errorf("the database files contain the secret of %s...", k[:15])
			}
			// The hash is there, so the scan did read the rows.
			if !bytes.Contains(all, []byte(hashKey(k))) {
				t.Errorf("the database files lack the hash of %s...", k[:15])
			}
		}
	}
}

func testLastUsed(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	s := e.svc
	_, err := s.CreateUser(ctx, "alice", "", false)
	mustDo(t, err)
	plain, k, err := s.CreateAPIKey(ctx, NewKey{Owner: "alice"})
	mustDo(t, err)
	lastUsed := func() int64 {
		t.Helper()
		got, err := s.GetAPIKey(ctx, k.ID)
		mustDo(t, err)
		return got.LastUsedMs
	}
	if lastUsed() != 0 {
		t.Fatal("new key has a last-used time")
	}
	t0 := e.clk.Now().UnixMilli()
	steps := []struct {
		advance time.Duration
		want    int64
	}{
		{0, t0},
		{30 * time.Second, t0},          // within a minute: no write
		{29 * time.Second, t0},          // 59 s
		{time.Second, t0 + 60_000},      // exactly a minute later
		{10 * time.Second, t0 + 60_000}, //
		{time.Hour, t0 + 70_000 + time.Hour.Milliseconds()},
	}
	for i, st := range steps {
		e.clk.Add(st.advance)
		if _, err := s.Authenticate(ctx, plain); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); got != st.want {
			t.Errorf("step %d: last used %d, want %d", i, got, st.want)
		}
	}
	// Many requests in the same minute, on several goroutines: one value.
	e.clk.Add(2 * time.Minute)
	want := e.clk.Now().UnixMilli()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := s.Authenticate(ctx, plain); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := lastUsed(); got != want {
		t.Errorf("after concurrent use: %d, want %d", got, want)
	}
	// Use through /datafeed counts as well.
	e.clk.Add(time.Minute)
	if _, err := s.VerifyAPIKey(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if got, want := lastUsed(), e.clk.Now().UnixMilli(); got != want {
		t.Errorf("after VerifyAPIKey: %d, want %d", got, want)
	}
}

func testVerifyAPIKey(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	s := e.svc
	_, err1 := s.CreateUser(ctx, "sender-1", "Sending System", false)
	_, err2 := s.CreateUser(ctx, "sender-2", "", false)
	mustDo(t, err1, err2)
	plain, k, err := s.CreateAPIKey(ctx, NewKey{Owner: "sender-1", Expires: e.clk.Now().Add(time.Minute)})
	mustDo(t, err)
	plain2, _, err := s.CreateAPIKey(ctx, NewKey{Owner: "sender-2"})
	mustDo(t, err)

	id, err := s.VerifyAPIKey(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	if id.SubjectID != "sender-1" || id.DisplayName != "Sending System" || id.Attributes != nil {
		t.Errorf("identity = %+v", id)
	}
	if id, err := s.VerifyAPIKey(ctx, "Bearer "+plain2); err != nil || id.SubjectID != "sender-2" || id.DisplayName != "sender-2" {
		t.Errorf("identity 2 = %+v %v", id, err)
	}

	// Through the /datafeed token authenticator, as the server wires it.
	ta, err := token.New(ctx, token.Options{APIKeys: s})
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Close()
	if id, err := ta.Verify(ctx, "Bearer "+plain); err != nil || id.SubjectID != "sender-1" || id.Type != auth.Token {
		t.Errorf("token.Verify = %+v %v", id, err)
	}

	other, _ := generateKey()
	if _, err := ta.Verify(ctx, other); err == nil || !strings.Contains(err.Error(), "not recognised") {
		t.Errorf("token.Verify unknown key = %v", err)
	}
	fail := func(name, key, want string) {
		t.Helper()
		_, err := s.VerifyAPIKey(ctx, key)
		var f *auth.Failure
		if !errors.As(err, &f) || f.Code != auth.TokenFailed || !strings.Contains(f.Detail, want) {
			t.Errorf("%s: %v, want a 311 failure mentioning %q", name, err, want)
		}
	}
	fail("empty", "", "no API key")
	fail("malformed", "sak_nonsense", "not a well-formed API key")
	fail("unknown", other, "not recognised")
	mustDo(t, s.SetAPIKeyEnabled(ctx, k.ID, false))
	fail("disabled", plain, "disabled")
	mustDo(t, s.SetAPIKeyEnabled(ctx, k.ID, true), s.SetEnabled(ctx, "sender-1", false))
	fail("owner disabled", plain, "owner is disabled")
	mustDo(t, s.SetEnabled(ctx, "sender-1", true))
	e.clk.Add(time.Minute)
	fail("expired", plain, "expired")
}

func testBootstrap(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	dir := filepath.Join(t.TempDir(), "data")
	path, created, err := e.svc.Bootstrap(ctx, dir)
	if err != nil || !created || path != filepath.Join(dir, BootstrapKeyFile) {
		t.Fatalf("Bootstrap = %q %v %v", path, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	key := strings.TrimSpace(string(b))
	if !keyRE.MatchString(key) || string(b) != key+"\n" {
		t.Fatalf("key file holds %q", b)
	}
	p, err := e.svc.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if p.User.Name != "admin" || p.User.DisplayName != "Administrator" || !p.IsAdmin() || !p.Has(ManageNodes) || p.FeedLevel("X") != Owner {
		t.Errorf("bootstrap principal = %+v %v", p.User, p.Permissions())
	}
	keys, _ := e.svc.ListAPIKeys(ctx, "admin")
	if len(keys) != 1 || keys[0].ExpiresMs != e.clk.Now().Add(testMaxExpiry).UnixMilli() {
		t.Errorf("bootstrap keys = %+v", keys)
	}

	// Second start (the key file taken away or not): nothing happens.
	for range 2 {
		path2, created2, err := e.svc.Bootstrap(ctx, dir)
		if err != nil || created2 || path2 != "" {
			t.Errorf("second Bootstrap = %q %v %v", path2, created2, err)
		}
		mustDo(t, os.Remove(path))
		mustDo(t, os.WriteFile(path, b, 0o600))
	}
	if users, _ := e.svc.ListUsers(ctx); len(users) != 1 {
		t.Errorf("users after restarts: %+v", users)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
		t.Error("key file changed")
	}
}

// testBootstrapConcurrent starts several "nodes" at once on one database,
// each with its own repository, and its own data directory or (shared) one
// they all share, as nodes of a cluster do: there a node used to find the
// winner's key file and refuse to start, taking it for a stale one.
func testBootstrapConcurrent(t *testing.T, loc location, shared bool) {
	ctx := t.Context()
	const n = 4
	svcs := make([]*Service, n)
	dirs := make([]string, n)
	for i := range n {
		svcs[i] = New(openRepo(t, loc), 0, nil)
		dirs[i] = t.TempDir()
		if shared && i > 0 {
			dirs[i] = dirs[0]
		}
	}
	paths := make([]string, n)
	created := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { paths[i], created[i], errs[i] = svcs[i].Bootstrap(ctx, dirs[i]) })
	}
	wg.Wait()
	wins := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("node %d: %v", i, errs[i])
		}
		_, statErr := os.Stat(filepath.Join(dirs[i], BootstrapKeyFile))
		if created[i] {
			wins++
			b, err := os.ReadFile(paths[i])
			mustDo(t, err)
			if p, err := svcs[0].Authenticate(ctx, string(b)); err != nil || !p.IsAdmin() {
				t.Errorf("winner's key: %v", err)
			}
		} else if statErr == nil && !shared {
			t.Errorf("node %d lost but wrote a key file", i)
		}
	}
	if wins != 1 {
		t.Errorf("%d nodes created the administrator, want 1", wins)
	}
	users, _ := svcs[0].ListUsers(ctx)
	keys, _ := svcs[0].ListAPIKeys(ctx, "")
	if len(users) != 1 || len(keys) != 1 {
		t.Errorf("users %d, keys %d; want 1 and 1", len(users), len(keys))
	}
}

func testBootstrapStaleFile(t *testing.T, loc location) {
	ctx := t.Context()
	e := newEnv(t, loc)
	dir := t.TempDir()
	stale := filepath.Join(dir, BootstrapKeyFile)
	mustDo(t, os.WriteFile(stale, []byte("old key\n"), 0o600))
	if _, created, err := e.svc.Bootstrap(ctx, dir); err == nil || created || !strings.Contains(err.Error(), stale) {
		t.Errorf("Bootstrap with a stale file = %v %v, want an error naming it", created, err)
	}
	if users, _ := e.svc.ListUsers(ctx); len(users) != 0 {
		t.Errorf("users created despite the error: %+v", users)
	}
	if b, _ := os.ReadFile(stale); string(b) != "old key\n" {
		t.Error("stale file overwritten")
	}
	// A symlink in its place is not followed either.
	mustDo(t, os.Remove(stale), os.Symlink(filepath.Join(dir, "elsewhere"), stale))
	if _, _, err := e.svc.Bootstrap(ctx, dir); err == nil {
		t.Error("Bootstrap followed a symlink")
	}
	if _, err := os.Stat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Error("symlink target written")
	}
}
