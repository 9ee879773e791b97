package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

// Reader reads one complete stream.
type Reader struct {
	Stream meta.Stream
	f      *os.File
	sf     *streamfile.Reader
}

// Open opens a stream for reading. Only UNLOCKED streams are readable:
// a LOCKED stream is still being written and a DELETED one is gone.
func (s *Store) Open(ctx context.Context, id int64) (*Reader, error) {
	st, err := s.repo.GetStream(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("stream %d: %w", id, err)
	}
	if st.Status != meta.Unlocked {
		return nil, fmt.Errorf("stream %d is %s: %w", id, st.Status, ErrNotReadable)
	}
	r, err := s.openFile(st)
	if errors.Is(err, os.ErrNotExist) {
		// Deleted and purged since the row was read (a short
		// store.deletePurgeAge): say so, rather than that a file is missing.
		if now, gerr := s.repo.GetStream(ctx, id); gerr != nil {
			return nil, fmt.Errorf("stream %d: %w", id, gerr)
		} else if now.Status != meta.Unlocked {
			return nil, fmt.Errorf("stream %d is %s: %w", id, now.Status, ErrNotReadable)
		}
	}
	return r, err
}

// OpenRow opens a stream whose row the caller has just read (saving the
// lookup Open makes), as long as that row says it is complete.
func (s *Store) OpenRow(st meta.Stream) (*Reader, error) {
	if st.Status != meta.Unlocked {
		return nil, fmt.Errorf("stream %d is %s: %w", st.ID, st.Status, ErrNotReadable)
	}
	return s.openFile(st)
}

func (s *Store) openFile(st meta.Stream) (*Reader, error) {
	p := s.Path(st)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("stream %d: open file: %w", st.ID, err)
	}
	var ra io.ReaderAt = f
	size := st.FileSize
	if st.Pack == "" {
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("stream %d: stat file: %w", st.ID, err)
		}
		size = fi.Size()
	} else {
		ra = io.NewSectionReader(f, st.PackOffset, st.FileSize)
	}
	sf, err := streamfile.NewReader(ra, size, s.codec)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stream %d (%s): %w", st.ID, p, err)
	}
	return &Reader{Stream: st, f: f, sf: sf}, nil
}

// Close releases the stream file.
func (r *Reader) Close() error { return r.f.Close() }

// Parts is the number of parts of the stream.
func (r *Reader) Parts() int { return r.sf.Parts() }

// Has reports whether a part has the given channel.
func (r *Reader) Has(ch streamfile.Channel, part int) bool { return r.sf.Has(ch, part) }

// Section gives random access to the uncompressed bytes of one channel of one part (0-based).
func (r *Reader) Section(ch streamfile.Channel, part int) (*io.SectionReader, error) {
	return r.sf.Section(ch, part)
}

// Path is the file holding the stream, for operators: its own file, or
// the pack it is in (at PackOffset).
func (s *Store) Path(st meta.Stream) string {
	if st.Pack != "" {
		return filepath.Join(s.opt.Root, st.Pack)
	}
	return s.path(&st)
}
