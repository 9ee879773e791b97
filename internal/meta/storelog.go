package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// LogMark is how far a node's store log is recorded in the database: every
// record that ends at or before End in Pack, and every record in the packs
// before it, has its rows here (see the store_marks table).
type LogMark struct {
	Node string
	Pack string
	End  int64
}

// LogMark returns node's mark, and false if it has none (no transaction
// of its store recorded one yet).
func (r *Repo) LogMark(ctx context.Context, node string) (LogMark, bool, error) {
	m := LogMark{Node: node}
	err := r.db.QueryRowContext(ctx, `SELECT pack, pack_end FROM store_marks WHERE node = $1`, node).Scan(&m.Pack, &m.End)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return LogMark{Node: node}, false, nil
	case err != nil:
		return LogMark{}, false, fmt.Errorf("read the store log mark of node %s: %w", node, err)
	}
	return m, true, nil
}

func (r *Repo) setLogMark(ctx context.Context, tx *sql.Tx, m LogMark) error {
	stmt, err := r.txStmt(ctx, tx, `INSERT INTO store_marks (node, pack, pack_end) VALUES ($1, $2, $3)
		ON CONFLICT (node) DO UPDATE SET pack = excluded.pack, pack_end = excluded.pack_end`)
	if err != nil {
		return fmt.Errorf("prepare the store log mark: %w", err)
	}
	defer stmt.Close()
	if _, err := stmt.ExecContext(ctx, m.Node, m.Pack, m.End); err != nil {
		return fmt.Errorf("record the store log mark of node %s: %w", m.Node, err)
	}
	return nil
}

// IDRange is the stream ids First to Last, both included.
type IDRange struct{ First, Last int64 }

// ReserveStreamIDs takes n stream ids that no row has and no insert will
// be given, for rows a store inserts later with their ids set (Packed
// streams with an ID): a post can then be answered, and its ids logged,
// before its rows are inserted. Ids reserved and never used are a gap, as
// those of rolled-back inserts are.
func (r *Repo) ReserveStreamIDs(ctx context.Context, n int) ([]IDRange, error) {
	if n <= 0 {
		return nil, nil
	}
	var out []IDRange
	if r.engine == enginePostgres {
		// nextval never hands out a value twice, whatever rolls back;
		// other nodes' reservations may interleave, so the values come
		// back as ranges.
		rows, err := r.db.QueryContext(ctx, `SELECT nextval(pg_get_serial_sequence('streams', 'id')) FROM generate_series(1, $1) ORDER BY 1`, n)
		if err != nil {
			return nil, fmt.Errorf("reserve %d stream ids: %w", n, err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return nil, fmt.Errorf("reserve %d stream ids: %w", n, err)
			}
			if k := len(out); k > 0 && out[k-1].Last+1 == id {
				out[k-1].Last = id
			} else {
				out = append(out, IDRange{id, id})
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reserve %d stream ids: %w", n, err)
		}
		return out, nil
	}
	// SQLite: AUTOINCREMENT gives every new row an id above the
	// sqlite_sequence row of its table, which it keeps at the largest id
	// ever inserted; moving that row up by n keeps the n ids below it for
	// the caller. The row is there once a stream was inserted; before,
	// it is made.
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sqlite_sequence (name, seq)
			SELECT 'streams', COALESCE((SELECT MAX(id) FROM streams), 0)
			WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'streams')`); err != nil {
			return err
		}
		var last int64
		if err := tx.QueryRowContext(ctx, `UPDATE sqlite_sequence SET seq = seq + $1 WHERE name = 'streams' RETURNING seq`, n).Scan(&last); err != nil {
			return err
		}
		out = []IDRange{{last - int64(n) + 1, last}}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reserve %d stream ids: %w", n, err)
	}
	return out, nil
}
