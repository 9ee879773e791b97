package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// dataDirLockKey is the first key of the transaction advisory lock that
// servers recording the data directory's id take turns on ("weid").
const dataDirLockKey = 0x77656964

// DataDirID returns the id of the data directory whose files this
// database's rows name, "" if none is recorded yet (a database no server
// has started on since migration 0013).
func (r *Repo) DataDirID(ctx context.Context) (string, error) {
	var id string
	err := r.db.QueryRowContext(ctx, `SELECT data_id FROM data_directory WHERE id = 1`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the data directory's id: %w", err)
	}
	return id, nil
}

// RecordDataDirID returns the data directory's recorded id, recording
// the one newID gives if there is none. Servers that do this at once take
// turns (a transaction advisory lock on PostgreSQL; SQLite's one writer),
// so newID runs in one at a time and sees what the one before it did: it
// reads or creates the directory's id file, and all of them record the
// same id.
func (r *Repo) RecordDataDirID(ctx context.Context, newID func() (string, error)) (string, error) {
	var id string
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if r.engine == enginePostgres {
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, 1)`, dataDirLockKey); err != nil {
				return err
			}
		}
		err := tx.QueryRowContext(ctx, `SELECT data_id FROM data_directory WHERE id = 1`).Scan(&id)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if id, err = newID(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO data_directory (id, data_id, create_ms) VALUES (1, $1, $2)`,
			id, time.Now().UnixMilli())
		return err
	})
	if err != nil {
		return "", fmt.Errorf("record the data directory's id: %w", err)
	}
	return id, nil
}

// HasStreams reports whether the database holds any stream row.
func (r *Repo) HasStreams(ctx context.Context) (bool, error) {
	return r.anyRow(ctx, "streams")
}

// anyRow reports whether table (a constant, never input) has a row.
func (r *Repo) anyRow(ctx context.Context, table string) (bool, error) {
	var n int
	if err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM `+table+` LIMIT 1) AS one`).Scan(&n); err != nil {
		return false, fmt.Errorf("look for rows in %s: %w", table, err)
	}
	return n > 0, nil
}
