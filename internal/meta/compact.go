package meta

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// A pack that holds both streams the purge may remove and streams that
// stay is compacted (internal/store/compact.go): the purgeable rows are
// claimed (ClaimPackDeleted), the staying streams' bytes copied into a new
// pack, and then one transaction (CompactPack) repoints the staying rows
// to it and deletes the claimed ones. The pack files a compaction may
// leave behind are recorded in pack_removals (AddPackRemoval before the
// new pack is created; CompactPack swaps it for the old one), and removed
// once no row names them (PackRemovals, DonePackRemoval).

// ClaimPackDeleted claims for a purge the streams of pack DELETED since
// before beforeMs (those claimed already stay claimed) and returns their
// ids, whatever the other streams of the pack are. A restore that
// commits first leaves its stream out; one that comes after finds it
// claimed (see purge.go).
func (r *Repo) ClaimPackDeleted(ctx context.Context, pack string, beforeMs int64) ([]int64, error) {
	var claimed []int64
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, r.claimPackSQL(), pack, string(Deleted), beforeMs)
		if err != nil {
			return err
		}
		claimed, err = scanIDs(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim the deleted streams of pack %s for removal: %w", pack, err)
	}
	return claimed, nil
}

// PackMove is where a staying stream's bytes are in its pack: read from
// PackStaying (ID, Offset, Size), and then where the compaction copied
// them to (NewOffset).
type PackMove struct {
	ID        int64
	Offset    int64
	Size      int64
	NewOffset int64
}

// PackStaying lists the streams of pack that no purge has claimed, by
// offset.
func (r *Repo) PackStaying(ctx context.Context, pack string) ([]PackMove, error) {
	ms, err := queryAll(ctx, r.db, func(s rowScanner) (PackMove, error) {
		var m PackMove
		return m, s.Scan(&m.ID, &m.Offset, &m.Size)
	}, `SELECT id, pack_offset, file_size FROM streams`+r.indexedBy("streams_pack")+` WHERE `+inPackSQL+
		` AND NOT (status = $2 AND status_ms < 0) ORDER BY pack_offset, id`, pack, string(Deleted))
	if err != nil {
		return nil, fmt.Errorf("list the staying streams of pack %s: %w", pack, err)
	}
	return ms, nil
}

// AddPackRemoval records that node's pack file may be left on disk, to be
// removed once no row names it.
func (r *Repo) AddPackRemoval(ctx context.Context, node, pack string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO pack_removals (pack, node, create_ms) VALUES ($1, $2, $3)`, pack, node, nowMs())
		return err
	})
	if err != nil {
		return fmt.Errorf("record pack %s for removal: %w", pack, err)
	}
	return nil
}

// PackRemovals lists node's recorded pack removals.
func (r *Repo) PackRemovals(ctx context.Context, node string) ([]string, error) {
	ps, err := queryAll(ctx, r.db, func(s rowScanner) (string, error) {
		var p string
		return p, s.Scan(&p)
	}, `SELECT pack FROM pack_removals WHERE node = $1 ORDER BY pack`, node)
	if err != nil {
		return nil, fmt.Errorf("list the packs of node %q to remove: %w", node, err)
	}
	return ps, nil
}

// DonePackRemoval forgets a recorded pack removal: its file is gone (or
// named by rows, and kept).
func (r *Repo) DonePackRemoval(ctx context.Context, pack string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM pack_removals WHERE pack = $1`, pack)
		return err
	})
	if err != nil {
		return fmt.Errorf("forget the removal of pack %s: %w", pack, err)
	}
	return nil
}

// ErrPackChanged is returned by CompactPack, which then changed nothing,
// when the old pack's rows are not those the compaction copied.
var ErrPackChanged = errors.New("the rows of the pack changed during its compaction")

// CompactPack ends the compaction of node's pack old into newPack (""
// when no stream stays), in one transaction: each staying row (moves)
// that still names old is repointed to newPack at its NewOffset, the
// claimed rows (purge: DELETED, and claimed) are deleted (and, by cascade,
// their receipt ids), and the removal recorded for newPack becomes one
// for old. If afterwards any row still names old (one the compaction did
// not copy), or a staying row no longer named it, or newPack's recorded
// removal is gone (carried out by another start of the node: the file
// may be gone too), nothing is changed and ErrPackChanged is returned.
func (r *Repo) CompactPack(ctx context.Context, node, old, newPack string, moves []PackMove, purge []int64) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		// Set-based, a chunk of rows a statement: a pack may hold tens of
		// thousands of streams, and a statement a row held the database's
		// writer (SQLite) for most of a second, the rows' locks
		// (PostgreSQL) for seconds.
		for done := 0; done < len(moves); {
			chunk := moves[done:min(len(moves), done+compactChunk)]
			pairs := make([][2]int64, len(chunk))
			for i, m := range chunk {
				pairs[i] = [2]int64{m.ID, m.NewOffset}
			}
			js, err := json.Marshal(pairs)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, r.repointSQL(), newPack, old, string(js))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != int64(len(chunk)) {
				return fmt.Errorf("%d of %d staying rows still in the pack: %w", n, len(chunk), ErrPackChanged)
			}
			done += len(chunk)
		}
		// The claimed rows: only this purge claims this node's rows, so
		// they are those of purge.
		res, err := tx.ExecContext(ctx, `DELETE FROM streams`+r.indexedBy("streams_pack")+` WHERE `+inPackSQL+
			` AND status = $2 AND status_ms < 0`, old, string(Deleted))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(purge)) {
			return fmt.Errorf("%d claimed rows in the pack, not %d: %w", n, len(purge), ErrPackChanged)
		}
		var left int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM streams`+r.indexedBy("streams_pack")+` WHERE `+inPackSQL, old).Scan(&left); err != nil {
			return err
		}
		if left > 0 {
			return fmt.Errorf("%d rows left: %w", left, ErrPackChanged)
		}
		if newPack != "" {
			// The new pack's recorded removal must still be there: if
			// another start of this node (a server that took over the
			// node's lock) carried it out, the file may be gone.
			res, err := tx.ExecContext(ctx, `DELETE FROM pack_removals WHERE pack = $1 AND node = $2`, newPack, node)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				return fmt.Errorf("the new pack's recorded removal is gone (carried out by another start of the node?): %w", ErrPackChanged)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO pack_removals (pack, node, create_ms) VALUES ($1, $2, $3) ON CONFLICT (pack) DO NOTHING`, old, node, nowMs())
		return err
	})
	if err != nil {
		return fmt.Errorf("compact pack %s into %q: %w", old, newPack, err)
	}
	return nil
}

// compactChunk is how many rows one statement of CompactPack repoints.
const compactChunk = 5000

// repointSQL moves the rows of the JSON list $3 of [id, offset] that are
// in pack $2 to pack $1 at their offsets: each found by id.
func (r *Repo) repointSQL() string {
	if r.engine == enginePostgres {
		return `UPDATE streams SET pack = $1, pack_offset = m.off
		FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS off FROM json_array_elements($3::json) AS e) AS m
		WHERE streams.id = m.id AND streams.pack = $2`
	}
	return `UPDATE streams SET pack = $1, pack_offset = m.off
		FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS off FROM json_each($3)) AS m
		WHERE streams.id = m.id AND streams.pack = $2`
}
