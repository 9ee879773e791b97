package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// Stream is a stored post as the API shows it.
type Stream struct {
	ID            int64             `json:"id"`
	Feed          string            `json:"feed"`
	Type          string            `json:"type"`
	Status        string            `json:"status" enum:"LOCKED,UNLOCKED,DELETED"`
	CreateTime    string            `json:"createTime" doc:"UTC, yyyy-MM-ddTHH:mm:ss.SSSZ"`
	EffectiveTime string            `json:"effectiveTime"`
	StatusTime    string            `json:"statusTime"`
	ReceiptID     string            `json:"receiptId"`
	Parts         int               `json:"parts"`
	RawSize       int64             `json:"rawSize" doc:"Uncompressed bytes of the data of all parts"`
	FileSize      int64             `json:"fileSize" doc:"Bytes on disk"`
	Attributes    map[string]string `json:"attributes"`
}

// ms formats a create or status time, of which 0 is none. (The effective
// time is always set, 0 being 1970-01-01: it is formatted as it is.)
func ms(v int64) string {
	if v == 0 {
		return ""
	}
	return attr.FormatTime(time.UnixMilli(v))
}

func toStream(s meta.Stream) Stream {
	a := make(map[string]string, s.Attributes.Len())
	for k, v := range s.Attributes.All() {
		a[k] = v
	}
	return Stream{ID: s.ID, Feed: s.Feed, Type: s.Type, Status: string(s.Status), CreateTime: ms(s.CreateMs),
		EffectiveTime: attr.FormatTime(time.UnixMilli(s.EffectiveMs)), StatusTime: ms(s.StatusMs), ReceiptID: s.ReceiptID, Parts: s.Parts,
		RawSize: s.RawSize, FileSize: s.FileSize, Attributes: a}
}

// Child stream type names, as the reference system spells them.
const (
	childContext = "Context"
	childMeta    = "Meta Data"
)

// StreamPart describes one part of a stream as its file records it.
type StreamPart struct {
	Part        int    `json:"part" doc:"Part number, from 1"`
	DataSize    int64  `json:"dataSize" doc:"Bytes of the part's data"`
	ContextSize *int64 `json:"contextSize" doc:"Bytes of the part's Context child; null when it has none"`
	MetaSize    *int64 `json:"metaSize" doc:"Bytes of the part's Meta Data child; null when it has none"`
}

// StreamDetail is a stream with what its file holds.
type StreamDetail struct {
	Stream
	// Named partDetails rather than parts so that parts means the same
	// (a count) in every stream object the API returns.
	PartDetails []StreamPart `json:"partDetails" doc:"Each part's sizes, read from the stream file; empty when the stream is not UNLOCKED (its data cannot be read)."`
	Children    []string     `json:"children" doc:"The child stream types any part has: Context, Meta Data."`
}

type listStreamsInput struct {
	Feed    string `query:"feed" doc:"Only streams of this feed"`
	Status  string `query:"status" enum:"LOCKED,UNLOCKED,DELETED" default:"UNLOCKED"`
	AfterID int64  `query:"afterId" minimum:"0" doc:"Page: streams with a larger id than this"`
	Limit   int    `query:"limit" minimum:"1" maximum:"1000" default:"100"`
}

type listStreamsOutput struct {
	Body struct {
		Streams     []Stream `json:"streams" doc:"Narrowed to feeds the caller may view: an empty page does not prove there are none."`
		NextAfterID int64    `json:"nextAfterId" doc:"Pass as afterId for the next page; 0 when this is the last page."`
	}
}

type streamInput struct {
	ID int64 `path:"id" minimum:"1"`
}

type streamOutput struct{ Body Stream }

type streamDetailOutput struct{ Body StreamDetail }

type dataInput struct {
	ID      int64  `path:"id" minimum:"1"`
	Part    int    `query:"part" minimum:"0" doc:"Part number from 1; 0 (default) for all parts in order"`
	Child   string `query:"child" enum:"Context,Meta Data" doc:"A child stream instead of the data"`
	Offset  int64  `query:"offset" minimum:"0" doc:"First byte of the selection to return (default 0)"`
	Length  int64  `query:"length" minimum:"0" doc:"Bytes to return from offset; 0 (default): to the end"`
	Range   string `header:"Range" doc:"One byte range within what offset and length select (bytes=a-b, bytes=a- or bytes=-n): answered 206 with Content-Range. A header with several ranges is answered with everything (200)."`
	IfRange string `header:"If-Range" doc:"Honour Range only if this is the ETag of an earlier answer (streams never change, so it always is)"`
}

func (s *server) registerStreams() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "list-streams", Method: http.MethodGet, Path: "/streams", Tags: []string{"Streams"},
		Summary: "List streams", Description: "Streams of the feeds on which the caller holds VIEW, by id. For filters, sorting and totals use POST /streams/find.",
	}), func(ctx context.Context, in *listStreamsInput) (*listStreamsOutput, error) {
		f := meta.StreamFilter{Feed: in.Feed, Status: meta.Status(in.Status), AfterID: in.AfterID,
			Limit: in.Limit + 1, FeedIn: visibleFeeds(ctx)}
		rows, err := s.Repo.ListStreams(ctx, f)
		if err != nil {
			return nil, s.internal("list streams", err)
		}
		out := &listStreamsOutput{}
		out.Body.Streams = []Stream{}
		for i, r := range rows {
			if i == in.Limit {
				out.Body.NextAfterID = rows[i-1].ID
				break
			}
			out.Body.Streams = append(out.Body.Streams, toStream(r))
		}
		return out, nil
	})

	s.registerStreamQueries()

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-stream", Method: http.MethodGet, Path: "/streams/{id}", Tags: []string{"Streams"},
		Summary:     "Get a stream",
		Description: "The stream's metadata and attributes, and the sizes of its parts and children from its file. Needs VIEW on the feed.",
		Errors:      []int{http.StatusNotFound},
	}), func(ctx context.Context, in *streamInput) (*streamDetailOutput, error) {
		st, err := s.visibleStream(ctx, in.ID, access.View)
		if err != nil {
			return nil, err
		}
		out := &streamDetailOutput{Body: StreamDetail{Stream: toStream(st), PartDetails: []StreamPart{}, Children: []string{}}}
		if st.Status != meta.Unlocked {
			return out, nil
		}
		r, err := s.Store.Open(ctx, st.ID)
		if errors.Is(err, store.ErrNotReadable) || errors.Is(err, meta.ErrNotFound) {
			return out, nil // deleted (and maybe purged) since GetStream
		}
		if err != nil {
			// The metadata is still worth showing; the file's trouble is
			// the operator's to see in the log.
			s.Log.Error("api: open stream file", "stream", st.ID, "err", err)
			return out, nil
		}
		defer r.Close()
		out.Body.PartDetails, out.Body.Children = partInfo(r)
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-stream-data", Method: http.MethodGet, Path: "/streams/{id}/data", Tags: []string{"Streams"},
		Summary: "Download stream data",
		Description: "The stored bytes, exactly: the data of every part in order, of one part, or a child stream; " +
			"offset and length (and a Range header within them) select a byte range. Needs Data - View and VIEW on the feed. " +
			"Only UNLOCKED streams can be read (409 otherwise).",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusRequestedRangeNotSatisfiable},
		Responses: map[string]*huma.Response{
			"200": {Description: "The bytes", Content: map[string]*huma.MediaType{"application/octet-stream": {}}},
			"206": {Description: "The byte range the Range header asked for", Content: map[string]*huma.MediaType{"application/octet-stream": {}}},
		},
	}), s.streamData)

	s.registerStreamText()

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "delete-stream", Method: http.MethodDelete, Path: "/streams/{id}", Tags: []string{"Streams"},
		Summary:     "Delete a stream",
		Description: "Marks the stream DELETED: it can be restored (POST /streams/restore) until store.deletePurgeAge (7 days by default) has passed, then it is removed for good. Needs Data - Delete and DELETE on the feed.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict},
	}), func(ctx context.Context, in *streamInput) (*streamOutput, error) {
		if err := require(ctx, access.DataDelete); err != nil {
			return nil, err
		}
		st, err := s.visibleStream(ctx, in.ID, access.Delete)
		if err != nil {
			return nil, err
		}
		if st.Status != meta.Unlocked {
			return nil, huma.Error409Conflict(fmt.Sprintf("stream %d is %s; only UNLOCKED streams can be deleted", st.ID, st.Status))
		}
		if err := s.Repo.SetStreamStatus(ctx, st.ID, meta.Deleted); err != nil {
			return nil, s.internal("delete stream", err)
		}
		st, err = s.Repo.GetStream(ctx, st.ID)
		if err != nil {
			return nil, s.internal("get stream", err)
		}
		return &streamOutput{Body: toStream(st)}, nil
	})
}

// partInfo reads the sizes of every part and which children exist.
func partInfo(r *store.Reader) ([]StreamPart, []string) {
	parts := make([]StreamPart, r.Parts())
	var hasCtx, hasMeta bool
	size := func(ch streamfile.Channel, p int) *int64 {
		if !r.Has(ch, p) {
			return nil
		}
		sec, err := r.Section(ch, p)
		if err != nil {
			return nil
		}
		n := sec.Size()
		return &n
	}
	for p := range parts {
		parts[p] = StreamPart{Part: p + 1, ContextSize: size(streamfile.Context, p), MetaSize: size(streamfile.Meta, p)}
		if d := size(streamfile.Data, p); d != nil {
			parts[p].DataSize = *d
		}
		hasCtx = hasCtx || parts[p].ContextSize != nil
		hasMeta = hasMeta || parts[p].MetaSize != nil
	}
	children := []string{}
	if hasCtx {
		children = append(children, childContext)
	}
	if hasMeta {
		children = append(children, childMeta)
	}
	return parts, children
}

// channelOf maps the child parameter to a channel of the stream file.
func channelOf(child string) streamfile.Channel {
	switch child {
	case childContext:
		return streamfile.Context
	case childMeta:
		return streamfile.Meta
	}
	return streamfile.Data
}

// openReadable opens a stream whose data the caller may read: Data - View
// and VIEW on its feed; 409 when it is not UNLOCKED (being written, or
// deleted: restore it first).
func (s *server) openReadable(ctx context.Context, id int64) (meta.Stream, *store.Reader, error) {
	if err := require(ctx, access.DataView); err != nil {
		return meta.Stream{}, nil, err
	}
	return s.openVisible(ctx, id)
}

// openVisible opens a stream the caller may see (VIEW on its feed) for
// reading: 409 while it is written or once it is deleted, as every way
// of reading a stream answers.
func (s *server) openVisible(ctx context.Context, id int64) (meta.Stream, *store.Reader, error) {
	st, err := s.visibleStream(ctx, id, access.View)
	if err != nil {
		return st, nil, err
	}
	notReadable := func(st meta.Stream) error {
		why := "it is still being written"
		if st.Status == meta.Deleted {
			why = "it was deleted; restore it to read its data"
		}
		return huma.Error409Conflict(fmt.Sprintf("stream %d is %s: %s", st.ID, st.Status, why))
	}
	if st.Status != meta.Unlocked {
		return st, nil, notReadable(st)
	}
	r, err := s.Store.Open(ctx, st.ID)
	if errors.Is(err, store.ErrNotReadable) {
		st.Status = meta.Deleted // changed since GetStream, and only a delete can do that
		return st, nil, notReadable(st)
	}
	if errors.Is(err, meta.ErrNotFound) {
		// Deleted and removed for good (store.deletePurgeAge) since.
		return st, nil, huma.Error404NotFound(fmt.Sprintf("no stream %d", st.ID))
	}
	if err != nil {
		return st, nil, s.streamUnreadable(st.ID, "open stream", err)
	}
	return st, r, nil
}

func (s *server) streamData(ctx context.Context, in *dataInput) (*huma.StreamResponse, error) {
	st, r, err := s.openReadable(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	ch := channelOf(in.Child)
	first, last := 0, r.Parts()-1
	if in.Part > 0 {
		if in.Part > r.Parts() {
			r.Close()
			return nil, huma.Error404NotFound(fmt.Sprintf("stream %d has %d part(s)", st.ID, r.Parts()))
		}
		first, last = in.Part-1, in.Part-1
	}
	var sections []*io.SectionReader
	for p := first; p <= last; p++ {
		if !r.Has(ch, p) {
			continue
		}
		sec, err := r.Section(ch, p)
		if err != nil {
			r.Close()
			return nil, s.streamUnreadable(st.ID, "read stream", err)
		}
		sections = append(sections, sec)
	}
	if len(sections) == 0 && in.Child != "" {
		// As the text view answers: a child that is not there is 404,
		// not an empty 200 a client could take for an empty child.
		r.Close()
		if in.Part > 0 {
			return nil, huma.Error404NotFound(fmt.Sprintf("part %d of stream %d has no %s", in.Part, st.ID, in.Child))
		}
		return nil, huma.Error404NotFound(fmt.Sprintf("no part of stream %d has %s", st.ID, in.Child))
	}
	all := newConcat(sections)

	// The selection is [offset, offset+length); a Range header picks
	// within it, so Content-Range speaks of the selection.
	if in.Offset > all.size {
		r.Close()
		return nil, bytesPastTheEnd(in.Offset, selectionName(st.ID, in.Part, in.Child), all.size)
	}
	selSize := all.size - in.Offset
	if in.Length > 0 && in.Length < selSize {
		selSize = in.Length
	}
	etag := fmt.Sprintf(`"weir-stream-%d"`, st.ID)
	start, n, status := in.Offset, selSize, http.StatusOK
	contentRange := ""
	if in.Range != "" && (in.IfRange == "" || in.IfRange == etag) {
		rs, rn, ok, satisfiable := parseRange(in.Range, selSize)
		if !satisfiable {
			r.Close()
			return nil, huma.ErrorWithHeaders(
				huma.NewError(http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("range %q is not within the %d bytes selected", in.Range, selSize)),
				http.Header{"Content-Range": {fmt.Sprintf("bytes */%d", selSize)}})
		}
		if ok {
			start, n, status = in.Offset+rs, rn, http.StatusPartialContent
			contentRange = fmt.Sprintf("bytes %d-%d/%d", rs, rs+rn-1, selSize)
		}
	}
	name := fmt.Sprintf("stream-%d", st.ID)
	if in.Part > 0 {
		name += fmt.Sprintf("-part-%d", in.Part)
	}
	if in.Child != "" {
		name += "-" + strings.ToLower(strings.ReplaceAll(in.Child, " ", ""))
	}
	body := io.NewSectionReader(all, start, n)
	resp, err := s.download(ctx, func(hc huma.Context, w http.ResponseWriter) {
		defer r.Close()
		hc.SetHeader("Content-Type", "application/octet-stream")
		hc.SetHeader("Content-Length", strconv.FormatInt(n, 10))
		hc.SetHeader("Content-Disposition", `attachment; filename="`+name+`.dat"`)
		hc.SetHeader("Accept-Ranges", "bytes")
		hc.SetHeader("ETag", etag)
		if contentRange != "" {
			hc.SetHeader("Content-Range", contentRange)
		}
		hc.SetStatus(status)
		// A block-sized buffer: each read inflates whole blocks.
		if _, err := io.CopyBuffer(w, body, make([]byte, streamfile.DefaultBlockSize)); err != nil {
			s.Log.Warn("stream download ended early", "stream", st.ID, "err", err)
		}
	})
	if err != nil {
		r.Close()
	}
	return resp, err
}

// parseRange reads a Range header for a body of size bytes. ok is false
// when the header is to be ignored and the whole body sent (not a byte
// range, malformed, or several ranges: RFC 9110 lets a server ignore
// Range); satisfiable is false when the one range lies outside the body.
func parseRange(h string, size int64) (start, n int64, ok, satisfiable bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false, true
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false, true
	}
	num := func(s string) (int64, bool) {
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil && v >= 0 && s != "" && s[0] != '+'
	}
	if a == "" { // bytes=-n: the last n bytes
		suffix, valid := num(b)
		if !valid {
			return 0, 0, false, true
		}
		if suffix == 0 || size == 0 {
			return 0, 0, false, false
		}
		suffix = min(suffix, size)
		return size - suffix, suffix, true, true
	}
	first, valid := num(a)
	if !valid {
		return 0, 0, false, true
	}
	lastByte := size - 1
	if b != "" {
		l, valid := num(b)
		if !valid || l < first {
			return 0, 0, false, true
		}
		lastByte = min(l, size-1)
	}
	if first >= size {
		return 0, 0, false, false
	}
	return first, lastByte - first + 1, true, true
}

// concat reads several sections as one run of bytes.
type concat struct {
	secs   []*io.SectionReader
	starts []int64 // offset of each section in the whole
	size   int64
}

func newConcat(secs []*io.SectionReader) *concat {
	c := &concat{secs: secs}
	for _, s := range secs {
		c.starts = append(c.starts, c.size)
		c.size += s.Size()
	}
	return c
}

func (c *concat) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for i, s := range c.secs {
		if n == len(p) {
			break
		}
		end := c.starts[i] + s.Size()
		if off+int64(n) >= end {
			continue
		}
		in := off + int64(n) - c.starts[i]
		m, err := s.ReadAt(p[n:min(len(p), n+int(end-(off+int64(n))))], in)
		n += m
		if err != nil && !errors.Is(err, io.EOF) {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// visibleStream returns a stream the caller holds level on its feed for:
// 404 when it does not exist, 403 when the caller may not touch it.
func (s *server) visibleStream(ctx context.Context, id int64, level access.Level) (meta.Stream, error) {
	st, err := s.Repo.GetStream(ctx, id)
	if errors.Is(err, meta.ErrNotFound) {
		return st, huma.Error404NotFound(fmt.Sprintf("no stream %d", id))
	}
	if err != nil {
		return st, s.internal("get stream", err)
	}
	if err := requireFeed(ctx, st.Feed, level); err != nil {
		if p := caller(ctx); p == nil || p.FeedLevel(st.Feed) < access.View {
			// A caller who may not see the feed is not told its name:
			// any key could otherwise learn every stream's feed by
			// walking the ids.
			return st, huma.Error403Forbidden(fmt.Sprintf("this needs %s permission on the feed of stream %d", level, id))
		}
		return st, err
	}
	return st, nil
}
