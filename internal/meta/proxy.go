package meta

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Aggregate is a set of streams of one feed and type that a proxy forwards
// together as one zip.
type Aggregate struct {
	ID       int64
	Feed     string
	Type     string
	GUID     string // sent with every attempt, so a downstream can tell a resend
	Open     bool   // streams may still be added
	Items    int    // parts (zip entry groups) in it
	Bytes    int64  // uncompressed data bytes in it
	CreateMs int64
	CloseMs  int64
}

// AggregateItem puts a stream into an aggregate (by pointer: the aggregate
// may be new in the same batch).
type AggregateItem struct {
	Aggregate *Aggregate
	StreamID  int64
}

// AggregationBatch is one transaction of the aggregator: new aggregates,
// streams put into aggregates, counters saved, and aggregates closed (each
// queued for every destination).
type AggregationBatch struct {
	New          []*Aggregate // inserted; ID set on commit
	Items        []AggregateItem
	Save         []*Aggregate // items and bytes stored
	Close        []*Aggregate // closed at CloseMs and queued for Destinations
	Destinations []string
}

// ForwardState is where an aggregate stands with one destination.
type ForwardState string

const (
	ForwardQueued ForwardState = "QUEUED" // to send when NextMs has passed (Attempts > 0: retrying)
	ForwardFailed ForwardState = "FAILED" // in the failure area until replayed
)

// Forward is an aggregate that has still to reach one destination.
type Forward struct {
	Aggregate
	Destination string
	State       ForwardState
	Attempts    int
	FirstMs     int64 // first attempt
	LastMs      int64 // last attempt
	NextMs      int64
	LastStatus  int    // last datafeed status code (0: none)
	Error       string // last error
	ErrorLog    string // one line per failed attempt, oldest first (bounded)
}

const aggregateColumns = `a.id, a.feed, a.type, a.guid, a.open, a.items, a.bytes, a.create_ms, a.close_ms`
const forwardColumns = aggregateColumns + `, f.destination, f.state, f.attempts, f.first_ms, f.last_ms, f.next_ms, f.last_status, f.error, f.error_log`

func scanAggregate(s rowScanner) (Aggregate, error) {
	var a Aggregate
	var open int
	err := s.Scan(&a.ID, &a.Feed, &a.Type, &a.GUID, &open, &a.Items, &a.Bytes, &a.CreateMs, &a.CloseMs)
	a.Open = open != 0
	return a, err
}

func scanForward(s rowScanner) (Forward, error) {
	var f Forward
	var open int
	var state string
	err := s.Scan(&f.ID, &f.Feed, &f.Type, &f.GUID, &open, &f.Items, &f.Bytes, &f.CreateMs, &f.CloseMs,
		&f.Destination, &state, &f.Attempts, &f.FirstMs, &f.LastMs, &f.NextMs, &f.LastStatus, &f.Error, &f.ErrorLog)
	f.Open = open != 0
	f.State = ForwardState(state)
	return f, err
}

// UnaggregatedStreams lists complete streams that are in no aggregate yet,
// oldest first, among those that became complete at or after sinceMs. It
// returns what aggregating them takes (ID, Feed, Type, Status, Parts and
// RawSize), without attributes: decoding those was a twentieth of a busy
// proxy's CPU.
func (r *Repo) UnaggregatedStreams(ctx context.Context, sinceMs int64, limit int) ([]Stream, error) {
	ss, err := queryAll(ctx, r.db, func(rs rowScanner) (Stream, error) {
		var s Stream
		err := rs.Scan(&s.ID, &s.Feed, &s.Type, &s.Status, &s.Parts, &s.RawSize)
		return s, err
	}, `SELECT s.id, s.feed, s.type, s.status, s.parts, s.raw_size FROM streams s
		WHERE s.status = $1 AND s.status_ms >= $2
		AND NOT EXISTS (SELECT 1 FROM proxy_items i WHERE i.stream_id = s.id)
		ORDER BY s.id LIMIT $3`, string(Unlocked), sinceMs, limit)
	if err != nil {
		return nil, fmt.Errorf("list streams waiting for aggregation: %w", err)
	}
	return ss, nil
}

// OpenAggregates lists the aggregates that can still take streams.
func (r *Repo) OpenAggregates(ctx context.Context) ([]Aggregate, error) {
	as, err := queryAll(ctx, r.db, scanAggregate, `SELECT `+aggregateColumns+` FROM proxy_aggregates a WHERE a.open = 1 ORDER BY a.id`)
	if err != nil {
		return nil, fmt.Errorf("list open aggregates: %w", err)
	}
	return as, nil
}

// ApplyAggregation commits an aggregator batch in one transaction.
func (r *Repo) ApplyAggregation(ctx context.Context, b *AggregationBatch) error {
	ids := make([]int64, len(b.New))
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		for i, a := range b.New {
			if err := tx.QueryRowContext(ctx, `INSERT INTO proxy_aggregates (feed, type, guid, open, items, bytes, create_ms, close_ms)
				VALUES ($1, $2, $3, 1, $4, $5, $6, 0) RETURNING id`, a.Feed, a.Type, a.GUID, a.Items, a.Bytes, a.CreateMs).Scan(&ids[i]); err != nil {
				return fmt.Errorf("create aggregate for feed %q: %w", a.Feed, err)
			}
		}
		id := func(a *Aggregate) int64 {
			for i, n := range b.New {
				if n == a {
					return ids[i]
				}
			}
			return a.ID
		}
		// Many items per statement: this transaction runs on a proxy's
		// only writer, between commits of received posts.
		args := make([]any, 0, 2*min(len(b.Items), itemsPerInsert))
		for rest := b.Items; len(rest) > 0; {
			chunk := rest[:min(len(rest), itemsPerInsert)]
			rest = rest[len(chunk):]
			args = args[:0]
			for _, it := range chunk {
				args = append(args, it.StreamID, id(it.Aggregate))
			}
			if _, err := tx.ExecContext(ctx, insertItemsSQL(len(chunk), r.namelessParams()), args...); err != nil {
				return fmt.Errorf("add streams %d.. to aggregates: %w", chunk[0].StreamID, err)
			}
		}
		for _, a := range b.Save {
			if _, err := tx.ExecContext(ctx, `UPDATE proxy_aggregates SET items = $1, bytes = $2 WHERE id = $3`, a.Items, a.Bytes, id(a)); err != nil {
				return fmt.Errorf("update aggregate %d: %w", id(a), err)
			}
		}
		for _, a := range b.Close {
			if err := expectOne(tx.ExecContext(ctx, `UPDATE proxy_aggregates SET open = 0, close_ms = $1, items = $2, bytes = $3 WHERE id = $4 AND open = 1`,
				a.CloseMs, a.Items, a.Bytes, id(a))); err != nil {
				return fmt.Errorf("close aggregate %d: %w", id(a), err)
			}
			for _, d := range b.Destinations {
				if _, err := tx.ExecContext(ctx, `INSERT INTO proxy_forwards (aggregate_id, destination, state, next_ms) VALUES ($1, $2, $3, $4)`,
					id(a), d, string(ForwardQueued), a.CloseMs); err != nil {
					return fmt.Errorf("queue aggregate %d for %q: %w", id(a), d, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, a := range b.New {
		a.ID = ids[i]
	}
	for _, a := range b.Close {
		a.Open = false
	}
	return nil
}

// itemsPerInsert is how many aggregate items one INSERT adds.
const itemsPerInsert = 128

// insertItemsSQL adds n aggregate items: (stream_id, aggregate_id) pairs.
func insertItemsSQL(n int, nameless bool) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO proxy_items (stream_id, aggregate_id) VALUES `)
	valueRows(&b, nameless, n, 2)
	return b.String()
}

// DueForwards lists up to limit aggregates queued for destination whose
// time has come (NextMs <= nowMs), the longest-waiting first, leaving out
// those in skip (being sent already).
func (r *Repo) DueForwards(ctx context.Context, destination string, nowMs int64, skip []int64, limit int) ([]Forward, error) {
	args := []any{destination, string(ForwardQueued), nowMs, limit}
	not := notIn("f.aggregate_id", skip, &args)
	fs, err := queryAll(ctx, r.db, scanForward, `SELECT `+forwardColumns+`
		FROM proxy_forwards f JOIN proxy_aggregates a ON a.id = f.aggregate_id
		WHERE f.destination = $1 AND f.state = $2 AND f.next_ms <= $3`+not+`
		ORDER BY f.next_ms, f.aggregate_id LIMIT $4`, args...)
	if err != nil {
		return nil, fmt.Errorf("list forwards due for %q: %w", destination, err)
	}
	return fs, nil
}

// PullForwardsBack makes due at nowMs the queued aggregates for
// destination that were scheduled at a time the clock has not reached:
// scheduled when it read later (it has stepped back since, or this start's
// clock is earlier than the last run's), they would otherwise wait as long
// as the step. An aggregate not yet tried was scheduled when it closed (at
// its next_ms), a retry at its last attempt (last_ms). It returns how many
// it pulled back.
func (r *Repo) PullForwardsBack(ctx context.Context, destination string, nowMs int64) (int64, error) {
	res, err := r.db.ExecContext(ctx, `UPDATE proxy_forwards SET next_ms = $1
		WHERE destination = $2 AND state = $3 AND next_ms > $1 AND (attempts = 0 OR last_ms > $1)`,
		nowMs, destination, string(ForwardQueued))
	if err != nil {
		return 0, fmt.Errorf("queue of %q after the clock stepped back: %w", destination, err)
	}
	n, err := res.RowsAffected()
	return n, err
}

// NextForwardMs is when the next queued aggregate for destination is due,
// leaving out the aggregates in skip (ok false when none is queued). The
// forwarder passes those it is sending: they are still queued until their
// outcome is recorded, and counting them would have it poll every few
// milliseconds for as long as a send takes.
func (r *Repo) NextForwardMs(ctx context.Context, destination string, skip []int64) (ms int64, ok bool, err error) {
	var v sql.NullInt64
	args := []any{destination, string(ForwardQueued)}
	not := notIn("aggregate_id", skip, &args)
	if err := r.db.QueryRowContext(ctx, `SELECT MIN(next_ms) FROM proxy_forwards WHERE destination = $1 AND state = $2`+not,
		args...).Scan(&v); err != nil {
		return 0, false, fmt.Errorf("next forward for %q: %w", destination, err)
	}
	return v.Int64, v.Valid, nil
}

// notIn is the condition " AND column NOT IN (...)" with a placeholder per
// id appended to args, or "" when there are none.
func notIn(column string, ids []int64, args *[]any) string {
	if len(ids) == 0 {
		return ""
	}
	ph := make([]string, len(ids))
	for i, id := range ids {
		*args = append(*args, id)
		ph[i] = fmt.Sprintf("$%d", len(*args))
	}
	return " AND " + column + " NOT IN (" + strings.Join(ph, ", ") + ")"
}

// AggregateStreams lists the streams of an aggregate in the order they
// were added.
func (r *Repo) AggregateStreams(ctx context.Context, aggregateID int64) ([]Stream, error) {
	ss, err := r.queryStreams(ctx, `SELECT `+prefixed("s.", streamColumns)+` FROM streams s
		JOIN proxy_items i ON i.stream_id = s.id WHERE i.aggregate_id = $1 ORDER BY s.id`, aggregateID)
	if err != nil {
		return nil, fmt.Errorf("list streams of aggregate %d: %w", aggregateID, err)
	}
	return ss, nil
}

func prefixed(p, columns string) string {
	cols := strings.Split(columns, ", ")
	for i := range cols {
		cols[i] = p + cols[i]
	}
	return strings.Join(cols, ", ")
}

// ForwardSent records that an aggregate reached a destination. When it was
// the last destination, the aggregate is removed and its streams marked
// DELETED (in the same transaction) and returned, for the caller to remove
// their files and then PurgeStreams (without attributes: see
// removeAggregate).
func (r *Repo) ForwardSent(ctx context.Context, aggregateID int64, destination string) (done []Stream, err error) {
	err = r.withTx(ctx, func(tx *sql.Tx) error {
		// Two destinations finishing one aggregate at once must not both
		// count the other's forward as left: on PostgreSQL (READ
		// COMMITTED) the aggregate's row lock makes the second wait for the
		// first's commit. SQLite transactions are serial already.
		if r.engine == enginePostgres {
			if _, err := tx.ExecContext(ctx, `SELECT id FROM proxy_aggregates WHERE id = $1 FOR UPDATE`, aggregateID); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM proxy_forwards WHERE aggregate_id = $1 AND destination = $2`, aggregateID, destination); err != nil {
			return err
		}
		var left int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM proxy_forwards WHERE aggregate_id = $1`, aggregateID).Scan(&left); err != nil {
			return err
		}
		if left > 0 {
			return nil
		}
		done, err = removeAggregate(ctx, tx, aggregateID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record aggregate %d sent to %q: %w", aggregateID, destination, err)
	}
	return done, nil
}

// removeAggregate deletes a closed aggregate and marks its streams DELETED.
// The streams it returns carry what removing their data takes (ID, Feed,
// Type, CreateMs, Pack) and no attributes: decoding those for a thousand
// streams took most of this transaction's time, on the proxy's only
// writer, between commits of received posts.
func removeAggregate(ctx context.Context, tx *sql.Tx, aggregateID int64) ([]Stream, error) {
	rows, err := tx.QueryContext(ctx, `SELECT s.id, s.feed, s.type, s.create_ms, s.pack FROM streams s
		JOIN proxy_items i ON i.stream_id = s.id WHERE i.aggregate_id = $1 ORDER BY s.id`, aggregateID)
	if err != nil {
		return nil, err
	}
	var done []Stream
	for rows.Next() {
		var s Stream
		if err := rows.Scan(&s.ID, &s.Feed, &s.Type, &s.CreateMs, &s.Pack); err != nil {
			rows.Close()
			return nil, err
		}
		done = append(done, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// One statement for the whole aggregate (up to maxItems streams), not
	// one per stream: this runs on the proxy's only writer, between commits
	// of received posts.
	now := nowMs()
	if _, err := tx.ExecContext(ctx, `UPDATE streams SET status = $1, status_ms = $2
		WHERE id IN (SELECT stream_id FROM proxy_items WHERE aggregate_id = $3)`, string(Deleted), now, aggregateID); err != nil {
		return nil, err
	}
	for i := range done {
		done[i].Status = Deleted
		done[i].StatusMs = now
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM proxy_items WHERE aggregate_id = $1`, aggregateID); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM proxy_aggregates WHERE id = $1`, aggregateID); err != nil {
		return nil, err
	}
	return done, nil
}

// FinishedAggregates removes closed aggregates that no destination waits
// for any more (left by a crash between a send and its bookkeeping, or by
// a destination removed from the configuration is NOT one of them: those
// keep their rows) and returns their streams, marked DELETED.
func (r *Repo) FinishedAggregates(ctx context.Context) ([]Stream, error) {
	var done []Stream
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT a.id FROM proxy_aggregates a WHERE a.open = 0
			AND NOT EXISTS (SELECT 1 FROM proxy_forwards f WHERE f.aggregate_id = a.id)`)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			ss, err := removeAggregate(ctx, tx, id)
			if err != nil {
				return err
			}
			done = append(done, ss...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("remove finished aggregates: %w", err)
	}
	return done, nil
}

// DeletedStreams lists streams marked DELETED (whose files may still exist).
func (r *Repo) DeletedStreams(ctx context.Context, limit int) ([]Stream, error) {
	ss, err := r.queryStreams(ctx, `SELECT `+streamColumns+` FROM streams WHERE status = $1 ORDER BY id LIMIT $2`, string(Deleted), limit)
	if err != nil {
		return nil, fmt.Errorf("list deleted streams: %w", err)
	}
	return ss, nil
}

// PurgeStreams removes DELETED stream rows (their files already gone), in
// transactions of up to purgeChunk rows: on a proxy they take turns on
// the only writer with commits of received posts, which must not wait for
// a whole aggregate's rows (a thousand rows and eight indexes took tens of
// milliseconds). A purge cut short is finished by the next one.
func (r *Repo) PurgeStreams(ctx context.Context, ids []int64) error {
	for done := 0; done < len(ids); {
		chunk := ids[done:min(len(ids), done+purgeChunk)]
		err := r.withTx(ctx, func(tx *sql.Tx) error {
			if r.engine == enginePostgres {
				_, err := tx.ExecContext(ctx, `DELETE FROM streams WHERE status = $1 AND id = ANY($2)`, string(Deleted), chunk)
				return err
			}
			args := make([]any, 0, 1+len(chunk))
			args = append(args, string(Deleted))
			for _, id := range chunk {
				args = append(args, id)
			}
			_, err := tx.ExecContext(ctx, sqlitePurgeSQL(len(chunk)), args...)
			return err
		})
		if err != nil {
			return fmt.Errorf("purge deleted streams (%d of %d purged): %w", done, len(ids), err)
		}
		done += len(chunk)
	}
	return nil
}

// purgeChunk is how many rows one purge transaction removes.
const purgeChunk = 250

// sqlitePurgeSQL deletes n DELETED streams by id. NOT INDEXED keeps SQLite
// on rowid lookups for the ids: otherwise it may walk every DELETED entry of
// streams_status_ms instead, which after a backlog is most of the table.
// Its parameters are nameless (status, then the ids), as valueRows says why.
func sqlitePurgeSQL(n int) string {
	var b strings.Builder
	b.WriteString(`DELETE FROM streams NOT INDEXED WHERE status = ? AND id IN (`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('?')
	}
	b.WriteByte(')')
	return b.String()
}

// maxErrorLog bounds the error log kept per forward.
const maxErrorLog = 16 << 10

// ForwardAttemptFailed records a failed attempt: f's Attempts, FirstMs,
// LastMs, NextMs, State, LastStatus and Error are stored and logLine is
// appended to its error log (the oldest lines are dropped beyond a bound).
func (r *Repo) ForwardAttemptFailed(ctx context.Context, f Forward, logLine string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		var log string
		if err := tx.QueryRowContext(ctx, `SELECT error_log FROM proxy_forwards WHERE aggregate_id = $1 AND destination = $2`,
			f.ID, f.Destination).Scan(&log); err != nil {
			if err == sql.ErrNoRows {
				return fmt.Errorf("aggregate %d for %q: %w", f.ID, f.Destination, ErrNotFound)
			}
			return err
		}
		if q := maxErrorLog / 8; len(logLine) > 2*q {
			// One line never crowds out the others (or itself): keep its
			// start (the status) and its end.
			logLine = logLine[:q] + " ... " + logLine[len(logLine)-q:]
		}
		// PostgreSQL stores only valid UTF-8, and a downstream's message
		// (or the cut above) may not be.
		logLine = strings.ToValidUTF8(logLine, "\uFFFD")
		f.Error = strings.ToValidUTF8(f.Error, "\uFFFD")
		log += logLine + "\n"
		if len(log) > maxErrorLog {
			log = log[len(log)-maxErrorLog:]
			if i := strings.IndexByte(log, '\n'); i >= 0 {
				log = log[i+1:]
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE proxy_forwards SET state = $1, attempts = $2, first_ms = $3, last_ms = $4,
			next_ms = $5, last_status = $6, error = $7, error_log = $8 WHERE aggregate_id = $9 AND destination = $10`,
			string(f.State), f.Attempts, f.FirstMs, f.LastMs, f.NextMs, f.LastStatus, f.Error, log, f.ID, f.Destination)
		return err
	})
	if err != nil {
		return fmt.Errorf("record failed attempt of aggregate %d for %q: %w", f.ID, f.Destination, err)
	}
	return nil
}

// SetAsideStream moves a stream of an aggregate that cannot be sent (its
// stored data is damaged or gone) into a new closed aggregate of its own
// (the old one's feed and type, guid), queued for every destination the old
// one still waits for, in their failure areas (FAILED after one attempt,
// errText its error and logLine its error log), in one transaction, so that
// the rest of the old aggregate can be sent. It returns the new aggregate's
// id, or 0 (and changes nothing) when the stream is no longer in that
// aggregate or no destination waits for it.
func (r *Repo) SetAsideStream(ctx context.Context, aggregateID, streamID int64, guid string, nowMs int64, errText, logLine string) (int64, error) {
	var id int64
	errText = strings.ToValidUTF8(errText, "\uFFFD")
	logLine = strings.ToValidUTF8(logLine, "\uFFFD")
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if r.engine == enginePostgres {
			// As ForwardSent: one change to an aggregate's forwards at a time.
			if _, err := tx.ExecContext(ctx, `SELECT id FROM proxy_aggregates WHERE id = $1 FOR UPDATE`, aggregateID); err != nil {
				return err
			}
		}
		var feed, typ string
		var parts int
		var raw int64
		err := tx.QueryRowContext(ctx, `SELECT a.feed, a.type, s.parts, s.raw_size FROM proxy_items i
			JOIN proxy_aggregates a ON a.id = i.aggregate_id JOIN streams s ON s.id = i.stream_id
			WHERE i.stream_id = $1 AND i.aggregate_id = $2`, streamID, aggregateID).Scan(&feed, &typ, &parts, &raw)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT destination FROM proxy_forwards WHERE aggregate_id = $1 ORDER BY destination`, aggregateID)
		if err != nil {
			return err
		}
		var dests []string
		for rows.Next() {
			var d string
			if err := rows.Scan(&d); err != nil {
				rows.Close()
				return err
			}
			dests = append(dests, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(dests) == 0 {
			return err
		}
		if err := tx.QueryRowContext(ctx, `INSERT INTO proxy_aggregates (feed, type, guid, open, items, bytes, create_ms, close_ms)
			VALUES ($1, $2, $3, 0, $4, $5, $6, $6) RETURNING id`, feed, typ, guid, parts, raw, nowMs).Scan(&id); err != nil {
			return err
		}
		if err := expectOne(tx.ExecContext(ctx, `UPDATE proxy_items SET aggregate_id = $1 WHERE stream_id = $2`, id, streamID)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE proxy_aggregates SET items = CASE WHEN items > $1 THEN items - $1 ELSE 0 END,
			bytes = CASE WHEN bytes > $2 THEN bytes - $2 ELSE 0 END WHERE id = $3`, parts, raw, aggregateID); err != nil {
			return err
		}
		for _, d := range dests {
			if _, err := tx.ExecContext(ctx, `INSERT INTO proxy_forwards (aggregate_id, destination, state, attempts, first_ms, last_ms, next_ms, error, error_log)
				VALUES ($1, $2, $3, 1, $4, $4, $4, $5, $6)`, id, d, string(ForwardFailed), nowMs, errText, logLine+"\n"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("set stream %d of aggregate %d aside: %w", streamID, aggregateID, err)
	}
	return id, nil
}

// QueueState names a forward's state as operators see it (the queue tool,
// metrics, logs): "failed", "retrying" (queued after at least one failed
// attempt) or "queued".
func QueueState(state ForwardState, retrying bool) string {
	switch {
	case state == ForwardFailed:
		return "failed"
	case retrying:
		return "retrying"
	}
	return "queued"
}

// ForwardFilter selects forwards to list.
type ForwardFilter struct {
	Destination string       // "" for all
	State       ForwardState // "" for all
	Retrying    bool         // only queued forwards that failed before
	Limit       int          // 0: 1000
}

// ListForwards lists forwards, oldest aggregate first.
func (r *Repo) ListForwards(ctx context.Context, f ForwardFilter) ([]Forward, error) {
	var where []string
	var args []any
	if f.Destination != "" {
		args = append(args, f.Destination)
		where = append(where, fmt.Sprintf("f.destination = $%d", len(args)))
	}
	if f.State != "" {
		args = append(args, string(f.State))
		where = append(where, fmt.Sprintf("f.state = $%d", len(args)))
	}
	if f.Retrying {
		args = append(args, string(ForwardQueued))
		where = append(where, fmt.Sprintf("f.state = $%d AND f.attempts > 0", len(args)))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	args = append(args, limit)
	q := `SELECT ` + forwardColumns + ` FROM proxy_forwards f JOIN proxy_aggregates a ON a.id = f.aggregate_id`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY f.aggregate_id, f.destination LIMIT $%d", len(args))
	fs, err := queryAll(ctx, r.db, scanForward, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list forwards: %w", err)
	}
	return fs, nil
}

// ForwardSummary counts what waits for one destination in one state.
type ForwardSummary struct {
	Destination string
	State       ForwardState
	Retrying    bool // queued after at least one failure
	Count       int64
	Bytes       int64 // uncompressed data bytes
	OldestMs    int64 // close time of the oldest aggregate
}

// SummariseForwards counts forwards per destination and state.
func (r *Repo) SummariseForwards(ctx context.Context) ([]ForwardSummary, error) {
	ss, err := queryAll(ctx, r.db, func(s rowScanner) (ForwardSummary, error) {
		var v ForwardSummary
		var state string
		var retrying int
		err := s.Scan(&v.Destination, &state, &retrying, &v.Count, &v.Bytes, &v.OldestMs)
		v.State, v.Retrying = ForwardState(state), retrying != 0
		return v, err
	}, `SELECT f.destination, f.state, CASE WHEN f.attempts > 0 THEN 1 ELSE 0 END,
		COUNT(*), COALESCE(SUM(a.bytes), 0), COALESCE(MIN(a.close_ms), 0)
		FROM proxy_forwards f JOIN proxy_aggregates a ON a.id = f.aggregate_id
		GROUP BY f.destination, f.state, CASE WHEN f.attempts > 0 THEN 1 ELSE 0 END
		ORDER BY 1, 2, 3`)
	if err != nil {
		return nil, fmt.Errorf("summarise forwards: %w", err)
	}
	return ss, nil
}

// ReplayForwards moves failed forwards of destination back to the queue,
// due at nowMs with a fresh retry budget: the given aggregates, or every
// failed one when ids is empty. It returns how many moved.
func (r *Repo) ReplayForwards(ctx context.Context, destination string, ids []int64, nowMs int64) (int64, error) {
	var n int64
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		q := `UPDATE proxy_forwards SET state = $1, attempts = 0, first_ms = 0, next_ms = $2 WHERE destination = $3 AND state = $4`
		args := []any{string(ForwardQueued), nowMs, destination, string(ForwardFailed)}
		if len(ids) == 0 {
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		}
		for _, id := range ids {
			res, err := tx.ExecContext(ctx, q+` AND aggregate_id = $5`, append(args, id)...)
			if err != nil {
				return err
			}
			c, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += c
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("replay failed forwards of %q: %w", destination, err)
	}
	return n, nil
}

// PendingBytes is the stored size of every stream not yet forwarded
// everywhere (what the proxy's repository holds).
func (r *Repo) PendingBytes(ctx context.Context) (int64, error) {
	var n int64
	if err := r.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(file_size), 0) FROM streams WHERE status <> $1`, string(Deleted)).Scan(&n); err != nil {
		return 0, fmt.Errorf("sum pending bytes: %w", err)
	}
	return n, nil
}
