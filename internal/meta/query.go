package meta

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/weirhq/weir/internal/streamquery"
)

// DefaultFindLimit is the page size of FindStreams when none is given.
const DefaultFindLimit = 100

// bulkChunk is how many streams one transaction of a bulk status change
// touches: small enough that the write lock (on SQLite, the whole database)
// is held for milliseconds, so posts keep committing during a large change.
const bulkChunk = 1000

// StreamQuery selects, sorts and pages streams for FindStreams.
type StreamQuery struct {
	Expr *streamquery.Expr // nil: every stream (any status)
	// FeedIn narrows to these feeds, as StreamFilter.FeedIn: nil no
	// narrowing, an empty non-nil slice matches nothing.
	FeedIn []string
	Sort   []streamquery.SortKey // none: by id ascending
	Offset int64
	Limit  int // 0: DefaultFindLimit
	// Count asks for the exact total even when that costs a count of every
	// match; without it the total is exact only when the page reached the
	// end of the matches.
	Count bool
}

// StreamPage is one page of FindStreams.
type StreamPage struct {
	Streams []Stream
	// Total is the number of matches when Exact; otherwise a lower bound
	// (there is at least one match after this page).
	Total int64
	Exact bool
}

func (r *Repo) dialect() streamquery.Dialect {
	if r.engine == enginePostgres {
		return streamquery.Postgres
	}
	return streamquery.SQLite
}

// placeholder is the next $n after args; json types it for InJSON.
func (r *Repo) placeholder(args []any, json bool) string {
	ph := "$" + strconv.Itoa(len(args))
	if json && r.engine == enginePostgres {
		ph += "::json"
	}
	return ph
}

// selection is the WHERE condition for an expression narrowed to feedIn.
func (r *Repo) selection(e *streamquery.Expr, feedIn []string, args []any) (string, []any) {
	if feedIn != nil && len(feedIn) == 0 {
		return "1 = 0", args
	}
	where, args := e.Where(r.dialect(), args)
	if feedIn != nil {
		// One JSON parameter however many feeds the caller may see.
		args = append(args, streamquery.JSONList(feedIn))
		where = "(" + where + ") AND " + r.dialect().InJSON("feed", r.placeholder(args, true), false)
	}
	return where, args
}

// FindStreams returns one page of the streams matching q. It fetches one
// row more than the page to learn whether more follow, so the total is
// exact without a count whenever the page reaches the end; q.Count (or a
// page past the end, where the client needs to find its way back) counts
// every match.
func (r *Repo) FindStreams(ctx context.Context, q StreamQuery) (StreamPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultFindLimit
	}
	if q.Offset < 0 {
		return StreamPage{}, fmt.Errorf("find streams: negative offset %d", q.Offset)
	}
	where, args := r.selection(q.Expr, q.FeedIn, nil)
	stmt := `SELECT ` + streamColumns + ` FROM streams WHERE ` + where +
		` ORDER BY ` + streamquery.OrderBy(r.dialect(), q.Sort)
	args = append(args, limit+1)
	stmt += ` LIMIT ` + r.placeholder(args, false)
	args = append(args, q.Offset)
	stmt += ` OFFSET ` + r.placeholder(args, false)
	rows, err := r.queryStreams(ctx, stmt, args...)
	if err != nil {
		return StreamPage{}, fmt.Errorf("find streams: %w", err)
	}
	page := StreamPage{Streams: rows}
	switch {
	case len(rows) > limit:
		page.Streams = rows[:limit]
		page.Total = q.Offset + int64(len(rows))
	case len(rows) > 0 || q.Offset == 0:
		page.Total, page.Exact = q.Offset+int64(len(rows)), true
	}
	if !page.Exact && (q.Count || len(rows) == 0) {
		n, err := r.countWhere(ctx, where, args[:len(args)-2])
		if err != nil {
			return StreamPage{}, fmt.Errorf("find streams: %w", err)
		}
		page.Total, page.Exact = n, true
	}
	return page, nil
}

func (r *Repo) countWhere(ctx context.Context, where string, args []any) (int64, error) {
	var n int64
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM streams WHERE `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return n, nil
}

// StatusChange is the outcome of a bulk status change.
type StatusChange struct {
	// Matched counts the selected streams that are complete (UNLOCKED or
	// DELETED); LOCKED streams are still being written and never change.
	Matched int64
	// Changed counts those whose status changed (for a dry run: would
	// change now), i.e. the matched ones that were in the other status.
	Changed int64
}

// bulkFrom is the status a bulk change to `to` moves streams from.
func bulkFrom(to Status) (Status, error) {
	switch to {
	case Deleted:
		return Unlocked, nil
	case Unlocked:
		return Deleted, nil
	}
	return "", fmt.Errorf("bulk status change to %s: only UNLOCKED (restore) and DELETED (delete) are possible", to)
}

// CountStatusChange is the dry run of UpdateStatusWhere: what it would
// match and change now, changing nothing.
func (r *Repo) CountStatusChange(ctx context.Context, e *streamquery.Expr, feedIn []string, to Status) (StatusChange, error) {
	from, err := bulkFrom(to)
	if err != nil {
		return StatusChange{}, err
	}
	where, args := r.selection(e, feedIn, []any{string(from), string(Locked)})
	var c StatusChange
	err = r.db.QueryRowContext(ctx, `SELECT count(*), COALESCE(sum(CASE WHEN status = $1 AND `+restorableSQL+` THEN 1 ELSE 0 END), 0)
		FROM streams WHERE status <> $2 AND `+where, args...).Scan(&c.Matched, &c.Changed)
	if err != nil {
		return StatusChange{}, fmt.Errorf("count streams to set %s: %w", to, err)
	}
	return c, nil
}

// UpdateStatusWhere moves every complete stream matching e in feedIn to
// status to (DELETED: a logical delete of UNLOCKED streams; UNLOCKED: a
// restore of DELETED ones), stamping the status time.
//
// It acts on the streams that exist when it starts (streams created during
// the change are left alone) in chunks of bulkChunk by id, each its own
// short transaction, so a change of millions of streams never holds the
// write lock for long. Each chunk re-checks the status it changes from, so
// a stream changed concurrently by someone else is not counted twice. On
// error, the chunks already committed stay changed; the counts returned
// say how far it got.
func (r *Repo) UpdateStatusWhere(ctx context.Context, e *streamquery.Expr, feedIn []string, to Status) (StatusChange, error) {
	var c StatusChange
	from, err := bulkFrom(to)
	if err != nil {
		return c, err
	}
	var maxID int64
	if err := r.db.QueryRowContext(ctx, `SELECT COALESCE(max(id), 0) FROM streams`).Scan(&maxID); err != nil {
		return c, fmt.Errorf("set streams %s: %w", to, err)
	}
	where, args := r.selection(e, feedIn, []any{string(Locked), maxID, int64(0)})
	lastArg := 2 // index in args of the id the next chunk starts after
	args = append(args, bulkChunk)
	find := `SELECT id, status FROM streams WHERE status <> $1 AND id <= $2 AND id > $3 AND ` + where +
		` ORDER BY id LIMIT ` + r.placeholder(args, false)
	// A stream a purge has claimed is not restored (see purge.go).
	update := `UPDATE streams SET status = $1, status_ms = $2 WHERE status = $3 AND ` + restorableSQL + ` AND ` +
		r.dialect().InJSON("id", r.placeholder(make([]any, 4), true), true)
	for {
		// Read outside the write transaction: finding the chunk may scan
		// many rows (attribute terms), and readers do not block writers.
		ids, change, err := r.nextChunk(ctx, find, args, from)
		if err != nil {
			return c, fmt.Errorf("set streams %s (after %d changed): %w", to, c.Changed, err)
		}
		if len(ids) == 0 {
			return c, nil
		}
		c.Matched += int64(len(ids))
		if len(change) > 0 {
			var n int64
			err := r.withTx(ctx, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, update, string(to), nowMs(), string(from), streamquery.JSONList(change))
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return c, fmt.Errorf("set streams %s (after %d changed): %w", to, c.Changed, err)
			}
			c.Changed += n
		}
		if len(ids) < bulkChunk {
			return c, nil
		}
		args[lastArg] = ids[len(ids)-1]
	}
}

// nextChunk returns the ids of the next chunk and those of them in status
// from.
func (r *Repo) nextChunk(ctx context.Context, find string, args []any, from Status) (ids, change []int64, err error) {
	rows, err := r.db.QueryContext(ctx, find, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     int64
			status string
		)
		if err := rows.Scan(&id, &status); err != nil {
			return nil, nil, err
		}
		ids = append(ids, id)
		if Status(status) == from {
			change = append(change, id)
		}
	}
	return ids, change, rows.Err()
}
