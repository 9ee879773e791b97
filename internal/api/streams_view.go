package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

// Viewer limits: what one call returns by default and at most. They bound
// the response (and the JSON encoding of it) whatever a client asks for.
const (
	defaultTextChars = 80_000 // the reference viewer's maxCharactersPerFetch
	maxTextChars     = 1_000_000
	defaultHexBytes  = 4096
	maxHexBytes      = 65536 // 4096 dump lines
)

// NonText says why a part cannot be shown as text.
type NonText struct {
	_      struct{} `nullable:"true"`
	Reason string   `json:"reason"`
}

// TextView is a range of one part (or child) of a stream, decoded.
type TextView struct {
	Stream int64   `json:"stream"`
	Part   int     `json:"part" doc:"Part number, from 1"`
	Child  *string `json:"child" doc:"Context or Meta Data; null for the data"`
	Mode   string  `json:"mode" enum:"text,hex"`
	Text   string  `json:"text" doc:"text: the characters; hex: a hex dump (hexdump -C layout, offsets from the start of the part). Empty when nonText is set in text mode."`
	// Charset is what the bytes were decoded with: the feed's encoding
	// (Context: its context encoding; Meta Data: UTF-8), unless a
	// byte-order mark says otherwise.
	Charset string  `json:"charset" doc:"The character encoding used: the feed's encoding (its context encoding for Context, UTF-8 for Meta Data) unless a byte-order mark overrides it"`
	BOM     *string `json:"bom" doc:"The byte-order mark at the start of the part (UTF-8, UTF-16LE, UTF-16BE, UTF-32LE, UTF-32BE), or null. Text mode skips it; hex mode shows it."`
	Offset  int64   `json:"offset" doc:"Where the returned range starts: characters after any byte-order mark (text), bytes from the start of the part (hex)"`
	Length  int64   `json:"length" doc:"Characters (text) or bytes (hex) returned; fewer than asked at the end of the part"`
	// TotalBytes counts every byte of the part, a byte-order mark included.
	TotalBytes      int64    `json:"totalBytes" doc:"Bytes of the part, a byte-order mark included"`
	TotalChars      *int64   `json:"totalChars" doc:"Characters of the whole part (after any byte-order mark), whatever range was asked for; unless totalCharsExact, an estimate from the characters per byte decoded so far, always more than offset + length while more characters follow, so that paging while offset < totalChars reaches the end. Null in hex mode and for data that is not text."`
	TotalCharsExact bool     `json:"totalCharsExact"`
	NonText         *NonText `json:"nonText" doc:"Set when the part is not text (judged from its first 8 KiB), saying why; null for text"`
}

type textInput struct {
	ID     int64  `path:"id" minimum:"1"`
	Part   int    `query:"part" minimum:"1" default:"1" doc:"Part number, from 1"`
	Child  string `query:"child" enum:"Context,Meta Data" doc:"A child stream of the part instead of its data"`
	Mode   string `query:"mode" enum:"text,hex" default:"text"`
	Offset int64  `query:"offset" minimum:"0" doc:"text: the first character (after any byte-order mark); hex: the first byte"`
	Length int64  `query:"length" minimum:"0" doc:"Characters (text, default 80000, at most 1000000) or bytes (hex, default 4096, at most 65536); 0: the default"`
}

type textOutput struct{ Body TextView }

func (s *server) registerStreamText() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-stream-text", Method: http.MethodGet, Path: "/streams/{id}/text", Tags: []string{"Streams"},
		Summary: "View stream data as text or hex",
		Description: "A character range of one part (or of its Context or Meta Data child) decoded with the feed's encoding, " +
			"honouring a byte-order mark, or a byte range as a hex dump. Data that is not text (compressed, binary, or not " +
			"valid in its encoding) is reported in nonText with the reason instead of being shown as text; hex mode always works. " +
			"Character offsets count Unicode code points. An offset past the end of the part (in characters, or bytes in hex mode) " +
			"is 416, saying how long the part is; an offset at its end returns nothing. " +
			"Needs Data - View and VIEW on the feed; only UNLOCKED streams can be read.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusRequestedRangeNotSatisfiable, http.StatusUnprocessableEntity},
	}), s.streamText)
}

func (s *server) streamText(ctx context.Context, in *textInput) (*textOutput, error) {
	limit, def := int64(maxTextChars), int64(defaultTextChars)
	if in.Mode == "hex" {
		limit, def = maxHexBytes, defaultHexBytes
	}
	if in.Length > limit {
		return nil, huma.Error422UnprocessableEntity(fmt.Sprintf("length is at most %d in %s mode", limit, in.Mode),
			&huma.ErrorDetail{Location: "query.length", Message: fmt.Sprintf("at most %d", limit), Value: in.Length})
	}
	length := in.Length
	if length == 0 {
		length = def
	}
	st, r, err := s.openReadable(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if in.Part > r.Parts() {
		return nil, huma.Error404NotFound(fmt.Sprintf("stream %d has %d part(s)", st.ID, r.Parts()))
	}
	ch := channelOf(in.Child)
	if !r.Has(ch, in.Part-1) {
		what := "data"
		if in.Child != "" {
			what = in.Child
		}
		return nil, huma.Error404NotFound(fmt.Sprintf("part %d of stream %d has no %s", in.Part, st.ID, what))
	}
	sec, err := r.Section(ch, in.Part-1)
	if err != nil {
		return nil, s.streamUnreadable(st.ID, "read stream", err)
	}
	size := sec.Size()
	head := make([]byte, min(size, sniffBytes))
	if _, err := sec.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, s.streamUnreadable(st.ID, "read stream", err)
	}

	view := TextView{Stream: st.ID, Part: in.Part, Mode: in.Mode, TotalBytes: size}
	if in.Child != "" {
		view.Child = &in.Child
	}
	encName, err := s.encodingOf(ctx, st.Feed, ch)
	if err != nil {
		return nil, err
	}
	cs, csErr := lookupCharset(encName)
	bomCS, bomLen, hasBOM := detectBOM(head)
	if hasBOM {
		// As in the reference system, a byte-order mark overrides the
		// configured encoding: it cannot be there by accident.
		cs, csErr = bomCS, nil
		view.BOM = &bomCS.name
	}
	view.Charset = cs.name
	reason := ""
	if csErr != nil {
		view.Charset = encName
		reason = cannotShow + "the feed's encoding " + csErr.Error() + "; correct the feed's encoding." + showHex
	} else {
		reason = nonTextReason(head, int64(len(head)) == size, bomLen, cs, st.Attributes.Value("UndeclaredCompression"))
	}
	if reason != "" {
		view.NonText = &NonText{Reason: reason}
	}

	// An offset past the end of the part is 416 in every mode, as for
	// /data, saying how long the part is; an offset at its end answers
	// nothing (length 0), so that paging ends without an error.
	what := selectionName(st.ID, in.Part, in.Child)
	if in.Mode == "hex" {
		if in.Offset > size {
			return nil, bytesPastTheEnd(in.Offset, what, size)
		}
		b := make([]byte, min(length, size-in.Offset))
		if _, err := sec.ReadAt(b, in.Offset); err != nil && !errors.Is(err, io.EOF) {
			return nil, s.streamUnreadable(st.ID, "read stream", err)
		}
		view.Text, view.Offset, view.Length = hexDump(b, in.Offset), in.Offset, int64(len(b))
		return &textOutput{Body: view}, nil
	}
	afterBOM := ""
	if hasBOM {
		afterBOM = "(after its " + bomCS.name + " byte-order mark)"
	}
	view.Offset = in.Offset
	if view.NonText != nil {
		// Its characters cannot be counted, but there are no more of them
		// than bytes.
		if body := size - int64(bomLen); in.Offset > body {
			return nil, pastTheEnd(in.Offset, what, body, "bytes", strings.TrimSpace(afterBOM+" and is not text (offset 0 says why)"))
		}
		return &textOutput{Body: view}, nil
	}
	tr, err := readTextRange(ctx, sec, int64(bomLen), size, cs, in.Offset, length)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("decode stream %d: %w", st.ID, ctx.Err()) // nobody is waiting for an answer
	}
	if err != nil {
		return nil, s.streamUnreadable(st.ID, "decode stream", err)
	}
	// Decoding stops at the end of the part, so a range that starts past
	// it has counted every character: the total is exact.
	if tr.exact && in.Offset > tr.total {
		return nil, pastTheEnd(in.Offset, what, tr.total, "characters", afterBOM)
	}
	view.Text, view.Length, view.TotalChars, view.TotalCharsExact = tr.text, tr.chars, &tr.total, tr.exact
	return &textOutput{Body: view}, nil
}

// selectionName names what a view or a download of a stream reads, for
// messages: "part 2 of stream 7", "the Context of part 2 of stream 7", or
// for every part (part 0) "the data of stream 7 (all its parts)".
func selectionName(id int64, part int, child string) string {
	switch {
	case part > 0 && child == "":
		return fmt.Sprintf("part %d of stream %d", part, id)
	case part > 0:
		return fmt.Sprintf("the %s of part %d of stream %d", child, part, id)
	case child == "":
		return fmt.Sprintf("the data of stream %d (all its parts)", id)
	}
	return fmt.Sprintf("the %s of stream %d (all its parts)", child, id)
}

// pastTheEnd is the 416 for an offset past the end of what, which is
// length units ("bytes", "characters") long; note adds to that ("(after
// its UTF-8 byte-order mark)"). An offset at the end is not past it.
func pastTheEnd(offset int64, what string, length int64, unit, note string) error {
	if note != "" {
		note = " " + note
	}
	if length == 1 {
		unit = strings.TrimSuffix(unit, "s")
	}
	return huma.NewError(http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf(
		"offset %d is past the end of %s, which is %d %s long%s: the offset can be at most %d", offset, what, length, unit, note, length))
}

// bytesPastTheEnd is pastTheEnd for a byte offset, with the Content-Range
// that RFC 9110 §15.5.17 has a 416 to a byte range carry: bytes */length.
func bytesPastTheEnd(offset int64, what string, length int64) error {
	return huma.ErrorWithHeaders(pastTheEnd(offset, what, length, "bytes", ""),
		http.Header{"Content-Range": {fmt.Sprintf("bytes */%d", length)}})
}

// encodingOf is the configured encoding of a channel of the feed's streams:
// Meta Data is always UTF-8 (weir writes it).
func (s *server) encodingOf(ctx context.Context, feedName string, ch streamfile.Channel) (string, error) {
	if ch == streamfile.Meta {
		return "UTF-8", nil
	}
	f, err := s.Repo.GetFeed(ctx, feedName)
	if errors.Is(err, meta.ErrNotFound) {
		return "UTF-8", nil // the feed is gone; its streams remain
	}
	if err != nil {
		return "", s.internal("get feed", err)
	}
	if ch == streamfile.Context {
		return f.ContextEncoding, nil
	}
	return f.Encoding, nil
}
