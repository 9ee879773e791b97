// Package meta is weir's metadata repository: feeds and the streams posted to
// them, stored in SQLite (the default, one file in the data directory) or
// PostgreSQL (when a postgres:// DSN is configured).
//
// Both engines are used through database/sql with $n placeholders so that
// almost every query is shared; the few engine differences are confined to
// openSQLite/openPostgres, the migration lock and the SQLite write gate.
package meta

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	// Drivers register themselves with database/sql under "pgx" and "sqlite".
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is wrapped by errors for a feed or stream that does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is wrapped by errors for a feed name that is already taken.
var ErrExists = errors.New("already exists")

const (
	engineSQLite   = "sqlite"
	enginePostgres = "postgres"

	// sqliteFile is the database file name inside the data directory.
	sqliteFile = "weir.db"
)

// SQLiteFile is the name of the SQLite database inside the data directory.
const SQLiteFile = sqliteFile

// Repo is the metadata repository. It is safe for concurrent use.
type Repo struct {
	db     *sql.DB
	engine string
	logger *slog.Logger

	// writeGate serialises this process's write transactions on SQLite, where
	// only one writer can hold the database anyway. Waiting here is ordered and
	// immediate, whereas contending inside SQLite falls back to the busy
	// handler's sleep-and-retry polling, which adds milliseconds of latency to
	// every commit under load. Other processes (an admin CLI) still contend
	// via busy_timeout. Nil on PostgreSQL, which handles concurrent writers.
	writeGate chan struct{}
	// writer is the connection SQLite write transactions run on (guarded by
	// writeGate; nil until the first, and on PostgreSQL). One connection
	// means the hot path's statements are prepared once, not once per
	// pooled connection, and it alone has temp_store = MEMORY: the
	// temporary b-trees of a write (IN lists, DISTINCT) then never touch a
	// file, while readers, whose sorts can be as large as a table, keep the
	// default.
	writer *sql.Conn
	// loseCommit, if set (tests), makes a write transaction roll back and
	// fail as one whose COMMIT's answer was lost when it says so.
	loseCommit func() bool

	// feedGen goes up after every feed change this Repo commits, so that a
	// FeedCache knows its entries are stale.
	feedGen atomic.Uint64

	// stmts holds the hot path's statements, prepared once: preparing
	// (parsing) them for every group commit cost more than a tenth of the
	// committer's time with small posts.
	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt
}

// Open connects and migrates. dsn "" selects SQLite in <dataDir>/weir.db; a
// dsn starting with postgres:// or postgresql:// selects PostgreSQL. Any other
// dsn is rejected.
func Open(ctx context.Context, dsn, dataDir string, logger *slog.Logger) (*Repo, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var (
		r   *Repo
		err error
	)
	switch {
	case dsn == "":
		r, err = openSQLite(ctx, dataDir, logger)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		r, err = openPostgres(ctx, dsn, logger)
	default:
		// Never echo the DSN: it may carry a password.
		return nil, errors.New("open metadata database: unsupported database DSN: use an empty DSN for SQLite in the data directory, or a postgres:// or postgresql:// URL")
	}
	if err != nil {
		return nil, err
	}
	if err := r.migrate(ctx); err != nil {
		_ = r.db.Close()
		return nil, err
	}
	return r, nil
}

func openSQLite(ctx context.Context, dataDir string, logger *slog.Logger) (*Repo, error) {
	if dataDir == "" {
		return nil, errors.New("open sqlite metadata database: no data directory given")
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("open sqlite metadata database: create data directory: %w", err)
	}
	path, err := filepath.Abs(filepath.Join(dataDir, sqliteFile))
	if err != nil {
		return nil, fmt.Errorf("open sqlite metadata database: %w", err)
	}
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite metadata database %s: %w", path, err)
	}
	// WAL lets readers run alongside the single writer, so a few connections
	// are useful; more would only add page caches, as writes serialise anyway.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)

	r := &Repo{db: db, engine: engineSQLite, logger: logger, writeGate: make(chan struct{}, 1)}
	// Switching a new database to WAL needs an exclusive lock and fails with
	// SQLITE_BUSY at once, without the busy handler, when another process
	// (a server and an admin command starting together) does the same:
	// retry for as long as busy_timeout would have waited.
	for start, wait := time.Now(), 10*time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err = r.checkSQLiteDurability(ctx)
		if err == nil || !isBusy(err) || time.Since(start) > 10*time.Second {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(wait):
			continue
		}
		break
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open sqlite metadata database %s: %w", path, err)
	}
	logger.Info("metadata database opened", "engine", engineSQLite, "path", path)
	return r, nil
}

// sqliteDSN builds the modernc.org/sqlite DSN for the database file at path.
//
// The path is a file: URI so that characters such as '?' or '#' in the data
// directory cannot be mistaken for the start of the parameters. The
// parameters are the durability contract: synchronous(FULL) makes every
// committed transaction durable before Commit returns (receipts promise
// that); WAL lets readers proceed during a write; busy_timeout makes a second
// process (the admin CLI) wait for the lock instead of failing; and
// _txlock=immediate takes the write lock at BEGIN, so two processes cannot
// both hold read locks and then deadlock upgrading to write (SQLITE_BUSY that
// no timeout resolves).
func sqliteDSN(path string) string {
	u := url.URL{Path: filepath.ToSlash(path)}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return "file:" + u.EscapedPath() + "?" + q.Encode()
}

// checkSQLiteDurability verifies the pragmas took effect. A filesystem that
// cannot do WAL silently keeps the old journal mode, which is survivable (only
// slower) so it is logged; a synchronous level below FULL would break the
// promise receipts make, so it is an error.
func (r *Repo) checkSQLiteDurability(ctx context.Context) error {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		r.logger.Warn("sqlite metadata database is not in WAL mode; readers will block during writes", "journal_mode", mode)
	}
	var syncLevel int
	if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncLevel); err != nil {
		return fmt.Errorf("read synchronous: %w", err)
	}
	// 2 is FULL, 3 is EXTRA.
	if syncLevel < 2 {
		return fmt.Errorf("sqlite synchronous level is %d, need FULL (2) for durable commits", syncLevel)
	}
	return nil
}

func openPostgres(ctx context.Context, dsn string, logger *slog.Logger) (*Repo, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		// pgx reports parse errors with the DSN redacted.
		return nil, fmt.Errorf("open postgres metadata database: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open postgres metadata database: %w", err)
	}
	logger.Info("metadata database opened", "engine", enginePostgres, "host", redactedHost(dsn))
	return &Repo{db: db, engine: enginePostgres, logger: logger}, nil
}

// redactedHost returns host and database of a postgres URL for logging, never
// the credentials.
func redactedHost(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "?"
	}
	return u.Host + u.Path
}

// Close releases the database connections.
func (r *Repo) Close() error {
	if r.writeGate != nil {
		r.writeGate <- struct{}{}
		if r.writer != nil {
			_ = r.writer.Close()
			r.writer = nil
		}
		<-r.writeGate
	}
	r.stmtMu.Lock()
	for _, st := range r.stmts {
		_ = st.Close()
	}
	r.stmts = nil
	r.stmtMu.Unlock()
	if err := r.db.Close(); err != nil {
		return fmt.Errorf("close metadata database: %w", err)
	}
	return nil
}

// txStmt returns query as a statement of tx, prepared once for the Repo
// (database/sql then prepares it once per connection and reuses it). The
// caller closes the returned statement, which leaves the shared one open.
func (r *Repo) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	r.stmtMu.Lock()
	st, ok := r.stmts[query]
	if !ok {
		var err error
		if st, err = r.db.PrepareContext(ctx, query); err != nil {
			r.stmtMu.Unlock()
			return nil, err
		}
		if r.stmts == nil {
			r.stmts = make(map[string]*sql.Stmt)
		}
		r.stmts[query] = st
	}
	r.stmtMu.Unlock()
	return tx.StmtContext(ctx, st), nil
}

// Engine reports "sqlite" or "postgres".
func (r *Repo) Engine() string { return r.engine }

// Ping checks the database is reachable.
func (r *Repo) Ping(ctx context.Context) error {
	if err := r.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s metadata database: %w", r.engine, err)
	}
	return nil
}

// withTx runs fn in a write transaction and commits it. On SQLite the
// transaction begins IMMEDIATE (see sqliteDSN) and in-process writers queue
// on writeGate first.
func (r *Repo) withTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if r.writeGate != nil {
		select {
		case r.writeGate <- struct{}{}:
			defer func() { <-r.writeGate }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tx, err := r.beginWrite(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if r.loseCommit != nil && r.loseCommit() {
		_ = tx.Rollback()
		return fmt.Errorf("commit: %w: %w", ErrCommitUnknown, driver.ErrBadConn)
	}
	if err = tx.Commit(); err != nil {
		if r.engine == enginePostgres && IsUnavailable(err) {
			// COMMIT may have reached the server and been applied, with
			// only its answer lost.
			return fmt.Errorf("commit: %w: %w", ErrCommitUnknown, err)
		}
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ErrCommitUnknown is wrapped by a write that failed as its transaction
// was committing, because the connection to PostgreSQL failed then: the
// transaction may have been committed. (SQLite commits in this process:
// its failures are never in doubt.)
var ErrCommitUnknown = errors.New("the connection failed while committing: the transaction may have been committed")

// beginWrite begins a write transaction: on SQLite on r.writer (the
// caller holds writeGate), opening it first if need be, or again if
// database/sql has discarded it after a driver error.
func (r *Repo) beginWrite(ctx context.Context) (*sql.Tx, error) {
	if r.writeGate == nil {
		return r.db.BeginTx(ctx, nil)
	}
	for attempt := 0; ; attempt++ {
		if r.writer == nil {
			c, err := r.db.Conn(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := c.ExecContext(ctx, "PRAGMA temp_store = MEMORY"); err != nil {
				_ = c.Close()
				return nil, fmt.Errorf("set temp_store on the writer connection: %w", err)
			}
			r.writer = c
		}
		tx, err := r.writer.BeginTx(ctx, nil)
		if errors.Is(err, sql.ErrConnDone) && attempt == 0 {
			_ = r.writer.Close()
			r.writer = nil
			continue
		}
		return tx, err
	}
}

// nowMs is the current time in epoch milliseconds, the unit of every time
// column.
func nowMs() int64 { return time.Now().UnixMilli() }

// isBusy reports whether err is SQLite's "database is locked" (SQLITE_BUSY,
// including its extended codes).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// IsFull reports whether err is the database refusing a write for lack of
// space: SQLite's SQLITE_FULL or PostgreSQL's disk_full (53100).
func IsFull(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
		return true
	}
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == "53100"
}

// IsUnavailable reports whether err means that the database could not be
// reached or went away, rather than that a statement failed: a connection
// refused, reset or timed out, a server shutting down, starting up, in
// recovery (read-only after a failover) or out of connections, or SQLite's
// database held locked by another process past the busy timeout. The work
// may succeed if tried again later, so callers answer 503, not 500; such
// an error's text (addresses, user names) is for the log, not for senders.
// A deadline passed counts: callers set one only on database calls, to
// bound how long they wait for an answer.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed) || isBusy(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		switch code := pe.SQLState(); {
		case strings.HasPrefix(code, "08"): // connection exception
			return true
		case code == "57P01", code == "57P02", code == "57P03": // admin or crash shutdown, cannot connect now
			return true
		case code == "53300": // too many connections
			return true
		case code == "25006": // read-only transaction: a standby, or in recovery
			return true
		}
		return false
	}
	// Not io.ErrUnexpectedEOF, although pgx can report a connection cut
	// mid-message so: a sender's truncated body is one too, and must not
	// pass for the database's failure. (A connection pgx finds closed is
	// driver.ErrBadConn or pgconn.ErrConnClosed, above.)
	return pgconn.Timeout(err)
}

// queryAll runs q and scans every row with scan.
func queryAll[T any](ctx context.Context, db *sql.DB, scan func(rowScanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
