package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
)

// replayRows is how many rows one transaction of replay inserts.
const replayRows = 512

// replay records the rows of the posts in this node's log that no
// transaction recorded: posts answered once their records were durable
// (store.commit: log) whose transaction had not committed when the server
// stopped (a crash, a power cut, a close while the database failed). It
// reads the log from its mark in the database (meta.LogMark) through every
// pack the database lists after it (meta.Repo.LogPacks), each up to where
// the next one says it ended (records past that are a failed write's),
// inserts the rows of the answered posts' records there (a row already in
// place stays as it is), and moves the mark to the end, so that the next
// pack is listed after the last one. Records of posts that waited for
// their transaction (recPostSync) are left: their rows are in if the post
// succeeded. A pack listed and not there (removed since, with all its
// streams) has nothing to read.
func (s *Store) replay(ctx context.Context) error {
	mark, _, err := s.repo.LogMark(ctx, s.opt.Node)
	if err != nil {
		return fmt.Errorf("replay the store log: %w", err)
	}
	packs, err := s.repo.LogPacks(ctx, s.opt.Node, mark.Seq)
	if err != nil {
		return fmt.Errorf("replay the store log: %w", err)
	}
	recordedAt := logEnd{mark.Seq, mark.Pack, mark.End}
	cur := recordedAt
	var rows []*meta.Stream
	var recorded int
	var maxID int64
	flush := func(at logEnd) error {
		if len(rows) == 0 && at == recordedAt {
			return nil
		}
		b := &meta.Batch{Packed: rows, Mark: &meta.LogMark{Node: s.opt.Node, Seq: at.seq, Pack: at.rel, End: at.end}}
		if err := s.repo.Apply(ctx, b); err != nil {
			return fmt.Errorf("replay the store log: record %d streams of %s: %w", len(rows), at.rel, err)
		}
		recorded += len(rows)
		recordedAt = at
		rows = rows[:0]
		return nil
	}
	var buf []byte
	for i, p := range packs {
		start := int64(0)
		if p.Seq == mark.Seq && p.Pack == mark.Pack {
			start = mark.End
		}
		limit := int64(-1)
		if i+1 < len(packs) {
			limit = packs[i+1].PrevEnd
		}
		end, err := s.scanLog(p.Pack, start, limit, &buf, func(r []meta.Stream, end int64) error {
			for i := range r {
				rows = append(rows, &r[i])
				maxID = max(maxID, r[i].ID)
			}
			if len(rows) >= replayRows {
				return flush(logEnd{p.Seq, p.Pack, end})
			}
			return nil
		})
		if err != nil {
			return err
		}
		cur = logEnd{p.Seq, p.Pack, end}
	}
	if err := flush(cur); err != nil {
		return err
	}
	if err := s.repo.AdvanceStreamIDs(ctx, maxID); err != nil {
		return fmt.Errorf("replay the store log: %w", err)
	}
	if recorded > 0 {
		s.opt.Logger.Warn("recorded the streams of posts received before the last stop whose rows were not in the database yet",
			"streams", recorded, "node", s.opt.Node, "logEnd", cur.rel)
	}
	s.tail = cur
	return nil
}

// scanLog reads the records of pack rel from start to the first place no
// intact record starts (or limit, if not negative), passes the rows of
// each answered post's record to got with the end of that record, and
// returns where the records end. A pack that is not there has none. The
// pack is flushed before the first rows go to got.
func (s *Store) scanLog(rel string, start, limit int64, buf *[]byte, got func(rows []meta.Stream, end int64) error) (int64, error) {
	f, err := os.Open(filepath.Join(s.opt.Root, rel))
	if errors.Is(err, os.ErrNotExist) {
		return start, nil
	}
	if err != nil {
		return 0, fmt.Errorf("replay the store log: open pack %s: %w", rel, err)
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
	off := start
	synced := false
	for {
		kind, payload, err := readRecord(f, off, size, *buf)
		if errors.Is(err, errNoRecord) {
			return off, nil
		}
		if err != nil {
			return 0, fmt.Errorf("replay the store log: pack %s: %w", rel, err)
		}
		*buf = payload
		end := off + recordFrame + int64(len(payload))
		if kind == recPost {
			rows, err := parseRows(payload, s.opt.Node, rel, off+recordFrame)
			if err != nil {
				// Its checksum held: written so by this store, which
				// a later version may read. Stop here rather than
				// guess.
				return 0, fmt.Errorf("replay the store log: pack %s at %d: %w", rel, off, err)
			}
			if !synced {
				// A record read back may be in the page cache only: the
				// last run was killed between writing it and flushing it
				// (its post then got no answer). Its rows must not name
				// bytes a power cut could still take.
				if err := fsutil.Fdatasync(f); err != nil {
					return 0, fmt.Errorf("replay the store log: %w", err)
				}
				synced = true
			}
			if err := got(rows, end); err != nil {
				return 0, err
			}
		}
		off = end
	}
}
