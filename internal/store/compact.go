package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

// Compaction of packs. A pack goes whole once every stream in it may be
// purged (removePack); one that also holds streams that stay (live, or
// deleted too recently to purge) is compacted by the purge instead: it is
// rewritten without the purgeable streams, whose rows then go. The steps,
// and what a crash after each leaves:
//
//  1. The purgeable rows of the pack are claimed (meta.ClaimPackDeleted),
//     as removePack claims a whole pack's: from now on they cannot be
//     restored, and a restore that came first keeps its stream among
//     those that stay. A crash leaves claimed rows, which stay
//     unrestorable and which the next purge (finding the pack again)
//     finishes.
//  2. The new pack's name is recorded in pack_removals (a file that is
//     to go once no row names it), and only then is the file created in
//     the current day's directory: so no crash can leave a pack file
//     that nothing removes, wherever it is.
//  3. The staying streams' bytes are copied, each [PackOffset,
//     PackOffset+FileSize) of the old pack (a complete stream file: no
//     recompression), through a fixed buffer, into the new pack, which is
//     then fsynced, and its directory. A crash leaves a new pack no row
//     names: the recorded removal takes it (at the next start or purge).
//  4. One transaction (meta.CompactPack) repoints every staying row that
//     still names the old pack to the new one, deletes the claimed rows,
//     checks that no row names the old pack any more (or changes nothing),
//     and swaps the recorded removal of the new pack for one of the old.
//     Before it commits, rows name the old pack, whole; after, the new
//     one, durable and byte-exact. An error here (even one whose commit
//     may have happened) leaves both files to the recorded removals,
//     which remove whichever no row names.
//  5. The old pack is removed, its directory fsynced, and its recorded
//     removal forgotten. A crash before leaves the record: the next start
//     or purge removes the file.
//
// Recorded removals are carried out at start (Open) and at the start of
// each purge, whose runs take turns (purgeMu): never while a compaction
// is between steps 2 and 4. A file is removed only if no row names it.
//
// A pack with a batch in flight is not compacted (the batch's rows are
// about to name it); the open pack without one is closed first, so that
// no batch appends to it any more. packMu is held only for that, and to
// mark the pack as being compacted, which keeps RemoveDeleted off it. A reader that read a row before step 4 and opens the old pack after
// step 5 finds it gone, reads the row again and opens the new one (see
// Open); one that opened the old pack before step 5 reads on (an open
// file outlives its name).

// compactBuf is the buffer of a compaction's copy: its memory does not
// grow with the pack.
const compactBuf = 1 << 20

// compaction is what compactPack did.
type compaction struct {
	streams []int64 // purged rows
	bytes   int64   // bytes given back: the old pack's size less the new one's
}

// compactStep is called by a compaction after each step (tests inject
// failures, as a crash there would leave things, by returning an error).
func (s *Store) compactStep(step string) error {
	if s.compactHook == nil {
		return nil
	}
	return s.compactHook(step)
}

// compactPack rewrites this node's pack without its streams DELETED since
// before beforeMs, and purges their rows (see above). It does nothing
// (an empty compaction) for a pack with a batch in flight or one being
// compacted or removed, or when no stream in it may be purged. The open
// pack is closed first.
func (s *Store) compactPack(ctx context.Context, pack string, beforeMs int64) (compaction, error) {
	var c compaction
	s.packMu.Lock()
	if s.packsInFlight[pack] > 0 || s.compacting[pack] {
		s.packMu.Unlock()
		return c, nil
	}
	if s.pack != nil && s.pack.rel == pack {
		// The open pack, with no batch in flight: a server that receives
		// little (or nothing since) can keep one open for days, and the
		// data deleted in it must go after the purge age as anywhere
		// else. It is closed (the next batch starts a new pack) and
		// compacted like any other.
		s.closePack()
	}
	if s.compacting == nil {
		s.compacting = make(map[string]bool)
	}
	s.compacting[pack] = true
	s.packMu.Unlock()
	defer func() {
		s.packMu.Lock()
		delete(s.compacting, pack)
		s.packMu.Unlock()
	}()

	claimed, err := s.repo.ClaimPackDeleted(ctx, pack, beforeMs)
	if err != nil || len(claimed) == 0 {
		return c, err
	}
	if err := s.compactStep("claimed"); err != nil {
		return c, err
	}
	staying, err := s.repo.PackStaying(ctx, pack)
	if err != nil {
		return c, err
	}
	oldPath := filepath.Join(s.opt.Root, pack)
	fi, err := os.Stat(oldPath)
	if err != nil {
		return c, fmt.Errorf("compact pack %s: %w", pack, err)
	}
	var newRel string
	var newSize int64
	if len(staying) > 0 {
		now := s.opt.Now().UTC()
		day := filepath.Join(packDir, now.Format("2006"), now.Format("01"), now.Format("02"))
		newRel = filepath.Join(day, safeName(s.opt.Node)+"-"+strconv.FormatInt(s.packSeq.Add(1), 10)+packSuffix)
		if err := s.repo.AddPackRemoval(ctx, s.opt.Node, newRel); err != nil {
			return c, err
		}
		if newSize, err = s.copyStaying(oldPath, filepath.Join(s.opt.Root, newRel), staying); err != nil {
			if errors.Is(err, errPackNotCreated) {
				// Whatever is under that name is not this compaction's
				// (a pack of an earlier run, named from a clock that was
				// set back since): it stays; only the record goes.
				if derr := s.repo.DonePackRemoval(ctx, newRel); derr != nil {
					err = errors.Join(err, derr)
				}
			} else {
				s.dropNewPack(ctx, newRel)
			}
			return c, fmt.Errorf("compact pack %s: %w", pack, err)
		}
	}
	if err := s.compactStep("copied"); err != nil {
		return c, err
	}
	if err := s.held(); err != nil {
		// Another server may be acting as this node: its start may
		// have removed the new pack. The recorded removal stays.
		return c, fmt.Errorf("compact pack %s: %w", pack, err)
	}
	if err := s.repo.CompactPack(ctx, s.opt.Node, pack, newRel, staying, claimed); err != nil {
		// The transaction may have committed (its answer lost): the
		// recorded removals take whichever pack no row names.
		return c, err
	}
	c.streams = claimed
	c.bytes = max(fi.Size()-newSize, 0)
	if err := s.compactStep("committed"); err != nil {
		return c, err
	}
	if err := s.removeRecorded(ctx, pack, false); err != nil {
		// Its rows are purged all the same; the record stays, for the
		// next start or purge.
		return c, err
	}
	return c, nil
}

// copyStaying copies the staying streams from the pack at oldPath into a
// new pack at newPath, back to back, setting their NewOffset, and makes
// it durable (the file and its directory). It returns the new pack's size.
func (s *Store) copyStaying(oldPath, newPath string, staying []meta.PackMove) (int64, error) {
	src, err := os.Open(oldPath)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if err := s.mkdirAllSync(filepath.Dir(newPath)); err != nil {
		return 0, fmt.Errorf("create pack directory: %w: %w", errPackNotCreated, err)
	}
	dst, err := os.OpenFile(newPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return 0, fmt.Errorf("create pack: %w: %w", errPackNotCreated, err)
	}
	buf := make([]byte, compactBuf)
	var off int64
	for i := range staying {
		m := &staying[i]
		n, err := io.CopyBuffer(onlyWriter{dst}, io.NewSectionReader(src, m.Offset, m.Size), buf)
		if err == nil && n != m.Size {
			err = fmt.Errorf("stream %d: %d of its %d bytes in the pack: %w", m.ID, n, m.Size, io.ErrUnexpectedEOF)
		}
		if err == nil {
			// The copy is checked, every block against its checksum (in
			// the page cache: it was just written), before any row may
			// name it: damaged bytes (bit rot in the old pack, or a bad
			// read) must not move into a new pack as if they were good,
			// nor the old pack, the evidence, go. The pack is then not
			// compacted; the damaged stream is named in the error.
			err = s.verifyCopy(dst, off, m.Size)
		}
		if err != nil {
			dst.Close()
			return 0, fmt.Errorf("copy stream %d: %w", m.ID, err)
		}
		m.NewOffset = off
		off += n
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return 0, fmt.Errorf("sync pack: %w", err)
	}
	if err := dst.Close(); err != nil {
		return 0, fmt.Errorf("close pack: %w", err)
	}
	if err := fsutil.SyncDir(filepath.Dir(newPath)); err != nil {
		return 0, err
	}
	return off, nil
}

// verifyCopy checks the stream file at [off, off+size) of f: its header,
// index and trailer, and every block's checksum.
func (s *Store) verifyCopy(f *os.File, off, size int64) error {
	r, err := streamfile.NewReader(io.NewSectionReader(f, off, size), size, s.codec)
	if err == nil {
		err = r.Verify()
	}
	if errors.Is(err, streamfile.ErrCorrupt) {
		return fmt.Errorf("its stored data is damaged: %w", err)
	}
	return err
}

// errPackNotCreated is copyStaying's error when it did not create the new
// pack: a file already there under its name (O_EXCL) is not the
// compaction's to remove.
var errPackNotCreated = errors.New("the new pack was not created")

// onlyWriter hides the file's ReadFrom, so that io.CopyBuffer uses the
// fixed buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

// dropNewPack removes a compaction's new pack that no row can name yet
// (the transaction was not tried). On failure the recorded removal
// stays, for the next start or purge.
func (s *Store) dropNewPack(ctx context.Context, rel string) {
	if err := s.removeRecorded(ctx, rel, false); err != nil {
		s.opt.Logger.Warn("remove the new pack of a failed compaction; trying again at the next purge", "pack", rel, "err", err)
	}
}

// removeRecorded carries out the recorded removal of pack: its file goes
// (unless check finds a row naming it: then it stays) and the removal is
// made durable before the record is forgotten.
func (s *Store) removeRecorded(ctx context.Context, pack string, check bool) error {
	if check {
		used, err := s.repo.PackReferenced(ctx, pack)
		if err != nil {
			return err
		}
		if used {
			return s.repo.DonePackRemoval(ctx, pack)
		}
	}
	path := filepath.Join(s.opt.Root, pack)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pack %s: %w", pack, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := s.compactStep("removed"); err != nil {
		return err
	}
	return s.repo.DonePackRemoval(ctx, pack)
}

// removeRecordedPacks carries out this node's recorded pack removals
// (left by compactions cut short) and returns how many it carried out.
// One that fails (a file the server may not remove, say) does not hold up
// the others: their errors are returned together, and the records stay
// for the next run. Called at start and by the purge (under purgeMu):
// never during a compaction.
func (s *Store) removeRecordedPacks(ctx context.Context) (int, error) {
	packs, err := s.repo.PackRemovals(ctx, s.opt.Node)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range packs {
		if err := ctx.Err(); err != nil {
			return n, errors.Join(append(errs, err)...)
		}
		if err := s.removeRecorded(ctx, p, true); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// held is Options.Held: nil while this server may act as its node.
func (s *Store) held() error {
	if s.opt.Held == nil {
		return nil
	}
	return s.opt.Held()
}

// compactPacks compacts packs, one at a time, in name order. A pack that
// cannot be compacted (its file unreadable, say) does not hold up the
// others: the first error is returned, with how many failed.
func (s *Store) compactPacks(ctx context.Context, packs map[string]bool, beforeMs int64, res *PurgeResult) error {
	names := make([]string, 0, len(packs))
	for p := range packs {
		names = append(names, p)
	}
	sort.Strings(names)
	var first error
	failed := 0
	for _, p := range names {
		if err := ctx.Err(); err != nil {
			return errors.Join(first, err)
		}
		if err := s.held(); err != nil {
			return errors.Join(first, fmt.Errorf("compact packs: %w", err))
		}
		c, err := s.compactPack(ctx, p, beforeMs)
		if len(c.streams) > 0 {
			res.Streams += int64(len(c.streams))
			res.Bytes += c.bytes
			res.Packs++
			if m := s.opt.Metrics; m != nil {
				m.purgedStreams.Add(float64(len(c.streams)))
				m.purgedBytes.Add(float64(c.bytes))
				m.compactedPacks.Inc()
			}
		}
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 1 {
		return fmt.Errorf("%d packs not compacted; the first: %w", failed, first)
	}
	return first
}
