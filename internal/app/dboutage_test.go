package app_test

// The metadata database (PostgreSQL) going away under load: posts are
// refused with a clear 503 while it is gone, nothing acknowledged is lost,
// nothing half-stored becomes visible, and weir recovers by itself when the
// database is back. The database is reached through a TCP relay the test
// controls, which can cut every connection and refuse new ones (a database
// restart or crash) or hold every byte without answering (a network
// partition).

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
	"github.com/weirhq/weir/internal/streamfile"
)

// relayState is what the relay does with traffic.
type relayState int

const (
	relayUp        relayState = iota // forwards both ways
	relayDown                        // every connection cut, new ones closed at once
	relayPartition                   // connections open, nothing forwarded until up
)

// tcpRelay forwards loopback TCP connections to target, with faults.
type tcpRelay struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	state relayState
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
	// loseCommitAnswer: the next COMMIT a client sends reaches the
	// server, which answers it, and the connection is then cut before the
	// answer reaches the client (see loseNextCommitAnswer).
	loseCommitAnswer atomic.Bool
	commitsLost      atomic.Int64
	// downAfterLostCommit: once a commit's answer is lost, the relay goes
	// down, so that the client cannot ask whether it committed.
	downAfterLostCommit atomic.Bool
}

// loseNextCommitAnswer makes the next COMMIT succeed on the server while
// its client sees the connection fail: a commit whose outcome the client
// cannot know.
func (r *tcpRelay) loseNextCommitAnswer() { r.loseCommitAnswer.Store(true) }

// relayPair is one relayed connection: swallow, once set, makes the
// server's next bytes (the answer to a COMMIT) be dropped and the
// connection cut.
type relayPair struct {
	client, server net.Conn
	swallow        atomic.Bool
}

func startRelay(t testing.TB, target string) *tcpRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay listen: %v", err)
	}
	r := &tcpRelay{t: t, ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	r.cond = sync.NewCond(&r.mu)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *tcpRelay) addr() string { return r.ln.Addr().String() }

func (r *tcpRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.state == relayDown {
			r.mu.Unlock()
			abort(c)
			continue
		}
		r.conns[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go r.serve(c)
	}
}

// serve connects c to the target once the relay is up.
func (r *tcpRelay) serve(c net.Conn) {
	defer r.wg.Done()
	if !r.waitUp(c) {
		return
	}
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		r.drop(c)
		return
	}
	r.mu.Lock()
	if _, open := r.conns[c]; !open {
		r.mu.Unlock()
		abort(up)
		return
	}
	r.conns[up] = struct{}{}
	r.mu.Unlock()
	pair := &relayPair{client: c, server: up}
	r.wg.Add(2)
	go r.pipe(pair, up, c)
	go r.pipe(pair, c, up)
}

// waitUp waits while the relay holds traffic; false if c was cut meanwhile.
func (r *tcpRelay) waitUp(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.state == relayPartition {
		r.cond.Wait()
	}
	_, open := r.conns[c]
	return open
}

// pipe copies src to dst, holding what it read while the relay is
// partitioned; either end failing cuts both.
func (r *tcpRelay) pipe(pair *relayPair, dst, src net.Conn) {
	defer r.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !r.waitUp(src) {
				break
			}
			if src == pair.server && pair.swallow.Load() {
				// The server has answered the COMMIT: it is applied.
				r.commitsLost.Add(1)
				if r.downAfterLostCommit.Load() {
					r.set(relayDown)
				}
				break
			}
			if src == pair.client && r.loseCommitAnswer.Load() &&
				bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit")) && r.loseCommitAnswer.CompareAndSwap(true, false) {
				pair.swallow.Store(true)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	r.drop(src)
	r.drop(dst)
}

func (r *tcpRelay) drop(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	abort(c)
}

// abort closes c with a reset, as a crashed peer's kernel would.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (r *tcpRelay) set(s relayState) {
	r.mu.Lock()
	r.state = s
	var cut []net.Conn
	if s == relayDown {
		for c := range r.conns {
			cut = append(cut, c)
			delete(r.conns, c)
		}
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	for _, c := range cut {
		abort(c)
	}
}

func (r *tcpRelay) close() {
	_ = r.ln.Close()
	r.set(relayDown)
	r.wg.Wait()
}

// relayedDSN is dsn with its host replaced by the relay's address.
func relayedDSN(t testing.TB, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal("the PostgreSQL DSN is not a URL")
	}
	u.Host = addr
	return u.String()
}

// outageServer starts weir serve on PostgreSQL reached through a relay.
func outageServer(t *testing.T, mutate func(*config.Config)) (*apptest.Server, *tcpRelay) {
	t.Helper()
	cfg := apptest.Config(t)
	if cfg.DB == "" {
		cfg.DB = metatest.PostgresDSN(t) // skips without WEIR_TEST_POSTGRES_DSN
	}
	u, err := url.Parse(cfg.DB)
	if err != nil {
		t.Fatal("the PostgreSQL DSN is not a URL")
	}
	relay := startRelay(t, u.Host)
	cfg.DB = relayedDSN(t, cfg.DB, relay.addr())
	cfg.NodeLockCheckInterval = 100 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	s := apptest.StartConfig(t, cfg)
	s.CreateFeed(testFeed, "", "")
	return s, relay
}

// sent is one post of an outage test and how it was answered.
type sent struct {
	body    []byte
	code    int
	receipt string
	status  string // Service-Status
	errText string // Service-Error
	retry   string // Retry-After
	err     error  // the exchange failed
	took    time.Duration
}

// postOnce posts body and records the answer without failing the test.
func postOnce(s *apptest.Server, body []byte) (out sent) {
	out.body = body
	start := time.Now()
	defer func() { out.took = time.Since(start) }()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/datafeed", strings.NewReader(string(body)))
	if err != nil {
		out.err = err
		return out
	}
	req.Header.Set("Feed", testFeed)
	req.Header.Set("User-Agent", userAgent)
	res, err := client.Do(req)
	if err != nil {
		out.err = err
		return out
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		out.err = err
		return out
	}
	out.code = res.StatusCode
	out.status, out.errText, out.retry = res.Header.Get("Service-Status"), res.Header.Get("Service-Error"), res.Header.Get("Retry-After")
	if out.code == http.StatusOK {
		out.receipt = strings.TrimSuffix(string(b), "\n")
	}
	return out
}

// checkStored asserts that every acknowledged post is stored byte for byte
// under its receipt id, and that every stream there is is complete: one of
// the posts, whole. A post refused because its transaction's answer was
// lost may still be stored (its sender retries it; the reference system
// does the same): that is a complete duplicate, never a partial stream.
func checkStored(t *testing.T, s *apptest.Server, posts []sent) {
	t.Helper()
	byReceipt := make(map[string][]byte)
	refused := make(map[string]bool) // bodies of posts not acknowledged
	acked := 0
	for _, p := range posts {
		if p.code == http.StatusOK {
			byReceipt[p.receipt] = p.body
			acked++
		} else {
			refused[string(p.body)] = true
		}
	}
	streams := s.Streams()
	seen := make(map[string]bool)
	unacked := 0
	for _, st := range streams {
		if st.Status != "UNLOCKED" {
			t.Errorf("stream %d (receipt %s) is %s", st.ID, st.ReceiptID, st.Status)
			continue
		}
		data := s.Read(st.ID, streamfile.Data, 0)
		if seen[st.ReceiptID] {
			t.Errorf("receipt %s names more than one stream (another: %d)", st.ReceiptID, st.ID)
		}
		seen[st.ReceiptID] = true
		if want, ok := byReceipt[st.ReceiptID]; ok {
			if string(data) != string(want) {
				t.Errorf("stream %d (receipt %s): %q, want %q", st.ID, st.ReceiptID, data, want)
			}
		} else if unacked++; !refused[string(data)] {
			// Not another post's bytes, nor a part of one.
			t.Errorf("stream %d (receipt %s, not acknowledged) holds %q, which no refused post sent whole", st.ID, st.ReceiptID, data)
		}
	}
	for r := range byReceipt {
		if !seen[r] {
			t.Errorf("acknowledged receipt %s has no stream", r)
		}
	}
	t.Logf("%d posts, %d acknowledged, %d streams, of which %d of posts answered with a failure", len(posts), acked, len(streams), unacked)
}

// checkRefusal asserts that a post refused during an outage was told to
// retry: 503, Service-Status 503, a Service-Error and a Retry-After.
func checkRefusal(t *testing.T, p sent) {
	t.Helper()
	if p.err != nil {
		t.Errorf("post %q: the exchange failed: %v", p.body, p.err)
		return
	}
	if p.code != http.StatusServiceUnavailable || p.status != "503" || p.errText == "" || p.retry == "" {
		t.Errorf("post %q during the outage: %d Service-Status %q Service-Error %q Retry-After %q; want 503 with a reason and Retry-After",
			p.body, p.code, p.status, p.errText, p.retry)
	}
	// The database's address and user are the operator's business.
	for _, leak := range []string{"user=", "127.0.0.1", "tcp", "postgres"} {
		if strings.Contains(p.errText, leak) {
			t.Errorf("post %q: Service-Error %q tells the sender about the database (%q)", p.body, p.errText, leak)
		}
	}
}

// logRefusals logs each distinct reason posts were refused for.
func logRefusals(t *testing.T, posts []sent) {
	t.Helper()
	seen := make(map[string]int)
	for _, p := range posts {
		if p.code != http.StatusOK {
			seen[fmt.Sprintf("%d %s", p.code, p.errText)]++
		}
	}
	for m, n := range seen {
		t.Logf("%d x %s", n, m)
	}
}

// TestMetadataDatabaseDown: PostgreSQL goes away (every connection cut,
// new ones refused) while senders post, and comes back. Every post in the
// outage gets 503 with Retry-After and a reason, /readyz says the
// database is unavailable, every acknowledged post is stored whole, and
// posts are accepted again without a restart once the database is back.
func TestMetadataDatabaseDown(t *testing.T) {
	s, relay := outageServer(t, nil)
	admin := user(t, s, "outageadmin", []string{access.Administrator}, nil)
	admin.do(http.MethodGet, "/streams", "").want(t, "list streams before the outage", http.StatusOK, nil)
	var (
		mu    sync.Mutex
		posts []sent
		seq   atomic.Int64
	)
	record := func(p sent) sent {
		mu.Lock()
		posts = append(posts, p)
		mu.Unlock()
		return p
	}
	next := func() []byte { return []byte(fmt.Sprintf("outage event %d\n", seq.Add(1))) }
	for range 5 {
		if p := record(postOnce(s, next())); p.code != http.StatusOK {
			t.Fatalf("before the outage: %d %q", p.code, p.errText)
		}
	}

	// Senders keep posting through the outage.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if record(postOnce(s, next())).code != http.StatusOK {
					time.Sleep(20 * time.Millisecond) // as a sender backs off
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	relay.set(relayDown)

	// Once weir has seen the outage, every post is refused with 503.
	apptest.WaitFor(t, "/readyz to report the database unavailable", func() bool {
		r := readyz(t, s)
		return r.code == http.StatusServiceUnavailable
	})
	if r := readyz(t, s); !strings.Contains(r.body, "database") && !strings.Contains(r.body, "lock") {
		t.Errorf("/readyz during the outage: %d %q, want a reason naming the database or the node lock", r.code, r.body)
	}
	for range 5 {
		checkRefusal(t, record(postOnce(s, next())))
	}
	// The REST API says the same: 503, Retry-After, nothing about the
	// database's address (it was 500, as for a bug).
	for _, path := range []string{"/streams", "/feeds"} {
		r := admin.do(http.MethodGet, path, "")
		r.want(t, "GET "+path+" during the outage", http.StatusServiceUnavailable, nil)
		if r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "metadata database is unavailable") ||
			strings.Contains(string(r.body), relay.addr()) || strings.Contains(string(r.body), "user=") {
			t.Errorf("GET %s during the outage: Retry-After %q, body %s", path, r.header.Get("Retry-After"), r.body)
		}
	}
	time.Sleep(500 * time.Millisecond)
	relay.set(relayUp)
	apptest.WaitFor(t, "the node lock taken again", func() bool { return logCount(s, logRegain) == 1 })
	apptest.WaitFor(t, "posts accepted again", func() bool {
		return record(postOnce(s, next())).code == http.StatusOK
	})
	stop()
	wg.Wait()
	for range 5 {
		if p := record(postOnce(s, next())); p.code != http.StatusOK {
			t.Fatalf("after the outage: %d %q", p.code, p.errText)
		}
	}
	if r := readyz(t, s); r.code != http.StatusOK {
		t.Errorf("/readyz after the outage: %d %q", r.code, r.body)
	}
	admin.do(http.MethodGet, "/streams", "").want(t, "list streams after the outage", http.StatusOK, nil)

	// Every answer was 200 or a refusal a sender can act on.
	for _, p := range posts {
		if p.code != http.StatusOK {
			checkRefusal(t, p)
		}
	}
	logRefusals(t, posts)
	checkStored(t, s, posts)
}

// TestMetadataDatabasePartition: the database stops answering without
// closing anything (a network partition: every byte held). Posts must not
// hang with it: each is answered about receive.databaseTimeout after it
// was sent, with 503 and Retry-After, and weir recovers when the
// partition heals. Without the timeout they waited until the partition
// healed (TCP gives up after many minutes).
func TestMetadataDatabasePartition(t *testing.T) {
	const timeout = 2 * time.Second
	s, relay := outageServer(t, func(c *config.Config) { c.Receive.DatabaseTimeout = config.Duration(timeout) })
	var posts []sent
	for i := range 3 {
		p := postOnce(s, []byte(fmt.Sprintf("partition event %d\n", i)))
		posts = append(posts, p)
		if p.code != http.StatusOK {
			t.Fatalf("before the partition: %d %q", p.code, p.errText)
		}
	}
	relay.set(relayPartition)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := postOnce(s, []byte(fmt.Sprintf("held event %d\n", i)))
			mu.Lock()
			posts = append(posts, p)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, p := range posts[3:] {
		checkRefusal(t, p)
		t.Logf("refused after %v: %s", p.took.Round(time.Millisecond), p.errText)
		// A bound on a hang, far above the timeout: not a measure of speed.
		if p.took > 15*timeout {
			t.Errorf("post %q was answered after %v, with receive.databaseTimeout %v", p.body, p.took, timeout)
		}
	}
	if r := readyz(t, s); r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "metadata database unavailable") {
		t.Errorf("/readyz during the partition: %d %q", r.code, r.body)
	}
	relay.set(relayUp)
	apptest.WaitFor(t, "posts accepted again", func() bool {
		p := postOnce(s, []byte("after the partition\n"))
		posts = append(posts, p)
		return p.code == http.StatusOK
	})
	checkStored(t, s, posts)
}

// TestMetadataDatabaseLockedSQLite: another process (an operator's sqlite3
// shell, say) holds SQLite's write lock longer than the busy timeout.
// Posts meanwhile are refused with 503 and Retry-After (they were 500, as
// for a bug), nothing half-stored is visible, and posts are accepted again
// as soon as the lock is released.
func TestMetadataDatabaseLockedSQLite(t *testing.T) {
	if os.Getenv("WEIR_TEST_DB") == "postgres" {
		t.Skip("a SQLite test; TestMetadataDatabaseDown is PostgreSQL's")
	}
	t.Parallel()
	s := start(t, nil)
	var posts []sent
	p := postOnce(s, []byte("before the lock\n"))
	if p.code != http.StatusOK {
		t.Fatalf("before the lock: %d %q", p.code, p.errText)
	}
	posts = append(posts, p)

	db, err := sql.Open("sqlite", filepath.Join(s.Cfg.Data, meta.SQLiteFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	p = postOnce(s, []byte("while locked\n"))
	posts = append(posts, p)
	checkRefusal(t, p)
	if !strings.Contains(p.errText, "the metadata database is unavailable") {
		t.Errorf("Service-Error %q does not say why", p.errText)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatalf("release the write lock: %v", err)
	}
	p = postOnce(s, []byte("after the lock\n"))
	if p.code != http.StatusOK {
		t.Fatalf("after the lock: %d %q", p.code, p.errText)
	}
	posts = append(posts, p)
	checkStored(t, s, posts)
}

// TestMetadataDatabaseCommitAnswerLost: the connection to PostgreSQL fails
// after the server committed a batch and before weir heard so. weir asks
// the database whether the batch is there and, as it is, answers the post
// 200 with its receipt id. It used to answer 503, so that its sender sent
// the data again and it was stored twice.
func TestMetadataDatabaseCommitAnswerLost(t *testing.T) {
	s, relay := outageServer(t, nil)
	var posts []sent
	for i := range 3 {
		p := postOnce(s, []byte(fmt.Sprintf("before %d\n", i)))
		if p.code != http.StatusOK {
			t.Fatalf("before: %d %q", p.code, p.errText)
		}
		posts = append(posts, p)
	}
	for i := range 3 {
		relay.loseNextCommitAnswer()
		p := postOnce(s, []byte(fmt.Sprintf("answer lost %d\n", i)))
		posts = append(posts, p)
		if relay.commitsLost.Load() != int64(i+1) {
			t.Fatalf("the relay lost %d commit answers, want %d", relay.commitsLost.Load(), i+1)
		}
		if p.code != http.StatusOK {
			t.Errorf("post whose commit's answer was lost: %d %q, want 200 (it is stored)", p.code, p.errText)
		}
	}
	p := postOnce(s, []byte("after\n"))
	if p.code != http.StatusOK {
		t.Fatalf("after: %d %q", p.code, p.errText)
	}
	posts = append(posts, p)
	checkStored(t, s, posts)
	if n := len(s.Streams()); n != len(posts) {
		t.Errorf("%d streams for %d posts", n, len(posts))
	}
	if n := strings.Count(s.Logs.String(), "failed while a batch committed; the batch is committed"); n != 3 {
		t.Errorf("logged %d resolved commits, want 3", n)
	}
}

// TestMetadataDatabaseCommitInDoubt: as above, but the database cannot be
// reached afterwards, so weir cannot learn whether the batch committed.
// The post is refused (503), and the stream that did commit must be its
// own data, whole. It used to name bytes of the pack that weir, taking the
// commit for failed, cut back and gave to the next batch: another post's
// data, or nothing (a stream that could not be read).
func TestMetadataDatabaseCommitInDoubt(t *testing.T) {
	s, relay := outageServer(t, nil)
	var posts []sent
	for i := range 2 {
		p := postOnce(s, []byte(fmt.Sprintf("before %d\n", i)))
		if p.code != http.StatusOK {
			t.Fatalf("before: %d %q", p.code, p.errText)
		}
		posts = append(posts, p)
	}
	relay.downAfterLostCommit.Store(true)
	relay.loseNextCommitAnswer()
	p := postOnce(s, []byte("in doubt\n"))
	posts = append(posts, p)
	if relay.commitsLost.Load() != 1 {
		t.Fatalf("the relay lost %d commit answers, want 1", relay.commitsLost.Load())
	}
	checkRefusal(t, p)
	relay.downAfterLostCommit.Store(false)
	relay.set(relayUp)
	// The cut ended the node lock's session too: wait until it is taken
	// again, or a post could be refused for its loss, noticed late.
	apptest.WaitFor(t, "the node lock taken again", func() bool { return logCount(s, logRegain) == 1 })
	apptest.WaitFor(t, "posts accepted again", func() bool {
		p := postOnce(s, []byte(fmt.Sprintf("after %d\n", len(posts))))
		posts = append(posts, p)
		return p.code == http.StatusOK
	})
	for i := range 3 {
		p := postOnce(s, []byte(fmt.Sprintf("later %d\n", i)))
		if p.code != http.StatusOK {
			t.Fatalf("later: %d %q", p.code, p.errText)
		}
		posts = append(posts, p)
	}
	checkStored(t, s, posts)
	// The batch did commit: its stream is there, holding its own post.
	found := false
	for _, st := range s.Streams() {
		if string(s.Read(st.ID, streamfile.Data, 0)) == "in doubt\n" {
			found = true
		}
	}
	if !found {
		t.Error("the stream committed while its answer was lost is not there")
	}
	// And a restart (which removes what was left incomplete) keeps it so.
	s = s.Restart()
	checkStored(t, s, posts)
}
