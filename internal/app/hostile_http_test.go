package app_test

// Hostile senders at the HTTP/1.1 level (docs/reliability.md, "Hostile
// senders"): connections used in ways that are legal but unusual
// (pipelining, half-closing, Expect: 100-continue) or that announce a body
// and never send it. Each must get its answer, and no connection may be
// held without a bound.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// rawPost is a POST /datafeed with a Content-Length, as a sender writes it.
func rawPost(s *apptest.Server, body string, lines ...string) string {
	return strings.ReplaceAll(head(s, "POST /datafeed HTTP/1.1", append(lines, "Content-Length: "+itoa(len(body)))...), "\n", "\r\n") +
		"\r\n\r\n" + body
}

// readAnswers reads n final responses (skipping 1xx) from br.
func readAnswers(t *testing.T, br *bufio.Reader, n int) []*resp {
	t.Helper()
	var out []*resp
	for range n {
		res, err := http.ReadResponse(br, nil)
		for err == nil && res.StatusCode < 200 {
			res, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			t.Fatalf("answer %d of %d: %v", len(out)+1, n, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("answer %d of %d: body: %v", len(out)+1, n, err)
		}
		out = append(out, &resp{code: res.StatusCode, header: res.Header, body: string(b)})
	}
	return out
}

// TestHostileHalfClosedPipelined: a sender that shuts down its sending side
// once its requests are written must get their answers. Go's server cancels
// a request's context when it reads the end of the input, which it does at
// once for a post without a body, and for every post pipelined behind the
// first: their credential look-up then failed with "context canceled",
// answered 401 / 313 "Data feed key failed authentication" for a valid key,
// a refusal a sender does not retry.
func TestHostileHalfClosedPipelined(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) { c.Receive.AuthenticationRequired = true })
	key, _ := dbDataFeedKey(t, s, "1000", time.Now().Add(time.Hour))
	auth := "Authorization: Bearer " + key + "\nAccountId: 1000"
	for _, tc := range []struct {
		name   string
		bodies []string
	}{
		{"empty", []string{""}},
		{"pipelined", []string{"first post\n", "second post\n", "third post\n"}},
		{"pipelined_empty_last", []string{"first post\n", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s)
			var w strings.Builder
			for _, b := range tc.bodies {
				w.WriteString(rawPost(s, b, "Feed: "+testFeed, auth))
			}
			if _, err := io.WriteString(c, w.String()); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			answers := readAnswers(t, bufio.NewReader(c), len(tc.bodies))
			s.Sync()
			for i, r := range answers {
				id := r.ok(t)
				st, err := s.App.Repo().ListStreams(t.Context(), meta.StreamFilter{ReceiptID: id})
				switch {
				case err != nil:
					t.Fatal(err)
				case tc.bodies[i] == "" && len(st) != 0, tc.bodies[i] != "" && len(st) != 1:
					t.Errorf("post %d: %d streams", i+1, len(st))
				case len(st) == 1 && string(s.Read(st[0].ID, 0, 0)) != tc.bodies[i]:
					t.Errorf("post %d: stored %q, want %q", i+1, s.Read(st[0].ID, 0, 0), tc.bodies[i])
				}
			}
		})
	}
}

// TestHostileUnsentBody: a request that announces a body and does not send
// it, to a handler that answers without reading it (a refusal before the
// body, /healthz). Go's server reads the rest of an unread body (up to 256
// KiB) before it answers, and again when it closes it, with no deadline:
// such a connection got no answer and was held, with its goroutine, for as
// long as the sender kept it open; after Expect: 100-continue and a
// refusal (the sender rightly waits for a 100 that never comes), the answer
// came but the connection stayed open. Now the rest of the body has
// receive.bodyIdleTimeout to arrive, then the answer is sent with
// Connection: close and the connection is closed; a body that was never
// asked for is not waited for at all.
func TestHostileUnsentBody(t *testing.T) {
	t.Parallel()
	// Long enough that "answered at once" (under 3/4 of it) holds on a
	// machine loaded by the whole suite: 2 s once took 2.04 s there.
	const idle = 4 * time.Second
	s := start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.BodyIdleTimeout = config.Duration(idle)
	})
	key, _ := dbDataFeedKey(t, s, "1000", time.Now().Add(time.Hour))
	// The key's hash is checked once here, not in the timed cases.
	post(t, s, nil, "Feed", testFeed, "Authorization", "Bearer "+key, "AccountId", "1000").ok(t)
	h := func(requestLine string, lines ...string) string {
		return strings.ReplaceAll(head(s, requestLine, lines...), "\n", "\r\n") + "\r\n\r\n"
	}
	for _, tc := range []struct {
		name    string
		request string
		code    int
		// within: the answer and the end of the connection come within this
		// much (the drain's deadline plus slack), and not before after.
		within, after time.Duration
	}{
		{"no_credential", h("POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Content-Length: 100"), 401, idle + 3*time.Second, idle / 2},
		{"no_credential_chunked", h("POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Transfer-Encoding: chunked"), 401, idle + 3*time.Second, idle / 2},
		{"unknown_feed", h("POST /datafeed HTTP/1.1", "Feed: NO-SUCH-FEED", "Authorization: Bearer "+key, "AccountId: 1000", "Content-Length: 100"), 406, idle + 3*time.Second, idle / 2},
		{"method", h("GET /datafeed HTTP/1.1", "Content-Length: 100"), 405, idle + 3*time.Second, idle / 2},
		{"healthz", h("GET /healthz HTTP/1.1", "Content-Length: 100"), 200, idle + 3*time.Second, idle / 2},
		{"expect_unknown_feed", h("POST /datafeed HTTP/1.1", "Feed: NO-SUCH-FEED", "Authorization: Bearer "+key, "AccountId: 1000",
			"Expect: 100-continue", "Content-Length: 100"), 406, idle * 3 / 4, 0},
		{"expect_no_credential", h("POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Expect: 100-continue", "Content-Length: 100"), 401, idle * 3 / 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, s)
			start := time.Now()
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(start.Add(tc.within + 10*time.Second))
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer after %v: %v", time.Since(start).Round(time.Millisecond), err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != tc.code {
				t.Errorf("status %d, want %d", res.StatusCode, tc.code)
			}
			if res.StatusCode == 100 {
				t.Errorf("100 Continue for a post refused before its body")
			}
			if !res.Close {
				t.Errorf("answer without Connection: close: the sender would send its next request on a connection about to close")
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the answer: %v, want the connection closed (EOF)", err)
			}
			took := time.Since(start)
			if took > tc.within || took < tc.after {
				t.Errorf("answered and closed after %v, want between %v and %v", took.Round(time.Millisecond), tc.after, tc.within)
			}
		})
	}
	t.Run("body_sent_late_is_read", func(t *testing.T) {
		// A refused post whose body arrives within the timeout keeps its
		// connection: the next post on it is received.
		t.Parallel()
		c := dial(t, s)
		body := "refused body"
		io.WriteString(c, h("POST /datafeed HTTP/1.1", "Feed: NO-SUCH-FEED", "Authorization: Bearer "+key, "AccountId: 1000", "Content-Length: "+itoa(len(body))))
		time.Sleep(idle / 2)
		io.WriteString(c, body+rawPost(s, "next post\n", "Feed: "+testFeed, "Authorization: Bearer "+key, "AccountId: 1000"))
		a := readAnswers(t, bufio.NewReader(c), 2)
		a[0].fails(t, 406, 110)
		a[1].ok(t)
	})
}

// TestHostileContentLengthOverLimit: a post whose Content-Length is over
// receive.maxRequestSize is refused before its body is read. It got
// "100 Continue" (curl asks for one before any body over 1 MiB), then the
// 413 once maxRequestSize bytes had arrived.
func TestHostileContentLengthOverLimit(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	s := start(t, func(c *config.Config) { c.Receive.MaxRequestSize = limit })
	t.Run("expect_100_continue", func(t *testing.T) {
		c := dial(t, s)
		io.WriteString(c, strings.ReplaceAll(head(s, "POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Expect: 100-continue",
			"Content-Length: "+itoa(4*limit)), "\n", "\r\n")+"\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer before the body: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		r := &resp{code: res.StatusCode, header: res.Header, body: string(b)}
		r.fails(t, 413, 410, "Content-Length 4194304")
		if !res.Close {
			t.Error("413 without Connection: close")
		}
	})
	t.Run("go_client", func(t *testing.T) {
		// Go's client, which sends no Expect, still gets the status and not
		// a broken connection while it is writing.
		r := post(t, s, bytes.Repeat([]byte("x"), 8*limit), "Feed", testFeed)
		r.fails(t, 413, 410, "Content-Length 8388608")
	})
	t.Run("chunked", func(t *testing.T) {
		// No Content-Length: the limit is found by reading, as before.
		r := send(t, s, http.MethodPost, "/datafeed", io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("x"), 2*limit))) /* no length: chunked */, "Feed", testFeed)
		r.fails(t, 413, 410, "the body is larger")
	})
	nothingStored(t, s)
}

// TestHostileDownloadNotRead: a client that starts a large download and
// then reads nothing. The server's writes block once the sockets are full;
// with no write deadline, the download held its goroutine and one of
// api.maxConcurrentDownloads for as long as the client stayed connected, so
// that many such clients refused every download with 503. Now a write that
// the client does not take within receive.bodyIdleTimeout fails: the
// connection is cut (the client sees a short, failed download, never a
// complete-looking one) and the slot is free again.
func TestHostileDownloadNotRead(t *testing.T) {
	t.Parallel()
	// Long enough that the 503 to a second download, asked for once the
	// first has stalled, comes before the first is cut on a loaded machine.
	const idle = 5 * time.Second
	s := start(t, func(c *config.Config) {
		c.API.MaxConcurrentDownloads = 1
		c.Receive.BodyIdleTimeout = config.Duration(idle)
	})
	reader := user(t, s, "reader", []string{access.DataView, access.DataExport}, map[string]access.Level{testFeed: access.View})
	// Far more than the sockets between server and client hold, and random,
	// so that the zip does not compress it to less.
	big := make([]byte, 48<<20)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(big)
	id := streamByReceipt(t, s, post(t, s, big, "Feed", testFeed).ok(t)).ID
	for _, path := range []string{fmt.Sprintf("/api/streams/%d/data", id), fmt.Sprintf("/api/streams/%d/zip", id)} {
		t.Run(path, func(t *testing.T) {
			c := dial(t, s)
			if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+addr(s)+"\r\nAuthorization: Bearer "+reader.key+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("download: %v %v", res, err)
			}
			// The client reads nothing more; the one download slot is taken.
			if r := reader.do("GET", fmt.Sprintf("/streams/%d/data", id), ""); r.status != http.StatusServiceUnavailable {
				t.Fatalf("a second download while the first is stalled: %d, want 503", r.status)
			}
			stalled := time.Now()
			var freed time.Duration
			for deadline := time.Now().Add(idle + 9*time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if r := reader.do("GET", fmt.Sprintf("/streams/%d/data", id), ""); r.status == http.StatusOK {
					freed = time.Since(stalled)
					break
				}
			}
			if freed == 0 {
				t.Fatalf("the download slot of a client that reads nothing was still taken after %v", time.Since(stalled).Round(time.Second))
			}
			t.Logf("slot free after %v", freed.Round(10*time.Millisecond))
			// The stalled client, reading now, gets a download cut short.
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := io.Copy(io.Discard, res.Body)
			if err == nil || n >= int64(len(big)) {
				t.Errorf("the stalled download ended with %v after %d bytes: want it cut short", err, n)
			}
		})
	}
}

// TestHostileDownloadReadSlowly: a client that reads its download slowly
// but steadily (a slow link: some bytes every tenth of a second, never idle
// for long) gets all of it. Each write of a download had
// receive.bodyIdleTimeout to reach the client, and a write is a whole block
// (256 KiB), which must all be in the socket's buffer before the write
// returns, and which the system makes room in only once a third of it has
// gone: a client taking less than that per bodyIdleTimeout had its download
// cut once the buffers were full.
func TestHostileDownloadReadSlowly(t *testing.T) {
	t.Parallel()
	const idle = time.Second
	s := start(t, func(c *config.Config) { c.Receive.BodyIdleTimeout = config.Duration(idle) })
	reader := user(t, s, "reader", []string{access.DataView, access.DataExport}, map[string]access.Level{testFeed: access.View})
	big := make([]byte, 6<<20)
	rand.NewChaCha8([32]byte{2}).Read(big)
	id := streamByReceipt(t, s, post(t, s, big, "Feed", testFeed).ok(t)).ID
	for _, path := range []string{fmt.Sprintf("/api/streams/%d/data", id), fmt.Sprintf("/api/streams/%d/zip", id)} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			c := dial(t, s)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(32 << 10) // the buffers fill sooner
			}
			if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+addr(s)+"\r\nAuthorization: Bearer "+reader.key+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReaderSize(c, 4<<10), nil)
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("download: %v %v", res, err)
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			// 64 KiB every 100 ms (640 KiB/s): the client is never idle for
			// long, but a third of the server's socket buffer (a megabyte or
			// more here) takes longer than idle to go.
			buf := make([]byte, 64<<10)
			var n int64
			for {
				m, err := io.ReadFull(res.Body, buf)
				n += int64(m)
				if err != nil {
					if err != io.EOF && err != io.ErrUnexpectedEOF || n < int64(len(big)) {
						t.Fatalf("a download read slowly but steadily was cut after %d bytes: %v", n, err)
					}
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestHostileChunkedTrailers: trailer fields after a chunked body are read
// and ignored: one named Feed does not move the post to another feed, and
// none becomes an attribute (the headers were checked before the body was
// read, so a trailer cannot take part in them).
func TestHostileChunkedTrailers(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	s.CreateFeed("OTHER-FEED", "", "")
	r := rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Transfer-Encoding: chunked", "Trailer: Feed, System"),
		[]byte("5\r\nhello\r\n0\r\nFeed: OTHER-FEED\r\nSystem: from-trailer\r\n\r\n"))
	st := oneStream(t, s, testFeed, "Raw Events", r.ok(t))
	if got := string(s.Read(st.ID, 0, 0)); got != "hello" {
		t.Errorf("data %q", got)
	}
	for _, k := range []string{"System", "Trailer"} {
		if v, ok := st.Attributes.Get(k); ok {
			t.Errorf("attribute %s: %q, want none", k, v)
		}
	}
	if n := len(s.Streams()); n != 1 {
		t.Errorf("%d streams, want 1", n)
	}
}
