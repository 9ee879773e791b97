package app_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// TestDataDirCheckedOnPostgres: servers on one PostgreSQL database must
// share its data directory. A second node started on a data directory of
// its own used to start, and then answered 500 ("its stored file is
// missing") for every stream the first had written, and 404 for its
// exports. Now it is refused at start, with a message that says what to
// do, whether its directory has no id or another one; on the first
// server's directory it starts, and so does a directory given the id by
// hand (a lost directory replaced by an empty one).
func TestDataDirCheckedOnPostgres(t *testing.T) {
	cfg, first := startOnPostgres(t, "DIR-FEED", nil)
	b, err := os.ReadFile(filepath.Join(cfg.Data, "data-id"))
	id := strings.TrimSpace(string(b))
	if err != nil || len(id) != 32 {
		t.Fatalf("the first server's data-id: %q %v", b, err)
	}

	other := cfg
	other.Node = "other-node"
	other.Data = t.TempDir()
	log := slog.New(slog.DiscardHandler)
	refused := func(want ...string) {
		t.Helper()
		a, err := app.New(context.Background(), other, log)
		if err == nil {
			_ = a.Shutdown(0)
			t.Fatal("a node on another data directory started")
		}
		for _, w := range append(want, "every weir server on one database must use the same data directory", "--data") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not say %q", err, w)
			}
		}
	}
	refused("has no data-id file", id, "write "+id+" into "+filepath.Join(other.Data, "data-id"))
	if err := os.WriteFile(filepath.Join(other.Data, "data-id"), []byte("0123456789abcdef\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	refused("(id 0123456789abcdef, in its data-id file) is not the one", "(id "+id+")")
	if err := os.WriteFile(filepath.Join(other.Data, "data-id"), []byte("not an id!\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := app.New(context.Background(), other, log); err == nil || !strings.Contains(err.Error(), "does not hold a data directory id") {
		t.Fatalf("a data-id file that holds no id: %v", err)
	}

	// The operator's way out: the lost directory's id, written by hand.
	if err := os.WriteFile(filepath.Join(other.Data, "data-id"), []byte(id+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	apptest.StartConfig(t, other).Stop()

	// The first server's directory, shared: the second node reads the
	// first's streams.
	other.Data = cfg.Data
	second := apptest.StartConfig(t, other)
	rid := post(t, first, []byte("shared\n"), "Feed", "DIR-FEED").ok(t)
	x := streamByReceipt(t, first, rid)
	admin := user(t, second, "diradmin", []string{access.Administrator}, nil)
	if r := admin.do("GET", fmt.Sprintf("/streams/%d/data", x.ID), ""); r.status != 200 || string(r.body) != "shared\n" {
		t.Fatalf("the second node reading the first's stream: %d %q", r.status, r.body)
	}
}

// TestDataDirFirstStartsAtOnce: several nodes that start at the same time
// on a new database and a shared data directory all start: one id is
// written and recorded, not one per server (which would refuse all but
// one, and later every start, as the file and the row disagreed).
func TestDataDirFirstStartsAtOnce(t *testing.T) {
	cfg := apptest.Config(t)
	if cfg.DB == "" {
		cfg.DB = metatest.PostgresDSN(t) // skips without WEIR_TEST_POSTGRES_DSN
	}
	log := slog.New(slog.DiscardHandler)
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		c := cfg
		c.Node = fmt.Sprintf("node-%d", i)
		go func() {
			a, err := app.New(context.Background(), c, log)
			if err == nil {
				err = a.Shutdown(0)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("a node starting at once with others: %v", err)
		}
	}
	// And each starts again.
	for i := range n {
		c := cfg
		c.Node = fmt.Sprintf("node-%d", i)
		apptest.StartConfig(t, c).Stop()
	}
}

// TestDataDirUpgradeNeedsStore: a database that holds streams but no data
// directory id (one from before the check) is claimed only by a data
// directory with a store. An empty one (a shared filesystem not mounted
// yet, a mistyped --data) is refused, and claims nothing: the nodes on the
// right directory start afterwards.
func TestDataDirUpgradeNeedsStore(t *testing.T) {
	cfg, s := startOnPostgres(t, "UP-FEED", nil)
	rid := post(t, s, []byte("before the upgrade\n"), "Feed", "UP-FEED").ok(t)
	s.Stop()
	// As before migration 0013: no row, no file.
	db, err := sql.Open("pgx", cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM data_directory`); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cfg.Data, "data-id")); err != nil {
		t.Fatal(err)
	}

	empty := cfg
	empty.Data = t.TempDir()
	if a, err := app.New(context.Background(), empty, slog.New(slog.DiscardHandler)); err == nil {
		_ = a.Shutdown(0)
		t.Fatal("an empty data directory claimed a database that holds streams")
	} else if !strings.Contains(err.Error(), "holds streams") || !strings.Contains(err.Error(), "has no store") {
		t.Fatalf("refusal: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM data_directory`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused start recorded %d ids (%v)", n, err)
	}

	s = apptest.StartConfig(t, cfg)
	admin := user(t, s, "upadmin", []string{access.Administrator}, nil)
	x := streamByReceipt(t, s, rid)
	if r := admin.do("GET", fmt.Sprintf("/streams/%d/data", x.ID), ""); r.status != 200 || string(r.body) != "before the upgrade\n" {
		t.Fatalf("the stream after the upgrade: %d %q", r.status, r.body)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Data, "data-id")); err != nil || len(strings.TrimSpace(string(b))) != 32 {
		t.Fatalf("the data-id written at the upgrade: %q %v", b, err)
	}
}
