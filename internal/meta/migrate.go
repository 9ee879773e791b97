package meta

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Each engine has its own directory of NNNN_name.sql files, applied in
// version order; a version once released must never be edited, only
// followed by a new file.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads and orders the migrations of one engine.
func loadMigrations(engine string) ([]migration, error) {
	dir := path.Join("migrations", engine)
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("read %s migrations: %w", engine, err)
	}
	var ms []migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: name must start with a positive version number and '_'", dir, e.Name())
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s in %s share version %d", other, e.Name(), dir, v)
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(migrationFS, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s/%s: %w", dir, e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// migrate applies the pending migrations, each in its own transaction
// together with its schema_migrations row, so a crash leaves either all or
// none of a migration applied. Several processes may start at once (server
// and admin CLI, or several server replicas on PostgreSQL); each transaction
// first takes an exclusive lock (lockMigrations) and only then checks whether
// its version is still pending, so every migration runs exactly once.
func (r *Repo) migrate(ctx context.Context) error {
	ms, err := loadMigrations(r.engine)
	if err != nil {
		return err
	}
	for _, m := range ms {
		var applied bool
		err := r.withTx(ctx, func(tx *sql.Tx) error {
			if err := r.lockMigrations(ctx, tx); err != nil {
				return err
			}
			// Created here rather than in 0001 so that the version check below
			// works on an empty database.
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version    INTEGER NOT NULL PRIMARY KEY,
				applied_ms BIGINT  NOT NULL
			)`); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			var n int
			if err := tx.QueryRowContext(ctx,
				`SELECT COUNT(*) FROM schema_migrations WHERE version = $1`, m.version).Scan(&n); err != nil {
				return fmt.Errorf("read schema_migrations: %w", err)
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (version, applied_ms) VALUES ($1, $2)`, m.version, nowMs()); err != nil {
				return fmt.Errorf("record version: %w", err)
			}
			applied = true
			return nil
		})
		if err != nil {
			return fmt.Errorf("migrate %s metadata database: %s: %w", r.engine, m.name, err)
		}
		if applied {
			r.logger.Info("metadata migration applied", "engine", r.engine, "migration", m.name)
		}
	}
	// A database a newer weir migrated (an upgrade rolled back) has tables
	// this version does not fill in as that one expects: refuse it at
	// start rather than fail posts later.
	var newest sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	if known := ms[len(ms)-1].version; newest.Valid && newest.Int64 > int64(known) {
		return fmt.Errorf("the %s metadata database has migration %d applied, and this weir knows migrations up to %d only: "+
			"a newer weir has used it; run that version or a later one", r.engine, newest.Int64, known)
	}
	return nil
}

// lockMigrations serialises migrating transactions across processes.
//
// SQLite needs nothing more: the transaction began IMMEDIATE and so already
// holds the database's single write lock.
//
// PostgreSQL takes a transaction-scoped advisory lock, released by commit or
// rollback. The key includes the current schema, so databases that hold
// several weir schemas (tests create one per test) only serialise migrations
// of the same schema.
func (r *Repo) lockMigrations(ctx context.Context, tx *sql.Tx) error {
	if r.engine != enginePostgres {
		return nil
	}
	// 0x77656972 is "weir" in ASCII: a fixed namespace for weir's advisory locks.
	if _, err := tx.ExecContext(ctx,
		`SELECT pg_advisory_xact_lock(2003134834, hashtext(coalesce(current_schema(), '')))`); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	return nil
}
