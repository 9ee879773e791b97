package store

import (
	"context"
	"fmt"
	"io"
	"os"

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
	return s.openFile(st)
}

func (s *Store) openFile(st meta.Stream) (*Reader, error) {
	p := s.path(&st)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("stream %d: open file: %w", st.ID, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stream %d: stat file: %w", st.ID, err)
	}
	sf, err := streamfile.NewReader(f, fi.Size(), s.codec)
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

// Path is the stream file's location, for operators.
func (s *Store) Path(st meta.Stream) string { return s.path(&st) }
