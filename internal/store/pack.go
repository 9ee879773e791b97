package store

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
)

// Small streams are stored together. The group committer appends every
// small post of a batch, as one record of its rows and stream files (see
// logrec.go), to the node's open pack (a segment file that grows to
// packSegmentSize and then gives way to a new one), flushes it once, and
// inserts their rows (complete) in one transaction, after the posts are
// answered (store.commit: log) or before: a batch of small posts costs one
// flush and a share of one transaction, where a file per post cost a
// create, a rename, two fsyncs and two transactions each. A crash before
// the transaction commits leaves records past the log's mark, which the
// next start records if their posts were answered (replay.go); bytes of a
// failed write at the end of a pack are named by no row (harmless: rows
// name their own offsets), and a pack no row names is removed at start.

// packItem is one small stream's complete stream file, to be packed.
type packItem struct {
	row  *meta.Stream
	data []byte
}

// packPost is one post's packed streams, written as one record of kind
// recPost or recPostSync (see logrec.go).
type packPost struct {
	items []*packItem
	kind  byte
}

const (
	packDir    = "packs"
	packSuffix = ".wpk"
	// packSegmentSize is the size past which the open pack is closed and
	// the next batch starts a new one. Packs are removed whole, once every
	// stream in them is deleted (a proxy's forwarded posts), so smaller
	// packs give space back sooner; bigger ones cost fewer creates.
	packSegmentSize = 32 << 20
)

// openPack is the pack batches append to; one writePack at a time writes
// it. Its fields are guarded by packMu, except that while writing is set,
// that writePack alone uses f, size and zeroed.
type openPack struct {
	f    *os.File
	rel  string // path relative to the root, as rows name it
	day  string // the day directory it is in: a new day starts a new pack
	size int64  // where the next batch goes
	// zeroed is the file's length: past size it holds zeros written
	// ahead (see zeroAhead).
	zeroed int64
	// committed is set once a batch's rows naming this pack committed.
	committed bool
	// writing is set while a batch is written and synced, outside packMu.
	writing bool
	// seq is its number in the node's log (meta.LogPack), and prev the
	// end of the log before it: the log's end again should the pack go
	// before any batch in it counts (see rollbackPack).
	seq  int64
	prev logEnd
}

// logEnd is where the node's log ends: the end of the last record that
// counts in pack rel, the seq-th of the log.
type logEnd struct {
	seq int64
	rel string
	end int64
}

// packZeroAhead is how far past a batch's end the pack is zero-filled.
const packZeroAhead = 1 << 20

// packWrite is where one batch went: [start, end) of pack rel, the
// seq-th of the node's log.
type packWrite struct {
	seq        int64
	rel        string
	start, end int64
}

// writePack appends posts to the open pack as records (starting a new pack
// when there is none, it is full or the day changed) and makes them
// durable, and sets each row's Pack, PackOffset and FileSize. Each row
// must have its ID. The batch counts as in flight on its pack, which
// RemoveDeleted leaves alone, until packDone.
func (s *Store) writePack(posts []packPost) (packWrite, error) {
	// Stage one writes every batch, but a failed batch is retried request
	// by request from stage two: writes take turns.
	s.packWriteMu.Lock()
	defer s.packWriteMu.Unlock()
	p, err := s.startPackWrite()
	if err != nil {
		return packWrite{}, err
	}
	// The bytes are written and synced without packMu: stage two takes it
	// to end the previous batch's flight (packDone), and must not wait for
	// this batch's disk write. p.writing keeps packDone from cutting the
	// file under this write, and the batch counts as in flight already.
	w := packWrite{seq: p.seq, rel: p.rel, start: p.size, end: p.size}
	bufs := s.recordBufs(p, posts)
	n, werr := fsutil.WriteVAt(p.f, bufs, w.start)
	if werr != nil {
		werr = fmt.Errorf("write pack: %w", werr)
	} else {
		w.end += n
	}
	synced := true
	if werr == nil {
		s.zeroAhead(p, w.end)
		// fdatasync: the pack's name is durable already, and a batch that
		// changed the file's length (past the zeroed part) still has the
		// length flushed with its data.
		if err := fsutil.Fdatasync(p.f); err != nil {
			werr, synced = fmt.Errorf("sync pack: %w", err), false
		}
	}
	s.packMu.Lock()
	defer s.packMu.Unlock()
	p.writing = false
	if werr != nil {
		for _, pp := range posts {
			for _, it := range pp.items {
				it.row.Pack, it.row.PackOffset = "", 0
			}
		}
		s.endFlight(p.rel)
		s.rollbackPack(w)
		if !synced {
			// After a failed fsync the kernel may have dropped the pages:
			// no later batch may trust this file (earlier ones were synced).
			s.closePack()
		}
		return packWrite{}, werr
	}
	p.size = w.end
	return w, nil
}

// recordBufs lays out the records of posts at the end of pack p and
// returns the buffers to write there, back to back; it places each row
// (Pack, PackOffset, FileSize). Called with packWriteMu held: the header bytes live in
// s.recBuf until the next batch.
func (s *Store) recordBufs(p *openPack, posts []packPost) [][]byte {
	hb := s.recBuf[:0]
	// Each post's frame and rows go into hb first, and are cut from it
	// once it has stopped growing.
	type span struct{ start, end int }
	spans := make([]span, len(posts))
	rows := make([]*meta.Stream, 0, 4)
	off := p.size + int64(len(hb))
	for i, pp := range posts {
		rows = rows[:0]
		var size int64
		for _, it := range pp.items {
			it.row.FileSize = int64(len(it.data))
			rows = append(rows, it.row)
			size += it.row.FileSize
		}
		start := len(hb)
		hb = append(hb, make([]byte, recordFrame)...)
		hb = appendRows(hb, rows)
		head := hb[start+recordFrame:]
		length := len(head) + int(size)
		crc := crc32.Update(frameCRC(pp.kind, length), castagnoli, head)
		dataAt := off + recordFrame + int64(len(head))
		for _, it := range pp.items {
			crc = crc32.Update(crc, castagnoli, it.data)
			it.row.Pack, it.row.PackOffset = p.rel, dataAt
			dataAt += it.row.FileSize
		}
		appendFrame(hb[start:start], pp.kind, length, crc)
		spans[i] = span{start, len(hb)}
		off = dataAt
	}
	s.recBuf = hb
	bufs := s.iov[:0]
	for i, pp := range posts {
		bufs = append(bufs, hb[spans[i].start:spans[i].end])
		for _, it := range pp.items {
			bufs = append(bufs, it.data)
		}
	}
	s.iov = bufs
	return bufs
}

// startPackWrite returns the pack the next batch goes to, starting a new
// one when there is none, it is full or the day changed, and marks the
// batch as being written and in flight on it.
func (s *Store) startPackWrite() (*openPack, error) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	now := s.opt.Now().UTC()
	day := filepath.Join(packDir, now.Format("2006"), now.Format("01"), now.Format("02"))
	if p := s.pack; p != nil && (p.size >= s.opt.PackSegment || p.day != day) {
		s.closePack()
	}
	if s.pack == nil {
		var rel, path string
		var f *os.File
		for {
			rel = filepath.Join(day, safeName(s.opt.Node)+"-"+strconv.FormatInt(s.packSeq.Add(1), 10)+packSuffix)
			path = filepath.Join(s.opt.Root, rel)
			if err := s.mkdirAllSync(filepath.Dir(path)); err != nil {
				return nil, fmt.Errorf("create pack directory: %w", err)
			}
			var err error
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
			if errors.Is(err, os.ErrExist) {
				// A pack of an earlier run: the sequence starts at the
				// clock's nanoseconds at Open, and this start's clock read
				// earlier than that run's (it was set back). The next
				// number, rather than failing the batch.
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("create pack: %w", err)
			}
			break
		}
		// The new name must be durable before any row names it, and the
		// pack listed in the node's log before any record in it is
		// answered (a start reads the packs listed).
		if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			_ = os.Remove(path)
			return nil, err
		}
		seq, err := s.listLogPack(rel)
		if err != nil {
			f.Close()
			_ = os.Remove(path)
			return nil, err
		}
		s.pack = &openPack{f: f, rel: rel, day: day, seq: seq, prev: s.tail}
	}
	p := s.pack
	p.writing = true
	if s.packsInFlight == nil {
		s.packsInFlight = make(map[string]int)
	}
	s.packsInFlight[p.rel]++
	return p, nil
}

// listLogPack lists pack rel as the next pack of the node's log, in the
// database, and returns its number there.
func (s *Store) listLogPack(rel string) (int64, error) {
	ctx := context.Background()
	if t := s.opt.CommitTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	return s.repo.OpenLogPack(ctx, s.opt.Node, rel, s.tail.end)
}

// endFlight ends a batch's flight on pack rel and returns how many are
// still in flight there. Called under packMu.
func (s *Store) endFlight(rel string) int {
	s.packsInFlight[rel]--
	n := s.packsInFlight[rel]
	if n <= 0 {
		delete(s.packsInFlight, rel)
	}
	return n
}

// zeroAhead is called once a batch's bytes are written up to end: when
// they reach past the zeros written ahead, it zero-fills the pack to
// packZeroAhead beyond them. The next batches then overwrite blocks the
// file already has: their fdatasync changes neither the file's length nor
// its blocks, so on ext4 it need not commit the journal, which costs as
// much again as writing the data (measured: an overwrite and fdatasync
// 170 µs, an append and fsync 280-360 µs). The batch that goes past the
// zeros pays for the length change, about one in a megabyte's worth.
// Zeros are only ever written past the data; if writing them fails (a
// full disk), the file is cut back to the data's end and the next batch
// appends as it would have anyway.
func (s *Store) zeroAhead(p *openPack, end int64) {
	if end <= p.zeroed {
		return
	}
	if s.zeros == nil {
		s.zeros = make([]byte, packZeroAhead)
	}
	if _, err := p.f.WriteAt(s.zeros, end); err != nil {
		_ = p.f.Truncate(end)
		p.zeroed = end
		return
	}
	p.zeroed = end + packZeroAhead
}

// packDone ends a batch's flight on its pack. A batch whose rows were not
// committed gives its bytes back if nothing was written after them (the
// pack goes if the batch had started it); otherwise they stay, named by
// no row, and go with the pack.
func (s *Store) packDone(w packWrite, items []*packItem, failed bool) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	inFlight := s.endFlight(w.rel)
	p := s.pack
	if p == nil || p.rel != w.rel {
		return
	}
	if !failed {
		p.committed = true
		return
	}
	for _, it := range items {
		it.row.Pack, it.row.PackOffset = "", 0
	}
	switch {
	case p.writing:
		// The next batch is being written after these bytes: they stay.
	case !p.committed && inFlight <= 0:
		// Every batch in this pack failed: no row will ever name it.
		s.rollbackPack(packWrite{rel: w.rel})
	case p.size == w.end:
		s.rollbackPack(w)
	}
}

// rollbackPack cuts the open pack back to where batch w started (or
// removes it, if w started it). If that fails, the pack is closed, so no
// later batch appends after bytes no row names.
func (s *Store) rollbackPack(w packWrite) {
	p := s.pack
	if p == nil || p.rel != w.rel {
		return
	}
	if w.start == 0 {
		p.f.Close()
		_ = os.Remove(filepath.Join(s.opt.Root, p.rel))
		s.pack = nil
		// Nothing in it counts: the log ends where it did before.
		s.tail = p.prev
		return
	}
	if err := p.f.Truncate(w.start); err != nil {
		s.closePack()
		return
	}
	p.size, p.zeroed = w.start, w.start
}

// closePack closes the open pack; the next batch starts a new one.
func (s *Store) closePack() {
	if s.pack != nil {
		// The zeros written ahead go: a closed pack is as long as its
		// streams. (A crash leaves them, named by no row, and harmless.)
		if s.pack.zeroed > s.pack.size {
			if err := s.pack.f.Truncate(s.pack.size); err != nil {
				s.opt.Logger.Warn("cut the zeros off a closed pack", "pack", s.pack.rel, "err", err)
			}
		}
		if err := s.pack.f.Close(); err != nil {
			s.opt.Logger.Warn("close pack", "pack", s.pack.rel, "err", err)
		}
		// The next pack is listed after this one, and where it ends.
		s.tail = logEnd{s.pack.seq, s.pack.rel, s.pack.size}
		s.pack = nil
	}
}

// removeOrphanPacks removes this node's packs that no row names: written
// by a batch whose transaction never committed (a crash in between).
// Only the two newest day directories are looked at: a batch's pack is
// written in the directory of the day it was written, and a crash is
// followed by a start.
func (s *Store) removeOrphanPacks(ctx context.Context) error {
	root := filepath.Join(s.opt.Root, packDir)
	days, err := newestDirs(root, 3, 2)
	if err != nil {
		return err
	}
	// And today's by the clock: after the clock was set back (from a
	// time it read too late), batches write into a directory older than
	// the newest ones.
	now := s.opt.Now().UTC()
	today := filepath.Join(root, now.Format("2006"), now.Format("01"), now.Format("02"))
	if !slices.Contains(days, today) {
		if _, err := os.Stat(today); err == nil {
			days = append(days, today)
		}
	}
	prefix := safeName(s.opt.Node) + "-"
	removed := 0
	for _, day := range days {
		entries, err := os.ReadDir(day)
		if err != nil {
			return fmt.Errorf("recover: list packs: %w", err)
		}
		for _, e := range entries {
			if !ownPack(e.Name(), prefix) {
				continue
			}
			rel, err := filepath.Rel(s.opt.Root, filepath.Join(day, e.Name()))
			if err != nil {
				return err
			}
			used, err := s.repo.PackReferenced(ctx, rel)
			if err != nil {
				return fmt.Errorf("recover: %w", err)
			}
			if !used {
				if err := os.Remove(filepath.Join(day, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("recover: remove orphan pack: %w", err)
				}
				removed++
			}
		}
	}
	if removed > 0 {
		s.opt.Logger.Warn("removed packs left by a batch that never committed", "count", removed, "node", s.opt.Node)
	}
	return nil
}

// ownPack reports whether a pack file name is <prefix><digits>.wpk: a
// longer node name that starts with this one ("N1-B-7.wpk" for node N1)
// is another node's.
func ownPack(name, prefix string) bool {
	seq, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	seq, ok = strings.CutSuffix(seq, packSuffix)
	if !ok || seq == "" {
		return false
	}
	_, err := strconv.ParseUint(seq, 10, 63)
	return err == nil
}

// newestDirs walks depth levels of numbered directories (year, month,
// day) below root, newest first, and returns up to n leaf directories.
func newestDirs(root string, depth, n int) ([]string, error) {
	if depth == 0 {
		return []string{root}, nil
	}
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recover: list %s: %w", root, err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	var out []string
	for _, name := range names {
		sub, err := newestDirs(filepath.Join(root, name), depth-1, n-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
		if len(out) >= n {
			break
		}
	}
	return out, nil
}

// RemoveDeleted removes the data of streams already marked DELETED and
// returns the ids whose rows may now be purged. A stream with a file of
// its own goes at once; a packed stream's pack goes with the last of its
// live streams, and then every row in that pack may be purged. The
// removals are made durable (their directories synced) before any id is
// returned: a row purged while its file's removal was still only in the
// page cache would leave, after a power cut, a file no row names, which
// nothing would ever remove. It is for streams nobody can restore (a
// proxy's delivered ones); PurgeDeleted is for those that can be.
func (s *Store) RemoveDeleted(ctx context.Context, streams []meta.Stream) ([]int64, error) {
	r, err := s.removeDeletedSynced(ctx, streams, nil)
	return r.ids, err
}

// removal is what removeDeleted removed: the ids whose rows may be
// purged, the directories it removed files from, and the bytes of those
// files.
type removal struct {
	ids   []int64
	dirs  map[string]bool
	bytes int64
	// kept are this node's packs that stay, for now, with their streams
	// (with claim only): the purge compacts them.
	kept map[string]bool
}

// removeDeletedSynced is removeDeleted followed by the syncs of the
// directories it removed files from; on a failed sync no id is returned.
func (s *Store) removeDeletedSynced(ctx context.Context, streams []meta.Stream, claim *int64) (removal, error) {
	r, err := s.removeDeleted(ctx, streams, claim)
	for dir := range r.dirs {
		if serr := fsutil.SyncDir(dir); serr != nil && !errors.Is(serr, os.ErrNotExist) {
			// Nothing may be purged: the rows stay DELETED, and the next
			// cleanup removes (finds gone) and syncs again.
			return removal{}, errors.Join(err, serr)
		}
	}
	return r, err
}

// removeDeleted is RemoveDeleted without the syncs. With claim (the main
// service's purge, of streams that can still be restored) only streams
// DELETED before *claim go, and each is claimed in the database (see
// meta.Repo.ClaimPurge and ClaimPack) before its file, or its pack, is
// removed: a restore then either came first, and the stream stays, or
// finds it claimed and leaves it.
func (s *Store) removeDeleted(ctx context.Context, streams []meta.Stream, claim *int64) (removal, error) {
	r := removal{dirs: map[string]bool{}, kept: map[string]bool{}}
	packs := map[string]bool{}
	var own []meta.Stream
	for _, st := range streams {
		if st.Status != meta.Deleted {
			return r, fmt.Errorf("stream %d is %s, not DELETED", st.ID, st.Status)
		}
		if st.Pack != "" {
			packs[st.Pack] = true
			continue
		}
		own = append(own, st)
	}
	if claim != nil && len(own) > 0 {
		ids := make([]int64, len(own))
		for i := range own {
			ids[i] = own[i].ID
		}
		claimed, err := s.repo.ClaimPurge(ctx, s.opt.Node, ids, *claim)
		if err != nil {
			return r, err
		}
		ok := make(map[int64]bool, len(claimed))
		for _, id := range claimed {
			ok[id] = true
		}
		keep := own[:0]
		for _, st := range own {
			if ok[st.ID] {
				keep = append(keep, st)
			}
		}
		own = keep
	}
	for _, st := range own {
		path := s.path(&st)
		r.dirs[filepath.Dir(path)] = true
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return r, fmt.Errorf("remove stream %d: %w", st.ID, err)
		}
		r.ids = append(r.ids, st.ID)
		r.bytes += st.FileSize
	}
	if len(packs) == 0 {
		return r, nil
	}
	for pack := range packs {
		// Only this node's packs: their names start with its name.
		if claim != nil && !ownPack(filepath.Base(pack), safeName(s.opt.Node)+"-") {
			continue
		}
		ids, size, err := s.removePack(ctx, pack, claim)
		if ids != nil || err != nil { // removed, or maybe
			r.dirs[filepath.Dir(filepath.Join(s.opt.Root, pack))] = true
		}
		if err != nil {
			return r, err
		}
		if ids == nil && claim != nil {
			r.kept[pack] = true
		}
		r.ids = append(r.ids, ids...)
		r.bytes += size
	}
	return r, nil
}

// removePack removes pack if none of its streams is to stay, and returns
// the ids of its rows (nil if it stays) and the size of its file. A pack
// with no batch in flight has a final live count (packMu keeps batches out
// while this runs); the open pack is closed first if it is to go. A pack
// with a batch in flight is left: that batch's rows are about to be live
// (if its transaction fails after all, the pack's deleted rows still name
// it, and the next cleanup removes it). packMu is held for one pack at a
// time: posts into packs wait for it, and a purge's batch may name
// hundreds of packs.
func (s *Store) removePack(ctx context.Context, pack string, claim *int64) ([]int64, int64, error) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	if s.packsInFlight[pack] > 0 || s.compacting[pack] {
		return nil, 0, nil
	}
	var ids []int64
	if claim != nil {
		var err error
		if ids, err = s.repo.ClaimPack(ctx, pack, *claim); err != nil || ids == nil {
			return nil, 0, err
		}
	} else {
		live, err := s.repo.PackLive(ctx, pack)
		if err != nil || live > 0 {
			return nil, 0, err
		}
	}
	if s.pack != nil && s.pack.rel == pack {
		s.closePack()
	}
	path := filepath.Join(s.opt.Root, pack)
	var size int64
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("remove pack %s: %w", pack, err)
	}
	if claim == nil {
		var err error
		if ids, err = s.repo.PackStreamIDs(ctx, pack); err != nil {
			return nil, 0, err
		}
		if ids == nil {
			ids = []int64{}
		}
	}
	return ids, size, nil
}

// PurgeResult is what PurgeDeleted removed.
type PurgeResult struct {
	Streams int64 // rows removed
	// Bytes given back: of the files removed (own files and whole
	// packs), and by the compaction of packs (the old pack's size less
	// the new one's).
	Bytes int64
	Packs int64 // packs compacted
}

// defaultPurgeBatch is how many streams PurgeDeleted reads, removes and
// purges at a time.
const defaultPurgeBatch = 1000

// PurgeDeleted removes for good this node's streams that have been
// DELETED since before beforeMs: their files (an own file at once, a pack
// with the last of its streams) and then their rows (and, by cascade,
// their earlier hops' receipt ids), a batch at a time, so that a backlog
// neither loads every row nor holds the database's writer for long. Each
// stream is claimed before its file goes (see removeDeleted), so a
// restore racing with the purge either wins or finds the stream gone.
// A pack that also holds streams that stay is then compacted, one at a
// time (see compact.go): rewritten without the purgeable streams, whose
// rows go. Other nodes' streams (PostgreSQL shared by several servers)
// are theirs to remove. A purge cut short is finished by the next one;
// runs take turns.
func (s *Store) PurgeDeleted(ctx context.Context, beforeMs int64) (PurgeResult, error) {
	if s.opt.ReadOnly {
		return PurgeResult{}, errors.New("purge deleted streams: the store is read-only")
	}
	s.purgeMu.Lock()
	defer s.purgeMu.Unlock()
	// Packs a compaction cut short left behind; one that cannot be
	// removed does not hold up the purge (its error is returned with the
	// run's).
	_, rerr := s.removeRecordedPacks(ctx)
	res, err := s.purgeDeleted(ctx, beforeMs)
	return res, errors.Join(rerr, err)
}

// purgeDeleted is PurgeDeleted's run, under purgeMu.
func (s *Store) purgeDeleted(ctx context.Context, beforeMs int64) (PurgeResult, error) {
	var res PurgeResult
	batch := s.opt.PurgeBatch
	if batch <= 0 {
		batch = defaultPurgeBatch
	}
	kept := map[string]bool{}
	cur := meta.PurgeStart
	for {
		if err := s.held(); err != nil {
			return res, fmt.Errorf("purge deleted streams: %w", err)
		}
		ss, next, err := s.repo.DeletedStreamsBefore(ctx, s.opt.Node, beforeMs, cur, batch)
		if err != nil {
			return res, err
		}
		if len(ss) == 0 {
			break
		}
		r, err := s.removeDeletedSynced(ctx, ss, &beforeMs)
		if perr := s.repo.PurgeStreams(ctx, r.ids); perr != nil {
			return res, errors.Join(err, perr)
		}
		res.Streams += int64(len(r.ids))
		res.Bytes += r.bytes
		if m := s.opt.Metrics; m != nil {
			m.purgedStreams.Add(float64(len(r.ids)))
			m.purgedBytes.Add(float64(r.bytes))
		}
		if err != nil {
			return res, err
		}
		for p := range r.kept {
			kept[p] = true
		}
		if len(ss) < batch {
			break
		}
		cur = next
	}
	return res, s.compactPacks(ctx, kept, beforeMs, &res)
}
