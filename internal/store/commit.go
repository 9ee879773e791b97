package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
)

// request is one post's share of a group commit.
type request struct {
	create []*meta.Stream       // rows to insert LOCKED (ids are set on return)
	unlock []*meta.Stream       // rows whose files are complete and renamed
	dirs   []string             // directories whose new entries must be fsynced first
	delete []int64              // rows of aborted streams
	forget []meta.ForwardedPost // forwarded posts of a post whose commit failed
	pack   []packItem           // small streams to write into the batch's pack and insert complete
	at     time.Time            // when it was submitted
	ctx    context.Context
	done   chan error
	// early: answered by stage one as soon as its record is durable in
	// the pack, before its rows are inserted (store.commit: log).
	early bool
	// rows are the rows of its packed streams that its transaction
	// inserts: for an early request, copies, since its caller goes on
	// with the originals once answered.
	rows []*meta.Stream
}

// maxBatch bounds one transaction's requests so that a burst cannot make
// one commit arbitrarily large (and every post waiting for it wait for all
// the others).
const maxBatch = 1024

// stagedAhead is how many batches stage one may have written ahead of the
// transactions recording them: with store.commit: log their posts are
// answered already, and maxPendingRows bounds them.
const stagedAhead = 1024

// maxPendingRows bounds the rows of answered posts not yet inserted (and
// held in memory until they are): past it, posts are refused with 503 (see
// ErrBehind) until the database has caught up.
const maxPendingRows = 20_000

// ErrBehind is returned for a post refused because the metadata database
// has not yet recorded the streams of posts already answered, which must go
// in first: it failed (the cause is wrapped too), or it is far behind.
var ErrBehind = errors.New("the metadata database has not yet recorded the streams of posts already received")

// submit hands a request to the committer and waits until it is durable.
func (s *Store) submit(ctx context.Context, r *request) error {
	r.ctx = ctx
	r.at = time.Now()
	r.done = make(chan error, 1)
	if err := s.behind(); err != nil {
		if err := s.awaitRecovery(ctx, err); err != nil {
			return err
		}
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	s.commits <- r
	s.closeMu.RUnlock()
	// The committer always answers; a cancelled caller must still wait so
	// that it never mistakes an in-flight commit for a failed one.
	return <-r.done
}

// behind returns why new work is refused, if it is: the transaction that
// records the rows of answered posts is failing, or too many such rows
// wait for one.
func (s *Store) behind() error {
	if !s.opt.Log {
		return nil
	}
	s.failMu.Lock()
	err := s.failing
	s.failMu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBehind, err)
	}
	if n := s.pendingRows.Load(); n > maxPendingRows {
		return fmt.Errorf("%w: %d streams wait for their rows", ErrBehind, n)
	}
	return nil
}

// awaitRecovery is called by a request that behind refused with err: while
// the transaction of answered posts' rows fails, it has that transaction
// tried again now (see recordUntilDone) and waits for the outcome, so that
// the first post after the database recovers (space freed, a connection
// back) is taken at once, and each during an outage is refused after one
// try, as with store.commit: transaction. It returns nil if the rows went
// in.
func (s *Store) awaitRecovery(ctx context.Context, err error) error {
	s.failMu.Lock()
	if s.failing == nil {
		s.failMu.Unlock()
		return err // too many rows waiting: nothing to try again
	}
	want := s.tries + 1
	s.failMu.Unlock()
	select {
	case s.tryNow <- struct{}{}:
	default:
	}
	for {
		s.failMu.Lock()
		failing, done, ch := s.failing, s.triesDone, s.tried
		s.failMu.Unlock()
		switch {
		case failing == nil:
			return nil
		case done >= want:
			return fmt.Errorf("%w: %w", ErrBehind, failing)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrBehind, failing)
		case <-s.closing:
			return ErrClosed
		}
	}
}

// answersEarly reports whether r is answered as soon as its record is
// durable: with store.commit: log, a post whose streams are all packed.
// Not one that a trusted forwarder sent with a GUID: a resend of it must
// find the post recorded (meta.Repo.ForwardedReceipt) once it is answered.
func (s *Store) answersEarly(r *request) bool {
	if !s.opt.Log || len(r.pack) == 0 || len(r.create)+len(r.unlock)+len(r.delete)+len(r.forget)+len(r.dirs) > 0 {
		return false
	}
	for i := range r.pack {
		if r.pack[i].row.Forward.GUID != "" {
			return false
		}
	}
	return true
}

// commitLoop is the group committer. It takes whatever requests queued up
// while the previous batch was written and writes them together: no timer,
// so an idle server commits at once and a busy one batches naturally.
//
// It is a pipeline of two stages. Stage one writes a batch's directories
// and its pack records and flushes them, and answers the posts whose
// records hold all they are (see answersEarly); stage two records the
// rows in the metadata database, in one transaction for every batch that
// stage one wrote meanwhile, in the order they were written, and answers
// the rest. A batch's rows are inserted only after its files are durable,
// so a committed row always names bytes that survive a crash.
func (s *Store) commitLoop() {
	defer close(s.done)
	written := make(chan *staged, stagedAhead)
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		s.recordLoop(written)
	}()
	var seq uint64
	for r := range s.commits {
		batch := make([]*request, 1, 64)
		batch[0] = r
	fill:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.commits:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		for _, r := range batch {
			r.early = s.answersEarly(r)
		}
		st := s.stage(batch)
		for _, r := range batch {
			if st.err != nil {
				// Not answered: they fail with the rest.
				r.early = false
			}
			if !r.early {
				st.waiting++
			}
		}
		seq++
		st.seq = seq
		// Counted before any post is answered: a caller of Sync who
		// heard of one waits for its rows.
		s.acked.Store(seq)
		if st.err == nil && st.rows > 0 {
			s.pendingRows.Add(int64(st.rows))
			if m := s.opt.Metrics; m != nil {
				m.rowsPending.Add(float64(st.rows))
			}
			for _, r := range batch {
				if r.early {
					r.done <- nil
				}
			}
		}
		written <- st
	}
	close(written)
	<-recorded
	s.packMu.Lock()
	s.closePack()
	s.packMu.Unlock()
}

// staged is a batch whose files are durable (or failed to be), waiting for
// its transaction.
type staged struct {
	batch  []*request
	b      meta.Batch
	writes []stagedPack // where its small streams went
	start  time.Time
	oldest time.Time // its longest-waiting request's submission
	err    error     // from stage one
	seq    uint64    // its place in stage one's order (commitLoop's batches)
	// mark is where the log ends after its last pack write: its
	// transaction records it (see meta.LogMark).
	mark    *meta.LogMark
	rows    int // rows of early requests: answered, waiting for its transaction
	waiting int // requests not answered yet
}

// stagedPack is one pack write of a staged batch and its streams.
type stagedPack struct {
	w     packWrite
	items []*packItem
	// early: it holds the record of an answered post, which must stay
	// whatever becomes of the rest.
	early bool
}

// merge makes one staged batch of two whose stage one succeeded, b
// written after a.
func merge(a, b *staged) *staged {
	a.batch = append(a.batch, b.batch...)
	a.b.Create = append(a.b.Create, b.b.Create...)
	a.b.Delete = append(a.b.Delete, b.b.Delete...)
	a.b.Forget = append(a.b.Forget, b.b.Forget...)
	a.b.Unlock = append(a.b.Unlock, b.b.Unlock...)
	a.b.Packed = append(a.b.Packed, b.b.Packed...)
	a.writes = append(a.writes, b.writes...)
	if b.oldest.Before(a.oldest) {
		a.oldest = b.oldest
	}
	if b.mark != nil {
		a.mark = b.mark
	}
	a.seq = max(a.seq, b.seq)
	a.rows += b.rows
	a.waiting += b.waiting
	return a
}

// recordDelay is how long stage two waits for more batches to join one
// whose posts were all answered already, before it records them: nobody
// waits for that transaction, and one costs about as much for 5 rows as
// for 50. A request that waits for its transaction, or a caller of Sync,
// ends the wait; so does lingerRows.
const (
	recordDelay = 3 * time.Millisecond
	lingerRows  = 256
)

// stagedQueue is stage two's input: the channel stage one writes staged
// batches to, and one taken from it that could not join the batch before
// it (see recordLoop), which comes next.
type stagedQueue struct {
	ch   chan *staged
	held *staged
}

// take returns the next batch, waiting for one if wait is set; nil when
// there is none (without wait) or, with ok false, none will come.
func (q *stagedQueue) take(wait bool) (st *staged, ok bool) {
	if st := q.held; st != nil {
		q.held = nil
		return st, true
	}
	if wait {
		st, ok = <-q.ch
		return st, ok
	}
	select {
	case st, ok = <-q.ch:
		return st, ok
	default:
		return nil, true
	}
}

// recordLoop is stage two: it records staged batches in the order stage
// one wrote them. Batches that were staged while the last transaction ran
// share the next one: the stage that waits longer sets the pace, and
// merging lets the transactions keep up.
func (s *Store) recordLoop(written chan *staged) {
	q := &stagedQueue{ch: written}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		st, ok := q.take(true)
		if !ok {
			return
		}
		var deadline time.Time
		for len(st.batch) < maxBatch {
			next, ok := s.more(q, st, &deadline, timer)
			if next == nil || !ok {
				break
			}
			if st.err != nil || next.err != nil {
				// A failed stage one is retried request by request,
				// alone: it comes next.
				q.held = next
				break
			}
			st = merge(st, next)
		}
		s.finish(st, q)
	}
}

// more returns the next staged batch to join st, or nil when st is to be
// recorded now: at once when none is queued, unless st may linger (all
// its posts answered) for up to recordDelay.
func (s *Store) more(q *stagedQueue, st *staged, deadline *time.Time, timer *time.Timer) (*staged, bool) {
	if next, ok := q.take(false); next != nil || !ok {
		return next, ok
	}
	if !s.opt.Log || st.err != nil || st.waiting > 0 || st.rows >= lingerRows {
		return nil, true
	}
	if deadline.IsZero() {
		*deadline = time.Now().Add(recordDelay)
	}
	d := time.Until(*deadline)
	if d <= 0 {
		return nil, true
	}
	timer.Reset(d)
	defer timer.Stop()
	select {
	case next, ok := <-q.ch:
		return next, ok
	case <-timer.C:
	case <-s.hurry:
	case <-s.closing:
	}
	return nil, true
}

// finish commits a staged batch's transaction and answers its requests
// still waiting.
func (s *Store) finish(st *staged, q *stagedQueue) {
	if s.abandoned {
		// Closing, with rows of answered posts not recorded before:
		// recording later ones would move the mark past them.
		s.answerWaiting(st, ErrClosed)
		return
	}
	err := st.err
	if err == nil {
		err = s.commitRows(st)
	}
	// Counted before any request is answered, so that whoever reads the
	// metric after its answer finds its batch in it.
	if m := s.opt.Metrics; m != nil {
		m.batchSize.Observe(float64(len(st.batch)))
		m.commitSeconds.Observe(time.Since(st.start).Seconds())
	}
	switch {
	case err == nil:
		s.endWrites(st.writes, false)
		s.answerWaiting(st, nil)
		s.recorded(st)
	case st.rows == 0:
		// Nothing answered yet: the batch fails as a whole (or request
		// by request), and nothing of it is left to record.
		s.endWrites(st.writes, failedCommit(err))
		s.retryAlone(waiting(st), err)
		s.advance(st.seq)
	default:
		// The rows of answered posts must go in, and in order: alone
		// first (another request may be what failed), then again until
		// they do.
		early, rest := s.split(st, failedCommit(err))
		err2 := s.commitRows(early)
		if err2 == nil {
			s.endWrites(early.writes, false)
			s.recorded(early)
		} else {
			s.fail(err2)
		}
		s.retryAlone(rest, err)
		if err2 != nil {
			s.recordUntilDone(early, q, err2)
		}
	}
}

// failedCommit says whether a transaction that returned err certainly did
// not commit: one in doubt (its answer lost, meta.ErrCommitUnknown) may
// have committed rows that name the batch's bytes, which must then stay.
func failedCommit(err error) bool {
	return err != nil && !errors.Is(err, meta.ErrCommitUnknown)
}

// waiting returns the requests of st not answered yet.
func waiting(st *staged) []*request {
	var out []*request
	for _, r := range st.batch {
		if !r.early {
			out = append(out, r)
		}
	}
	return out
}

// answerWaiting answers st's requests not answered yet with err.
func (s *Store) answerWaiting(st *staged, err error) {
	for _, r := range st.batch {
		if !r.early {
			r.done <- err
		}
	}
}

// retryAlone answers requests whose batch failed with err: each is tried
// again alone, so that one bad request does not fail its neighbours, but
// not when the database is unreachable: no request is to blame, and each
// retry would wait for it again.
func (s *Store) retryAlone(rs []*request, err error) {
	if len(rs) > 1 && !meta.IsUnavailable(err) && s.behind() == nil {
		for _, r := range rs {
			r.done <- s.apply([]*request{r})
		}
		return
	}
	for _, r := range rs {
		r.done <- err
	}
}

// split takes the answered requests of a failed batch, with their rows and
// the pack writes holding their records, out of it; the rest are returned
// to be answered. Pack writes holding only the others' records end now,
// their bytes given back if failed says their rows were certainly not
// committed (see failedCommit).
func (s *Store) split(st *staged, failed bool) (*staged, []*request) {
	// The mark is set below, from the writes that stay: st's mark is the
	// end of its last write, which may be one of the others' and given
	// back (cut from the pack), and the next batch is written there. A
	// mark past the end would have a start replay the log from beyond
	// that batch's records, and its answered posts never recorded.
	early := &staged{start: st.start, oldest: time.Now(), seq: st.seq, rows: st.rows}
	var rest []*request
	for _, r := range st.batch {
		if r.early {
			early.batch = append(early.batch, r)
			early.b.Packed = append(early.b.Packed, r.rows...)
			continue
		}
		rest = append(rest, r)
		if failed {
			// Its bytes stay in the pack, named by no row, if they
			// share a write with an answered post's.
			for i := range r.pack {
				r.pack[i].row.Pack, r.pack[i].row.PackOffset = "", 0
			}
		}
	}
	for _, row := range st.b.Unlock {
		row.Status = meta.Locked
	}
	for _, w := range st.writes {
		if w.early {
			early.writes = append(early.writes, w)
			early.mark = s.markAt(w.w)
		} else {
			s.endWrites([]stagedPack{w}, failed)
		}
	}
	return early, rest
}

// recordUntilDone tries the transaction of answered posts' rows again,
// with a growing delay, until it commits or the store closes: their posts
// were answered, their records are durable, and their rows must go in
// before any later batch's. Meanwhile new posts are refused (see behind),
// batches stage one wrote before that join this one, and their waiting
// requests are refused too. If the store closes first, the rows stay in
// the log, for the next start to record (see replay).
func (s *Store) recordUntilDone(e *staged, q *stagedQueue, err error) {
	delay := minRetry
	last := time.Now()
	for {
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
			delay = min(2*delay, maxRetry)
		case <-s.tryNow:
			// A post waits for this try (see awaitRecovery); not sooner
			// than minRetry after the last, whoever asks.
			time.Sleep(time.Until(last.Add(minRetry)))
		case <-s.closing:
			timer.Stop()
			s.opt.Logger.Warn("closing before the rows of posts already received were recorded; the next start records them from the store's log",
				"streams", s.pendingRows.Load(), "node", s.opt.Node, "err", err)
			s.abandoned = true
			return
		}
		timer.Stop()
		// Batches stage one wrote meanwhile: their answered posts' rows
		// join, their waiting requests are refused.
		for {
			next, _ := q.take(false)
			if next == nil {
				break
			}
			// Done with once e is recorded (see Sync), not before: e's
			// posts were answered first.
			e.seq = max(e.seq, next.seq)
			if next.err != nil {
				s.answerWaiting(next, next.err)
				continue
			}
			if next.rows == 0 {
				s.endWrites(next.writes, true)
				s.answerWaiting(next, fmt.Errorf("%w: %w", ErrBehind, err))
				continue
			}
			ne, rest := s.split(next, true)
			for _, r := range rest {
				r.done <- fmt.Errorf("%w: %w", ErrBehind, err)
			}
			e = merge(e, ne)
		}
		s.failMu.Lock()
		s.tries++
		s.failMu.Unlock()
		e.oldest, last = time.Now(), time.Now()
		err = s.commitRows(e)
		if err == nil {
			s.endWrites(e.writes, false)
			s.recorded(e)
		} else {
			s.fail(err)
		}
		s.failMu.Lock()
		s.triesDone = s.tries
		close(s.tried)
		s.tried = make(chan struct{})
		s.failMu.Unlock()
		if err == nil {
			return
		}
	}
}

// The delays between tries of a failing transaction of answered posts'
// rows: from minRetry, doubling to maxRetry while nobody waits for one.
const (
	minRetry = 20 * time.Millisecond
	maxRetry = 5 * time.Second
)

// fail sets the error that refuses new posts while answered posts' rows
// cannot be recorded, and logs it (the first time, then at most once a
// minute).
func (s *Store) fail(err error) {
	s.failMu.Lock()
	s.failing = err
	s.failMu.Unlock()
	s.failLog.Observe(s.opt.Logger, slog.LevelError, err,
		"cannot record the streams of posts already received; new posts are refused until they are",
		"the metadata database recorded the streams of posts received while it failed",
		"node", s.opt.Node, "streams", s.pendingRows.Load())
}

// recorded notes that st's transaction committed: its answered posts' rows
// are in the database.
func (s *Store) recorded(st *staged) {
	s.pendingRows.Add(-int64(st.rows))
	if m := s.opt.Metrics; m != nil {
		m.rowsPending.Sub(float64(st.rows))
	}
	s.failMu.Lock()
	was := s.failing
	s.failing = nil
	s.failMu.Unlock()
	if was != nil {
		s.failLog.Observe(s.opt.Logger, slog.LevelError, nil, "",
			"the metadata database recorded the streams of posts received while it failed", "node", s.opt.Node)
	}
	s.advance(st.seq)
	s.retryLeftovers()
}

// advance notes that every batch up to seq is done with (see Sync).
func (s *Store) advance(seq uint64) {
	s.syncMu.Lock()
	if seq > s.synced {
		s.synced = seq
		close(s.syncCh)
		s.syncCh = make(chan struct{})
	}
	s.syncMu.Unlock()
}

// Sync waits until the rows of every post answered before it was called
// are in the metadata database (with store.commit: log a post is answered
// before them), or ctx ends, or the store closes. A caller that was told
// of a post sees it in the database after Sync; the rows are usually
// there within milliseconds. While their transaction fails it does not
// wait: it returns ErrBehind at once.
func (s *Store) Sync(ctx context.Context) error {
	target := s.acked.Load()
	for {
		s.syncMu.Lock()
		done, ch := s.synced >= target, s.syncCh
		s.syncMu.Unlock()
		if done {
			return nil
		}
		s.failMu.Lock()
		failing := s.failing
		s.failMu.Unlock()
		if failing != nil {
			return fmt.Errorf("%w: %w", ErrBehind, failing)
		}
		// Stage two need not wait for more batches to join.
		select {
		case s.hurry <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return ErrClosed
		}
	}
}

// apply makes a set of requests durable, both stages at once, outside the
// order of stage one's batches: their records are not answered early, and
// the log's mark is not moved.
func (s *Store) apply(batch []*request) error {
	st := s.stage(batch)
	if st.err != nil {
		return st.err
	}
	st.mark = nil
	err := s.commitRows(st)
	s.endWrites(st.writes, failedCommit(err))
	return err
}

// stage is stage one: the directory entries of the batch's own-file
// streams and its pack are made durable, so that a committed UNLOCKED row
// always names a file that survives a crash.
func (s *Store) stage(batch []*request) *staged {
	st := &staged{batch: batch, start: time.Now(), oldest: batch[0].at}
	if hook := s.stageHook.Load(); hook != nil {
		if st.err = (*hook)(); st.err != nil {
			return st
		}
	}
	seen := make(map[string]bool)
	for _, r := range batch {
		if r.at.Before(st.oldest) {
			st.oldest = r.at
		}
		for _, d := range r.dirs {
			if seen[d] {
				continue
			}
			seen[d] = true
			if err := fsutil.SyncDir(d); err != nil {
				st.err = err
				return st
			}
		}
		st.b.Create = append(st.b.Create, r.create...)
		st.b.Delete = append(st.b.Delete, r.delete...)
		st.b.Forget = append(st.b.Forget, r.forget...)
		st.b.Unlock = append(st.b.Unlock, r.unlock...)
	}
	var posts []packPost
	need := 0
	for _, row := range st.b.Create {
		if row.ID == 0 {
			need++
		}
	}
	for _, r := range batch {
		if len(r.pack) == 0 {
			continue
		}
		pp := packPost{kind: recPostSync}
		if r.early {
			pp.kind = recPost
		}
		for i := range r.pack {
			pp.items = append(pp.items, &r.pack[i])
			if r.pack[i].row.ID == 0 {
				need++
			}
		}
		posts = append(posts, pp)
	}
	// Ids first: a record names its rows'. Streams with files of their
	// own take theirs from the same reservations, so that ids follow the
	// order streams arrive in, whatever their size.
	if need > 0 {
		ids, err := s.ids.take(need)
		if err != nil {
			st.err = err
			return st
		}
		for _, row := range st.b.Create {
			if row.ID == 0 {
				row.ID, ids = ids[0], ids[1:]
			}
		}
		for _, pp := range posts {
			for _, it := range pp.items {
				if it.row.ID == 0 {
					it.row.ID, ids = ids[0], ids[1:]
				}
			}
		}
	}
	if len(posts) == 0 {
		return st
	}
	now := s.opt.Now().UnixMilli()
	for _, pp := range posts {
		for _, it := range pp.items {
			it.row.StatusMs = now
		}
	}
	w, err := s.writePack(posts)
	if err != nil {
		st.err = err
		return st
	}
	sp := stagedPack{w: w}
	for _, r := range batch {
		r.rows = r.rows[:0]
		for i := range r.pack {
			row := r.pack[i].row
			sp.items = append(sp.items, &r.pack[i])
			if r.early {
				row.Status = meta.Unlocked
				c := *row
				row = &c
				st.rows++
				sp.early = true
			}
			r.rows = append(r.rows, row)
		}
		st.b.Packed = append(st.b.Packed, r.rows...)
	}
	st.writes = append(st.writes, sp)
	st.mark = s.markAt(w)
	return st
}

// markAt is the log's mark at the end of pack write w.
func (s *Store) markAt(w packWrite) *meta.LogMark {
	return &meta.LogMark{Node: s.opt.Node, Seq: w.seq, Pack: w.rel, End: w.end}
}

// commitRows is stage two: the batch's rows, in one transaction, with the
// log's mark. It does not end the batch's pack writes (see endWrites).
func (s *Store) commitRows(st *staged) error {
	now := s.opt.Now().UnixMilli()
	for _, row := range st.b.Unlock {
		row.Status = meta.Unlocked
		row.StatusMs = now
	}
	// The transaction is not tied to any one caller's context: callers
	// wait for the result whatever happens to their request. Its deadline
	// counts from the submission of the batch's longest-waiting request,
	// so that batches queued behind a transaction the database never
	// answered fail at once rather than each waiting the timeout again.
	ctx := context.Background()
	if t := s.opt.CommitTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, st.oldest.Add(t))
		defer cancel()
	}
	st.b.Mark = st.mark
	err := s.repo.Apply(ctx, &st.b)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("the metadata database did not commit within %v (%w): %w", s.opt.CommitTimeout, ctx.Err(), err)
	}
	if err != nil {
		for _, row := range st.b.Unlock {
			row.Status = meta.Locked
		}
		b := &st.b
		return fmt.Errorf("commit %d streams: %w", len(b.Create)+len(b.Unlock)+len(b.Delete)+len(b.Packed), err)
	}
	return nil
}

// endWrites ends the flights of a batch's pack writes; failed says their
// rows were certainly not committed, so that their bytes may be given back.
func (s *Store) endWrites(writes []stagedPack, failed bool) {
	for _, p := range writes {
		s.packDone(p.w, p.items, failed && !p.early)
	}
}

// leftovers are the rows and forwarded posts of aborted posts whose
// removal failed (the metadata database was unavailable when the post
// failed): LOCKED rows whose files are gone, which only the next start's
// recovery removed, however soon the database came back.
type leftovers struct {
	mu       sync.Mutex
	ids      []int64
	forget   []meta.ForwardedPost
	retrying bool
}

// keepLeftovers remembers an aborted post's rows whose removal failed.
func (s *Store) keepLeftovers(ids []int64, forget []meta.ForwardedPost) {
	l := &s.left
	l.mu.Lock()
	l.ids = append(l.ids, ids...)
	l.forget = append(l.forget, forget...)
	l.mu.Unlock()
}

// retryLeftovers removes the leftovers, if any, now that a commit has
// succeeded (the database answers again). It runs on the committer's
// goroutine, which must not wait for a request of its own: the removal is
// submitted from another. A removal that fails is tried again after a
// delay (1 s, doubling up to 30 s) until it succeeds or the store closes,
// not only after the next commit: the first try after an outage can meet
// a connection the outage broke, and no post may come to commit again.
func (s *Store) retryLeftovers() {
	l := &s.left
	l.mu.Lock()
	if l.retrying || (len(l.ids) == 0 && len(l.forget) == 0) {
		l.mu.Unlock()
		return
	}
	l.retrying = true
	l.mu.Unlock()
	go func() {
		delay := time.Second
		for {
			l.mu.Lock()
			ids, forget := l.ids, l.forget
			l.ids, l.forget = nil, nil
			if len(ids) == 0 && len(forget) == 0 {
				l.retrying = false
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
			err := s.submit(context.Background(), &request{delete: ids, forget: forget})
			if err == nil {
				s.opt.Logger.Info("removed the rows of posts aborted while the metadata database was unavailable", "ids", ids, "forwardedPosts", len(forget))
				continue // any that failed meanwhile
			}
			l.mu.Lock()
			l.ids = append(l.ids, ids...)
			l.forget = append(l.forget, forget...)
			l.mu.Unlock()
			if errors.Is(err, ErrClosed) {
				break
			}
			s.opt.Logger.Warn("cannot remove the rows of aborted posts yet; trying again", "ids", ids, "in", delay.String(), "err", err)
			select {
			case <-time.After(delay):
			case <-s.done:
			}
			delay = min(2*delay, 30*time.Second)
		}
		l.mu.Lock()
		l.retrying = false
		l.mu.Unlock()
	}()
}
