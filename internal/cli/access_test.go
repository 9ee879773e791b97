package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// accessEnv runs admin commands against one database, as an operator would.
type accessEnv struct {
	t    *testing.T
	dsn  string
	data string
	svc  *access.Service
}

type accessResult struct {
	code           int
	stdout, stderr string
}

func (e *accessEnv) run(args ...string) accessResult {
	e.t.Helper()
	args = append([]string{"admin"}, args...)
	args = append(args, "--data", e.data)
	if e.dsn != "" {
		args = append(args, "--db", e.dsn)
	}
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return accessResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs a command that must succeed and returns its stdout.
func (e *accessEnv) ok(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("weir admin %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fail runs a command that must fail with the given exit code and mention
// every one of want on stderr.
func (e *accessEnv) fail(code int, args []string, want ...string) {
	e.t.Helper()
	r := e.run(args...)
	if r.code != code {
		e.t.Errorf("weir admin %s: exit %d, want %d\nstderr: %s", strings.Join(args, " "), r.code, code, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			e.t.Errorf("weir admin %s: stderr does not mention %q: %s", strings.Join(args, " "), w, r.stderr)
		}
	}
}

func (e *accessEnv) principal(key string) (*access.Principal, string) {
	e.t.Helper()
	p, err := e.svc.Authenticate(context.Background(), key)
	var ae *access.AuthError
	if errors.As(err, &ae) {
		return nil, ae.Reason
	}
	if err != nil {
		e.t.Fatalf("Authenticate: %v", err)
	}
	return p, "ok"
}

func TestAccessCLI(t *testing.T) {
	onEngines(t, func(t *testing.T, e *accessEnv, repo *meta.Repo) {
		e.svc = access.New(repo, 0, nil)
		testAccessCLI(t, e)
	})
}

// onEngines runs fn in parallel subtests on SQLite and on PostgreSQL
// (skipped without WEIR_TEST_POSTGRES_DSN), each with a fresh data
// directory and its repository open.
func onEngines(t *testing.T, fn func(t *testing.T, e *accessEnv, repo *meta.Repo)) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			e := &accessEnv{t: t, data: t.TempDir()}
			if engine == "postgres" {
				e.dsn = metatest.PostgresDSN(t) // skips without WEIR_TEST_POSTGRES_DSN
			}
			repo, err := meta.Open(context.Background(), e.dsn, e.data, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = repo.Close() })
			fn(t, e, repo)
		})
	}
}

func testAccessCLI(t *testing.T, e *accessEnv) {
	if out := e.ok("user", "create", "alice", "--display-name", "Alice Example"); out != "created user alice\n" {
		t.Errorf("user create said %q", out)
	}
	if out := e.ok("user", "create", "ops", "--group"); out != "created group ops\n" {
		t.Errorf("user create --group said %q", out)
	}
	e.ok("group", "add", "ops", "alice")

	// api-key create: the key alone on the first line of stdout.
	r := e.run("api-key", "create", "--user", "alice", "--name", "ci", "--expires", "P7D", "--comments", "CI runner")
	if r.code != 0 {
		t.Fatalf("api-key create: %d %s", r.code, r.stderr)
	}
	key, rest, _ := strings.Cut(r.stdout, "\n")
	if rest != "" || !strings.HasPrefix(key, "sak_") || len(key) != 143 {
		t.Fatalf("api-key create stdout %q, want the key alone", r.stdout)
	}
	if !strings.Contains(r.stderr, "shown only this once") || strings.Contains(r.stderr, key[15:]) {
		t.Errorf("api-key create stderr %q", r.stderr)
	}
	p, reason := e.principal(key)
	if reason != "ok" || p.User.Name != "alice" || p.User.DisplayName != "Alice Example" || len(p.Permissions()) != 0 {
		t.Fatalf("new key: %s %+v", reason, p)
	}

	// Grants through the group and directly change the principal.
	e.ok("user", "grant", "ops", "data - view") // any case on the command line
	e.ok("user", "feed", "ops", "F1", "VIEW")
	e.ok("user", "feed", "alice", "F2", "owner")
	e.ok("user", "feed", "alice", "F3", "use")
	p, _ = e.principal(key)
	if !p.Has(access.DataView) || p.Has(access.DataDelete) {
		t.Errorf("after grant: %v", p.Permissions())
	}
	if _, feeds := p.Feeds(access.View); !slices.Equal(feeds, []string{"F1", "F2"}) {
		t.Errorf("Feeds(View) = %v", feeds)
	}
	if p.FeedLevel("F2") != access.Owner || p.FeedLevel("F3") != access.Use {
		t.Errorf("levels %v %v", p.FeedLevel("F2"), p.FeedLevel("F3"))
	}
	show := e.ok("user", "show", "alice")
	for _, w := range []string{"member of (with groups above):  ops", "effective permissions:", "Data - View", "F1=VIEW, F2=OWNER, F3=USE"} {
		if !strings.Contains(show, w) {
			t.Errorf("user show lacks %q:\n%s", w, show)
		}
	}
	e.ok("user", "feed", "alice", "F3", "NONE")
	e.ok("user", "revoke", "ops", "Data - View")
	e.ok("group", "remove", "ops", "alice")
	p, _ = e.principal(key)
	if p.Has(access.DataView) || p.FeedLevel("F1") != access.None || p.FeedLevel("F3") != access.None {
		t.Errorf("after revoke and removal: %v F1=%v F3=%v", p.Permissions(), p.FeedLevel("F1"), p.FeedLevel("F3"))
	}
	e.ok("user", "grant", "alice", "Administrator")
	if p, _ = e.principal(key); !p.IsAdmin() {
		t.Error("grant Administrator had no effect")
	}

	// user disable/enable.
	e.ok("user", "disable", "alice")
	if _, reason := e.principal(key); reason != access.ReasonOwnerDisabled {
		t.Errorf("owner disabled: %s", reason)
	}
	e.ok("user", "enable", "alice")

	// api-key list, in both forms, never shows the hash.
	sum := sha256.Sum256([]byte(key))
	hash := hex.EncodeToString(sum[:])
	list := e.ok("api-key", "list")
	if !strings.Contains(list, key[:15]) || !strings.Contains(list, "CI runner") || strings.Contains(list, hash) {
		t.Errorf("api-key list:\n%s", list)
	}
	jl := e.ok("api-key", "list", "--user", "alice", "--json")
	if strings.Contains(jl, hash) || strings.Contains(jl, `"hash"`) || strings.Contains(jl, key[15:]) {
		t.Errorf("api-key list --json shows the hash or key: %s", jl)
	}
	var kj apiKeyJSON
	if err := json.Unmarshal([]byte(jl), &kj); err != nil || kj.Owner != "alice" || kj.Name != "ci" || !kj.Enabled || kj.LastUsedTime == "" {
		t.Fatalf("api-key list --json = %q (%v)", jl, err)
	}
	id := strconv.FormatInt(kj.ID, 10)
	e.ok("api-key", "disable", id)
	if _, reason := e.principal(key); reason != access.ReasonDisabled {
		t.Errorf("disabled key: %s", reason)
	}
	e.ok("api-key", "enable", id)
	if _, reason := e.principal(key); reason != "ok" {
		t.Errorf("re-enabled key: %s", reason)
	}

	// user list.
	var users []accessUserJSON
	for _, line := range strings.Split(strings.TrimSpace(e.ok("user", "list", "--json")), "\n") {
		var u accessUserJSON
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
	}
	if len(users) != 2 || users[0].Name != "alice" || users[1].Name != "ops" || !users[1].Group {
		t.Errorf("user list --json = %+v", users)
	}
	if out := e.ok("user", "list"); !strings.Contains(out, "ops    group  enabled") {
		t.Errorf("user list:\n%s", out)
	}

	// Failures: usage errors exit 2, others 1, with a message that says why.
	e.fail(2, []string{"api-key", "create"}, "--user")
	e.fail(2, []string{"api-key", "rotate"}, "unknown admin command")
	e.fail(2, []string{"api-key", "disable", "abc"}, "not a positive number")
	e.fail(2, []string{"user", "grant", "alice"}, "user grant takes NAME PERMISSION")
	e.fail(1, []string{"api-key", "create", "--user", "alice", "--expires", "P400D"}, "maximum")
	e.fail(1, []string{"api-key", "create", "--user", "alice", "--expires", "soon"}, "--expires")
	e.fail(1, []string{"api-key", "create", "--user", "ops"}, "is a group")
	e.fail(1, []string{"api-key", "create", "--user", "nobody"}, "nobody", "not found")
	e.fail(1, []string{"api-key", "create", "--user", "alice", "--name", "ci"}, "already exists")
	e.fail(1, []string{"api-key", "delete", "999"}, "no API key with id 999")
	e.fail(1, []string{"user", "create", "alice"}, "already exists")
	e.fail(1, []string{"user", "grant", "alice", "Superuser"}, "Superuser", "Data - View")
	e.fail(1, []string{"user", "feed", "alice", "F1", "READ"}, "READ", "USE, VIEW")
	e.fail(1, []string{"group", "add", "alice", "ops"}, "is a user, not a group")
	e.fail(1, []string{"group", "add", "ops", "ops"}, "member of itself")
	e.fail(1, []string{"user", "disable", "nobody"}, "not found")

	// delete, last: the key stops working.
	if out := e.ok("api-key", "delete", id); out != "deleted API key "+id+"\n" {
		t.Errorf("api-key delete said %q", out)
	}
	if _, reason := e.principal(key); reason != access.ReasonUnknown {
		t.Errorf("deleted key: %s", reason)
	}
}

// TestAPIKeyExpiresInDays: api-key create takes --expires 90d, as
// datafeed-key create does (both through config.ParseDuration).
func TestAPIKeyExpiresInDays(t *testing.T) {
	e := &accessEnv{t: t, data: t.TempDir()}
	e.ok("user", "create", "alice")
	before := time.Now()
	e.ok("api-key", "create", "--user", "alice", "--name", "ops", "--expires", "90d")
	var kj apiKeyJSON
	if err := json.Unmarshal([]byte(e.ok("api-key", "list", "--user", "alice", "--json")), &kj); err != nil {
		t.Fatal(err)
	}
	expires, err := time.Parse(time.RFC3339, kj.ExpireTime)
	if err != nil {
		t.Fatalf("expireTime %q: %v", kj.ExpireTime, err)
	}
	if d := expires.Sub(before); d < 90*24*time.Hour-time.Second || d > 90*24*time.Hour+time.Minute {
		t.Errorf("--expires 90d: the key expires %v after its creation, want 90 days", d)
	}
	e.fail(1, []string{"api-key", "create", "--user", "alice", "--expires", "0d"}, "must be positive")
	e.fail(1, []string{"api-key", "create", "--user", "alice", "--expires", "1.5d"}, "--expires", "90d")
}
