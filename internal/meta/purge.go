package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weirhq/weir/internal/streamquery"
)

// A stream deleted through the API stays restorable until the main
// service's purge removes it for good (store.deletePurgeAge). The purge
// first claims the rows it is about to remove, in a transaction that also
// checks they may go: it makes their status_ms negative (-1 - status_ms,
// so the deletion time can still be read back; scanStream does). Only
// then does it remove their files, and then their rows. A restore changes
// only DELETED rows whose status_ms is not negative, so it either commits
// before the claim (and the purge then leaves that stream alone: its pack
// stays, or is compacted with the stream among those copied, see
// compact.go) or finds the stream claimed and leaves it: there is never an
// UNLOCKED row whose file is gone. A purge cut short (a crash, a failed
// removal) leaves claimed rows, which stay unrestorable and which the
// next purge, finding them again, finishes. The status_ms column needs
// no migration for this, and the index streams_status_ms (status,
// status_ms) finds both the aged and the claimed rows.

// restorableSQL is the condition a DELETED row must also meet to be
// restored: no purge has claimed it.
const restorableSQL = `status_ms >= 0`

// claimSQL claims the rows an UPDATE matches (those claimed already stay).
const claimSQL = `status_ms = CASE WHEN status_ms < 0 THEN status_ms ELSE -1 - status_ms END`

// ErrPurging is wrapped by a restore of a stream that a purge has claimed:
// it is being removed for good (and wraps ErrNotFound too: it is as good
// as gone).
var ErrPurging = fmt.Errorf("stream is being removed for good (deleted longer than store.deletePurgeAge): %w", ErrNotFound)

// PurgeCursor is where DeletedStreamsBefore's next page starts: after the
// row with this (as stored) status time and id.
type PurgeCursor struct {
	StatusMs int64
	ID       int64
}

// PurgeStart is the cursor of the first page.
var PurgeStart = PurgeCursor{StatusMs: -1 << 63}

// DeletedStreamsBefore lists up to limit of node's streams that became
// DELETED before beforeMs (status time), and those a purge has claimed,
// after cursor, ordered by status time then id; it returns the cursor of
// the next page. The streams carry what removing their data takes (ID,
// Feed, Type, Status, CreateMs, StatusMs, Node, FileSize and Pack), not
// attributes. Only node's streams: on PostgreSQL several servers share
// the database, each with its own files, and each removes its own.
func (r *Repo) DeletedStreamsBefore(ctx context.Context, node string, beforeMs int64, after PurgeCursor, limit int) ([]Stream, PurgeCursor, error) {
	next := after
	ss, err := queryAll(ctx, r.db, func(rs rowScanner) (Stream, error) {
		var s Stream
		var status string
		err := rs.Scan(&s.ID, &s.Feed, &s.Type, &status, &s.CreateMs, &s.StatusMs, &s.Node, &s.FileSize, &s.Pack)
		s.Status = Status(status)
		next = PurgeCursor{StatusMs: s.StatusMs, ID: s.ID}
		if s.StatusMs < 0 {
			s.StatusMs = -1 - s.StatusMs
		}
		return s, err
	}, `SELECT id, feed, type, status, create_ms, status_ms, node, file_size, pack FROM streams
		WHERE status = $1 AND status_ms < $2 AND status_ms >= $3 AND (status_ms > $3 OR id > $4) AND node = $5
		ORDER BY status_ms, id LIMIT $6`, string(Deleted), beforeMs, after.StatusMs, after.ID, node, limit)
	if err != nil {
		return nil, after, fmt.Errorf("list streams of node %q deleted before %d: %w", node, beforeMs, err)
	}
	return ss, next, nil
}

// ClaimPurge claims for a purge node's streams among ids that have files
// of their own and are DELETED since before beforeMs (or claimed already),
// and returns their ids: from now on they cannot be restored, and their
// files may be removed.
func (r *Repo) ClaimPurge(ctx context.Context, node string, ids []int64, beforeMs int64) ([]int64, error) {
	var claimed []int64
	if len(ids) == 0 {
		return nil, nil
	}
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		args := []any{string(Deleted), beforeMs, node, streamquery.JSONList(ids)}
		rows, err := tx.QueryContext(ctx, r.claimPurgeSQL(r.placeholder(args, true)), args...)
		if err != nil {
			return err
		}
		claimed, err = scanIDs(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim %d deleted streams for removal: %w", len(ids), err)
	}
	return claimed, nil
}

// errPackLive rolls a pack's claim back.
var errPackLive = errors.New("a stream in the pack is not to be purged")

// ClaimPack claims for a purge every stream in a pack, and returns their
// ids, if all of them are DELETED since before beforeMs (or claimed
// already); otherwise it claims none and returns nil: a pack goes whole,
// with the last of its streams. The claim and the check are one
// transaction: a restore that commits first makes the check fail, and one
// that comes after finds its stream claimed.
func (r *Repo) ClaimPack(ctx context.Context, pack string, beforeMs int64) ([]int64, error) {
	// Most packs that still hold a live or a recently deleted stream are
	// told apart by a read, without a write transaction.
	var left int64
	if err := r.db.QueryRowContext(ctx, r.packKeepSQL(), pack, string(Deleted), beforeMs).Scan(&left); err != nil {
		return nil, fmt.Errorf("count the streams of pack %s to keep: %w", pack, err)
	}
	if left > 0 {
		return nil, nil
	}
	var claimed []int64
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		// The claim first: on PostgreSQL it locks the rows it changes, so
		// that a restore of one of them waits for this transaction and
		// then finds it claimed, and one that committed before is counted
		// below (READ COMMITTED: each statement sees what committed before it).
		rows, err := tx.QueryContext(ctx, r.claimPackSQL(), pack, string(Deleted), beforeMs)
		if err != nil {
			return err
		}
		if claimed, err = scanIDs(rows); err != nil {
			return err
		}
		var left int64
		if err := tx.QueryRowContext(ctx, r.packKeepSQL(), pack, string(Deleted), 0).Scan(&left); err != nil {
			return err
		}
		if left > 0 {
			return errPackLive
		}
		return nil
	})
	if errors.Is(err, errPackLive) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim the streams of pack %s for removal: %w", pack, err)
	}
	return claimed, nil
}

// The purge's statements must not walk the table, nor every DELETED row:
// ClaimPack runs for each pack a batch names, under the store's pack lock
// (posts into packs wait) and, but for its first count, on the database's
// writer; ClaimPurge for each batch on the writer. SQLite, left to itself,
// scanned the whole table for a pack's rows (a plain pack = $1 does not tell
// it that the partial index streams_pack, WHERE pack <> '', holds them)
// and, for the claims, walked every entry of streams_status_ms older than
// the cutoff: after a backlog, most of the table, for each pack and each
// batch (a million rows: half a second a pack, a purge of the backlog
// holding up posts for tens of minutes).

// inPackSQL selects pack $1's rows through streams_pack.
const inPackSQL = `pack = $1 AND pack <> ''`

// packKeepSQL counts pack $1's rows that are not DELETED before $3 ($2 is
// DELETED).
func (r *Repo) packKeepSQL() string {
	return `SELECT COUNT(*) FROM streams` + r.indexedBy("streams_pack") + ` WHERE ` + inPackSQL + ` AND NOT (status = $2 AND status_ms < $3)`
}

// claimPackSQL claims pack $1's rows DELETED ($2) before $3.
func (r *Repo) claimPackSQL() string {
	return `UPDATE streams` + r.indexedBy("streams_pack") + ` SET ` + claimSQL + `
		WHERE ` + inPackSQL + ` AND status = $2 AND status_ms < $3 RETURNING id`
}

// claimPurgeSQL claims the rows of ids (the JSON list ph) that are DELETED
// ($1) before $2, of node $3 and in no pack: found by id (SQLite: by rowid).
func (r *Repo) claimPurgeSQL(ph string) string {
	notIndexed := ""
	if r.engine == engineSQLite {
		notIndexed = " NOT INDEXED"
	}
	return `UPDATE streams` + notIndexed + ` SET ` + claimSQL + `
		WHERE status = $1 AND status_ms < $2 AND node = $3 AND pack = '' AND ` +
		r.dialect().InJSON("id", ph, true) + ` RETURNING id`
}

// indexedBy makes SQLite use index for the table just named.
func (r *Repo) indexedBy(index string) string {
	if r.engine == engineSQLite {
		return " INDEXED BY " + index
	}
	return ""
}

func scanIDs(rows *sql.Rows) ([]int64, error) {
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
