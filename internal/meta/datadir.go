package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

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

// RecordDataDirID records id as the data directory's unless one is
// recorded already, and returns the one recorded: id, or another server's
// if it recorded its own first.
func (r *Repo) RecordDataDirID(ctx context.Context, id string) (string, error) {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO data_directory (id, data_id, create_ms) VALUES (1, $1, $2)
			ON CONFLICT (id) DO NOTHING`, id, time.Now().UnixMilli())
		return err
	})
	if err != nil {
		return "", fmt.Errorf("record the data directory's id: %w", err)
	}
	return r.DataDirID(ctx)
}
