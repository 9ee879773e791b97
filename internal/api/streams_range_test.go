package api_test

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// stream posts body to a new feed (created with the given encoding, ""
// for the default) and returns the id of the stream it became.
func (a *testAPI) stream(feed, encoding string, body []byte, headers ...string) int64 {
	a.t.Helper()
	spec := map[string]string{"name": feed}
	if encoding != "" {
		spec["encoding"] = encoding
	}
	b, _ := json.Marshal(spec)
	if resp, out := a.call(http.MethodPost, "/api/feeds", string(b), "Content-Type", "application/json"); resp.StatusCode >= 300 {
		a.t.Fatalf("create feed %s: %d %s", feed, resp.StatusCode, out)
	}
	if resp, out := a.do(http.MethodPost, "/datafeed", string(body), append([]string{"Feed", feed}, headers...)...); resp.StatusCode != http.StatusOK {
		a.t.Fatalf("post to %s: %d %s", feed, resp.StatusCode, out)
	}
	resp, out := a.call(http.MethodGet, "/api/streams?feed="+feed, "")
	var list struct{ Streams []struct{ ID int64 } }
	if err := json.Unmarshal([]byte(out), &list); resp.StatusCode != http.StatusOK || err != nil || len(list.Streams) != 1 {
		a.t.Fatalf("streams of %s: %d %v %s", feed, resp.StatusCode, err, out)
	}
	return list.Streams[0].ID
}

// TestOffsetPastTheEnd: an offset past the end of what is read is 416 in
// every mode of /text as for /data, with a message that says how long the
// part is (in the mode's units) and where it is; an offset at the end is a
// 200 that returns nothing, and hex mode no longer moves an offset past the
// end back to it.
func TestOffsetPastTheEnd(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, nil)

	utf8ID := a.stream("RANGE-UTF8", "", []byte("héllo wörld\n")) // 12 characters, 14 bytes
	latin1ID := a.stream("RANGE-LATIN1", "ISO-8859-1", []byte("caf\xe9\n"))
	bomID := a.stream("RANGE-BOM", "", []byte("\xef\xbb\xbfabc"))
	gzipID := a.stream("RANGE-GZIP", "", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")) // not text: 10 bytes
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for _, e := range [][2]string{{"001.dat", "abc"}, {"001.ctx", "context!"}, {"002.meta", "Note:empty data\n"}} {
		w, err := zw.Create(e[0])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(e[1]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zipID := a.stream("RANGE-ZIP", "", zb.Bytes(), "Compression", "ZIP") // part 1 "abc" with a Context, part 2 empty

	type view struct {
		Text            string
		Offset, Length  int64
		TotalChars      *int64
		TotalCharsExact bool
		NonText         *struct{ Reason string }
	}
	ok := func(path string, offset, length int64, text string) view {
		t.Helper()
		resp, body := a.call(http.MethodGet, path, "")
		var v view
		if err := json.Unmarshal([]byte(body), &v); resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("GET %s: %d %v %s", path, resp.StatusCode, err, body)
			return v
		}
		if v.Offset != offset || v.Length != length || v.Text != text {
			t.Errorf("GET %s: offset %d, length %d, text %q; want %d, %d, %q", path, v.Offset, v.Length, v.Text, offset, length, text)
		}
		return v
	}
	past := func(path, want, contentRange string) {
		t.Helper()
		resp, body := a.call(http.MethodGet, path, "")
		var p struct{ Detail string }
		_ = json.Unmarshal([]byte(body), &p)
		if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || p.Detail != want {
			t.Errorf("GET %s: %d %s\nwant 416 %q", path, resp.StatusCode, body, want)
		}
		if got := resp.Header.Get("Content-Range"); got != contentRange {
			t.Errorf("GET %s: Content-Range %q, want %q", path, got, contentRange)
		}
	}

	// Text mode, a charset of varying width: characters are counted.
	u := fmt.Sprintf("/api/streams/%d", utf8ID)
	if v := ok(u+"/text?offset=12", 12, 0, ""); v.TotalChars == nil || *v.TotalChars != 12 || !v.TotalCharsExact {
		t.Errorf("text at the end: total %v exact %v, want 12 exact", v.TotalChars, v.TotalCharsExact)
	}
	ok(u+"/text?offset=11", 11, 1, "\n")
	partU := fmt.Sprintf("part 1 of stream %d", utf8ID)
	past(u+"/text?offset=13", "offset 13 is past the end of "+partU+", which is 12 characters long: the offset can be at most 12", "")
	// Within the bytes but past the characters.
	past(u+"/text?offset=14&length=5", "offset 14 is past the end of "+partU+", which is 12 characters long: the offset can be at most 12", "")
	past(u+"/text?mode=text&offset=1099511627776", "offset 1099511627776 is past the end of "+partU+", which is 12 characters long: the offset can be at most 12", "")
	// Hex mode counts bytes, and is not moved back to the end any more.
	ok(u+"/text?mode=hex&offset=14", 14, 0, "")
	ok(u+"/text?mode=hex&offset=13", 13, 1, "0000000d  0a                                                |.|\n")
	past(u+"/text?mode=hex&offset=15", "offset 15 is past the end of "+partU+", which is 14 bytes long: the offset can be at most 14", "bytes */14")
	// /data as before, with the same words.
	if resp, body := a.call(http.MethodGet, u+"/data?offset=14", ""); resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("data at the end: %d %q", resp.StatusCode, body)
	}
	past(u+"/data?part=1&offset=15", "offset 15 is past the end of "+partU+", which is 14 bytes long: the offset can be at most 14", "bytes */14")
	past(u+"/data?offset=15", fmt.Sprintf("offset 15 is past the end of the data of stream %d (all its parts), which is 14 bytes long: the offset can be at most 14", utf8ID), "bytes */14")

	// A fixed-width charset: characters are bytes.
	l := fmt.Sprintf("/api/streams/%d", latin1ID)
	ok(l+"/text?offset=3", 3, 2, "é\n")
	ok(l+"/text?offset=5", 5, 0, "")
	past(l+"/text?offset=6", fmt.Sprintf("offset 6 is past the end of part 1 of stream %d, which is 5 characters long: the offset can be at most 5", latin1ID), "")

	// A byte-order mark is not a character.
	b := fmt.Sprintf("/api/streams/%d", bomID)
	ok(b+"/text?offset=3", 3, 0, "")
	past(b+"/text?offset=4", fmt.Sprintf("offset 4 is past the end of part 1 of stream %d, which is 3 characters long "+
		"(after its UTF-8 byte-order mark): the offset can be at most 3", bomID), "")
	past(b+"/text?mode=hex&offset=7", fmt.Sprintf("offset 7 is past the end of part 1 of stream %d, which is 6 bytes long: the offset can be at most 6", bomID), "bytes */6")

	// Data that is not text: its characters are not counted, but there
	// are no more of them than bytes.
	g := fmt.Sprintf("/api/streams/%d", gzipID)
	if v := ok(g+"/text?offset=10", 10, 0, ""); v.NonText == nil {
		t.Errorf("gzip data: no nonText")
	}
	past(g+"/text?offset=11", fmt.Sprintf("offset 11 is past the end of part 1 of stream %d, which is 10 bytes long "+
		"and is not text (offset 0 says why): the offset can be at most 10", gzipID), "")
	past(g+"/text?mode=hex&offset=11", fmt.Sprintf("offset 11 is past the end of part 1 of stream %d, which is 10 bytes long: the offset can be at most 10", gzipID), "bytes */10")

	// An empty part, a child, and every part of a stream.
	z := fmt.Sprintf("/api/streams/%d", zipID)
	ok(z+"/text?part=2", 0, 0, "")
	ok(z+"/text?part=2&mode=hex", 0, 0, "")
	past(z+"/text?part=2&offset=1", fmt.Sprintf("offset 1 is past the end of part 2 of stream %d, which is 0 characters long: the offset can be at most 0", zipID), "")
	past(z+"/text?part=2&mode=hex&offset=1", fmt.Sprintf("offset 1 is past the end of part 2 of stream %d, which is 0 bytes long: the offset can be at most 0", zipID), "bytes */0")
	ok(z+"/text?child=Context&offset=7", 7, 1, "!")
	past(z+"/text?child=Context&offset=9", fmt.Sprintf("offset 9 is past the end of the Context of part 1 of stream %d, which is 8 characters long: the offset can be at most 8", zipID), "")
	past(z+"/data?part=1&child=Context&offset=9", fmt.Sprintf("offset 9 is past the end of the Context of part 1 of stream %d, which is 8 bytes long: the offset can be at most 8", zipID), "bytes */8")
	past(z+"/data?offset=4", fmt.Sprintf("offset 4 is past the end of the data of stream %d (all its parts), which is 3 bytes long: the offset can be at most 3", zipID), "bytes */3")
	past(z+"/data?child=Context&offset=9", fmt.Sprintf("offset 9 is past the end of the Context of stream %d (all its parts), which is 8 bytes long: the offset can be at most 8", zipID), "bytes */8")
}
