package app_test

// Hostile senders at the HTTP/1.1 level (docs/reliability.md, "Hostile
// senders"): connections used in ways that are legal but unusual
// (pipelining, half-closing, Expect: 100-continue) or that announce a body
// and never send it. Each must get its answer, and no connection may be
// held without a bound.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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
