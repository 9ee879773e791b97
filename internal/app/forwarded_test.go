package app_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
)

// TestForwardedPostSentAgain: a post a trusted forwarder (a proxy) sends
// again with the same GUID, after losing the answer to the first send, is
// answered with the first copy's receipt id and not stored twice; the same
// GUID from another sender, or another GUID, is a post of its own.
func TestForwardedPostSentAgain(t *testing.T) {
	t.Parallel()
	f := startForwarded(t, nil)
	s, trusted, body := f.s, f.key, f.body
	other, _ := dbDataFeedKey(t, s, "3000", time.Now().Add(time.Hour))
	send := func(key, account, guid string) string {
		t.Helper()
		return post(t, s, body, "Compression", "ZIP", "Feed", testFeed, "GUID", guid,
			"Authorization", "Bearer "+key, "AccountId", account).ok(t)
	}

	first := send(trusted, "2000", "aggregate-1")
	if again := send(trusted, "2000", "aggregate-1"); again != first {
		t.Errorf("sent again: receipt %s, want the first copy's %s", again, first)
	}
	if n := len(s.Streams()); n != 1 {
		t.Fatalf("%d streams after sending one aggregate twice, want 1", n)
	}
	if l := receiveLog(t, s, "duplicateOf", first); l.str("outcome") != "duplicate" || l.str("receiptId") == first {
		t.Errorf("receive log of the second send: %v", l)
	}
	// Another GUID from the same forwarder, and the same GUID from a
	// sender that is not trusted: posts of their own.
	if id := send(trusted, "2000", "aggregate-2"); id == first {
		t.Errorf("another GUID got the first receipt id")
	}
	a, b := send(other, "3000", "aggregate-1"), send(other, "3000", "aggregate-1")
	if a == b || a == first {
		t.Errorf("an untrusted sender's posts with one GUID: %s and %s (first %s)", a, b, first)
	}
	if n := len(s.Streams()); n != 4 {
		t.Errorf("%d streams, want 4", n)
	}
}

// TestForwardedPostSentTwiceAtOnce: a trusted forwarder that sends a post
// again while its first send is still being received (it timed out
// waiting for the answer and resent) gets the first copy's receipt id:
// the second send waits for the first to finish instead of storing the
// post a second time.
func TestForwardedPostSentTwiceAtOnce(t *testing.T) {
	t.Parallel()
	f := startForwarded(t, nil)
	s, key, body := f.s, f.key, f.body
	type answer struct {
		code int
		body string
		err  error
	}
	// do posts from its own goroutine (t.Fatal may not be called there).
	do := func(body io.Reader) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			req, err := http.NewRequest(http.MethodPost, s.URL+"/datafeed", body)
			if err != nil {
				out <- answer{err: err}
				return
			}
			for k, v := range map[string]string{"Compression": "ZIP", "Feed": testFeed, "GUID": "aggregate-1",
				"Authorization": "Bearer " + key, "AccountId": "2000", "User-Agent": userAgent} {
				req.Header.Set(k, v)
			}
			res, err := client.Do(req)
			if err != nil {
				out <- answer{err: err}
				return
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			out <- answer{code: res.StatusCode, body: strings.TrimSpace(string(b)), err: err}
		}()
		return out
	}

	// The first send: its headers and half its body, then nothing until
	// the second send has been answered or is seen waiting.
	pr, pw := io.Pipe()
	first := do(pr)
	if _, err := pw.Write(body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, s, "weir_receive_inflight", 1)
	second := do(bytes.NewReader(body))
	var a2 answer
	answered := false
	apptest.WaitFor(t, "the second send answered or waiting", func() bool {
		select {
		case a2 = <-second:
			answered = true
			return true
		default:
		}
		return strings.Contains(s.Logs.String(), "waiting for its earlier send to finish")
	})
	if _, err := pw.Write(body[len(body)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	a1 := <-first
	if !answered {
		a2 = <-second
	}
	for i, a := range []answer{a1, a2} {
		if a.err != nil || a.code != http.StatusOK {
			t.Fatalf("send %d: %d %q %v", i+1, a.code, a.body, a.err)
		}
	}
	if a2.body != a1.body {
		t.Errorf("the send that overlapped got receipt %s, want the first's %s", a2.body, a1.body)
	}
	if n := len(s.Streams()); n != 1 {
		t.Errorf("%d streams after two overlapping sends of one aggregate, want 1", n)
	}
	if l := receiveLog(t, s, "duplicateOf", a1.body); l.str("outcome") != "duplicate" {
		t.Errorf("receive log of the second send: %v", l)
	}
}

// TestForwardedPostSentAgainAfterFeedRejects: a resend is answered as the
// first send was even when the feed has since been set to REJECT: the
// copy is stored, and a refusal (permanent, to a proxy) would send a
// delivered aggregate to the proxy's failure area.
func TestForwardedPostSentAgainAfterFeedRejects(t *testing.T) {
	t.Parallel()
	fw := startForwarded(t, nil)
	s := fw.s
	first := fw.send("aggregate-1").ok(t)
	f, err := s.App.Repo().GetFeed(t.Context(), testFeed)
	if err != nil {
		t.Fatal(err)
	}
	f.Status = feed.Reject
	if err := s.App.Repo().UpdateFeed(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	if again := fw.send("aggregate-1").ok(t); again != first {
		t.Errorf("sent again: receipt %s, want the first copy's %s", again, first)
	}
	if n := len(s.Streams()); n != 1 {
		t.Errorf("%d streams, want 1", n)
	}
}

// TestForwardedPostLongGUID: a trusted forwarder's GUID too long for a
// database index (PostgreSQL refuses index entries over about 2.7 KB) is
// recorded by its digest: the post is stored, and recognised when sent
// again, on both engines.
func TestForwardedPostLongGUID(t *testing.T) {
	t.Parallel()
	f := startForwarded(t, nil)
	s := f.s
	// Random, so that PostgreSQL's compression of index entries does not
	// shrink it under the limit.
	b := make([]byte, 6000)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	guid := base64.StdEncoding.EncodeToString(b)
	send := func(guid string) string {
		t.Helper()
		return f.send(guid).ok(t)
	}
	first := send(guid)
	if again := send(guid); again != first {
		t.Errorf("sent again: receipt %s, want the first copy's %s", again, first)
	}
	// Another long GUID, and one that looks like the digest the first is
	// recorded by, are posts of their own.
	if other := send(guid[:len(guid)-4] + "AAAA"); other == first {
		t.Errorf("another long GUID got the first receipt id")
	}
	sum := sha256.Sum256([]byte(guid))
	if other := send("sha256:" + hex.EncodeToString(sum[:])); other == first {
		t.Errorf("a GUID spelling the first one's digest got the first receipt id")
	}
	if n := len(s.Streams()); n != 3 {
		t.Errorf("%d streams, want 3", n)
	}
}

// TestForwardedPostsKept: a trusted forwarder's post is remembered for
// receive.forwardedPostsKept from its first copy. A resend within it gets
// the first receipt id; once the server has forgotten the post (at start,
// and hourly), a resend is stored as a post of its own.
func TestForwardedPostsKept(t *testing.T) {
	t.Parallel()
	f := startForwarded(t, func(c *config.Config) { c.Receive.ForwardedPostsKept = config.Duration(2 * time.Hour) })
	s := f.s
	send := func(s *apptest.Server, guid string) string {
		t.Helper()
		f.s = s
		return f.send(guid).ok(t)
	}
	old, recent := send(s, "aggregate-old"), send(s, "aggregate-recent")
	s.Stop()
	// As if the first was stored three hours ago and the second one.
	execDB(t, s.Cfg, `UPDATE forwarded_posts SET create_ms = $1 WHERE guid = $2`, time.Now().Add(-3*time.Hour).UnixMilli(), "aggregate-old")
	execDB(t, s.Cfg, `UPDATE forwarded_posts SET create_ms = $1 WHERE guid = $2`, time.Now().Add(-time.Hour).UnixMilli(), "aggregate-recent")
	s = s.Restart()

	if again := send(s, "aggregate-recent"); again != recent {
		t.Errorf("resent within receive.forwardedPostsKept: receipt %s, want the first copy's %s", again, recent)
	}
	if again := send(s, "aggregate-old"); again == old {
		t.Errorf("resent after receive.forwardedPostsKept: got the first copy's receipt id %s, want a post of its own", old)
	}
	if n := len(s.Streams()); n != 3 {
		t.Errorf("%d streams, want 3 (two first copies and the old one stored again)", n)
	}
}

// execDB runs a statement that must change a row on a server's metadata
// database; a running server's SQLite writer is waited for.
func execDB(t *testing.T, cfg config.Config, query string, args ...any) {
	t.Helper()
	driver, dsn := "sqlite", "file:"+filepath.Join(cfg.Data, "weir.db")+"?_pragma=busy_timeout(10000)"
	if cfg.DB != "" {
		driver, dsn = "pgx", cfg.DB
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("%s %v: no row changed", query, args)
	}
}

// forwarded is a server that trusts the forwarder DATA_FEED_KEY:data-feed-identity-2000,
// with that forwarder's key and an aggregate (a zip of one part) to send.
type forwarded struct {
	t    *testing.T
	s    *apptest.Server
	key  string
	body []byte
}

// startForwarded starts a forwarded server; mutate (may be nil) changes
// its configuration further.
func startForwarded(t *testing.T, mutate func(*config.Config)) *forwarded {
	t.Helper()
	s := start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.TrustedForwarders = []string{"DATA_FEED_KEY:data-feed-identity-2000"}
		if mutate != nil {
			mutate(c)
		}
	})
	key, _ := dbDataFeedKey(t, s, "2000", time.Now().Add(time.Hour))
	body := zipOf(t, "0000000001.meta", "Feed:"+testFeed+"\nAccountId:1000\n", "0000000001.dat", "an aggregated post\n")
	return &forwarded{t: t, s: s, key: key, body: body}
}

// send posts the aggregate as the trusted forwarder with a GUID.
func (f *forwarded) send(guid string) *resp {
	f.t.Helper()
	return post(f.t, f.s, f.body, "Compression", "ZIP", "Feed", testFeed, "GUID", guid,
		"Authorization", "Bearer "+f.key, "AccountId", "2000")
}
