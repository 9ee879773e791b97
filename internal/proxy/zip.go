package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"

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
		return fmt.Errorf("read stream %d: %w", s.ID, err)
	}
	defer r.Close()
	for part := 0; part < r.Parts(); part++ {
		var p stroomzip.Part
		sec := func(ch streamfile.Channel) (io.Reader, error) {
			if !r.Has(ch, part) {
				return nil, nil
			}
			return r.Section(ch, part)
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
