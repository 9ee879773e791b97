package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/auth/datafeedkey"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
)

type dfkResult struct {
	code           int
	stdout, stderr string
}

func dfkMain(args ...string) dfkResult {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return dfkResult{code, out.String(), errb.String()}
}

// dfkStorage is where a test's commands and its Store meet: the flags that
// select it, and the same database opened directly.
type dfkStorage struct {
	flags []string
	repo  *meta.Repo
}

func forDataFeedKeyEngines(t *testing.T, fn func(t *testing.T, st dfkStorage)) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			data := t.TempDir()
			dsn := ""
			if engine == "postgres" {
				dsn = metatest.PostgresDSN(t) // skips when not configured
			}
			flags := []string{"--data", data}
			if dsn != "" {
				flags = append(flags, "--db", dsn)
			}
			repo, err := meta.Open(context.Background(), dsn, data, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = repo.Close() })
			fn(t, dfkStorage{flags: flags, repo: repo})
		})
	}
}

func dfk(st dfkStorage, args ...string) dfkResult {
	return dfkMain(append(append([]string{"admin", "datafeed-key"}, args...), st.flags...)...)
}

func dfkAuthenticate(s *datafeedkey.Store, key, account string) (*auth.Identity, error) {
	r := httptest.NewRequest(http.MethodPost, "/datafeed", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	attrs := new(attr.Map)
	attrs.Put("AccountId", account)
	return s.KeyAuthenticator().Authenticate(context.Background(), &auth.Request{HTTP: r, Attrs: attrs})
}

func TestDataFeedKeyCommands(t *testing.T) {
	forDataFeedKeyEngines(t, func(t *testing.T, st dfkStorage) {
		ctx := context.Background()
		r := dfk(st, "create", "--account", "1000", "--attr", "System=EXAMPLE", "--attr", "Environment = PROD ", "--expires", "90d")
		if r.code != 0 {
			t.Fatalf("create: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		key := lines[0]
		if len(lines) != 1 || !datafeedkey.Valid(key) {
			t.Fatalf("create stdout = %q, want the key alone on one line", r.stdout)
		}
		for _, want := range []string{"created data feed key 1 for account 1000", "hint " + key[4:10], "shown only this once"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("create stderr does not say %q: %s", want, r.stderr)
			}
		}

		stored, err := st.repo.GetDataFeedKey(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Account != "1000" || stored.Algorithm != "ARGON2" || stored.Hint != key[4:10] ||
			strings.Contains(stored.Hash, key[4:]) || stored.Salt == "" {
			t.Errorf("stored key = %+v", stored)
		}
		if d := time.Until(time.UnixMilli(stored.ExpiresMs)); d < 89*24*time.Hour || d > 90*24*time.Hour {
			t.Errorf("expires in %v, want 90 days", d)
		}

		s, err := datafeedkey.Open(ctx, datafeedkey.Options{OwnerHeader: "AccountId", CacheTTL: time.Minute, Repo: st.repo})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		id, err := dfkAuthenticate(s, key, "1000")
		if err != nil || id == nil || id.SubjectID != "data-feed-identity-1000" {
			t.Fatalf("authenticate the new key: %v, %v", id, err)
		}
		for k, v := range map[string]string{"System": "EXAMPLE", "Environment": "PROD", "AccountId": "1000"} {
			if got := id.Attributes.Value(k); got != v {
				t.Errorf("attribute %s = %q, want %q", k, got, v)
			}
		}
		if _, err := dfkAuthenticate(s, key, "2000"); err == nil {
			t.Errorf("the key authenticated another account")
		}

		// A second key, for the listing.
		if r := dfk(st, "create", "--account", "2000"); r.code != 0 {
			t.Fatalf("create 2: exit %d %s", r.code, r.stderr)
		}
		r = dfk(st, "list")
		if r.code != 0 {
			t.Fatalf("list: exit %d %s", r.code, r.stderr)
		}
		for _, want := range []string{"ID", "HINT", "1000", "2000", key[4:10], "active", "Environment=PROD,System=EXAMPLE"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("list does not show %q:\n%s", want, r.stdout)
			}
		}
		for _, secret := range []string{key[4:], stored.Hash, stored.Salt} {
			if strings.Contains(r.stdout, secret) {
				t.Errorf("list shows the key, hash or salt:\n%s", r.stdout)
			}
		}

		r = dfk(st, "list", "--json", "--account", "1000")
		if r.code != 0 {
			t.Fatalf("list --json: exit %d %s", r.code, r.stderr)
		}
		var rows []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var row map[string]any
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("list --json line %q: %v", line, err)
			}
			rows = append(rows, row)
		}
		if len(rows) != 1 || rows[0]["account"] != "1000" || rows[0]["hint"] != key[4:10] || rows[0]["status"] != "active" {
			t.Errorf("list --json = %v", rows)
		}
		if _, ok := rows[0]["hash"]; ok || strings.Contains(r.stdout, stored.Hash) {
			t.Errorf("list --json shows the hash: %s", r.stdout)
		}
		if a, _ := rows[0]["attributes"].(map[string]any); a["System"] != "EXAMPLE" {
			t.Errorf("list --json attributes = %v", rows[0]["attributes"])
		}
		// The names the API and `api-key list --json` use.
		if rows[0]["expireTime"] != ms(stored.ExpiresMs) || rows[0]["createTime"] != ms(stored.CreateMs) {
			t.Errorf("list --json expireTime, createTime = %v, %v; want %s, %s",
				rows[0]["expireTime"], rows[0]["createTime"], ms(stored.ExpiresMs), ms(stored.CreateMs))
		}
		if _, ok := rows[0]["expiryTime"]; ok {
			t.Errorf("list --json still has expiryTime: %s", r.stdout)
		}

		// Revoking stops the key at once, although the store has it cached.
		r = dfk(st, "revoke", "1")
		if r.code != 0 || !strings.Contains(r.stdout, "revoked data feed key 1 (account 1000") {
			t.Fatalf("revoke: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		_, err = dfkAuthenticate(s, key, "1000")
		var f *auth.Failure
		if !errors.As(err, &f) || f.Code != auth.DataFeedKeyFailed {
			t.Errorf("revoked key: err = %v, want 313", err)
		}
		if r := dfk(st, "revoke", "1"); r.code != 0 || !strings.Contains(r.stdout, "already revoked") {
			t.Errorf("revoke again: exit %d %s%s", r.code, r.stdout, r.stderr)
		}
		if r := dfk(st, "list", "--account", "1000"); !strings.Contains(r.stdout, "revoked") {
			t.Errorf("list after revoke:\n%s", r.stdout)
		}
		if r := dfk(st, "revoke", "99"); r.code != 1 || !strings.Contains(r.stderr, "no data feed key with id 99") {
			t.Errorf("revoke missing: exit %d %s", r.code, r.stderr)
		}
	})
}

func TestDataFeedKeyCommandErrors(t *testing.T) {
	st := dfkStorage{flags: []string{"--data", t.TempDir()}}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown admin command "datafeed-key frobnicate"`},
		{[]string{"create"}, "needs --account ID"},
		{[]string{"create", "--account", "  "}, "needs --account ID"},
		{[]string{"create", "--account", "1", "extra"}, "takes no arguments"},
		{[]string{"create", "--account", "1", "--expires", "soon"}, "--expires"},
		{[]string{"create", "--account", "1", "--expires", "0d"}, "positive"},
		{[]string{"create", "--account", "1", "--expires", "-5h"}, "positive"},
		{[]string{"create", "--account", "1", "--expires", "999999999d"}, "at most"},
		{[]string{"create", "--account", "1", "--attr", "novalue"}, "want KEY=VALUE"},
		{[]string{"create", "--account", "1", "--attr", "=v"}, "want KEY=VALUE"},
		{[]string{"create", "--account", "1", "--attr", "accountid=2"}, "set it with --account"},
		{[]string{"create", "--account", "1", "--attr", "A=1", "--attr", "a=2"}, "given twice"},
		{[]string{"create", "--account", "1", "--bogus"}, "flag provided but not defined"},
		{[]string{"list", "x"}, "takes no arguments"},
		{[]string{"revoke"}, "takes one key id"},
		{[]string{"revoke", "abc"}, "not a positive number"},
		{[]string{"revoke", "0"}, "not a positive number"},
	} {
		r := dfk(st, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "weir admin datafeed-key create --account ID") {
			t.Errorf("%q: exit %d, stderr %q; want 2 with %q and the usage", tc.args, r.code, r.stderr, tc.want)
		}
		if r.stdout != "" {
			t.Errorf("%q: stdout %q, want nothing", tc.args, r.stdout)
		}
	}
}

// TestDataFeedKeyReservedAttributes: --attr refuses what weir sets itself
// or never stores, as the API does (both create keys with one function).
func TestDataFeedKeyReservedAttributes(t *testing.T) {
	st := dfkStorage{flags: []string{"--data", t.TempDir()}}
	for _, name := range []string{"Authorization", "ReceiptId", "ReceiptIdPath", "StreamSize", "uploaduserid"} {
		r := dfk(st, "create", "--account", "3000", "--attr", name+"=x")
		if r.code != 1 || !strings.Contains(r.stderr, "attribute "+name+" cannot be set on a key") || r.stdout != "" {
			t.Errorf("--attr %s=x: exit %d, stdout %q, stderr %q", name, r.code, r.stdout, r.stderr)
		}
	}
	if r := dfk(st, "list", "--account", "3000"); r.code != 0 || strings.Contains(r.stdout, "3000") {
		t.Errorf("a refused key was stored: %+v", r)
	}
}

func TestParseKeyLifetime(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"365d": 365 * 24 * time.Hour, "90D": 90 * 24 * time.Hour, " 1d ": 24 * time.Hour,
		"720h": 720 * time.Hour, "P30D": 30 * 24 * time.Hour, "PT1H30M": 90 * time.Minute,
	} {
		got, err := parseKeyLifetime(in)
		if err != nil || got != want {
			t.Errorf("parseKeyLifetime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "1.5d", "-1d", "0", "PT0S", "forever", strconv.Itoa(1 << 30)} {
		if got, err := parseKeyLifetime(in); err == nil {
			t.Errorf("parseKeyLifetime(%q) = %v, want an error", in, got)
		}
	}
}
