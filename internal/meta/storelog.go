package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// LogMark is how far a node's store log is recorded in the database: every
// record that ends at or before End in Pack (the node's log pack number
// Seq, see LogPack), and every record in the packs before it, has its rows
// here (see the store_marks table).
type LogMark struct {
	Node string
	Seq  int64
	Pack string
	End  int64
}

// LogPack is one pack of a node's store log: the Seq-th the node opened,
// and where the log ended in the pack before it when it was opened.
type LogPack struct {
	Seq     int64
	Pack    string
	PrevEnd int64
}

// LogMark returns node's mark, and false if it has none (no transaction
// of its store recorded one yet).
func (r *Repo) LogMark(ctx context.Context, node string) (LogMark, bool, error) {
	m := LogMark{Node: node}
	err := r.db.QueryRowContext(ctx, `SELECT seq, pack, pack_end FROM store_marks WHERE node = $1`, node).Scan(&m.Seq, &m.Pack, &m.End)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return LogMark{Node: node}, false, nil
	case err != nil:
		return LogMark{}, false, fmt.Errorf("read the store log mark of node %s: %w", node, err)
	}
	return m, true, nil
}

// OpenLogPack records that node's store opens pack as the next pack of its
// log, the log having ended at prevEnd in the pack before, and returns its
// number in the log. It is called before any record in the pack is
// answered, so that a start after a crash finds every pack to read.
func (r *Repo) OpenLogPack(ctx context.Context, node, pack string, prevEnd int64) (int64, error) {
	var seq int64
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM store_log_packs WHERE node = $1`, node).Scan(&seq); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO store_log_packs (node, seq, pack, prev_end) VALUES ($1, $2, $3, $4)`, node, seq, pack, prevEnd)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record the store log's new pack %s: %w", pack, err)
	}
	return seq, nil
}

// LogPacks returns node's log packs from number from on, in order.
func (r *Repo) LogPacks(ctx context.Context, node string, from int64) ([]LogPack, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT seq, pack, prev_end FROM store_log_packs WHERE node = $1 AND seq >= $2 ORDER BY seq`, node, from)
	if err != nil {
		return nil, fmt.Errorf("list the store log's packs of node %s: %w", node, err)
	}
	defer rows.Close()
	var out []LogPack
	for rows.Next() {
		var p LogPack
		if err := rows.Scan(&p.Seq, &p.Pack, &p.PrevEnd); err != nil {
			return nil, fmt.Errorf("list the store log's packs of node %s: %w", node, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the store log's packs of node %s: %w", node, err)
	}
	return out, nil
}

// setLogMark records m in tx, and forgets the log packs before m's: a
// start reads from the mark's on.
func (r *Repo) setLogMark(ctx context.Context, tx *sql.Tx, m LogMark) error {
	stmt, err := r.txStmt(ctx, tx, `INSERT INTO store_marks (node, seq, pack, pack_end) VALUES ($1, $2, $3, $4)
		ON CONFLICT (node) DO UPDATE SET seq = excluded.seq, pack = excluded.pack, pack_end = excluded.pack_end`)
	if err != nil {
		return fmt.Errorf("prepare the store log mark: %w", err)
	}
	defer stmt.Close()
	if _, err := stmt.ExecContext(ctx, m.Node, m.Seq, m.Pack, m.End); err != nil {
		return fmt.Errorf("record the store log mark of node %s: %w", m.Node, err)
	}
	prune, err := r.txStmt(ctx, tx, `DELETE FROM store_log_packs WHERE node = $1 AND seq < $2`)
	if err != nil {
		return fmt.Errorf("prepare the store log mark: %w", err)
	}
	defer prune.Close()
	if _, err := prune.ExecContext(ctx, m.Node, m.Seq); err != nil {
		return fmt.Errorf("forget the store log's recorded packs of node %s: %w", m.Node, err)
	}
	return nil
}

// markCommitted reports whether node's mark is m, for a batch that
// recorded m and whose commit is in doubt: every batch of a node's store
// records a mark of its own, so the mark says whether this batch, all of
// it, was committed (a row of it being there need not: an earlier try of
// the same rows may have put it there).
func (r *Repo) markCommitted(ctx context.Context, m LogMark) bool {
	ctx, cancel := context.WithTimeout(ctx, committedCheckTimeout)
	defer cancel()
	got, ok, err := r.LogMark(ctx, m.Node)
	return err == nil && ok && got == m
}

// AdvanceStreamIDs makes sure that no id up to max is reserved or given
// again, after rows were inserted with ids that did not come from this
// database's counter (a store's log replayed into a database restored
// from a backup older than it). SQLite moves its counter by itself.
func (r *Repo) AdvanceStreamIDs(ctx context.Context, max int64) error {
	if r.engine != enginePostgres || max <= 0 {
		return nil
	}
	// Never back: other nodes may have reserved ids past max meanwhile.
	_, err := r.db.ExecContext(ctx, `SELECT setval('streams_id_seq', $1) WHERE $1 > (SELECT last_value FROM streams_id_seq)`, max)
	if err != nil {
		return fmt.Errorf("move stream ids past %d: %w", max, err)
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
