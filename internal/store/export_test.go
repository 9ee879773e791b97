package store

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/weirhq/weir/internal/meta"
)

// SetCompactHook makes a compaction call fn after each of its steps
// ("claimed", "copied", "committed", "removed"); an error from fn stops
// it there, as a crash would.
func SetCompactHook(s *Store, fn func(step string) error) { s.compactHook = fn }

// SetStageHook makes stage one call fn before each batch; an error from fn
// fails the batch there.
func SetStageHook(s *Store, fn func() error) {
	if fn == nil {
		s.stageHook.Store(nil)
		return
	}
	s.stageHook.Store(&fn)
}

// SetPackSeq sets the sequence number the next pack's name follows (as a
// start after the clock went back would).
func SetPackSeq(s *Store, n int64) { s.packSeq.Store(n) }

// Kinds of a pack's records (see logrec.go).
const (
	RecPost     = recPost
	RecPostSync = recPostSync
)

// PackRecord is one record of a pack as read back: its kind, where it
// starts and ends, and the rows of the post (as replay reads them).
type PackRecord struct {
	Kind       byte
	Start, End int64
	Rows       []meta.Stream
}

// ReadPackRecords reads the records of pack rel under root, from its start
// to the first place no intact record starts, which it returns too.
func ReadPackRecords(root, node, rel string) ([]PackRecord, int64, error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	var out []PackRecord
	var off int64
	for {
		kind, payload, err := readRecord(f, off, fi.Size(), nil)
		if errors.Is(err, errNoRecord) {
			return out, off, nil
		}
		if err != nil {
			return nil, 0, err
		}
		r := PackRecord{Kind: kind, Start: off, End: off + recordFrame + int64(len(payload))}
		if r.Rows, err = parseRows(payload, node, rel, off+recordFrame); err != nil {
			return nil, 0, err
		}
		out = append(out, r)
		off = r.End
	}
}
