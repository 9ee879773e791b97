package app_test

import (
	"bytes"
	"compress/zlib"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
)

// TestDatafeedGzip: Compression GZIP in any case, multi-member bodies, and the
// data stored decompressed without the Compression attribute (cases 10, 11).
func TestDatafeedGzip(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef line of text\n", 40000) // spans many store blocks
	for _, tc := range []struct {
		name, path  string
		compression string
		body        []byte
		want        string
	}{
		{"GZIP", "/datafeed", "GZIP", gz(t, "SOME TEST DATA"), "SOME TEST DATA"},
		{"gzip", "/datafeed", "gzip", gz(t, "SOME TEST DATA"), "SOME TEST DATA"},
		{"gZiP", "/datafeed", "gZiP", gz(t, "SOME TEST DATA"), "SOME TEST DATA"},
		{"multi-member", "/datafeed", "GZIP", gz(t, "LINE1\n", "LINE2\n"), "LINE1\nLINE2\n"},
		{"many_members", "/datafeed", "GZIP", gz(t, "a", "", "b", "c\n"), "abc\n"},
		{"large", "/datafeed", "GZIP", gz(t, big), big},
		{"query_parameter", "/datafeed?compression=gzip", "", gz(t, "SOME TEST DATA"), "SOME TEST DATA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, nil)
			hdr := []string{"Feed", testFeed}
			if tc.compression != "" {
				hdr = append(hdr, "Compression", tc.compression)
			}
			r := send(t, s, http.MethodPost, tc.path, bytes.NewReader(tc.body), hdr...)
			id := r.ok(t)
			st := oneStream(t, s, testFeed, "Raw Events", id)
			want := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "StreamSize", itoa(len(tc.want)))
			wantAttrs(t, "stream", st.Attributes, want)
			wantParts(t, s, st, part{data: tc.want, meta: want})
			l := receiveLog(t, s, "receiptId", id)
			if l.num("bytes") != float64(len(tc.body)) || l.num("storedBytes") != float64(len(tc.want)) {
				t.Errorf("log bytes %v stored %v, want %d %d", l["bytes"], l["storedBytes"], len(tc.body), len(tc.want))
			}
		})
	}
}

// TestDatafeedGzipInvalid: a body declared GZIP that is not valid gzip is
// 500 with Service-Status 400 and nothing is stored (cases 7, 21).
func TestDatafeedGzipInvalid(t *testing.T) {
	t.Parallel()
	valid := gz(t, "Sample Data")
	corrupt := gz(t, strings.Repeat("Sample Data that compresses somewhat ", 200))
	for i := 20; i < 40; i++ {
		corrupt[i] ^= 0x55
	}
	for _, tc := range []struct {
		name string
		body []byte
		msg  string
	}{
		{"not_gzip", []byte("SOME TEST DATA"), "gzip"}, // case 7
		{"truncated", valid[:len(valid)-10], ""},       // case 21
		// Too short for another member's header: not "unexpected EOF" alone.
		{"trailing_garbage", append(gz(t, "Sample Data"), "GARBAGE"...), "ends early, or is followed by bytes that are not compressed data"},
		{"trailing_member_truncated", append(gz(t, "one"), gz(t, "two")[:12]...), "ends early"},
		{"corrupt_deflate", corrupt, ""},
		{"header_only", valid[:10], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, nil)
			post(t, s, tc.body, "Feed", testFeed, "Compression", "GZIP").
				fails(t, 500, 400, "Compressed stream invalid", "[Feed: TEST-FEED, Compression: GZIP, Type: Raw Events]", tc.msg)
			nothingStored(t, s)
		})
	}
}

// TestDatafeedUnknownCompression: any Compression other than ZIP, GZIP or
// NONE is 406 with Service-Status 200, and nothing is stored (case 2). The
// receipt checks run first, so a rejected feed gets its own answer.
func TestDatafeedUnknownCompression(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	for _, c := range []string{"UNKNOWN", "deflate", "BZIP2", "gzip2", "ZIP,GZIP", "identity"} {
		post(t, s, []byte("SOME TEST DATA"), "Feed", testFeed, "EffectiveTime", "2024-01-01T00:00:00Z", "Compression", c).
			fails(t, 406, 200, "Unknown compression", c)
	}
	post(t, s, []byte("SOME TEST DATA"), "Feed", "NO-SUCH-FEED", "Compression", "UNKNOWN").fails(t, 406, 110)
	nothingStored(t, s)
}

// TestDatafeedContentEncoding: a body with Content-Encoding is decoded before
// the datafeed handles it and stored decompressed; sending it with
// Compression GZIP or ZIP as well is 500/400; unsupported codings are 406/200.
func TestDatafeedContentEncoding(t *testing.T) {
	t.Parallel()
	const text = "SOME TEST DATA\nand a second line\n"
	var zl bytes.Buffer
	zw := zlib.NewWriter(&zl)
	zw.Write([]byte(text))
	zw.Close()
	zenc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zs := zenc.EncodeAll([]byte(text), nil)
	zenc.Close()

	s := start(t, nil)
	for _, tc := range []struct {
		name string
		body []byte
		hdr  []string
	}{
		{"gzip", gz(t, text), []string{"Content-Encoding", "gzip"}},
		{"GZIP_value", gz(t, text), []string{"Content-Encoding", "GZIP"}},
		{"x-gzip", gz(t, text), []string{"Content-Encoding", "x-gzip"}},
		{"gzip_multi_member", gz(t, "SOME TEST DATA\n", "and a second line\n"), []string{"Content-Encoding", "gzip"}},
		{"gzip_with_compression_none", gz(t, text), []string{"Content-Encoding", "gzip", "Compression", "NONE"}},
		{"deflate", zl.Bytes(), []string{"Content-Encoding", "deflate"}},
		{"zstd", zs, []string{"Content-Encoding", "zstd"}},
		{"identity", []byte(text), []string{"Content-Encoding", "identity"}},
	} {
		r := post(t, s, tc.body, append([]string{"Feed", testFeed}, tc.hdr...)...)
		id := r.ok(t)
		st := streamByReceipt(t, s, id)
		want := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "StreamSize", itoa(len(text)))
		wantAttrs(t, tc.name, st.Attributes, want)
		wantParts(t, s, st, part{data: text, meta: want})
	}

	// Declared twice: every such post fails.
	s2 := start(t, nil)
	post(t, s2, gz(t, text), "Feed", testFeed, "Content-Encoding", "gzip", "Compression", "GZIP").
		fails(t, 500, 400, "Compressed stream invalid", "Content-Encoding", "Compression")
	post(t, s2, gz(t, string(gz(t, text))), "Feed", testFeed, "Content-Encoding", "gzip", "Compression", "gzip").
		fails(t, 500, 400, "Compressed stream invalid")
	post(t, s2, gz(t, string(zipOf(t, "1.dat", text))), "Feed", testFeed, "Content-Encoding", "gzip", "Compression", "ZIP").
		fails(t, 500, 400, "Compressed stream invalid")
	// Not what it says it is.
	post(t, s2, []byte(text), "Feed", testFeed, "Content-Encoding", "gzip").fails(t, 500, 400, "Compressed stream invalid")
	post(t, s2, gz(t, text)[:20], "Feed", testFeed, "Content-Encoding", "gzip").fails(t, 500, 400)
	post(t, s2, []byte(text), "Feed", testFeed, "Content-Encoding", "zstd").fails(t, 500, 400)
	// Bytes after the end of the compressed data are never silently
	// dropped: not garbage, and not a second stream.
	post(t, s2, append(gz(t, text), "GARBAGE"...), "Feed", testFeed, "Content-Encoding", "gzip").fails(t, 500, 400)
	post(t, s2, append(slices.Clone(zs), "GARBAGE"...), "Feed", testFeed, "Content-Encoding", "zstd").fails(t, 500, 400)
	post(t, s2, append(slices.Clone(zl.Bytes()), "GARBAGE"...), "Feed", testFeed, "Content-Encoding", "deflate").fails(t, 500, 400)
	post(t, s2, append(slices.Clone(zl.Bytes()), zl.Bytes()...), "Feed", testFeed, "Content-Encoding", "deflate").fails(t, 500, 400)
	// Codings weir cannot decode.
	post(t, s2, []byte(text), "Feed", testFeed, "Content-Encoding", "br").fails(t, 406, 200, "br")
	post(t, s2, []byte(text), "Feed", testFeed, "Content-Encoding", "compress").fails(t, 406, 200, "compress")
	nothingStored(t, s2)
}

// TestDatafeedEmptyBody: an empty body is 200 with a receipt and nothing
// stored, however it is declared (case 12).
func TestDatafeedEmptyBody(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	var receipts []string
	for _, c := range []string{"", "NONE", "GZIP", "ZIP", "gzip"} {
		hdr := []string{"Feed", testFeed}
		if c != "" {
			hdr = append(hdr, "Compression", c)
		}
		receipts = append(receipts, post(t, s, nil, hdr...).ok(t))
		if ce := append(hdr, "Content-Encoding", "gzip"); c == "" || c == "NONE" {
			receipts = append(receipts, post(t, s, nil, ce...).ok(t))
		} else {
			// Declared twice: every such post fails, even an empty one.
			post(t, s, nil, ce...).fails(t, 500, 400)
		}
		for _, framing := range []string{"Content-Length: 0", "Transfer-Encoding: chunked"} {
			lines := []string{"Feed: " + testFeed, framing}
			if c != "" {
				lines = append(lines, "Compression: "+c)
			}
			var body []byte
			if strings.HasPrefix(framing, "Transfer") {
				body = []byte("0\r\n\r\n")
			}
			receipts = append(receipts, rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", lines...), body).ok(t))
		}
	}
	// A gzip body that decompresses to nothing stores nothing either.
	receipts = append(receipts, post(t, s, gz(t, ""), "Feed", testFeed, "Compression", "GZIP").ok(t))
	receipts = append(receipts, post(t, s, gz(t, "", ""), "Feed", testFeed, "Content-Encoding", "gzip").ok(t))
	for _, id := range receipts {
		if l := receiveLog(t, s, "receiptId", id); l.str("outcome") != "empty" || l.num("status") != 0 {
			t.Errorf("%s: log %v", id, l)
		}
	}
	nothingStored(t, s)
}

// TestDatafeedUndeclaredCompression: the spec's silent failure. A body
// declared uncompressed that starts with gzip or zip magic is stored as sent
// and flagged (default), or rejected, or decompressed, by configuration; it
// is counted and the receive log says so in every mode.
func TestDatafeedUndeclaredCompression(t *testing.T) {
	t.Parallel()
	const text = "SOME TEST DATA"
	gzBody := gz(t, text)
	zipBody := zipOf(t, "001.dat", text, "001.meta", "Sender:zip")
	mode := func(a config.CompressedBodyAction) func(*config.Config) {
		return func(c *config.Config) { c.Receive.CompressedBodyWithoutHeader = a }
	}
	undeclared := func(t *testing.T, s *apptest.Server, format string, n float64) {
		t.Helper()
		waitMetric(t, s, `weir_receive_undeclared_compression_total{format="`+format+`"}`, n)
	}
	t.Run("store", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		for _, tc := range []struct {
			format, flag string
			body         []byte
			hdr          []string
		}{
			{"gzip", "GZIP", gzBody, nil},
			{"zip", "ZIP", zipBody, []string{"Compression", "NONE"}},
			{"gzip", "GZIP", gzBody, []string{"Compression", ""}},
		} {
			r := post(t, s, tc.body, append([]string{"Feed", testFeed}, tc.hdr...)...)
			id := r.ok(t)
			st := streamByReceipt(t, s, id)
			checkStream(t, st, testFeed, "Raw Events", id)
			want := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed,
				"UndeclaredCompression", tc.flag, "StreamSize", itoa(len(tc.body)))
			wantAttrs(t, tc.format, st.Attributes, want)
			wantParts(t, s, st, part{data: string(tc.body), meta: want}) // exactly as sent
			l := receiveLog(t, s, "receiptId", id)
			if l.str("undeclaredCompression") != tc.format || l.str("outcome") != "received" || l.str("level") != "WARN" {
				t.Errorf("log %v", l)
			}
		}
		undeclared(t, s, "gzip", 2)
		undeclared(t, s, "zip", 1)
		// Not flagged: text, and data that only looks a little like gzip.
		for _, b := range []string{"plain", "\x1f", "PK", "PKzz"} {
			id := post(t, s, []byte(b), "Feed", testFeed).ok(t)
			if st := streamByReceipt(t, s, id); st.Attributes.Value("UndeclaredCompression") != "" {
				t.Errorf("%q flagged", b)
			}
		}
		undeclared(t, s, "gzip", 2)
	})
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		s := start(t, mode(config.CompressedReject))
		post(t, s, gzBody, "Feed", testFeed, "GUID", "rej-gz").fails(t, 406, 201, "Compression", "gzip",
			"send Compression: GZIP (or Content-Encoding: gzip) or send the data uncompressed")
		// HTTP has no zip coding, so the advice names only the header.
		r := post(t, s, zipBody, "Feed", testFeed, "Compression", "NONE")
		r.fails(t, 406, 201, "Compression", "zip", "send Compression: ZIP or send the data uncompressed")
		if msg := r.header.Get("Service-Error"); strings.Contains(msg, "Content-Encoding") {
			t.Errorf("advice for a zip body names Content-Encoding: %s", msg)
		}
		l := receiveLog(t, s, "guid", "rej-gz")
		if l.str("undeclaredCompression") != "gzip" || l.str("outcome") != "rejected" || l.num("status") != 201 {
			t.Errorf("log %v", l)
		}
		undeclared(t, s, "gzip", 1)
		undeclared(t, s, "zip", 1)
		nothingStored(t, s)
		// Declared bodies are fine.
		id := post(t, s, gzBody, "Feed", testFeed, "Compression", "GZIP").ok(t)
		if got := string(s.Read(streamByReceipt(t, s, id).ID, 0, 0)); got != text {
			t.Errorf("data %q", got)
		}
	})
	t.Run("decompress", func(t *testing.T) {
		t.Parallel()
		s := start(t, mode(config.CompressedDecompress))
		r := post(t, s, gzBody, "Feed", testFeed)
		id := r.ok(t)
		st := streamByReceipt(t, s, id)
		want := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "StreamSize", itoa(len(text)))
		wantAttrs(t, "gzip", st.Attributes, want)
		wantParts(t, s, st, part{data: text, meta: want})

		r = post(t, s, zipBody, "Feed", testFeed, "Compression", "none")
		id = r.ok(t)
		st = streamByReceipt(t, s, id)
		base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events")
		wantAttrs(t, "zip", st.Attributes, base.with("Sender", "zip", "StreamSize", itoa(len(text))))
		wantParts(t, s, st, part{data: text, meta: base.with("Sender", "zip", "StreamSize", itoa(len(text)))})
		undeclared(t, s, "gzip", 1)
		undeclared(t, s, "zip", 1)
		if l := receiveLog(t, s, "receiptId", id); l.str("undeclaredCompression") != "zip" {
			t.Errorf("log %v", l)
		}
		// A body that only looks compressed fails as invalid compressed data.
		post(t, s, append([]byte{0x1f, 0x8b}, "not really"...), "Feed", testFeed, "GUID", "fake").fails(t, 500, 400)
		if n := len(s.Streams()); n != 2 {
			t.Errorf("%d streams, want 2", n)
		}
	})
	t.Run("dropped_feed_not_counted", func(t *testing.T) {
		// The body of a dropped post is never read, so it is not inspected.
		t.Parallel()
		s := start(t, mode(config.CompressedReject))
		s.CreateFeed("DROPPING", feed.Drop, "")
		post(t, s, gzBody, "Feed", "DROPPING").ok(t)
		if v := metric(t, s, `weir_receive_undeclared_compression_total{format="gzip"}`); v > 0 {
			t.Errorf("counted %g", v)
		}
		nothingStored(t, s)
	})
}

// TestDatafeedRepeatedHeaders: a header on several lines is one list (RFC
// 9110 5.3). Content-Encoding on two lines is refused as the same list on
// one line is, not half decoded; a header or query parameter weir reads
// (Feed, Type, Compression, ...) given twice with different values is
// refused with both values named; any other is stored joined with ", ".
func TestDatafeedRepeatedHeaders(t *testing.T) {
	t.Parallel()
	const text = "SOME TEST DATA\n"
	s := start(t, nil)
	s.CreateFeed("OTHER-FEED", "", "")
	for _, tc := range []struct {
		name string
		body []byte
		hdr  []string
	}{
		{"identity_then_gzip", gz(t, text), []string{"Content-Encoding", "identity", "Content-Encoding", "gzip"}},
		{"gzip_twice", gz(t, string(gz(t, text))), []string{"Content-Encoding", "gzip", "Content-Encoding", "gzip"}},
		{"one_line", gz(t, text), []string{"Content-Encoding", "identity, gzip"}},
	} {
		post(t, s, tc.body, append([]string{"Feed", testFeed}, tc.hdr...)...).fails(t, 406, 200, "Content-Encoding", "gzip")
	}
	for _, tc := range []struct {
		name, path string
		hdr        []string
		contains   []string
	}{
		{"feed_twice", "/datafeed", []string{"Feed", testFeed, "Feed", "OTHER-FEED"}, []string{"header Feed", testFeed, "OTHER-FEED"}},
		{"feed_in_two_cases", "/datafeed", []string{"Feed", testFeed, "feed", "OTHER-FEED"}, []string{testFeed, "OTHER-FEED"}},
		{"type_twice", "/datafeed", []string{"Feed", testFeed, "Type", "Raw Events", "Type", "Events"}, []string{"header Type", "Raw Events"}},
		{"compression_twice", "/datafeed", []string{"Feed", testFeed, "Compression", "NONE", "Compression", "GZIP"}, []string{"Compression", "NONE", "GZIP"}},
		{"query_feed_twice", "/datafeed?Feed=" + testFeed + "&feed=OTHER-FEED", nil, []string{"query parameter", testFeed, "OTHER-FEED"}},
	} {
		send(t, s, http.MethodPost, tc.path, strings.NewReader(text), tc.hdr...).fails(t, 406, 104, tc.contains...)
	}
	nothingStored(t, s)

	// The same value twice is no ambiguity; other attributes are joined.
	id := send(t, s, http.MethodPost, "/datafeed?Tag=a&tag=b&Tag=a", strings.NewReader(text),
		"Feed", testFeed, "Feed", testFeed, "System", "one", "System", "two", "X-Same", "v", "X-Same", "v").ok(t)
	st := streamByReceipt(t, s, id)
	for name, want := range map[string]string{"Feed": testFeed, "System": "one, two", "Tag": "a, b, a", "X-Same": "v"} {
		if got := st.Attributes.Value(name); got != want {
			t.Errorf("attribute %s = %q, want %q", name, got, want)
		}
	}
	// Query parameters still win over headers, as documented.
	id = send(t, s, http.MethodPost, "/datafeed?Feed=OTHER-FEED", strings.NewReader(text), "Feed", testFeed).ok(t)
	if st := streamByReceipt(t, s, id); st.Feed != "OTHER-FEED" {
		t.Errorf("feed %q, want the query parameter's OTHER-FEED", st.Feed)
	}
}
