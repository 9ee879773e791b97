package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/meta"
)

// Small streams are stored together. The group committer writes the
// stream files of every small post in a batch back to back into one pack
// file, fsyncs it once, and inserts their rows (complete) in the batch's
// transaction: a batch of small posts costs one file fsync, one directory
// fsync and one transaction instead of a file, a rename and two
// transactions each. A crash before the transaction commits leaves a pack
// no row names; the next start removes it.

// packItem is one small stream's complete stream file, to be packed.
type packItem struct {
	row  *meta.Stream
	data []byte
}

const (
	packDir    = "packs"
	packSuffix = ".wpk"
)

// writePack writes items into a new pack file and makes it durable, and
// sets each row's Pack, PackOffset and FileSize. It returns the pack's
// path relative to the root.
func (s *Store) writePack(items []*packItem) (string, error) {
	now := s.opt.Now().UTC()
	rel := filepath.Join(packDir, now.Format("2006"), now.Format("01"), now.Format("02"),
		safeName(s.opt.Node)+"-"+strconv.FormatInt(s.packSeq.Add(1), 10)+packSuffix)
	path := filepath.Join(s.opt.Root, rel)
	if err := mkdirAllSync(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("create pack directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return "", fmt.Errorf("create pack: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = os.Remove(path)
		}
	}()
	var off int64
	for _, it := range items {
		if _, err := f.Write(it.data); err != nil {
			return "", fmt.Errorf("write pack: %w", err)
		}
		it.row.Pack, it.row.PackOffset, it.row.FileSize = rel, off, int64(len(it.data))
		off += int64(len(it.data))
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("sync pack: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close pack: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	ok = true
	return rel, nil
}

// removePack deletes a pack whose rows were not committed.
func (s *Store) removePack(rel string, items []*packItem) {
	_ = os.Remove(filepath.Join(s.opt.Root, rel))
	for _, it := range items {
		it.row.Pack, it.row.PackOffset = "", 0
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
// live streams, and then every row in that pack may be purged.
func (s *Store) RemoveDeleted(ctx context.Context, streams []meta.Stream) ([]int64, error) {
	var purge []int64
	packs := map[string]bool{}
	for _, st := range streams {
		if st.Status != meta.Deleted {
			return purge, fmt.Errorf("stream %d is %s, not DELETED", st.ID, st.Status)
		}
		if st.Pack != "" {
			packs[st.Pack] = true
			continue
		}
		if err := os.Remove(s.path(&st)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return purge, fmt.Errorf("remove stream %d: %w", st.ID, err)
		}
		purge = append(purge, st.ID)
	}
	for pack := range packs {
		live, err := s.repo.PackLive(ctx, pack)
		if err != nil {
			return purge, err
		}
		if live > 0 {
			continue
		}
		if err := os.Remove(filepath.Join(s.opt.Root, pack)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return purge, fmt.Errorf("remove pack %s: %w", pack, err)
		}
		ids, err := s.repo.PackStreamIDs(ctx, pack)
		if err != nil {
			return purge, err
		}
		purge = append(purge, ids...)
	}
	return purge, nil
}
