package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/meta"
)

// replayRows is how many rows one transaction of replay inserts.
const replayRows = 512

// replay records the rows of the posts in this node's log that no
// transaction recorded: posts answered once their records were durable
// (store.commit: log) whose transaction had not committed when the server
// stopped (a crash, a power cut, a close while the database failed). It
// reads the log from its mark in the database (meta.LogMark), through each
// pack whose header names the one before as its predecessor, to the end,
// inserts the rows of the answered posts' records there (a row already in
// place stays as it is), and moves the mark to the end, so that the next
// pack names the last one. Records of posts that waited for their
// transaction (recPostSync) are left: their rows are in if the post
// succeeded.
func (s *Store) replay(ctx context.Context) error {
	mark, _, err := s.repo.LogMark(ctx, s.opt.Node)
	if err != nil {
		return fmt.Errorf("replay the store log: %w", err)
	}
	next, err := s.logSuccessors(mark.Pack)
	if err != nil {
		return fmt.Errorf("replay the store log: %w", err)
	}
	cur := logEnd{mark.Pack, mark.End}
	var rows []*meta.Stream
	var recorded int
	flush := func(at logEnd) error {
		if len(rows) == 0 && at == (logEnd{mark.Pack, mark.End}) {
			return nil
		}
		b := &meta.Batch{Packed: rows, Mark: &meta.LogMark{Node: s.opt.Node, Pack: at.rel, End: at.end}}
		if err := s.repo.Apply(ctx, b); err != nil {
			return fmt.Errorf("replay the store log: record %d streams of %s: %w", len(rows), at.rel, err)
		}
		recorded += len(rows)
		mark.Pack, mark.End = at.rel, at.end
		rows = rows[:0]
		return nil
	}
	seen := map[string]bool{}
	var buf []byte
	for {
		succ, ok := next[cur.rel]
		limit := int64(-1)
		if ok {
			// Records in cur past where its successor says it ends were
			// written by a batch that failed.
			limit = succ.prevEnd
		}
		if cur.rel != "" && !seen[cur.rel] {
			seen[cur.rel] = true
			end, err := s.scanLog(cur, limit, &buf, func(r []meta.Stream, end int64) error {
				for i := range r {
					rows = append(rows, &r[i])
				}
				if len(rows) >= replayRows {
					return flush(logEnd{cur.rel, end})
				}
				return nil
			})
			if err != nil {
				return err
			}
			cur.end = end
		}
		if !ok || seen[succ.rel] {
			break
		}
		if err := flush(cur); err != nil {
			return err
		}
		cur = logEnd{succ.rel, 0}
	}
	if err := flush(cur); err != nil {
		return err
	}
	if recorded > 0 {
		s.opt.Logger.Warn("recorded the streams of posts received before the last stop whose rows were not in the database yet",
			"streams", recorded, "node", s.opt.Node, "logEnd", cur.rel)
	}
	s.tail = cur
	return nil
}

// successor is a pack of the node's log and where the one before it ends.
type successor struct {
	rel     string
	prevEnd int64
}

// logSuccessors maps each pack of the node's log that a later one names as
// its predecessor to that one (and "" to the log's first pack). It looks in
// the day directories from the one of pack (the mark's) on, and in today's
// by the clock (after the clock was set back, packs go into an older
// directory); without a mark, in the newest two. Where two name the same
// predecessor (one removed after its first write failed, but left), the
// later pack of this run is the one.
func (s *Store) logSuccessors(pack string) (map[string]successor, error) {
	root := filepath.Join(s.opt.Root, packDir)
	var days []string
	if pack == "" {
		var err error
		if days, err = newestDirs(root, 3, 2); err != nil {
			return nil, err
		}
	} else {
		from := filepath.Dir(filepath.Join(s.opt.Root, pack))
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			if depth := strings.Count(rel, string(filepath.Separator)); rel != "." && depth == 2 {
				if p >= from {
					days = append(days, p)
				}
				return filepath.SkipDir
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list packs: %w", err)
		}
	}
	now := s.opt.Now().UTC()
	today := filepath.Join(root, now.Format("2006"), now.Format("01"), now.Format("02"))
	if fi, err := os.Stat(today); err == nil && fi.IsDir() && !contains(days, today) {
		days = append(days, today)
	}
	prefix := safeName(s.opt.Node) + "-"
	out := map[string]successor{}
	seqOf := map[string]uint64{}
	var buf []byte
	for _, day := range days {
		entries, err := os.ReadDir(day)
		if err != nil {
			return nil, fmt.Errorf("list packs: %w", err)
		}
		for _, e := range entries {
			if !ownPack(e.Name(), prefix) {
				continue
			}
			rel, err := filepath.Rel(s.opt.Root, filepath.Join(day, e.Name()))
			if err != nil {
				return nil, err
			}
			h, ok, err := s.readPackHeader(rel, &buf)
			if err != nil {
				return nil, err
			}
			if !ok || h.Node != s.opt.Node {
				continue
			}
			seq, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(e.Name(), prefix), packSuffix), 10, 64)
			if old, dup := out[h.Prev]; dup && seqOf[old.rel] > seq {
				continue
			}
			out[h.Prev] = successor{rel: rel, prevEnd: h.PrevEnd}
			seqOf[rel] = seq
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readPackHeader reads the header record a pack of the log begins with;
// false for a pack without one (written by a compaction, or before packs
// were logs).
func (s *Store) readPackHeader(rel string, buf *[]byte) (packHeader, bool, error) {
	f, err := os.Open(filepath.Join(s.opt.Root, rel))
	if errors.Is(err, os.ErrNotExist) {
		return packHeader{}, false, nil
	}
	if err != nil {
		return packHeader{}, false, fmt.Errorf("open pack %s: %w", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return packHeader{}, false, fmt.Errorf("open pack %s: %w", rel, err)
	}
	kind, payload, err := readRecord(f, 0, fi.Size(), *buf)
	if errors.Is(err, errNoRecord) || err == nil && kind != recPackHeader {
		return packHeader{}, false, nil
	}
	if err != nil {
		return packHeader{}, false, fmt.Errorf("pack %s: %w", rel, err)
	}
	*buf = payload
	h, err := parsePackHeader(payload)
	if err != nil {
		return packHeader{}, false, nil
	}
	return h, true, nil
}

// scanLog reads the records of pack at.rel from at.end to the first place
// no intact record starts (or limit, if not negative), passes the rows of
// each answered post's record to got with the end of that record, and
// returns where the records end. A pack that is not there has none.
func (s *Store) scanLog(at logEnd, limit int64, buf *[]byte, got func(rows []meta.Stream, end int64) error) (int64, error) {
	f, err := os.Open(filepath.Join(s.opt.Root, at.rel))
	if errors.Is(err, os.ErrNotExist) {
		return at.end, nil
	}
	if err != nil {
		return 0, fmt.Errorf("replay the store log: open pack %s: %w", at.rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("replay the store log: %w", err)
	}
	size := fi.Size()
	if limit >= 0 && limit < size {
		size = limit
	}
	off := at.end
	for {
		kind, payload, err := readRecord(f, off, size, *buf)
		if errors.Is(err, errNoRecord) {
			return off, nil
		}
		if err != nil {
			return 0, fmt.Errorf("replay the store log: pack %s: %w", at.rel, err)
		}
		*buf = payload
		end := off + recordFrame + int64(len(payload))
		if kind == recPost {
			rows, err := parseRows(payload, s.opt.Node, at.rel, off+recordFrame)
			if err != nil {
				// Its checksum held: written so by this store, which
				// a later version may read. Stop here rather than
				// guess.
				return 0, fmt.Errorf("replay the store log: pack %s at %d: %w", at.rel, off, err)
			}
			if err := got(rows, end); err != nil {
				return 0, err
			}
		}
		off = end
	}
}
