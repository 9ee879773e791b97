package receive

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/receipt"
)

// panickyFeeds is a feed table with a bug: every look-up panics.
type panickyFeeds struct{}

func (panickyFeeds) GetFeed(context.Context, string) (feed.Feed, error) {
	panic("a bug in the feed table")
}

func (panickyFeeds) CreateFeed(context.Context, feed.Feed) error { return nil }

// TestPanicAnswered500: a post that hits a bug (a panic) gets a 500 with
// Service-Status 999 and a Service-Error naming its receipt id, which the
// log line (with the stack) names too, and the connection serves the next
// post; it used to be cut without an answer (Go's server recovering).
func TestPanicAnswered500(t *testing.T) {
	ids, _ := receipt.NewGenerator('S', "bug", nil)
	cfg := config.Default().Receive
	cfg.AuthenticationRequired = false
	var logs bytes.Buffer
	h := New(Options{Config: cfg, Feeds: panickyFeeds{}, IDs: ids, TempDir: t.TempDir(),
		Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 2 { // the same keep-alive connection, twice
		req, _ := http.NewRequest("POST", srv.URL+"/datafeed", strings.NewReader("line\n"))
		req.Header.Set("Feed", "SOME-FEED")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("post %d: %v (the connection was cut)", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		se := resp.Header.Get("Service-Error")
		if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Service-Status") != "999" ||
			!strings.Contains(se, "a bug; logged with receipt id ") || !strings.Contains(se, "send it again") {
			t.Fatalf("post %d: %d %q, Service-Status %q, Service-Error %q", i, resp.StatusCode, body,
				resp.Header.Get("Service-Status"), se)
		}
		id := se[strings.Index(se, "receipt id ")+len("receipt id "):]
		id = id[:strings.IndexByte(id, ')')]
		if !strings.Contains(logs.String(), `"receiptId":"`+id+`"`) || !strings.Contains(logs.String(), "a bug in the feed table") ||
			!strings.Contains(logs.String(), "recover_test.go") {
			t.Fatalf("post %d: the log does not name receipt id %s, the panic and its stack:\n%s", i, id, logs.String())
		}
	}
}
