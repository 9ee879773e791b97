package meta

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestIsUnavailable: what counts as the database being unreachable (503,
// retry later) rather than a statement failing (500).
func TestIsUnavailable(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("no such table: streams"), false},
		{"connection reset, wrapped", fmt.Errorf("apply batch: %w", reset), true},
		{"connect error", &pgconn.ConnectError{}, true},
		{"bad conn", driver.ErrBadConn, true},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"unexpected EOF (a truncated body too)", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), false},
		{"deadline", fmt.Errorf("commit: %w", context.DeadlineExceeded), true},
		{"canceled", context.Canceled, false},
		{"admin shutdown", pg("57P01"), true},
		{"cannot connect now", pg("57P03"), true},
		{"connection failure", pg("08006"), true},
		{"too many connections", pg("53300"), true},
		{"read-only transaction", pg("25006"), true},
		{"unique violation", pg("23505"), false},
		{"disk full", pg("53100"), false},
		{"syntax error", pg("42601"), false},
	} {
		if got := IsUnavailable(c.err); got != c.want {
			t.Errorf("%s: IsUnavailable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestIsUnavailableSQLiteBusy: SQLite's "database is locked", as another
// process holding the write lock past busy_timeout gives it.
func TestIsUnavailableSQLiteBusy(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	r, err := Open(ctx, "", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other, err := Open(ctx, "", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c, err := other.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	w, err := r.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer w.ExecContext(ctx, "ROLLBACK")
	_, err = c.ExecContext(ctx, "BEGIN IMMEDIATE")
	if err == nil {
		t.Fatal("a second writer took the lock")
	}
	if !IsUnavailable(err) {
		t.Errorf("IsUnavailable(%v) = false", err)
	}
}
