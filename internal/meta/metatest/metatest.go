// Package metatest helps tests run against PostgreSQL: each test gets its
// own freshly created schema, so tests can run in parallel against one
// database and leave nothing behind.
package metatest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	// Registers the "pgx" database/sql driver.
	_ "github.com/jackc/pgx/v5/stdlib"
)

// envPostgresDSN names the environment variable holding the PostgreSQL URL
// tests use; when it is empty, PostgreSQL tests are skipped.
const envPostgresDSN = "WEIR_TEST_POSTGRES_DSN"

// PostgresDSN creates a schema with a random unique name in the database of
// $WEIR_TEST_POSTGRES_DSN and returns that DSN with search_path set to the
// schema (pgx sends unknown URL parameters as run-time parameters), so that
// everything the test creates lands in it. The schema is dropped with
// CASCADE when the test ends. The test is skipped if the variable is empty.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv(envPostgresDSN)
	if base == "" {
		t.Skipf("PostgreSQL tests disabled: set %s to a postgres:// URL to enable them, e.g. %s=postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
			envPostgresDSN, envPostgresDSN)
	}
	u, err := url.Parse(base)
	if err != nil {
		// Not %v of the error: it may quote the DSN, password included.
		t.Fatalf("%s is not a URL", envPostgresDSN)
	}

	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random schema name: %v", err)
	}
	// Lower-case letters, digits and '_' only, so the name needs no quoting.
	schema := "weir_test_" + hex.EncodeToString(b[:])

	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("open %s: %v", envPostgresDSN, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		_ = db.Close()
		t.Fatalf("create test schema %s: %v", schema, err)
	}
	// Registered before the caller's own cleanups, so it runs after them:
	// repositories opened on the schema are closed before it is dropped.
	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})

	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Rows reads every row of rows (which it closes) as a slice of column
// values, failing the test on any error.
func Rows(t testing.TB, rows *sql.Rows) [][]any {
	t.Helper()
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
