package meta

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/internal/attr"
)

// Status is the lifecycle state of a stream.
type Status string

const (
	Locked   Status = "LOCKED"   // being written; never readable as data
	Unlocked Status = "UNLOCKED" // complete and durable
	Deleted  Status = "DELETED"
)

// Stream is the metadata of one post to a feed.
type Stream struct {
	ID          int64
	Feed        string
	Type        string
	Status      Status
	CreateMs    int64
	EffectiveMs int64
	StatusMs    int64
	Node        string // node that wrote it (restart recovery cleans up this node's LOCKED rows)
	ReceiptID   string
	Parts       int
	RawSize     int64 // uncompressed bytes of all Data parts
	FileSize    int64 // bytes on disk
	Attributes  *attr.Map
	Pack        string // the pack file holding the stream (relative to the store root); "" for a file of its own
	PackOffset  int64  // where the stream starts in its pack
	// HopReceiptIDs are the receipt ids earlier hops (proxies) gave the
	// data this stream holds, from its parts' ReceiptIdPath; a query on
	// Receipt Id finds the stream by any of them. Apply records them with
	// Packed and Unlock streams; they are not read back with the stream.
	HopReceiptIDs []string
	// Forward names the post this stream came in, when a trusted forwarder
	// sent it with a GUID: Apply records it (with the stream's receipt id)
	// in forwarded_posts, so that the same post sent again is recognised.
	// Not read back with the stream.
	Forward ForwardKey
}

// ForwardKey names a post a trusted forwarder (a proxy) sent: the
// forwarder's identity and the post's GUID, which a proxy keeps for every
// attempt to send an aggregate.
type ForwardKey struct {
	Sender string
	GUID   string
}

// IsReferenceType reports whether streams of a type hold reference data,
// which is looked up by effective time: "Reference" and every type whose
// name ends in " Reference" (of the default receive.metaTypes: Raw
// Reference, Reference and Test Reference), in any case. A zip post stores
// each group of a reference type as a stream of its own, with its own
// effective time, where groups of other types are parts of one stream.
func IsReferenceType(typ string) bool {
	t := strings.ToLower(strings.TrimSpace(typ))
	return t == "reference" || strings.HasSuffix(t, " reference")
}

// Batch is one transaction: the group committer collects many posts' work
// into one Batch so that all of them share one commit (and one fsync).
//
// Apply runs Create, then Unlock, then Delete, so a Batch may unlock a stream
// it also creates (the same *Stream in both lists).
type Batch struct {
	Create []*Stream // inserted with Status Locked; Apply sets each ID (and StatusMs=CreateMs)
	Unlock []*Stream // by ID (must currently be Locked, else the whole batch fails with a clear error): sets Status=Unlocked, StatusMs, Parts, RawSize, FileSize, Attributes
	Delete []int64   // removes rows physically (aborted writes that never became visible)
	// Packed streams are inserted complete (UNLOCKED), their bytes already
	// durable in a pack; Apply sets each ID, Status and StatusMs.
	Packed []*Stream
	// Forget removes forwarded posts (see Stream.Forward) recorded with
	// this receipt id, and only with it: those of a post whose commit
	// failed, which may have committed all the same (the answer to COMMIT
	// lost), so that a resend is stored again rather than answered with
	// the receipt id of streams the abort removed.
	Forget []ForwardedPost
	// Mark, if set, records how far its node's store log is recorded
	// (see LogMark), in the same transaction as the rest.
	Mark *LogMark
}

// ForwardedPost is a forwarded post as recorded: its key and the receipt
// id its streams got.
type ForwardedPost struct {
	Key       ForwardKey
	ReceiptID string
}

const streamColumns = `id, feed, type, status, create_ms, effective_ms, status_ms, node, receipt_id, parts, raw_size, file_size, attributes, pack, pack_offset`

// Apply commits the batch in one transaction; either all of it takes effect
// or none does.
//
// Create: each stream is inserted as Locked; a zero CreateMs is set to now,
// and ID, Status and StatusMs (=CreateMs) are written back to the struct.
//
// Unlock: each stream, by ID, must exist and be Locked; its Parts, RawSize,
// FileSize and Attributes are stored, its status becomes Unlocked and its
// StatusMs the time of this Apply (written back to the struct).
//
// Delete: rows are removed whatever their status; ids that do not exist are
// ignored so that clean-up can be retried.
//
// The structs are changed only once the transaction has committed: after a
// failed Apply they are exactly as the caller passed them (no ID for rows
// that were rolled back).
func (r *Repo) Apply(ctx context.Context, b *Batch) error {
	if b == nil || len(b.Create)+len(b.Unlock)+len(b.Delete)+len(b.Packed)+len(b.Forget) == 0 && b.Mark == nil {
		return nil
	}
	now := nowMs()
	type created struct {
		id       int64
		createMs int64
	}
	ids := make([]created, len(b.Create))
	unlockAttrs := make([]string, len(b.Unlock))
	createAttrs := make([]string, len(b.Create))
	for i, s := range b.Create {
		a, err := attrsJSON(s.Attributes)
		if err != nil {
			return fmt.Errorf("apply batch: create stream for feed %q: %w", s.Feed, err)
		}
		createAttrs[i] = a
	}
	for i, s := range b.Unlock {
		a, err := attrsJSON(s.Attributes)
		if err != nil {
			return fmt.Errorf("apply batch: unlock stream %d: %w", s.ID, err)
		}
		unlockAttrs[i] = a
	}
	packedAttrs := make([]string, len(b.Packed))
	packedIDs := make([]int64, len(b.Packed))
	unlockIDs := make([]int64, len(b.Unlock))
	for i, s := range b.Packed {
		a, err := attrsJSON(s.Attributes)
		if err != nil {
			return fmt.Errorf("apply batch: packed stream for feed %q: %w", s.Feed, err)
		}
		packedAttrs[i] = a
	}

	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if len(b.Create) > 0 {
			// RETURNING works on both engines; rows are inserted one at a time
			// because neither engine promises RETURNING order for a
			// multi-row INSERT, and ids must map back to their structs.
			stmt, err := r.txStmt(ctx, tx, `INSERT INTO streams
				(feed, type, status, create_ms, effective_ms, status_ms, node, receipt_id, parts, raw_size, file_size, attributes)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
				RETURNING id`)
			if err != nil {
				return fmt.Errorf("prepare create: %w", err)
			}
			defer stmt.Close()
			// A stream whose id was reserved (see ReserveStreamIDs) is
			// inserted with it.
			withID, err := r.txStmt(ctx, tx, `INSERT INTO streams
				(feed, type, status, create_ms, effective_ms, status_ms, node, receipt_id, parts, raw_size, file_size, attributes, id)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
				RETURNING id`)
			if err != nil {
				return fmt.Errorf("prepare create: %w", err)
			}
			defer withID.Close()
			for i, s := range b.Create {
				createMs := s.CreateMs
				if createMs == 0 {
					createMs = now
				}
				args := []any{s.Feed, s.Type, string(Locked), createMs, s.EffectiveMs, createMs, s.Node,
					s.ReceiptID, s.Parts, s.RawSize, s.FileSize, createAttrs[i]}
				st := stmt
				if s.ID != 0 {
					st, args = withID, append(args, s.ID)
				}
				var id int64
				if err := st.QueryRowContext(ctx, args...).Scan(&id); err != nil {
					return fmt.Errorf("create stream for feed %q: %w", s.Feed, err)
				}
				ids[i] = created{id: id, createMs: createMs}
			}
		}
		if err := r.insertPacked(ctx, tx, b.Packed, packedAttrs, now, packedIDs); err != nil {
			return err
		}
		if len(b.Unlock) > 0 {
			// The status condition makes the check and the change one
			// statement, so no other writer can slip in between.
			stmt, err := r.txStmt(ctx, tx, `UPDATE streams SET
				status = $1, status_ms = $2, parts = $3, raw_size = $4, file_size = $5, attributes = $6
				WHERE id = $7 AND status = $8`)
			if err != nil {
				return fmt.Errorf("prepare unlock: %w", err)
			}
			defer stmt.Close()
			for i, s := range b.Unlock {
				id := s.ID
				for j, c := range b.Create {
					if c == s {
						// Created in this batch: s.ID is not set until commit.
						id = ids[j].id
					}
				}
				unlockIDs[i] = id
				res, err := stmt.ExecContext(ctx, string(Unlocked), now, s.Parts, s.RawSize, s.FileSize,
					unlockAttrs[i], id, string(Locked))
				if err != nil {
					return fmt.Errorf("unlock stream %d: %w", id, err)
				}
				n, err := res.RowsAffected()
				if err != nil {
					return fmt.Errorf("unlock stream %d: %w", id, err)
				}
				if n == 0 {
					return r.explainUnlockMiss(ctx, tx, id)
				}
			}
		}
		if err := r.insertHopReceipts(ctx, tx, b, packedIDs, unlockIDs); err != nil {
			return err
		}
		if err := r.insertForwardKeys(ctx, tx, b); err != nil {
			return err
		}
		for _, f := range b.Forget {
			if _, err := tx.ExecContext(ctx, `DELETE FROM forwarded_posts WHERE sender = $1 AND guid = $2 AND receipt_id = $3`,
				f.Key.Sender, f.Key.GUID, f.ReceiptID); err != nil {
				return fmt.Errorf("forget forwarded post %q of %q: %w", f.Key.GUID, f.Key.Sender, err)
			}
		}
		if b.Mark != nil {
			if err := r.setLogMark(ctx, tx, *b.Mark); err != nil {
				return err
			}
		}
		if len(b.Delete) > 0 {
			stmt, err := r.txStmt(ctx, tx, `DELETE FROM streams WHERE id = $1`)
			if err != nil {
				return fmt.Errorf("prepare delete: %w", err)
			}
			defer stmt.Close()
			for _, id := range b.Delete {
				if _, err := stmt.ExecContext(ctx, id); err != nil {
					return fmt.Errorf("delete stream %d: %w", id, err)
				}
			}
		}
		return nil
	})
	if errors.Is(err, ErrCommitUnknown) {
		// A batch with a mark is committed if the mark is there (see
		// markCommitted). Otherwise one row the transaction wrote tells
		// whether all of it was committed: a row it inserted (PostgreSQL
		// never hands out an id twice, even when the transaction that
		// took it rolls back; a store inserts a reserved id's rows in one
		// batch), or else a row it unlocked (only this post unlocks its
		// row).
		var id int64
		status := ""
		switch {
		case b.Mark != nil:
		case len(packedIDs) > 0:
			id = packedIDs[0]
		case len(ids) > 0:
			id = ids[0].id
		case len(unlockIDs) > 0:
			id, status = unlockIDs[0], string(Unlocked)
		}
		if b.Mark != nil && r.markCommitted(ctx, *b.Mark) || id != 0 && r.committed(ctx, id, status) {
			// Its answer was lost, not the commit: the batch's posts are
			// stored, and answering them with a failure would have their
			// senders store them again.
			r.logger.Warn("the connection to the metadata database failed while a batch committed; the batch is committed",
				"streams", len(b.Create)+len(b.Packed), "err", err)
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("apply batch (%d create, %d unlock, %d delete, %d packed): %w",
			len(b.Create), len(b.Unlock), len(b.Delete), len(b.Packed), err)
	}
	for i, s := range b.Create {
		s.ID = ids[i].id
		s.Status = Locked
		s.CreateMs = ids[i].createMs
		s.StatusMs = ids[i].createMs
	}
	for _, s := range b.Unlock {
		s.Status = Unlocked
		s.StatusMs = now
	}
	for i, s := range b.Packed {
		s.ID = packedIDs[i]
		s.Status = Unlocked
		if s.StatusMs == 0 {
			s.StatusMs = now
		}
	}
	return nil
}

// committedCheckTimeout bounds the question whether a batch committed.
const committedCheckTimeout = 10 * time.Second

// committed reports whether the stream row id exists (with status, if
// not empty), for a batch whose commit is in doubt (ErrCommitUnknown).
// False when the database cannot say (still unreachable, or ctx done).
func (r *Repo) committed(ctx context.Context, id int64, status string) bool {
	// The caller's deadline, if any, else a bound of its own: the question
	// is asked because the database just failed.
	ctx, cancel := context.WithTimeout(ctx, committedCheckTimeout)
	defer cancel()
	var ok bool
	err := r.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM streams WHERE id = $1 AND ($2 = '' OR status = $2))`,
		id, status).Scan(&ok)
	return err == nil && ok
}

// packedRows is how many packed streams one INSERT carries: one statement
// for a group commit's posts instead of one each (the per-statement cost
// dominates a small row's), with at most 32*14 placeholders, far below
// either engine's limit.
const packedRows = 32

// packedInsertSQL[e][n] inserts n packed streams and returns each row's id
// with its place (pack, pack_offset), which maps it back to its struct:
// neither engine promises that a multi-row INSERT returns rows in VALUES
// order. e is 1 for SQLite's nameless parameters (see valueRows), 0 for
// PostgreSQL's. Built once, so that each text is prepared once per
// connection.
var packedInsertSQL = func() (q [2][packedRows + 1]string) {
	for e, nameless := range []bool{false, true} {
		for n := 1; n <= packedRows; n++ {
			var b strings.Builder
			b.WriteString(`INSERT INTO streams (feed, type, status, create_ms, effective_ms, status_ms, node, receipt_id, parts, raw_size, file_size, attributes, pack, pack_offset) VALUES `)
			valueRows(&b, nameless, n, 14)
			b.WriteString(" RETURNING id, pack, pack_offset")
			q[e][n] = b.String()
		}
	}
	return q
}()

// valueRows writes the VALUES list of a multi-row INSERT: rows tuples of
// cols parameters, numbered in order ($1, $2, ...) or, when nameless, all
// "?". SQLite takes the nameless form because the pure-Go driver looks up
// each numbered parameter's name by scanning the statement's list of names,
// so binding k of them costs k*k/2 steps: 9% of the CPU of an 8-row packed
// insert's transaction (112 parameters), and more for the 448 of a full
// one. Nameless parameters bind by position with nothing to look up; they
// suit only text, like this, whose parameters run 1..k in order.
func valueRows(b *strings.Builder, nameless bool, rows, cols int) {
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			if nameless {
				b.WriteByte('?')
			} else {
				b.WriteString("$" + strconv.Itoa(i*cols+c+1))
			}
		}
		b.WriteByte(')')
	}
}

// namelessParams says whether r's engine takes valueRows' nameless form.
func (r *Repo) namelessParams() bool { return r.engine == engineSQLite }

// insertPacked inserts ss (complete streams whose bytes are already in
// packs) as Unlocked, packedRows per statement, and sets ids[i] to the id of
// ss[i]. A place (pack, offset) names one stream's bytes, so it identifies
// the row RETURNING gives back; should two streams claim the same place,
// they go in one row per statement instead, where the order is certain.
func (r *Repo) insertPacked(ctx context.Context, tx *sql.Tx, ss []*Stream, attrs []string, now int64, ids []int64) error {
	if len(ss) > 0 && ss[0].ID != 0 {
		return r.insertPackedWithIDs(ctx, tx, ss, attrs, now, ids)
	}
	index := make(map[place]int, len(ss))
	for i, s := range ss {
		p := place{s.Pack, s.PackOffset}
		if _, dup := index[p]; dup {
			index = nil
			break
		}
		index[p] = i
	}
	args := make([]any, 0, 14*min(len(ss), packedRows))
	for start := 0; start < len(ss); {
		n := min(packedRows, len(ss)-start)
		if index == nil {
			n = 1
		}
		args = args[:0]
		for i := start; i < start+n; i++ {
			s := ss[i]
			args = append(args, s.Feed, s.Type, string(Unlocked), s.CreateMs, s.EffectiveMs, now, s.Node,
				s.ReceiptID, s.Parts, s.RawSize, s.FileSize, attrs[i], s.Pack, s.PackOffset)
		}
		if err := r.insertPackedRows(ctx, tx, n, args, func(id int64, p place) error {
			i := start
			if index != nil {
				var ok bool
				if i, ok = index[p]; !ok || i < start || i >= start+n {
					return fmt.Errorf("insert packed streams: the database returned a row for %s at %d, which this statement did not insert", p.pack, p.offset)
				}
			}
			if ids[i] != 0 {
				return fmt.Errorf("insert packed streams: the database returned two rows for %s at %d", p.pack, p.offset)
			}
			ids[i] = id
			return nil
		}); err != nil {
			return err
		}
		start += n
	}
	return nil
}

// packedInsertIDSQL[e][n] inserts n packed streams whose ids are given
// (reserved beforehand: see ReserveStreamIDs), leaving any whose id is
// there already: the store inserts the rows of its log again after a crash
// or a commit whose outcome it could not learn, and a row in place is the
// same row.
var packedInsertIDSQL = func() (q [2][packedRows + 1]string) {
	for e, nameless := range []bool{false, true} {
		for n := 1; n <= packedRows; n++ {
			var b strings.Builder
			b.WriteString(`INSERT INTO streams (id, feed, type, status, create_ms, effective_ms, status_ms, node, receipt_id, parts, raw_size, file_size, attributes, pack, pack_offset) VALUES `)
			valueRows(&b, nameless, n, 15)
			b.WriteString(" ON CONFLICT (id) DO NOTHING")
			q[e][n] = b.String()
		}
	}
	return q
}()

// insertPackedWithIDs is insertPacked for streams whose ids are set (all of
// them must be): the ids need not come back, so the rows go in
// packedRows per statement whatever their places.
func (r *Repo) insertPackedWithIDs(ctx context.Context, tx *sql.Tx, ss []*Stream, attrs []string, now int64, ids []int64) error {
	e := 0
	if r.namelessParams() {
		e = 1
	}
	args := make([]any, 0, 15*min(len(ss), packedRows))
	for start := 0; start < len(ss); {
		n := min(packedRows, len(ss)-start)
		args = args[:0]
		for i := start; i < start+n; i++ {
			s := ss[i]
			if s.ID == 0 {
				return fmt.Errorf("insert packed streams: stream %d of %d has no id, the first has one", i+1, len(ss))
			}
			statusMs := s.StatusMs
			if statusMs == 0 {
				statusMs = now
			}
			args = append(args, s.ID, s.Feed, s.Type, string(Unlocked), s.CreateMs, s.EffectiveMs, statusMs, s.Node,
				s.ReceiptID, s.Parts, s.RawSize, s.FileSize, attrs[i], s.Pack, s.PackOffset)
			ids[i] = s.ID
		}
		stmt, err := r.txStmt(ctx, tx, packedInsertIDSQL[e][n])
		if err != nil {
			return fmt.Errorf("prepare packed insert of %d: %w", n, err)
		}
		res, err := stmt.ExecContext(ctx, args...)
		stmt.Close()
		if err != nil {
			return fmt.Errorf("insert %d packed streams: %w", n, err)
		}
		if got, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("insert %d packed streams: %w", n, err)
		} else if got < int64(n) {
			if err := r.samePacked(ctx, tx, ss[start:start+n]); err != nil {
				return err
			}
		}
		start += n
	}
	return nil
}

// samePacked checks that every one of ss whose id a row had already is
// that row (the same post's stream: receipt id, feed and time; its place
// may have moved since, by a compaction): inserted by an earlier try of
// the same batch, or a replay of the log. A row of another stream with the
// id is an error, not a success: the stream would be lost.
func (r *Repo) samePacked(ctx context.Context, tx *sql.Tx, ss []*Stream) error {
	for _, s := range ss {
		var receipt, feed string
		var createMs int64
		if err := tx.QueryRowContext(ctx, `SELECT receipt_id, feed, create_ms FROM streams WHERE id = $1`, s.ID).Scan(&receipt, &feed, &createMs); err != nil {
			return fmt.Errorf("insert packed stream %d: %w", s.ID, err)
		}
		if receipt != s.ReceiptID || feed != s.Feed || createMs != s.CreateMs {
			return fmt.Errorf("insert packed stream %d (receipt %s): the id is another stream's (receipt %s); "+
				"the database's stream ids are behind the store's", s.ID, s.ReceiptID, receipt)
		}
	}
	return nil
}

// insertForwardKeys records the Forward keys of b's Packed and Unlock
// streams with their receipt ids, each key once. A key already there (the
// same post stored twice, by two sends that overlapped) keeps its first
// receipt id.
func (r *Repo) insertForwardKeys(ctx context.Context, tx *sql.Tx, b *Batch) error {
	seen := map[ForwardKey]bool{}
	now := nowMs()
	for _, ss := range [][]*Stream{b.Packed, b.Unlock} {
		for _, s := range ss {
			if s.Forward.GUID == "" || seen[s.Forward] {
				continue
			}
			seen[s.Forward] = true
			if _, err := tx.ExecContext(ctx, `INSERT INTO forwarded_posts (sender, guid, receipt_id, create_ms)
				VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, s.Forward.Sender, s.Forward.GUID, s.ReceiptID, now); err != nil {
				return fmt.Errorf("record forwarded post %q of %q: %w", s.Forward.GUID, s.Forward.Sender, err)
			}
		}
	}
	return nil
}

// ForwardedReceipt is the receipt id given to the post k names, if it is
// stored (ok false otherwise).
func (r *Repo) ForwardedReceipt(ctx context.Context, k ForwardKey) (receiptID string, ok bool, err error) {
	err = r.db.QueryRowContext(ctx, `SELECT receipt_id FROM forwarded_posts WHERE sender = $1 AND guid = $2`,
		k.Sender, k.GUID).Scan(&receiptID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("look up forwarded post %q of %q: %w", k.GUID, k.Sender, err)
	}
	return receiptID, true, nil
}

// PruneForwardedPosts forgets forwarded posts recorded before beforeMs, a
// batch of rows at a time, and says how many it removed.
func (r *Repo) PruneForwardedPosts(ctx context.Context, beforeMs int64) (int64, error) {
	var total int64
	for {
		var n int64
		err := r.withTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM forwarded_posts WHERE (sender, guid) IN
				(SELECT sender, guid FROM forwarded_posts WHERE create_ms < $1 LIMIT 1000)`, beforeMs)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("prune forwarded posts: %w", err)
		}
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}

// maxHopReceipts bounds the earlier hops' receipt ids recorded for one
// stream, whatever the caller passes: a zip's parts each carry their own
// path, and a sender controls what its parts' ReceiptIdPath says. (The
// store bounds them per post, and keeps them distinct, first.)
const maxHopReceipts = 20_000

// insertHopReceipts records the HopReceiptIDs of b's Packed and Unlock
// streams (whose ids are packedIDs and unlockIDs) in stream_receipts, all
// in one statement: the pairs travel as one JSON array, so no count of
// them comes near the engines' parameter limits, and only streams that
// came through a proxy have any.
func (r *Repo) insertHopReceipts(ctx context.Context, tx *sql.Tx, b *Batch, packedIDs, unlockIDs []int64) error {
	var pairs []any
	add := func(ss []*Stream, ids []int64) {
		for i, s := range ss {
			for j, rid := range s.HopReceiptIDs {
				if j == maxHopReceipts {
					break
				}
				pairs = append(pairs, []any{rid, ids[i]})
			}
		}
	}
	add(b.Packed, packedIDs)
	add(b.Unlock, unlockIDs)
	if len(pairs) == 0 {
		return nil
	}
	js, err := json.Marshal(pairs)
	if err != nil {
		return fmt.Errorf("record earlier hops' receipt ids: %w", err)
	}
	q := `INSERT INTO stream_receipts (receipt_id, stream_id)
		SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each($1) WHERE true
		ON CONFLICT DO NOTHING`
	if r.engine == enginePostgres {
		q = `INSERT INTO stream_receipts (receipt_id, stream_id)
		SELECT e->>0, (e->>1)::bigint FROM json_array_elements($1::json) AS e
		ON CONFLICT DO NOTHING`
	}
	stmt, err := r.txStmt(ctx, tx, q)
	if err != nil {
		return fmt.Errorf("prepare recording of earlier hops' receipt ids: %w", err)
	}
	defer stmt.Close()
	if _, err := stmt.ExecContext(ctx, string(js)); err != nil {
		return fmt.Errorf("record %d earlier hops' receipt ids: %w", len(pairs), err)
	}
	return nil
}

// place is where a packed stream's bytes are: its pack and offset.
type place struct {
	pack   string
	offset int64
}

// insertPackedRows runs packedInsertSQL[.][n] and passes each returned row to
// got; it fails unless exactly n rows come back.
func (r *Repo) insertPackedRows(ctx context.Context, tx *sql.Tx, n int, args []any, got func(id int64, p place) error) error {
	e := 0
	if r.namelessParams() {
		e = 1
	}
	stmt, err := r.txStmt(ctx, tx, packedInsertSQL[e][n])
	if err != nil {
		return fmt.Errorf("prepare packed insert of %d: %w", n, err)
	}
	defer stmt.Close()
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return fmt.Errorf("insert %d packed streams: %w", n, err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var id int64
		var p place
		if err := rows.Scan(&id, &p.pack, &p.offset); err != nil {
			return fmt.Errorf("insert %d packed streams: %w", n, err)
		}
		if err := got(id, p); err != nil {
			return err
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert %d packed streams: %w", n, err)
	}
	if seen != n {
		return fmt.Errorf("insert %d packed streams: the database returned %d rows", n, seen)
	}
	return nil
}

// explainUnlockMiss turns an unlock that matched no row into an error that
// says why: the stream is missing (wrapping ErrNotFound) or not Locked.
func (r *Repo) explainUnlockMiss(ctx context.Context, tx *sql.Tx, id int64) error {
	var status string
	err := tx.QueryRowContext(ctx, `SELECT status FROM streams WHERE id = $1`, id).Scan(&status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("unlock stream %d: %w", id, ErrNotFound)
	case err != nil:
		return fmt.Errorf("unlock stream %d: %w", id, err)
	}
	return fmt.Errorf("unlock stream %d: status is %s, only %s streams can be unlocked", id, status, Locked)
}

// GetStream returns the stream with this id, or an error wrapping
// ErrNotFound.
func (r *Repo) GetStream(ctx context.Context, id int64) (Stream, error) {
	row := r.db.QueryRowContext(ctx, `SELECT `+streamColumns+` FROM streams WHERE id = $1`, id)
	s, err := scanStream(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Stream{}, fmt.Errorf("get stream %d: %w", id, err)
	}
	return s, nil
}

// StreamFilter selects streams for ListStreams; zero fields do not filter.
type StreamFilter struct {
	Feed      string // exact, "" = any
	Status    Status // "" = any
	ReceiptID string // matches the receipt_id column exactly
	// AnyReceiptID matches the stream's own receipt id or one an earlier hop
	// (a proxy) gave a part of it (see Stream.HopReceiptIDs).
	AnyReceiptID string
	AfterID      int64 // keyset pagination: id > AfterID
	Limit        int   // 0 -> no limit
	// FeedIn narrows to these feeds (the ones a caller may see). nil: no
	// narrowing; an empty non-nil slice matches nothing.
	FeedIn []string
}

// ListStreams returns the streams matching f, ordered by id ascending. To
// page, pass the last id returned as the next AfterID.
func (r *Repo) ListStreams(ctx context.Context, f StreamFilter) ([]Stream, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.Feed != "" {
		add("feed = ?", f.Feed)
	}
	if f.Status != "" {
		add("status = ?", string(f.Status))
	}
	if f.ReceiptID != "" {
		add("receipt_id = ?", f.ReceiptID)
	}
	if f.AnyReceiptID != "" {
		// Both placeholders are the same parameter.
		// One IN over a UNION ALL, not an OR, so that PostgreSQL looks both
		// up by index (see streamquery's hopsTerm).
		add("id IN (SELECT id FROM streams WHERE receipt_id = ? UNION ALL SELECT stream_id FROM stream_receipts WHERE receipt_id = ?)", f.AnyReceiptID)
	}
	if f.AfterID != 0 {
		add("id > ?", f.AfterID)
	}
	if f.FeedIn != nil {
		if len(f.FeedIn) == 0 {
			where = append(where, "1 = 0")
		} else {
			marks := make([]string, len(f.FeedIn))
			for i, name := range f.FeedIn {
				args = append(args, name)
				marks[i] = "$" + strconv.Itoa(len(args))
			}
			where = append(where, "feed IN ("+strings.Join(marks, ", ")+")")
		}
	}
	q := `SELECT ` + streamColumns + ` FROM streams`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id`
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += ` LIMIT $` + strconv.Itoa(len(args))
	}
	ss, err := r.queryStreams(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return ss, nil
}

// lockedStreamsSQL names the status as a literal, not a parameter: only
// then may the planners use the partial index streams_locked (migration
// 0007), which is what keeps it small.
const lockedStreamsSQL = `SELECT ` + streamColumns + ` FROM streams WHERE status = '` + string(Locked) + `' AND node = $1 ORDER BY id`

// LockedStreams returns the streams still Locked that node created, ordered
// by id: after a restart they are writes that never completed.
func (r *Repo) LockedStreams(ctx context.Context, node string) ([]Stream, error) {
	ss, err := r.queryStreams(ctx, lockedStreamsSQL, node)
	if err != nil {
		return nil, fmt.Errorf("list locked streams of node %q: %w", node, err)
	}
	return ss, nil
}

func (r *Repo) queryStreams(ctx context.Context, q string, args ...any) ([]Stream, error) {
	return queryAll(ctx, r.db, scanStream, q, args...)
}

func scanStream(s rowScanner) (Stream, error) {
	var (
		st     Stream
		status string
		attrs  string
	)
	if err := s.Scan(&st.ID, &st.Feed, &st.Type, &status, &st.CreateMs, &st.EffectiveMs, &st.StatusMs,
		&st.Node, &st.ReceiptID, &st.Parts, &st.RawSize, &st.FileSize, &attrs, &st.Pack, &st.PackOffset); err != nil {
		return Stream{}, err
	}
	st.Status = Status(status)
	if st.StatusMs < 0 {
		// Claimed by a purge (see purge.go): the time it was deleted.
		st.StatusMs = -1 - st.StatusMs
	}
	st.Attributes = new(attr.Map)
	if err := st.Attributes.UnmarshalJSON([]byte(attrs)); err != nil {
		return Stream{}, fmt.Errorf("stream %d: %w", st.ID, err)
	}
	return st, nil
}

// attrsJSON encodes attributes for the attributes column; nil is stored as
// an empty object so every row decodes to a non-nil map.
func attrsJSON(m *attr.Map) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := m.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("encode attributes: %w", err)
	}
	return string(b), nil
}

// SetStreamStatus changes a complete stream's status between UNLOCKED and
// DELETED (a logical delete, or a restore). LOCKED streams belong to their
// writer and cannot be changed; setting the current status is an error.
func (r *Repo) SetStreamStatus(ctx context.Context, id int64, status Status) error {
	if status != Unlocked && status != Deleted {
		return fmt.Errorf("set stream %d status: %s is not UNLOCKED or DELETED", id, status)
	}
	from := Unlocked
	if status == Unlocked {
		from = Deleted
	}
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		// A stream a purge has claimed is not restored (see purge.go).
		res, err := tx.ExecContext(ctx, `UPDATE streams SET status = $1, status_ms = $2 WHERE id = $3 AND status = $4 AND `+restorableSQL,
			string(status), nowMs(), id, string(from))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var cur string
		var ms int64
		if err := tx.QueryRowContext(ctx, `SELECT status, status_ms FROM streams WHERE id = $1`, id).Scan(&cur, &ms); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		if Status(cur) == from && ms < 0 {
			return ErrPurging
		}
		return fmt.Errorf("stream is %s, not %s", cur, from)
	})
	if err != nil {
		return fmt.Errorf("set stream %d status to %s: %w", id, status, err)
	}
	return nil
}

// PackLive counts the streams in a pack that are not DELETED.
func (r *Repo) PackLive(ctx context.Context, pack string) (int64, error) {
	var n int64
	if err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM streams WHERE `+inPackSQL+` AND status <> $2`, pack, string(Deleted)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count live streams of pack %s: %w", pack, err)
	}
	return n, nil
}

// PackStreamIDs lists the ids of every stream in a pack.
func (r *Repo) PackStreamIDs(ctx context.Context, pack string) ([]int64, error) {
	ids, err := queryAll(ctx, r.db, func(s rowScanner) (int64, error) {
		var id int64
		return id, s.Scan(&id)
	}, `SELECT id FROM streams WHERE `+inPackSQL+` ORDER BY id`, pack)
	if err != nil {
		return nil, fmt.Errorf("list streams of pack %s: %w", pack, err)
	}
	return ids, nil
}

// PackReferenced reports whether any stream row names the pack.
func (r *Repo) PackReferenced(ctx context.Context, pack string) (bool, error) {
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT 1 FROM streams WHERE `+inPackSQL+` LIMIT 1`, pack).Scan(&n)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up pack %s: %w", pack, err)
	}
	return true, nil
}
