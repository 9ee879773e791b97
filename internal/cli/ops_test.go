package cli

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/meta"
)

// TestAdminNotesNewDatabase: an admin command pointed at a data directory
// that holds no database (a mistyped --data) still works, so that feeds
// and keys can be provisioned before the first start, but says that it
// created a new, empty database and where; with the database there it
// says nothing of the kind.
func TestAdminNotesNewDatabase(t *testing.T) {
	data := filepath.Join(t.TempDir(), "weir-dta")
	e := &accessEnv{t: t, data: data}
	r := e.run("feed", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "no weir database at "+filepath.Join(data, "weir.db")) ||
		!strings.Contains(r.stderr, "--data") {
		t.Fatalf("feed list on a data directory without a database: %+v", r)
	}
	r = e.run("feed", "create", "NEW-FEED")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("feed create on the database made before: %+v", r)
	}
}

// TestAdminHelpAndUsageErrors: `weir admin --help` and its like print the
// usage and exit 0, as every other command's --help does; a stream status
// that does not exist and arguments that list commands do not take are
// usage errors (exit 2), not an empty list.
func TestAdminHelpAndUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"admin", "--help"}, {"admin", "-h"}, {"admin", "help"},
		{"admin", "feed", "--help"}, {"admin", "datafeed-key", "-h"}, {"admin", "user", "--help"}} {
		var out, errb bytes.Buffer
		if code := Main(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "weir admin feed create NAME") || errb.Len() != 0 {
			t.Errorf("weir %s: exit %d, stdout %q, stderr %q; want the usage and 0", strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
	e := &accessEnv{t: t, data: t.TempDir()}
	e.ok("feed", "create", "LIST-FEED")
	e.fail(2, []string{"stream", "list", "--status", "UNLOCK"}, `--status "UNLOCK" is not one of LOCKED, UNLOCKED, DELETED`)
	e.fail(2, []string{"--node", "n1", "feed", "list"}, "admin flags come after the subject and action", `got "--node n1" first`)
	e.fail(2, []string{"feed", "--json", "list"}, "admin flags come after the subject and action")
	e.fail(2, []string{"stream", "list", "LIST-FEED"}, "stream list takes no arguments", "--feed")
	e.fail(2, []string{"feed", "list", "LIST-FEED"}, "feed list takes no arguments")
	e.ok("stream", "list", "--status", "unlocked")
}

// TestAdminRefusesNewerSchema: a database that a newer weir migrated (an
// upgrade rolled back) is refused with a message that says so, on both
// engines, where this version used to run on it without a word.
func TestAdminRefusesNewerSchema(t *testing.T) {
	onEngines(t, func(t *testing.T, e *accessEnv, repo *meta.Repo) {
		e.ok("feed", "create", "OLD-FEED")
		driver, dsn := "sqlite", filepath.Join(e.data, meta.SQLiteFile)
		if e.dsn != "" {
			driver, dsn = "pgx", e.dsn
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var newest int
		if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&newest); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied_ms) VALUES ($1, 0)`, newest+1); err != nil {
			t.Fatal(err)
		}
		e.fail(1, []string{"feed", "list"}, fmt.Sprintf("has migration %d applied, and this weir knows migrations up to %d only", newest+1, newest),
			"a newer weir has used it")
	})
}

// TestServeNamesConfigLines: serve, an admin command and the proxy refuse
// an invalid configuration naming, for each problem with an option the
// file sets, the file and its line; an option a flag set is not blamed on
// the file.
func TestServeNamesConfigLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "weir.yaml")
	if err := os.WriteFile(path, []byte("db: \"\"\nreceive:\n  maxZipEntries: 0\n  trustedForwarders: [TOKEN:p1, nonsense]\n"+
		"api:\n  retryAfter: 0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	for _, args := range [][]string{
		{"serve", "--config", path, "--data", data, "--listen", "127.0.0.1:0", "--db", "mysql://x"},
		{"admin", "feed", "list", "--config", path, "--data", data, "--db", "mysql://x"},
		{"proxy", "--config", path, "--data", data, "--listen", "127.0.0.1:0", "--db", "mysql://x"},
	} {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		msg := errb.String()
		for _, want := range []string{path + ":3: receive.maxZipEntries: must be at least 1",
			path + `:4: receive.trustedForwarders[1]: "nonsense"`, path + ":6: api.retryAfter: 0s", "\ndb: \"mysql://x\""} {
			if code != 1 || !strings.Contains(msg, want) {
				t.Errorf("weir %s: exit %d, stderr does not say %q:\n%s", args[0], code, want, msg)
			}
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a refused configuration created the data directory: %v", err)
	}
}

// TestServeRefusesBadListen: serve and the proxy refuse a listen address
// that cannot be bound as validation, with every other problem and
// before creating anything, naming the option (and the file's line when
// the file sets it, not when --listen does).
func TestServeRefusesBadListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "weir.yaml")
	if err := os.WriteFile(path, []byte("log:\n  level: info\nlisten: 8080\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--config", path, "--data", data}, path + `:3: listen: "8080" is not host:port`},
		{[]string{"proxy", "--config", path, "--data", data, "--forward", "http://127.0.0.1:1/datafeed"}, path + `:3: listen: "8080" is not host:port`},
		{[]string{"serve", "--config", path, "--data", data, "--listen", ":80800"}, "\n" + `listen: ":80800": the port "80800" is not a number from 0 to 65535`},
		{[]string{"proxy", "--data", data, "--listen", ":80800", "--forward", "http://127.0.0.1:1/datafeed"}, "\n" + `listen: ":80800": the port`},
	} {
		var out, errb bytes.Buffer
		code := Main(tc.args, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "invalid configuration:") || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("weir %s: exit %d, stderr does not say %q:\n%s", strings.Join(tc.args, " "), code, tc.want, errb.String())
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a refused listen address created the data directory: %v", err)
	}
}

// TestAdminRefusesNode: --node, which only weir serve uses, is refused by
// every admin command (all of them, through openStorage) as a usage error
// that says so, where it used to be accepted and ignored; a node: in a
// configuration file shared with serve is no error.
func TestAdminRefusesNode(t *testing.T) {
	e := &accessEnv{t: t, data: t.TempDir()}
	e.ok("feed", "create", "NODE-FEED")
	for _, args := range [][]string{
		{"feed", "list", "--node", "n1"},
		{"stream", "list", "--node=n1"},
		{"stream", "cat", "1", "--node", "n1"},
		{"receipt-rules", "show", "--node", "n1"},
		{"datafeed-key", "list", "--node", "n1"},
		{"api-key", "list", "--node", "n1"},
		{"user", "list", "--node", "n1"},
	} {
		e.fail(2, args, "--node applies to weir serve only", "admin commands act on the whole data directory or database")
	}
	path := filepath.Join(t.TempDir(), "weir.yaml")
	if err := os.WriteFile(path, []byte("node: n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := e.ok("feed", "list", "--config", path); !strings.Contains(out, "NODE-FEED") {
		t.Errorf("feed list with node: in the file: %q", out)
	}
}
