package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

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
		// store.deletePurgeAge): say so, rather than that a file is
		// missing. Or moved, by the compaction of its pack: read it there.
		return s.reopen(ctx, st, err)
	}
	return r, err
}

// reopen is called when the file a row named is not there: the stream
// was purged since (then it says so), or its pack was compacted and the
// row now names another (then it opens that, once).
func (s *Store) reopen(ctx context.Context, st meta.Stream, err error) (*Reader, error) {
	now, gerr := s.repo.GetStream(ctx, st.ID)
	switch {
	case gerr != nil:
		return nil, fmt.Errorf("stream %d: %w", st.ID, gerr)
	case now.Status != meta.Unlocked:
		return nil, fmt.Errorf("stream %d is %s: %w", st.ID, now.Status, ErrNotReadable)
	case st.Pack != "" && (now.Pack != st.Pack || now.PackOffset != st.PackOffset):
		return s.openFile(now)
	}
	return nil, err
}

// OpenRow opens a stream whose row the caller has just read (saving the
// lookup Open makes), as long as that row says it is complete.
func (s *Store) OpenRow(st meta.Stream) (*Reader, error) {
	if st.Status != meta.Unlocked {
		return nil, fmt.Errorf("stream %d is %s: %w", st.ID, st.Status, ErrNotReadable)
	}
	r, err := s.openFile(st)
	if errors.Is(err, os.ErrNotExist) && st.Pack != "" {
		// Its pack compacted since the row was read (see Open).
		return s.reopen(context.Background(), st, err)
	}
	return r, err
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

// Blocks calls fn with each block of one channel of one part, its bytes
// and its S2 block when it is stored as one (streamfile.Reader.Blocks).
func (r *Reader) Blocks(ch streamfile.Channel, part int, fn func(data, s2block []byte) error) error {
	return r.sf.Blocks(ch, part, fn)
}

// BlockLimits returns the stream file's block size and the bytes the
// blocks of one channel of one part take in it.
func (r *Reader) BlockLimits(ch streamfile.Channel, part int) (maxBlock int, stored int64) {
	return r.sf.BlockSize(), r.sf.StoredSize(ch, part)
}

// Path is the file holding the stream, for operators: its own file, or
// the pack it is in (at PackOffset).
func (s *Store) Path(st meta.Stream) string {
	if st.Pack != "" {
		return filepath.Join(s.opt.Root, st.Pack)
	}
	return s.path(&st)
}

// Problem says in a few words, for the stream's reader (an API caller, a
// proxy's failure area), why its file could not be opened or read: its
// bytes are damaged (they do not match their checksums or the format),
// the file is missing, it may not be read, or the disk failed to read it.
// It names no path (the log has the details). It is "" when err is none
// of these.
func Problem(err error) string {
	var pe *fs.PathError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe) && pe.Op != "open" && pe.Op != "read" && pe.Op != "stat":
		return "" // writing somewhere else failed, say
	case errors.Is(err, streamfile.ErrCorrupt):
		return "its stored data is damaged"
	case errors.Is(err, fs.ErrNotExist):
		return "its stored file is missing"
	case errors.Is(err, fs.ErrPermission):
		return "its stored file may not be read (permissions)"
	case errors.Is(err, syscall.EIO):
		return "the disk failed to read its stored file (I/O error)"
	}
	return ""
}
