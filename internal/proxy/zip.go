package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
	"github.com/weirhq/weir/internal/stroomzip"
)

// writeZip writes the streams of an aggregate as one Stroom-format zip:
// every part of every stream, in order, renumbered from 0000000001, each
// with its full attributes as its .meta entry (so ReceiptIdPath and every
// other attribute reach the next hop), its context and its data.
// zw's entries are compressed as the destination chose (S2 for a weir
// downstream, else deflated at its compressionLevel, by default the
// fastest: the zip is in transit and the next hop decompresses it at once).
func writeZip(ctx context.Context, st *store.Store, streams []meta.Stream, zw *stroomzip.Writer) error {
	for _, s := range streams {
		if err := writeStream(ctx, st, s, zw); err != nil {
			return err
		}
	}
	return zw.Close()
}

func writeStream(ctx context.Context, st *store.Store, s meta.Stream, zw *stroomzip.Writer) error {
	// s was read with the aggregate's streams, and only forwarding them
	// everywhere deletes them: no need to look it up again.
	r, err := st.OpenRow(s)
	if err != nil {
		return &unreadableStream{id: s.ID, err: err}
	}
	defer r.Close()
	for part := 0; part < r.Parts(); part++ {
		var p stroomzip.Part
		sec := func(ch streamfile.Channel) (io.Reader, error) {
			if !r.Has(ch, part) {
				return nil, nil
			}
			sr, err := r.Section(ch, part)
			if err != nil {
				return nil, err
			}
			return sectionBlocks{unreadableOnError{SectionReader: sr, id: s.ID}, r, ch, part}, nil
		}
		m, err := sec(streamfile.Meta)
		if err != nil {
			return fmt.Errorf("stream %d part %d meta: %w", s.ID, part+1, err)
		}
		if m == nil {
			// Every stored part has its attributes; a stream without would
			// still reach the next hop with the stream's.
			m = bytes.NewReader(attr.AppendMeta(nil, s.Attributes))
		}
		p.Meta = m
		if p.Context, err = sec(streamfile.Context); err != nil {
			return fmt.Errorf("stream %d part %d context: %w", s.ID, part+1, err)
		}
		if p.Data, err = sec(streamfile.Data); err != nil {
			return fmt.Errorf("stream %d part %d data: %w", s.ID, part+1, err)
		}
		if _, err := zw.WritePart(p); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// unreadableStream is writeStream's error when a stream's stored data
// cannot be read (its file opened, or its bytes read), as opposed to the
// zip's writer failing (the destination).
type unreadableStream struct {
	id  int64
	err error
}

func (e *unreadableStream) Error() string { return fmt.Sprintf("read stream %d: %v", e.id, e.err) }
func (e *unreadableStream) Unwrap() error { return e.err }

// damaged reports whether retrying cannot help: the stream's stored bytes
// do not match their checksums or format, or its file is gone. A failed
// read of another kind (EIO, permissions) may be passing, or repaired by
// an operator, and is retried as a failed send is.
func (e *unreadableStream) damaged() bool {
	return errors.Is(e.err, streamfile.ErrCorrupt) || errors.Is(e.err, fs.ErrNotExist)
}

// unreadableOnError makes a read error of a stream's section an
// unreadableStream. It keeps the section's Seek and Size (the zip writer
// stores entries it can read twice).
type unreadableOnError struct {
	*io.SectionReader
	id int64
}

func (u unreadableOnError) Read(p []byte) (int, error) {
	n, err := u.SectionReader.Read(p)
	return n, u.wrap(err)
}

func (u unreadableOnError) ReadAt(p []byte, off int64) (int, error) {
	n, err := u.SectionReader.ReadAt(p, off)
	return n, u.wrap(err)
}

func (u unreadableOnError) wrap(err error) error {
	if err != nil && err != io.EOF {
		return &unreadableStream{id: u.id, err: err}
	}
	return err
}

// sectionBlocks is a section that a zip of S2 entries takes block by
// block (stroomzip.Blocks), passing on the blocks that the store holds
// S2-compressed as they are.
type sectionBlocks struct {
	unreadableOnError
	r    *store.Reader
	ch   streamfile.Channel
	part int
}

func (b sectionBlocks) EachBlock(fn func(data, s2block []byte) error) error {
	var fnErr error
	err := b.r.Blocks(b.ch, b.part, func(data, s2block []byte) error {
		fnErr = fn(data, s2block)
		return fnErr
	})
	if err != nil && err != fnErr {
		// The store's bytes could not be read, not the zip written.
		return &unreadableStream{id: b.id, err: err}
	}
	return err
}

func (b sectionBlocks) BlockLimits() (int, int64) { return b.r.BlockLimits(b.ch, b.part) }

// commonAttributes are the attributes every stream of an aggregate shares
// with the same value (as the reference proxy's aggregate meta), plus the
// aggregate's feed, type and GUID. They become the forward's headers; each
// part's own attributes travel in its .meta entry.
func commonAttributes(a meta.Aggregate, streams []meta.Stream) *attr.Map {
	out := &attr.Map{}
	if len(streams) > 0 && streams[0].Attributes != nil {
		out = streams[0].Attributes.Clone()
		for _, s := range streams[1:] {
			for _, kv := range out.Sorted() {
				if s.Attributes == nil || s.Attributes.Value(kv.Key) != kv.Value {
					out.Delete(kv.Key)
				}
			}
		}
	}
	out.Put("Feed", a.Feed)
	if a.Type != "" {
		out.Put("Type", a.Type)
	} else {
		out.Delete("Type")
	}
	out.Put("GUID", a.GUID)
	return out
}
