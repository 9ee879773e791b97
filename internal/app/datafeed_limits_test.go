package app_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// TestDatafeedMaxRequestSize: maxRequestSize bounds what a post decompresses
// to in every mode (zip bombs included) and answers 413 with Service-Status
// 410; a body of exactly the limit is accepted.
func TestDatafeedMaxRequestSize(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	zeros := func(n int) string { return string(make([]byte, n)) }
	storedZip := func(name string, n int) []byte { // incompressible: STORED
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		w.Write(bytes.Repeat([]byte("x"), n))
		zw.Close()
		return b.Bytes()
	}
	limited := func(c *config.Config) { c.Receive.MaxRequestSize = limit }
	t.Run("accepted_at_the_limit", func(t *testing.T) {
		t.Parallel()
		s := start(t, limited)
		for _, tc := range []struct {
			name string
			body []byte
			hdr  []string
		}{
			{"NONE", []byte(zeros(limit)), nil},
			{"GZIP", gz(t, zeros(limit)), []string{"Compression", "GZIP"}},
			{"Content-Encoding", gz(t, zeros(limit)), []string{"Content-Encoding", "gzip"}},
			{"ZIP", zipOf(t, "1.dat", zeros(limit)), []string{"Compression", "ZIP"}},
			{"ZIP_two_entries", zipOf(t, "1.dat", zeros(limit/2), "2.dat", zeros(limit/2)), []string{"Compression", "ZIP"}},
		} {
			id := post(t, s, tc.body, append([]string{"Feed", testFeed}, tc.hdr...)...).ok(t)
			st := streamByReceipt(t, s, id)
			if st.RawSize != limit {
				t.Errorf("%s: stored %d bytes, want %d", tc.name, st.RawSize, limit)
			}
		}
	})
	t.Run("too_large", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			body []byte
			hdr  []string
			msg  string
		}{
			{"NONE", []byte(zeros(limit + 1)), nil, "the body is larger"},
			{"NONE_chunked", nil, nil, "the body is larger"},
			{"GZIP", gz(t, zeros(limit+1)), []string{"Compression", "GZIP"}, "decompressed"},
			{"GZIP_bomb", gz(t, zeros(64*limit)), []string{"Compression", "GZIP"}, "decompressed"},
			{"Content-Encoding_bomb", gz(t, zeros(64*limit)), []string{"Content-Encoding", "gzip"}, "decompressed"},
			{"ZIP_bomb", zipOf(t, "1.dat", zeros(64*limit)), []string{"Compression", "ZIP"}, "decompress"},
			{"ZIP_entries_add_up", zipOf(t, "1.dat", zeros(limit/2), "2.dat", zeros(limit/2), "3.ctx", "x"), []string{"Compression", "ZIP"}, "decompress"},
			{"ZIP_raw", storedZip("1.dat", limit+100), []string{"Compression", "ZIP"}, "the body is larger"},
			{"undeclared_gzip_decompressed", gz(t, zeros(64*limit)), []string{"Compression", "NONE"}, "decompressed"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s := start(t, func(c *config.Config) {
					limited(c)
					c.Receive.CompressedBodyWithoutHeader = config.CompressedDecompress
				})
				var r *resp
				if tc.body == nil {
					// Chunked, size unknown up front.
					r = send(t, s, http.MethodPost, "/datafeed", io.MultiReader(strings.NewReader(zeros(limit)), strings.NewReader("x")), "Feed", testFeed)
				} else {
					r = post(t, s, tc.body, append([]string{"Feed", testFeed}, tc.hdr...)...)
				}
				r.fails(t, 413, 410, "Content too large", "Maximum request size exceeded", "64KiB", tc.msg)
				nothingStored(t, s)
			})
		}
	})
}

// TestDatafeedZipEntryLimit: a zip with more entries than maxZipEntries is
// refused before any entry is read.
func TestDatafeedZipEntryLimit(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) { c.Receive.MaxZipEntries = 3 })
	post(t, s, zipOf(t, "1.dat", "a", "1.meta", "A:1", "2.dat", "b", "3.dat", "c"), "Feed", testFeed, "Compression", "ZIP").
		fails(t, 413, 410, "4 entries", "maxZipEntries")
	nothingStored(t, s)
	id := post(t, s, zipOf(t, "1.dat", "a", "1.meta", "A:1", "2.dat", "b"), "Feed", testFeed, "Compression", "ZIP").ok(t)
	if st := oneStream(t, s, testFeed, "Raw Events", id); st.Parts != 2 {
		t.Errorf("parts %d", st.Parts)
	}
}

// TestDatafeedConcurrencyLimit: with every receipt slot busy, a post is
// answered 503 with Retry-After at once instead of queueing; the busy post
// still completes.
func TestDatafeedConcurrencyLimit(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) { c.Receive.MaxConcurrentReceipts = 1 })
	pr, pw := io.Pipe()
	first := make(chan *resp, 1)
	go func() {
		// Not send(): it may not call t.Fatal off the test goroutine.
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/datafeed", pr)
		req.Header.Set("Feed", testFeed)
		res, err := client.Do(req)
		if err != nil {
			first <- &resp{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		first <- &resp{code: res.StatusCode, header: res.Header, body: string(b)}
	}()
	if _, err := io.WriteString(pw, "first half, "); err != nil {
		t.Fatal(err)
	}
	// The first post holds the only slot once it is in flight.
	waitMetric(t, s, "weir_receive_inflight", 1)
	r := post(t, s, []byte("second"), "Feed", testFeed, "GUID", "busy")
	r.fails(t, 503, 503, "retry")
	if ra := r.header.Get("Retry-After"); ra != "5" {
		t.Errorf("Retry-After %q, want 5", ra)
	}
	if l := receiveLog(t, s, "guid", "busy"); l.num("status") != 503 || l.str("outcome") != "error" {
		t.Errorf("log %v", l)
	}
	if _, err := io.WriteString(pw, "second half"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var fr *resp
	select {
	case fr = <-first:
	case <-time.After(time.Minute):
		t.Fatal("the first post never finished")
	}
	id := fr.ok(t)
	st := oneStream(t, s, testFeed, "Raw Events", id)
	if got := string(s.Read(st.ID, 0, 0)); got != "first half, second half" {
		t.Errorf("data %q", got)
	}
	// The slot is free again.
	post(t, s, []byte("third"), "Feed", testFeed).ok(t)
}

// TestDatafeedHeaderLimit: headers larger than maxHeaderBytes are refused
// with 431: up to twice the limit with weir's status headers (datafeed) or
// a problem (API), beyond it by Go's HTTP server, which stops reading.
func TestDatafeedHeaderLimit(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) { c.Receive.MaxHeaderBytes = 8 << 10 })
	id := post(t, s, []byte("data"), "Feed", testFeed, "Big", strings.Repeat("v", 2<<10)).ok(t)
	if st := oneStream(t, s, testFeed, "Raw Events", id); len(st.Attributes.Value("Big")) != 2<<10 {
		t.Errorf("Big header not stored")
	}
	// Just under the limit (with the request line and the client's other
	// headers): taken.
	post(t, s, []byte("data"), "Feed", testFeed, "Big", strings.Repeat("v", 7<<10+512)).ok(t)
	// Just over the limit: the sender learns why, with the status headers
	// every datafeed failure carries.
	post(t, s, []byte("data"), "Feed", testFeed, "Big", strings.Repeat("v", 9<<10)).
		fails(t, 431, 431, "Request headers too large", "more than receive.maxHeaderBytes (8KiB)")
	// The API answers a problem.
	req, err := http.NewRequest("GET", s.URL+"/api/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Big", strings.Repeat("v", 9<<10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 431 || res.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(body), "receive.maxHeaderBytes") {
		t.Errorf("API call with 9 KiB of headers: %d %s %s, want a 431 problem", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	// Far over it: Go's server answers without reading the rest.
	c := dial(t, s)
	go func() {
		// The server may hang up before it has read everything; that is fine.
		io.WriteString(c, strings.ReplaceAll(head(s, "POST /datafeed HTTP/1.1", "Feed: "+testFeed,
			"Big: "+strings.Repeat("v", 32<<10), "Content-Length: 4"), "\n", "\r\n")+"\r\n\r\ndata")
	}()
	r := readResponse(t, c, &resp{})
	if r.code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("got %d %q, want 431", r.code, r.body)
	}
	if n := len(s.Streams()); n != 2 {
		t.Errorf("%d streams, want the 2 posts within the limit", n)
	}
}

// readUntilClosed reads from c until the server closes it and returns what
// it sent; the connection's deadline bounds the wait.
func readUntilClosed(t *testing.T, c io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(c)
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server did not close the connection (read so far %q)", b)
	}
	return string(b)
}

// TestDatafeedReadHeaderTimeout: a client that sends nothing, or only part of
// its headers, is disconnected after readHeaderTimeout.
func TestDatafeedReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	// Long enough that the normal post at the end sends its headers within
	// it on a machine loaded by the whole suite.
	const timeout = time.Second
	s := start(t, func(c *config.Config) { c.Receive.ReadHeaderTimeout = config.Duration(timeout) })
	for _, sent := range []string{"", "POST /datafeed HTTP/1.1\r\nHost: x\r\nFeed: TEST-FEED\r\n"} {
		begin := time.Now()
		c := dial(t, s)
		io.WriteString(c, sent)
		got := readUntilClosed(t, c)
		if strings.Contains(got, "200 OK") {
			t.Errorf("sent %q, got %q", sent, got)
		}
		if d := time.Since(begin); d < timeout {
			t.Errorf("closed after %s, before the timeout", d)
		}
	}
	nothingStored(t, s)
	// Slow header senders do not hold anything up.
	post(t, s, []byte("data"), "Feed", testFeed).ok(t)
}

// stalledBodies are the first bytes of a body of each compression.
func stalledBodies(t *testing.T) map[string][]byte {
	return map[string][]byte{
		"NONE": []byte("0123456789"),
		"GZIP": gz(t, strings.Repeat("some data ", 100))[:10],
		"ZIP":  zipOf(t, "1.dat", strings.Repeat("some data ", 100))[:10],
	}
}

// TestDatafeedBodyIdleTimeout: a body that stalls for longer than
// bodyIdleTimeout fails the post and nothing is stored.
func TestDatafeedBodyIdleTimeout(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) { c.Receive.BodyIdleTimeout = config.Duration(300 * time.Millisecond) })
	for name, first := range stalledBodies(t) {
		r := rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Compression: "+name, "Content-Length: 100"), first)
		r.fails(t, 500, 999, "Unknown error", "bodyIdleTimeout")
		nothingStored(t, s)
	}
	// The same server still receives.
	post(t, s, []byte("data"), "Feed", testFeed).ok(t)
}

// TestDatafeedClientDisconnect: a sender that goes away part way through its
// body leaves nothing stored (cases 14-16; the sender is gone, so the answer
// is read from the receive log).
func TestDatafeedClientDisconnect(t *testing.T) {
	t.Parallel()
	for name, first := range stalledBodies(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t, nil)
			c := dial(t, s)
			io.WriteString(c, strings.ReplaceAll(head(s, "POST /datafeed HTTP/1.1", "Feed: "+testFeed,
				"Compression: "+name, "Content-Length: 100", "GUID: gone"), "\n", "\r\n")+"\r\n\r\n")
			c.Write(first)
			c.Close()
			l := receiveLog(t, s, "guid", "gone")
			if l.str("outcome") != "error" || l.num("status") != 999 || l.num("bytes") != 10 {
				t.Errorf("log %v", l)
			}
			nothingStored(t, s)
		})
	}
}

// TestDatafeedConcurrentMixed posts many bodies of every kind at once; each
// is stored exactly and independently (group commit shares only the fsyncs).
func TestDatafeedConcurrentMixed(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	type sent struct{ data, ctx string }
	var (
		mu   sync.Mutex
		want = map[string]sent{}
		wg   sync.WaitGroup
	)
	for i := range 24 {
		wg.Go(func() {
			data := strings.Repeat(string(rune('a'+i%26)), 1000+i)
			var (
				body []byte
				hdr  = []string{"Feed", testFeed}
				ctx  string
			)
			switch i % 4 {
			case 0:
				body = []byte(data)
			case 1:
				body, hdr = gz(t, data), append(hdr, "Compression", "GZIP")
			case 2:
				body, hdr = gz(t, data), append(hdr, "Content-Encoding", "gzip")
			case 3:
				ctx = "ctx " + data[:10]
				body, hdr = zipOf(t, "1.dat", data, "1.ctx", ctx), append(hdr, "Compression", "ZIP")
			}
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/datafeed", bytes.NewReader(body))
			for j := 0; j < len(hdr); j += 2 {
				req.Header.Set(hdr[j], hdr[j+1])
			}
			res, err := client.Do(req)
			if err != nil {
				t.Errorf("post %d: %v", i, err)
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Errorf("post %d: %d %s", i, res.StatusCode, b)
				return
			}
			mu.Lock()
			want[strings.TrimSpace(string(b))] = sent{data, ctx}
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(s.Streams()) != len(want) || len(want) != 24 {
		t.Fatalf("%d streams, %d receipts", len(s.Streams()), len(want))
	}
	for id, w := range want {
		st := streamByReceipt(t, s, id)
		if got := string(s.Read(st.ID, 0, 0)); got != w.data {
			t.Errorf("%s: data differs", id)
		}
		if w.ctx != "" {
			if got := string(s.Read(st.ID, 1, 0)); got != w.ctx {
				t.Errorf("%s: context %q", id, got)
			}
		}
	}
	if v := metric(t, s, "weir_store_commit_batch_size_count"); v < 1 {
		t.Errorf("no group commits counted")
	}
}

// lyingZip is a zip of n empty STORED entries whose end record declares
// n mod 65536 of them, as the 16-bit field allows; Go's zip reader opens it.
func lyingZip(n int) []byte {
	var b, cd bytes.Buffer
	le := func(w *bytes.Buffer, vs ...any) {
		for _, v := range vs {
			binary.Write(w, binary.LittleEndian, v)
		}
	}
	for i := range n {
		name := fmt.Sprintf("%05x.dat", i)
		off := uint32(b.Len())
		le(&b, uint32(0x04034b50), uint16(20), uint16(0), uint16(0), uint16(0), uint16(0), uint32(0), uint32(0), uint32(0), uint16(len(name)), uint16(0))
		b.WriteString(name)
		le(&cd, uint32(0x02014b50), uint16(20), uint16(20), uint16(0), uint16(0), uint16(0), uint16(0), uint32(0), uint32(0), uint32(0),
			uint16(len(name)), uint16(0), uint16(0), uint16(0), uint16(0), uint32(0), off)
		cd.WriteString(name)
	}
	cdOff := uint32(b.Len())
	cdLen := uint32(cd.Len())
	b.Write(cd.Bytes())
	le(&b, uint32(0x06054b50), uint16(0), uint16(0), uint16(n%65536), uint16(n%65536), cdLen, cdOff, uint16(0))
	return b.Bytes()
}

// TestDatafeedZipEntryLimitUnderstated: the entry count in a zip's end record
// is 16 bits, so a zip can understate its entries by a multiple of 65536;
// the limit still holds.
func TestDatafeedZipEntryLimitUnderstated(t *testing.T) {
	t.Parallel()
	body := lyingZip(65536 + 2)
	if zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body))); err != nil || len(zr.File) != 65538 {
		t.Fatalf("test zip: %v", err)
	}
	s := start(t, func(c *config.Config) { c.Receive.MaxZipEntries = 100 })
	post(t, s, body, "Feed", testFeed, "Compression", "ZIP").fails(t, 413, 410, "maxZipEntries")
	nothingStored(t, s)
}

// TestDatafeedHalfClosedSender: a sender may shut down its sending side once
// the request is sent and still read the answer; the post must not fail
// because the server saw the end of its input (Go cancels the request's
// context then).
func TestDatafeedHalfClosedSender(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	for _, tc := range []struct {
		name, compression string
		body              []byte
		streams           int
	}{
		{"NONE", "NONE", []byte("plain data"), 1},
		{"GZIP", "GZIP", gz(t, "gzip data"), 1},
		{"ZIP", "ZIP", zipOf(t, "1.dat", "zip data"), 1},
		{"ZIP_two_feeds", "ZIP", zipOf(t, "1.dat", "one", "2.meta", "Feed:FEED-A", "2.dat", "two"), 2},
	} {
		c := dial(t, s)
		r := &resp{sent: time.Now()}
		io.WriteString(c, strings.ReplaceAll(head(s, "POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Compression: "+tc.compression,
			"Content-Length: "+itoa(len(tc.body))), "\n", "\r\n")+"\r\n\r\n")
		c.Write(tc.body)
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		id := readResponse(t, c, r).ok(t)
		s.Sync()
		st, err := s.App.Repo().ListStreams(t.Context(), meta.StreamFilter{ReceiptID: id})
		if err != nil || len(st) != tc.streams {
			t.Errorf("%s: %d streams, want %d (%v)", tc.name, len(st), tc.streams, err)
		}
	}
}

// TestDatafeedSlowSender: bodyIdleTimeout bounds each pause, not the whole
// body: a sender that keeps sending, however slowly, is received.
func TestDatafeedSlowSender(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	s := start(t, func(c *config.Config) { c.Receive.BodyIdleTimeout = config.Duration(idle) })
	pr, pw := io.Pipe()
	go func() {
		for i := range 6 {
			time.Sleep(idle / 4) // well inside the idle timeout; 1.5 timeouts in all
			io.WriteString(pw, "chunk "+itoa(i)+"\n")
		}
		pw.Close()
	}()
	id := send(t, s, http.MethodPost, "/datafeed", pr, "Feed", testFeed).ok(t)
	st := oneStream(t, s, testFeed, "Raw Events", id)
	if got := string(s.Read(st.ID, 0, 0)); got != "chunk 0\nchunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\n" {
		t.Errorf("data %q", got)
	}
}
