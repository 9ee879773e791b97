package app_test

// Behaviour of `weir proxy` as a whole, seen from outside: a sender posts
// to a real proxy, which forwards to a real main service, a fake
// downstream or a directory. Every asynchronous effect is waited for with
// apptest.WaitFor; nothing is asserted by sleeping.

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/cli"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

// ---------------------------------------------------------------------------
// Helpers (prefixed px so as not to collide with the package's others).

// pxProxy starts a proxy forwarding to the URLs, accepting every feed
// (RECEIVE_ALL: most tests here are not about feed status) and closing
// aggregates 200ms after they open; mutate changes the rest.
func pxProxy(t *testing.T, id string, mutate func(*config.Proxy), forward ...string) *apptest.Server {
	t.Helper()
	cfg := apptest.ProxyConfig(t, id, forward...)
	cfg.Receive.ReceiptCheckMode = config.ReceiveAll
	cfg.Aggregator.AggregationFrequency = config.Duration(200 * time.Millisecond)
	if mutate != nil {
		mutate(&cfg)
	}
	return apptest.StartProxy(t, cfg)
}

// eachProxyMode runs f, in parallel subtests named queued and instant,
// with a main service and a proxy (queued, or relaying each post at once)
// forwarding to it.
func eachProxyMode(t *testing.T, id string, f func(t *testing.T, main, px *apptest.Server)) {
	for _, instant := range []bool{false, true} {
		name := "queued"
		if instant {
			name = "instant"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			main := start(t, nil)
			px := pxProxy(t, id+"-"+name, func(c *config.Proxy) {
				c.ForwardHTTPDestinations[0].Instant = instant
			}, main.URL+"/datafeed")
			f(t, main, px)
		})
	}
}

// waitForBody waits until main has a stream whose data is body, and
// returns it.
func waitForBody(t *testing.T, main *apptest.Server, body string) meta.Stream {
	t.Helper()
	var got meta.Stream
	apptest.WaitFor(t, "the post at the main service", func() bool {
		for _, st := range main.Streams() {
			if string(main.Read(st.ID, 0, 0)) == body {
				got = st
				return true
			}
		}
		return false
	})
	return got
}

// pxFileDest is a file destination with quick retries.
func pxFileDest(name, path, template string) config.FileDestination {
	q := config.DefaultQueue()
	q.RetryDelay = config.Duration(100 * time.Millisecond)
	q.MaxRetryDelay = config.Duration(time.Second)
	return config.FileDestination{Name: name, Path: path, SubPathTemplate: template, Queue: q}
}

// pxReceiptRE matches the receipt ids a proxy with this id issues.
func pxReceiptRE(proxyID string) *regexp.Regexp {
	return regexp.MustCompile(`^\d{13}_\d{4}_P_` + regexp.QuoteMeta(proxyID) + `$`)
}

// pxFreeAddr returns a loopback address nothing listens on: a port that
// was free a moment ago, for a server the test starts at once.
func pxFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// pxDeadAddr returns a loopback address where connections are refused,
// held for the whole test: a socket bound to it that never listens, so
// that no other server can take the port meanwhile.
func pxDeadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// pxWaitListenable waits until addr can be listened on again.
func pxWaitListenable(t *testing.T, addr string) {
	t.Helper()
	apptest.WaitFor(t, addr+" to be free", func() bool {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		l.Close()
		return true
	})
}

// pxDestName is the name of a proxy's i-th HTTP destination (ProxyConfig
// names it after the host and port of its URL).
func pxDestName(t *testing.T, s *apptest.Server, i int) string {
	t.Helper()
	return s.Proxy.ForwardHTTPDestinations[i].Name
}

// pxParts reads every part of every complete (UNLOCKED) stream of a
// server; streams being written are left out.
func pxParts(t *testing.T, s *apptest.Server) []storedPart {
	t.Helper()
	st, err := s.App.Repo().ListStreams(context.Background(), meta.StreamFilter{Status: meta.Unlocked})
	if err != nil {
		t.Fatalf("list streams: %v", err)
	}
	var out []storedPart
	for _, x := range st {
		out = append(out, storedParts(t, s, x)...)
	}
	return out
}

// pxFeedParts is pxParts of one feed.
func pxFeedParts(t *testing.T, s *apptest.Server, feedName string) []storedPart {
	t.Helper()
	var out []storedPart
	for _, p := range pxParts(t, s) {
		if p.feed == feedName {
			out = append(out, p)
		}
	}
	return out
}

// pxWaitFeedParts waits until the server holds at least n complete parts
// of the feed ("" for any feed) and returns them.
func pxWaitFeedParts(t *testing.T, s *apptest.Server, feedName string, n int) []storedPart {
	t.Helper()
	var parts []storedPart
	apptest.WaitFor(t, fmt.Sprintf("%d parts of feed %q", n, feedName), func() bool {
		if feedName == "" {
			parts = pxParts(t, s)
		} else {
			parts = pxFeedParts(t, s, feedName)
		}
		return len(parts) >= n
	})
	return parts
}

// pxFirstHop is the first element of a part's ReceiptIdPath: the receipt
// id the sender got.
func pxFirstHop(p storedPart) string {
	first, _, _ := strings.Cut(p.meta.Value("ReceiptIdPath"), ",")
	return first
}

// pxForwards lists a proxy's forwards.
func pxForwards(t *testing.T, s *apptest.Server, f meta.ForwardFilter) []meta.Forward {
	t.Helper()
	fs, err := s.App.Repo().ListForwards(context.Background(), f)
	if err != nil {
		t.Fatalf("list forwards: %v", err)
	}
	return fs
}

// pxWaitDrained waits until a proxy has delivered everything: no forward
// left and no stream kept.
func pxWaitDrained(t *testing.T, s *apptest.Server) {
	t.Helper()
	apptest.WaitFor(t, "the proxy to deliver everything and empty its repository", func() bool {
		return len(pxForwards(t, s, meta.ForwardFilter{})) == 0 && len(s.Streams()) == 0
	})
}

// pxKept lists the streams a proxy still keeps: not yet forwarded
// everywhere. Forwarded (DELETED) rows of small posts stay until the last
// stream of their pack is forwarded and the pack goes with them.
func pxKept(t *testing.T, s *apptest.Server) []meta.Stream {
	t.Helper()
	var kept []meta.Stream
	for _, st := range s.Streams() {
		if st.Status != meta.Deleted {
			kept = append(kept, st)
		}
	}
	return kept
}

// pxPost posts data to feed and returns the receipt id the sender got.
func pxPost(t *testing.T, s *apptest.Server, feedName, data string, hdr ...string) string {
	t.Helper()
	return post(t, s, []byte(data), append([]string{"Feed", feedName, "System", "sys"}, hdr...)...).accepted(t)
}

// pxAPIKey creates a user without permissions on the main service and an
// API key for it.
func pxAPIKey(t *testing.T, s *apptest.Server, user, display string) string {
	t.Helper()
	ctx := context.Background()
	ac := s.App.Access()
	if _, err := ac.CreateUser(ctx, user, display, false); err != nil {
		t.Fatal(err)
	}
	key, _, err := ac.CreateAPIKey(ctx, access.NewKey{Owner: user, Name: "forwarding"})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// pxZipPart is one part of a Stroom-format zip.
type pxZipPart struct {
	base string
	meta *attr.Map
	ctx  []byte
	data string
}

// pxUnzip reads a Stroom-format zip: the entry names in order and the
// parts.
func pxUnzip(b []byte) ([]string, []pxZipPart, error) {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, nil, err
	}
	var names []string
	var parts []pxZipPart
	idx := map[string]int{}
	for _, f := range zr.File {
		names = append(names, f.Name)
		base, ext, _ := strings.Cut(f.Name, ".")
		rc, err := f.Open()
		if err != nil {
			return nil, nil, err
		}
		c, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		i, ok := idx[base]
		if !ok {
			i = len(parts)
			idx[base] = i
			parts = append(parts, pxZipPart{base: base})
		}
		switch ext {
		case "meta":
			if parts[i].meta, err = attr.ParseMeta(c); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", f.Name, err)
			}
		case "ctx":
			parts[i].ctx = c
		case "dat":
			parts[i].data = string(c)
		default:
			return nil, nil, fmt.Errorf("unexpected entry %s", f.Name)
		}
	}
	return names, parts, nil
}

// pxAnswer is how the fake downstream answers one post.
type pxAnswer struct {
	status     int
	code       int // Service-Status; 0: not sent
	retryAfter string
	body       string
}

// pxFakePost is one post the fake downstream received.
type pxFakePost struct {
	n      int
	at     time.Time
	header http.Header
	names  []string
	parts  []pxZipPart
	err    error // reading or unzipping the body
	answer pxAnswer
}

// pxFake is a downstream /datafeed whose answers a test decides.
type pxFake struct {
	*httptest.Server
	mu    sync.Mutex
	posts []pxFakePost
}

// pxFakeDownstream starts a fake downstream; answer gets the post's
// arrival number (from 1) and its Feed header.
func pxFakeDownstream(t *testing.T, answer func(n int, feedName string) pxAnswer) *pxFake {
	t.Helper()
	f := &pxFake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := pxFakePost{at: time.Now(), header: r.Header.Clone()}
		b, err := io.ReadAll(r.Body)
		if err == nil {
			p.names, p.parts, err = pxUnzip(b)
		}
		p.err = err
		f.mu.Lock()
		p.n = len(f.posts) + 1
		f.posts = append(f.posts, p)
		f.mu.Unlock()
		a := answer(p.n, r.Header.Get("Feed"))
		f.mu.Lock()
		f.posts[p.n-1].answer = a
		f.mu.Unlock()
		if a.code != 0 {
			w.Header().Set("Service-Status", fmt.Sprint(a.code))
			w.Header().Set("Service-Error", "fake downstream says "+fmt.Sprint(a.code))
		}
		if a.retryAfter != "" {
			w.Header().Set("Retry-After", a.retryAfter)
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(f.Close)
	return f
}

// snapshot returns the posts received so far.
func (f *pxFake) snapshot() []pxFakePost {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.posts)
}

// delivered returns, for every part of every post answered 200, the
// ReceiptIdPath of its meta, with its data.
func (f *pxFake) delivered(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range f.snapshot() {
		if p.err != nil {
			t.Fatalf("fake downstream: post %d: %v", p.n, p.err)
		}
		if p.answer.status != http.StatusOK {
			continue
		}
		for _, part := range p.parts {
			out[part.meta.Value("ReceiptIdPath")] = part.data
		}
	}
	return out
}

// pxFileItem is one aggregate a file destination wrote.
type pxFileItem struct {
	dir   string   // relative to the destination's path
	files []string // in the item's directory
	names []string // zip entries, in order
	parts []pxZipPart
	meta  *attr.Map // proxy.meta
}

// pxFileItems reads every finished item under root (directories holding
// proxy.zip), skipping the temporary ones being written.
func pxFileItems(t *testing.T, root string) []pxFileItem {
	t.Helper()
	var out []pxFileItem
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || p == root {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "proxy.zip")); err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		it := pxFileItem{dir: filepath.ToSlash(rel)}
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range ents {
			it.files = append(it.files, e.Name())
		}
		zb, err := os.ReadFile(filepath.Join(p, "proxy.zip"))
		if err != nil {
			return err
		}
		if it.names, it.parts, err = pxUnzip(zb); err != nil {
			return fmt.Errorf("%s/proxy.zip: %w", p, err)
		}
		mb, err := os.ReadFile(filepath.Join(p, "proxy.meta"))
		if err != nil {
			return err
		}
		if it.meta, err = attr.ParseMeta(mb); err != nil {
			return fmt.Errorf("%s/proxy.meta: %w", p, err)
		}
		out = append(out, it)
		return filepath.SkipDir
	})
	if err != nil {
		t.Fatalf("read file destination %s: %v", root, err)
	}
	return out
}

func pxCountFileParts(items []pxFileItem) int {
	n := 0
	for _, it := range items {
		n += len(it.parts)
	}
	return n
}

// pxGroups describes how parts were grouped: one sorted string per
// group, listing the first-hop receipts of its parts in order.
func pxGroups(groups [][]string) []string {
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = strings.Join(g, ",")
	}
	sort.Strings(out)
	return out
}

// pxStreamGroups groups the complete parts of a server by stream.
func pxStreamGroups(t *testing.T, s *apptest.Server, feedName string) []string {
	t.Helper()
	by := map[int64][]string{}
	var order []int64
	for _, p := range pxFeedParts(t, s, feedName) {
		if _, ok := by[p.stream]; !ok {
			order = append(order, p.stream)
		}
		by[p.stream] = append(by[p.stream], pxFirstHop(p))
	}
	var groups [][]string
	for _, id := range order {
		groups = append(groups, by[id])
	}
	return pxGroups(groups)
}

// pxReadyz GETs /readyz.
func pxReadyz(t *testing.T, s *apptest.Server) *resp {
	t.Helper()
	return send(t, s, http.MethodGet, "/readyz", nil)
}

// ---------------------------------------------------------------------------
// 1. The downstream stops for a while under steady posting.

// TestProxyDownstreamOutage: the main service stops while posts keep
// coming and comes back on the same address, data and database; every
// acknowledged post then arrives exactly once, with the receipt the
// sender got first in its ReceiptIdPath.
func TestProxyDownstreamOutage(t *testing.T) {
	t.Parallel()
	addr := pxFreeAddr(t)
	main := start(t, func(c *config.Config) { c.Listen = addr })
	px := pxProxy(t, "proxy-outage", func(c *config.Proxy) {
		c.Aggregator.MaxItemsPerAggregate = 4
	}, "http://"+addr+"/datafeed")
	dest := pxDestName(t, px, 0)
	re := pxReceiptRE("proxy-outage")

	sent := map[string]string{}
	postOne := func(i int) {
		t.Helper()
		data := fmt.Sprintf("outage event %d\n", i)
		id := pxPost(t, px, testFeed, data)
		if !re.MatchString(id) {
			t.Fatalf("post %d: receipt %q is not the proxy's", i, id)
		}
		if _, dup := sent[id]; dup {
			t.Fatalf("receipt %s given twice", id)
		}
		sent[id] = data
	}
	for i := range 10 {
		postOne(i)
	}
	main.Stop()
	postOne(10)
	// The outage is seen: an attempt failed and the item waits to retry.
	apptest.WaitFor(t, "a failed forward while the main service is down", func() bool {
		for _, f := range pxForwards(t, px, meta.ForwardFilter{Destination: dest, Retrying: true}) {
			if f.State == meta.ForwardQueued {
				return true
			}
		}
		return false
	})
	for i := 11; i < 20; i++ {
		postOne(i)
	}
	if fs := pxForwards(t, px, meta.ForwardFilter{State: meta.ForwardFailed}); len(fs) != 0 {
		t.Fatalf("an unreachable downstream put items in the failure area: %+v", fs)
	}
	pxWaitListenable(t, addr)
	main = apptest.StartConfig(t, main.Cfg)
	for i := 20; i < 30; i++ {
		postOne(i)
	}

	pxWaitFeedParts(t, main, testFeed, len(sent))
	pxWaitDrained(t, px)
	// Everything is delivered: what the main service holds now is final.
	parts := pxFeedParts(t, main, testFeed)
	seen := map[string][]string{} // first hop -> ReceiptIds at the main service
	for _, p := range parts {
		path := strings.Split(p.meta.Value("ReceiptIdPath"), ",")
		if len(path) != 2 || !receiptRE.MatchString(path[1]) || p.meta.Value("ReceiptId") != path[1] {
			t.Errorf("stream %d: ReceiptIdPath %q ReceiptId %q: want the proxy's and the main service's ids",
				p.stream, p.meta.Value("ReceiptIdPath"), p.meta.Value("ReceiptId"))
			continue
		}
		data, ok := sent[path[0]]
		if !ok {
			t.Errorf("stream %d: path starts with %q, which no sender got", p.stream, path[0])
			continue
		}
		if string(p.data) != data {
			t.Errorf("stream %d: data %q, want %q", p.stream, p.data, data)
		}
		seen[path[0]] = append(seen[path[0]], fmt.Sprintf("stream %d (GUID %s)", p.stream, p.meta.Value("GUID")))
	}
	for id := range sent {
		switch n := len(seen[id]); {
		case n == 0:
			t.Errorf("acknowledged post %s never arrived", id)
		case n > 1:
			t.Errorf("post %s arrived %d times: %v", id, n, seen[id])
		}
	}
	if len(parts) != len(sent) {
		t.Errorf("%d parts at the main service, want %d", len(parts), len(sent))
	}
	if v := metric(t, px, `weir_proxy_forwards_total{destination="`+dest+`",outcome="retry"}`); v < 1 {
		t.Errorf("weir_proxy_forwards_total retry = %g, want the failed attempts counted", v)
	}
}

// TestProxyRestartKeepsQueue: what a proxy holds for a downstream that is
// down survives a restart of the proxy, retries included, and is
// delivered exactly once when the downstream comes back.
func TestProxyRestartKeepsQueue(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	fake := pxFakeDownstream(t, func(int, string) pxAnswer {
		if down.Load() {
			return pxAnswer{status: http.StatusServiceUnavailable, code: 503}
		}
		return pxAnswer{status: http.StatusOK, body: "fake\n"}
	})
	px := pxProxy(t, "proxy-restart", func(c *config.Proxy) {
		c.Aggregator.MaxItemsPerAggregate = 2
	}, fake.URL+"/datafeed")
	dest := pxDestName(t, px, 0)
	sent := map[string]string{}
	for i := range 3 {
		d := fmt.Sprintf("before restart %d\n", i)
		sent[pxPost(t, px, testFeed, d)] = d
	}
	apptest.WaitFor(t, "every item to have failed at least once", func() bool {
		n := 0
		for _, f := range pxForwards(t, px, meta.ForwardFilter{Destination: dest, Retrying: true}) {
			n += f.Items
		}
		return n == len(sent)
	})
	px = px.Restart()
	d := "after restart\n"
	sent[pxPost(t, px, testFeed, d)] = d
	if fs := pxForwards(t, px, meta.ForwardFilter{Destination: dest, Retrying: true}); len(fs) < 2 {
		t.Errorf("after the restart %d retrying forwards, want the 2 from before", len(fs))
	}
	down.Store(false)
	pxWaitDrained(t, px)
	times := map[string]int{}
	for _, p := range fake.snapshot() {
		if p.answer.status != http.StatusOK {
			continue
		}
		for _, part := range p.parts {
			id := part.meta.Value("ReceiptIdPath")
			times[id]++
			if sent[id] != part.data {
				t.Errorf("delivered %q with data %q", id, part.data)
			}
		}
	}
	for id := range sent {
		if times[id] != 1 {
			t.Errorf("post %s delivered %d times, want once", id, times[id])
		}
	}
}

// ---------------------------------------------------------------------------
// 2. A downstream refuses one feed permanently: failure area and replay.

// TestProxyFailureAreaAndReplay: the main service refuses feed A (status
// REJECT, 406/110): A's aggregate goes to the failure area at once while
// feed B keeps flowing; once A receives again, `weir proxy replay` sends
// it.
func TestProxyFailureAreaAndReplay(t *testing.T) {
	t.Parallel()
	const feedA, feedB = "PXB-REJECTED", "PXB-FLOWING"
	main := start(t, nil)
	main.CreateFeed(feedA, feed.Reject, "")
	main.CreateFeed(feedB, "", "")
	px := pxProxy(t, "proxy-replay", nil, main.URL+"/datafeed")
	dest := pxDestName(t, px, 0)

	sentA, sentB := map[string]string{}, map[string]string{}
	for i := range 2 {
		d := fmt.Sprintf("A %d\n", i)
		sentA[pxPost(t, px, feedA, d)] = d
	}
	for i := range 3 {
		d := fmt.Sprintf("B %d\n", i)
		sentB[pxPost(t, px, feedB, d)] = d
	}
	var failed []meta.Forward
	apptest.WaitFor(t, "feed A's items in the failure area", func() bool {
		failed = pxForwards(t, px, meta.ForwardFilter{Destination: dest, State: meta.ForwardFailed})
		n := 0
		for _, f := range failed {
			n += f.Items
		}
		return n == len(sentA)
	})
	for _, f := range failed {
		if f.Feed != feedA || f.LastStatus != 110 || f.Attempts != 1 || f.ErrorLog == "" ||
			!strings.Contains(f.Error, "HTTP 406") || !strings.Contains(f.ErrorLog, "attempt 1") {
			t.Errorf("failed forward %+v: want feed %s, status 110 after one attempt (permanent), HTTP 406 in its error and an error log", f, feedA)
		}
	}
	pxWaitFeedParts(t, main, feedB, 3)
	// B keeps flowing while A sits in the failure area.
	for i := 3; i < 5; i++ {
		d := fmt.Sprintf("B %d\n", i)
		sentB[pxPost(t, px, feedB, d)] = d
	}
	pxWaitFeedParts(t, main, feedB, len(sentB))
	apptest.WaitFor(t, "B's forwards to finish", func() bool {
		for _, f := range pxForwards(t, px, meta.ForwardFilter{}) {
			if f.Feed == feedB {
				return false
			}
		}
		return true
	})
	// A is not retried: a permanent refusal waits for an operator.
	if again := pxForwards(t, px, meta.ForwardFilter{Destination: dest, State: meta.ForwardFailed}); len(again) != len(failed) {
		t.Fatalf("failure area changed: %+v, was %+v", again, failed)
	} else {
		for _, f := range again {
			if f.Attempts != 1 {
				t.Errorf("failed aggregate %d was tried again (%d attempts) without a replay", f.ID, f.Attempts)
			}
		}
	}
	if n := len(pxFeedParts(t, main, feedA)); n != 0 {
		t.Fatalf("%d parts of the refused feed at the main service", n)
	}

	// The operator fixes the feed and replays.
	ctx := context.Background()
	f, err := main.App.Repo().GetFeed(ctx, feedA)
	if err != nil {
		t.Fatal(err)
	}
	f.Status = feed.Receive
	if err := main.App.Repo().UpdateFeed(ctx, f); err != nil {
		t.Fatal(err)
	}
	args := []string{"proxy", "replay", "--destination", dest, "--all", "--data", px.Cfg.Data}
	if px.Cfg.DB != "" {
		args = append(args, "--db", px.Cfg.DB)
	}
	// A mistyped destination is an error, not "0 failed items".
	var out, errOut bytes.Buffer
	typo := slices.Clone(args)
	typo[3] = dest + "-typo"
	if code := cli.Main(typo, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "holds items for: "+dest) {
		t.Errorf("replay of an unknown destination: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := cli.Main(args, &out, &errOut); code != 0 {
		t.Fatalf("weir %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	if want := fmt.Sprintf("%d failed item(s) of %s queued again\n", len(failed), dest); out.String() != want {
		t.Errorf("replay said %q, want %q", out.String(), want)
	}
	parts := pxWaitFeedParts(t, main, feedA, len(sentA))
	pxWaitDrained(t, px)
	for _, p := range parts {
		if d, ok := sentA[pxFirstHop(p)]; !ok || string(p.data) != d {
			t.Errorf("replayed part: path %q data %q", p.meta.Value("ReceiptIdPath"), p.data)
		}
		delete(sentA, pxFirstHop(p))
	}
	if len(sentA) != 0 {
		t.Errorf("not delivered after replay: %v", sentA)
	}
	for _, p := range pxFeedParts(t, main, feedB) {
		delete(sentB, pxFirstHop(p))
	}
	if len(sentB) != 0 {
		t.Errorf("B posts not delivered: %v", sentB)
	}
}

// ---------------------------------------------------------------------------
// 3 and 4. When aggregates close.

// TestProxyAggregateClosesOnAge: with room for many items, two posts
// arrive together as one stream of two parts once the aggregate is
// aggregationFrequency old, with no later post to close it.
func TestProxyAggregateClosesOnAge(t *testing.T) {
	t.Parallel()
	const freq = 2 * time.Second
	main := start(t, nil)
	px := pxProxy(t, "proxy-age", func(c *config.Proxy) {
		c.Aggregator.MaxItemsPerAggregate = 1000
		c.Aggregator.AggregationFrequency = config.Duration(freq)
	}, main.URL+"/datafeed")

	// The aggregate opens after the first post was sent, and closes at the
	// first aggregator pass that finds it aggregationFrequency old; a pass
	// assigns every stream committed before it. So when the second post
	// was acknowledged less than aggregationFrequency after the first was
	// sent, both are in one aggregate. Should a very loaded machine be
	// slower than that, the pair is posted again on another feed.
	var feedName string
	var ids []string
	for attempt := 0; ; attempt++ {
		feedName = fmt.Sprintf("PXB-AGE-%d", attempt)
		main.CreateFeed(feedName, "", "")
		r1 := post(t, px, []byte("first\n"), "Feed", feedName)
		r2 := post(t, px, []byte("second\n"), "Feed", feedName)
		ids = []string{r1.accepted(t), r2.accepted(t)}
		took := r2.done.Sub(r1.sent)
		if took < freq-50*time.Millisecond {
			break
		}
		if attempt == 4 {
			t.Fatalf("two posts take %s on this machine, longer than the aggregation frequency %s", took, freq)
		}
		t.Logf("the two posts took %s; trying again", took)
	}
	pxWaitFeedParts(t, main, feedName, 2)
	st, err := main.App.Repo().ListStreams(context.Background(), meta.StreamFilter{Feed: feedName})
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Parts != 2 || st[0].Type != "Raw Events" {
		t.Fatalf("streams of %s: %+v; want one stream of 2 parts", feedName, st)
	}
	parts := storedParts(t, main, st[0])
	for i, want := range []string{"first\n", "second\n"} {
		if pxFirstHop(parts[i]) != ids[i] || string(parts[i].data) != want {
			t.Errorf("part %d: path %q data %q; want %s %q", i, parts[i].meta.Value("ReceiptIdPath"), parts[i].data, ids[i], want)
		}
	}
	if v := metric(t, px, `weir_proxy_aggregates_closed_total{reason="age"}`); v < 1 {
		t.Errorf("aggregates closed by age: %g", v)
	}
	if v := metric(t, px, `weir_proxy_aggregates_closed_total{reason="items"}`); v > 0 {
		t.Errorf("aggregates closed by item count: %g, want none", v)
	}
}

// TestProxyAggregateClosesOnItemCount: with maxItemsPerAggregate 3 and an
// hour's frequency, 7 posts make two aggregates of 3 that arrive, while
// the 7th waits in the open aggregate.
func TestProxyAggregateClosesOnItemCount(t *testing.T) {
	t.Parallel()
	main := start(t, nil)
	px := pxProxy(t, "proxy-items", func(c *config.Proxy) {
		c.Aggregator.MaxItemsPerAggregate = 3
		c.Aggregator.AggregationFrequency = config.Duration(time.Hour)
	}, main.URL+"/datafeed")
	var ids []string
	for i := range 7 {
		ids = append(ids, pxPost(t, px, testFeed, fmt.Sprintf("item %d\n", i)))
	}
	pxWaitFeedParts(t, main, testFeed, 6)
	var open []meta.Aggregate
	apptest.WaitFor(t, "the 7th post in the open aggregate and nothing queued", func() bool {
		var err error
		if open, err = px.App.Repo().OpenAggregates(context.Background()); err != nil {
			t.Fatal(err)
		}
		return len(open) == 1 && open[0].Items == 1 && len(pxForwards(t, px, meta.ForwardFilter{})) == 0
	})
	// Nothing is queued and the open aggregate holds the 7th post: what the
	// main service has now is all it gets until the aggregate closes.
	ss, err := px.App.Repo().AggregateStreams(context.Background(), open[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].ReceiptID != ids[6] {
		t.Fatalf("open aggregate holds %+v, want the 7th post %s", ss, ids[6])
	}
	got := pxStreamGroups(t, main, testFeed)
	want := pxGroups([][]string{ids[0:3], ids[3:6]})
	if !slices.Equal(got, want) {
		t.Errorf("streams at the main service:\n got %q\nwant %q", got, want)
	}
	if v := metric(t, px, `weir_proxy_aggregates_closed_total{reason="items"}`); v != 2 {
		t.Errorf("aggregates closed on item count: %g, want 2", v)
	}
	if n := len(pxKept(t, px)); n != 1 {
		t.Errorf("the proxy keeps %d streams, want only the 7th", n)
	}
}

// TestProxyAggregateClosesOnByteSize: with maxUncompressedByteSize 100,
// two 50-byte posts fill an aggregate, and a 150-byte post closes the
// open one first (it does not fit) and goes alone.
func TestProxyAggregateClosesOnByteSize(t *testing.T) {
	t.Parallel()
	main := start(t, nil)
	px := pxProxy(t, "proxy-bytes", func(c *config.Proxy) {
		c.Aggregator.MaxItemsPerAggregate = 1000
		c.Aggregator.MaxUncompressedByteSize = 100
		c.Aggregator.AggregationFrequency = config.Duration(time.Hour)
	}, main.URL+"/datafeed")
	var ids []string
	for i := range 5 {
		d := fmt.Sprintf("%-49d\n", i) // 50 bytes
		ids = append(ids, pxPost(t, px, testFeed, d))
	}
	ids = append(ids, pxPost(t, px, testFeed, strings.Repeat("x", 149)+"\n"))
	pxWaitFeedParts(t, main, testFeed, 6)
	pxWaitDrained(t, px)
	got := pxStreamGroups(t, main, testFeed)
	want := pxGroups([][]string{ids[0:2], ids[2:4], ids[4:5], ids[5:6]})
	if !slices.Equal(got, want) {
		t.Errorf("streams at the main service:\n got %q\nwant %q", got, want)
	}
	for reason, n := range map[string]float64{"bytes": 3, "full": 1, "items": 0, "age": 0} {
		v := metric(t, px, `weir_proxy_aggregates_closed_total{reason="`+reason+`"}`)
		if v == -1 {
			v = 0
		}
		if v != n {
			t.Errorf("aggregates closed by %s: %g, want %g", reason, v, n)
		}
	}
}

// ---------------------------------------------------------------------------
// 5. Retries.

// TestProxyRetryAfter: a downstream answering 503 with Retry-After twice,
// then 200: the item is delivered on the third attempt, the attempts are
// recorded meanwhile, each retry waits at least what Retry-After asks,
// and every attempt carries the same aggregate GUID.
func TestProxyRetryAfter(t *testing.T) {
	t.Parallel()
	third, release := make(chan struct{}), make(chan struct{})
	fake := pxFakeDownstream(t, func(n int, _ string) pxAnswer {
		switch {
		case n <= 2:
			return pxAnswer{status: http.StatusServiceUnavailable, code: 503, retryAfter: "1"}
		case n == 3:
			close(third)
			select { // held until the test has looked at the queue
			case <-release:
			case <-time.After(time.Minute):
			}
		}
		return pxAnswer{status: http.StatusOK, body: fmt.Sprintf("fake-receipt-%d\n", n)}
	})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseOnce)
	px := pxProxy(t, "proxy-retry", nil, fake.URL+"/datafeed")
	dest := pxDestName(t, px, 0)
	id := pxPost(t, px, testFeed, "retried\n")

	select {
	case <-third:
	case <-time.After(30 * time.Second):
		t.Fatalf("no third attempt; the fake got %d posts", len(fake.snapshot()))
	}
	fs := pxForwards(t, px, meta.ForwardFilter{Destination: dest})
	if len(fs) != 1 {
		t.Fatalf("forwards during the third attempt: %+v", fs)
	}
	f := fs[0]
	if f.State != meta.ForwardQueued || f.Attempts != 2 || f.LastStatus != 503 || !strings.Contains(f.Error, "HTTP 503") ||
		!strings.Contains(f.ErrorLog, "attempt 1") || !strings.Contains(f.ErrorLog, "attempt 2") ||
		strings.Count(f.ErrorLog, "\n") != 2 || f.FirstMs == 0 || f.LastMs < f.FirstMs {
		t.Errorf("forward after two failures: %+v", f)
	}
	releaseOnce()
	pxWaitDrained(t, px)

	posts := fake.snapshot()
	if len(posts) != 3 {
		t.Fatalf("the fake got %d posts, want 3", len(posts))
	}
	for i, p := range posts {
		if p.err != nil {
			t.Fatalf("attempt %d: %v", i+1, p.err)
		}
		if p.header.Get("Compression") != "ZIP" || p.header.Get("Feed") != testFeed || p.header.Get("GUID") != f.GUID {
			t.Errorf("attempt %d headers: Compression %q Feed %q GUID %q; want ZIP, %s, the aggregate's %s",
				i+1, p.header.Get("Compression"), p.header.Get("Feed"), p.header.Get("GUID"), testFeed, f.GUID)
		}
		if len(p.parts) != 1 || p.parts[0].data != "retried\n" || p.parts[0].meta.Value("ReceiptId") != id {
			t.Errorf("attempt %d: entries %q", i+1, p.names)
		}
		if i > 0 {
			// Retry-After: 1 asks for a second, more than retryDelay's 100ms.
			if gap := p.at.Sub(posts[i-1].at); gap < 990*time.Millisecond {
				t.Errorf("attempt %d came %s after the previous one, though Retry-After asked for 1s", i+1, gap)
			}
		}
	}
	if v := metric(t, px, `weir_proxy_forwards_total{destination="`+dest+`",outcome="retry"}`); v != 2 {
		t.Errorf("retries counted: %g, want 2", v)
	}
	if v := metric(t, px, `weir_proxy_forwards_total{destination="`+dest+`",outcome="sent"}`); v != 1 {
		t.Errorf("sends counted: %g, want 1", v)
	}
}

// TestProxyPoisonItemDoesNotBlock: a downstream that fails every post of
// feed X (500) but takes feed Y: X is retried again and again, and Y's
// posts still get through, even with a single forwarding thread.
func TestProxyPoisonItemDoesNotBlock(t *testing.T) {
	t.Parallel()
	const poison, fine = "PXB-POISON", "PXB-FINE"
	fake := pxFakeDownstream(t, func(n int, feedName string) pxAnswer {
		if feedName == poison {
			return pxAnswer{status: http.StatusInternalServerError}
		}
		return pxAnswer{status: http.StatusOK, body: fmt.Sprintf("fake-%d\n", n)}
	})
	px := pxProxy(t, "proxy-poison", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Queue.ForwardThreadCount = 1
	}, fake.URL+"/datafeed")
	dest := pxDestName(t, px, 0)
	pxPost(t, px, poison, "poison\n")
	apptest.WaitFor(t, "the poison item to fail once", func() bool {
		fs := pxForwards(t, px, meta.ForwardFilter{Destination: dest, Retrying: true})
		return len(fs) == 1 && fs[0].Feed == poison
	})
	want := map[string]string{}
	for i := range 3 {
		d := fmt.Sprintf("fine %d\n", i)
		want[pxPost(t, px, fine, d)] = d
	}
	apptest.WaitFor(t, "feed Y's posts to get through", func() bool {
		got := fake.delivered(t)
		for id, d := range want {
			if got[id] != d {
				return false
			}
		}
		return true
	})
	// X is still being retried, not given up on, and was never delivered.
	apptest.WaitFor(t, "the poison item to be retried again", func() bool {
		fs := pxForwards(t, px, meta.ForwardFilter{Destination: dest})
		return len(fs) == 1 && fs[0].Feed == poison && fs[0].Attempts >= 3
	})
	f := pxForwards(t, px, meta.ForwardFilter{Destination: dest})[0]
	if f.State != meta.ForwardQueued || f.LastStatus != 999 || !strings.Contains(f.Error, "HTTP 500") {
		t.Errorf("poison forward: %+v; want queued for retry, status 999, HTTP 500", f)
	}
	for _, p := range fake.snapshot() {
		if p.header.Get("Feed") == poison && p.answer.status == http.StatusOK {
			t.Errorf("post %d of the poison feed was answered 200", p.n)
		}
	}
}

// pxWaitFailed waits until the proxy holds one item for dest in the
// failure area and returns it.
func pxWaitFailed(t *testing.T, px *apptest.Server, dest string) meta.Forward {
	t.Helper()
	var f meta.Forward
	apptest.WaitFor(t, "the item in the failure area", func() bool {
		fs := pxForwards(t, px, meta.ForwardFilter{Destination: dest, State: meta.ForwardFailed})
		if len(fs) == 1 {
			f = fs[0]
		}
		return len(fs) == 1
	})
	return f
}

// TestProxyMaxRetryAge: an item that keeps failing (500, which is not
// permanent) goes to the failure area once it has failed for longer than
// maxRetryAge, with one error log line per attempt.
func TestProxyMaxRetryAge(t *testing.T) {
	t.Parallel()
	fake := pxFakeDownstream(t, func(int, string) pxAnswer { return pxAnswer{status: http.StatusInternalServerError} })
	px := pxProxy(t, "proxy-retry-age", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Queue.MaxRetryAge = config.Duration(500 * time.Millisecond)
	}, fake.URL+"/datafeed")
	dest := pxDestName(t, px, 0)
	pxPost(t, px, testFeed, "too old\n")
	f := pxWaitFailed(t, px, dest)
	if f.Attempts < 2 || f.LastMs-f.FirstMs < 500 || f.LastStatus != 999 ||
		strings.Count(f.ErrorLog, "\n") != f.Attempts || !strings.Contains(f.ErrorLog, fmt.Sprintf("attempt %d", f.Attempts)) {
		t.Errorf("failed forward: %+v; want several attempts over at least maxRetryAge, each logged", f)
	}
	if n := len(fake.snapshot()); n != f.Attempts {
		t.Errorf("the downstream got %d posts, the forward records %d attempts", n, f.Attempts)
	}
}

// TestProxyMaxRetryAgeZero: a destination whose queue says maxRetryAge: 0
// in the config file does not retry (the reference system's meaning of
// zero): a send that fails with a retryable answer (500) puts the item in
// the failure area after one attempt, and the downstream sees no second.
func TestProxyMaxRetryAgeZero(t *testing.T) {
	t.Parallel()
	fake := pxFakeDownstream(t, func(int, string) pxAnswer { return pxAnswer{status: http.StatusInternalServerError} })
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	yaml := "forwardHttpDestinations:\n  - forwardUrl: " + fake.URL + "/datafeed\n    queue:\n      maxRetryAge: 0\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := config.LoadProxy(file)
	if err != nil {
		t.Fatal(err)
	}
	px := pxProxy(t, "proxy-no-retries", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Queue = loaded.ForwardHTTPDestinations[0].Queue
	}, fake.URL+"/datafeed")
	dest := pxDestName(t, px, 0)
	pxPost(t, px, testFeed, "no retries\n")
	f := pxWaitFailed(t, px, dest)
	if f.Attempts != 1 || f.LastStatus != 999 || strings.Count(f.ErrorLog, "\n") != 1 {
		t.Errorf("failed forward: %+v; want one logged attempt", f)
	}
	if n := len(fake.snapshot()); n != 1 {
		t.Errorf("the downstream got %d posts, want 1 (no retries)", n)
	}
}

// TestProxyLivenessPausesForwarding: while a destination's liveness URL
// does not answer 200, nothing is sent to it (no attempt is spent);
// once it does, the queue goes.
func TestProxyLivenessPausesForwarding(t *testing.T) {
	t.Parallel()
	var live atomic.Bool
	fake := pxFakeDownstream(t, func(int, string) pxAnswer { return pxAnswer{status: http.StatusOK, body: "fake\n"} })
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !live.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(health.Close)
	px := pxProxy(t, "proxy-liveness", func(c *config.Proxy) {
		h := &c.ForwardHTTPDestinations[0]
		h.Name = "checked"
		h.LivenessCheckURL = health.URL + "/live"
		h.Queue.LivenessCheckInterval = config.Duration(100 * time.Millisecond)
	}, fake.URL+"/datafeed")
	id := pxPost(t, px, testFeed, "waits for liveness\n")
	apptest.WaitFor(t, "the aggregate queued", func() bool {
		return len(pxForwards(t, px, meta.ForwardFilter{Destination: "checked"})) == 1
	})
	if v := metric(t, px, `weir_proxy_destination_live{destination="checked"}`); v != 0 {
		t.Errorf("destination live = %g while its check fails", v)
	}
	if fs := pxForwards(t, px, meta.ForwardFilter{Destination: "checked"}); len(fs) != 1 || fs[0].Attempts != 0 {
		t.Errorf("forwards while not live: %+v; want one, never attempted", fs)
	}
	if n := len(fake.snapshot()); n != 0 {
		t.Errorf("%d posts sent to a destination that is not live", n)
	}
	live.Store(true)
	pxWaitDrained(t, px)
	if got := fake.delivered(t); len(got) != 1 || got[id] != "waits for liveness\n" {
		t.Errorf("delivered %v", got)
	}
	waitMetric(t, px, `weir_proxy_destination_live{destination="checked"}`, 1)
}

// ---------------------------------------------------------------------------
// 6 and 7. File destinations, and several destinations at once.

// TestProxyFileDestination: each aggregate becomes
// <path>/<FEED>/<yyyy>/<proxyId>-<aggregate id>/ holding proxy.zip (the
// Stroom-format zip with each part's meta) and proxy.meta (the common
// attributes); no temporary directory is left.
func TestProxyFileDestination(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	yearBefore := time.Now().UTC().Format("2006")
	px := pxProxy(t, "proxy-file", func(c *config.Proxy) {
		c.ForwardFileDestinations = []config.FileDestination{pxFileDest("files", dir, "${feed}/${year}")}
		c.Aggregator.MaxItemsPerAggregate = 2
	})
	sent := map[string]string{}
	for i := range 3 {
		d := fmt.Sprintf("file event %d\n", i)
		sent[pxPost(t, px, testFeed, d)] = d
	}
	var items []pxFileItem
	apptest.WaitFor(t, "3 parts written to the file destination", func() bool {
		items = pxFileItems(t, dir)
		return pxCountFileParts(items) >= len(sent)
	})
	pxWaitDrained(t, px)
	items = pxFileItems(t, dir)
	yearAfter := time.Now().UTC().Format("2006")
	nameRE := regexp.MustCompile(`^` + testFeed + `/(\d{4})/proxy-file-(\d{10})$`)
	aggIDs := map[string]bool{}
	for _, it := range items {
		m := nameRE.FindStringSubmatch(it.dir)
		if m == nil || (m[1] != yearBefore && m[1] != yearAfter) {
			t.Errorf("item directory %q: want %s/<year>/proxy-file-<aggregate id>", it.dir, testFeed)
			continue
		}
		if aggIDs[m[2]] {
			t.Errorf("aggregate %s written twice", m[2])
		}
		aggIDs[m[2]] = true
		if !slices.Equal(it.files, []string{"proxy.meta", "proxy.zip"}) {
			t.Errorf("%s holds %q, want proxy.meta and proxy.zip", it.dir, it.files)
		}
		// No service behind a file destination decides a typeless post's
		// type: the proxy does, as a main service that does not know the
		// feed would.
		if typ := it.meta.Value("Type"); typ != "Raw Events" {
			t.Errorf("%s/proxy.meta Type %q, want Raw Events", it.dir, typ)
		}
		var wantNames []string
		for i := range it.parts {
			wantNames = append(wantNames, fmt.Sprintf("%010d.meta", i+1), fmt.Sprintf("%010d.dat", i+1))
		}
		if !slices.Equal(it.names, wantNames) {
			t.Errorf("%s/proxy.zip entries %q, want %q", it.dir, it.names, wantNames)
		}
		for _, p := range it.parts {
			id := p.meta.Value("ReceiptId")
			d, ok := sent[id]
			if !ok || p.data != d || p.meta.Value("ReceiptIdPath") != id || p.meta.Value("Feed") != testFeed || p.meta.Value("System") != "sys" {
				t.Errorf("%s part %s: meta %q data %q", it.dir, p.base, p.meta.Sorted(), p.data)
			}
			delete(sent, id)
		}
		if it.meta.Value("Feed") != testFeed || !uuidRE.MatchString(it.meta.Value("GUID")) || it.meta.Value("System") != "sys" {
			t.Errorf("%s/proxy.meta: %q; want Feed, the aggregate's GUID and the common System", it.dir, it.meta.Sorted())
		}
	}
	if len(items) != 2 {
		t.Errorf("%d items written, want 2 (2 items, then 1 closed on age)", len(items))
	}
	if len(sent) != 0 {
		t.Errorf("not written: %v", sent)
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary left behind: %s", p)
		}
		return nil
	})
}

// TestProxyTwoDestinations: an HTTP destination and a file destination
// both get every aggregate, grouped the same way; the proxy keeps the
// data until both have it.
func TestProxyTwoDestinations(t *testing.T) {
	t.Parallel()
	main := start(t, nil)
	dir := t.TempDir()
	px := pxProxy(t, "proxy-both", func(c *config.Proxy) {
		c.ForwardFileDestinations = []config.FileDestination{pxFileDest("files", dir, "${feed}")}
		c.Aggregator.MaxItemsPerAggregate = 2
	}, main.URL+"/datafeed")
	var ids []string
	for i := range 5 {
		ids = append(ids, pxPost(t, px, testFeed, fmt.Sprintf("both %d\n", i)))
	}
	pxWaitFeedParts(t, main, testFeed, len(ids))
	apptest.WaitFor(t, "every part in the file destination", func() bool {
		return pxCountFileParts(pxFileItems(t, dir)) >= len(ids)
	})
	pxWaitDrained(t, px)
	var fileGroups [][]string
	for _, it := range pxFileItems(t, dir) {
		var g []string
		for _, p := range it.parts {
			g = append(g, p.meta.Value("ReceiptId"))
		}
		fileGroups = append(fileGroups, g)
	}
	got, fromFiles := pxStreamGroups(t, main, testFeed), pxGroups(fileGroups)
	if !slices.Equal(got, fromFiles) {
		t.Errorf("the destinations got different aggregates:\n http %q\n file %q", got, fromFiles)
	}
	var all []string
	for _, g := range got {
		all = append(all, strings.Split(g, ",")...)
	}
	sort.Strings(all)
	want := slices.Clone(ids)
	sort.Strings(want)
	if !slices.Equal(all, want) {
		t.Errorf("delivered %q, want each of %q once", all, want)
	}
}

// TestProxyStoredZip: with compressionLevel 0 the forwarded zip's entries
// are STORED (no deflate at either end), and the main service still gets
// every post byte for byte, a big one (its own file, several blocks)
// included.
func TestProxyStoredZip(t *testing.T) {
	t.Parallel()
	main := start(t, nil)
	var mu sync.Mutex
	methods := map[uint16]int{}
	// A relay in front of the main service that notes each entry's method.
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b))); err == nil {
			mu.Lock()
			for _, f := range zr.File {
				methods[f.Method]++
			}
			mu.Unlock()
		}
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, main.URL+"/datafeed", bytes.NewReader(b))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(relay.Close)
	stored := 0
	px := pxProxy(t, "proxy-stored", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].CompressionLevel = &stored
		c.Aggregator.MaxItemsPerAggregate = 3
	}, relay.URL+"/datafeed")
	big := make([]byte, 3<<20)
	rng := mrand.New(mrand.NewPCG(7, 8))
	for i := range big {
		big[i] = byte('a' + rng.IntN(26))
	}
	want := map[string]string{}
	for i, data := range []string{"one\n", string(big), "three\n", "", "five\n"} {
		if data == "" {
			data = fmt.Sprintf("post %d\n", i)
		}
		want[pxPost(t, px, testFeed, data)] = data
	}
	parts := pxWaitFeedParts(t, main, testFeed, len(want))
	for _, p := range parts {
		id := pxFirstHop(p)
		if w, ok := want[id]; !ok || string(p.data) != w {
			t.Errorf("part from %s: %d bytes, want %d", id, len(p.data), len(w))
		}
		delete(want, id)
	}
	if len(want) != 0 {
		t.Errorf("never arrived: %v", slices.Collect(maps.Keys(want)))
	}
	mu.Lock()
	defer mu.Unlock()
	if methods[zip.Store] == 0 || methods[zip.Deflate] != 0 {
		t.Errorf("entry methods in the forwarded zips: %v; want all STORED", methods)
	}
}

// TestProxyDeadDestinationDoesNotDelayOthers: with an HTTP destination
// nobody listens on, the file destination still gets every aggregate at
// once; the HTTP one keeps retrying and the proxy keeps the data for it.
func TestProxyDeadDestinationDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	dead := pxDeadAddr(t)
	dir := t.TempDir()
	px := pxProxy(t, "proxy-dead", func(c *config.Proxy) {
		c.ForwardFileDestinations = []config.FileDestination{pxFileDest("files", dir, "")}
	}, "http://"+dead+"/datafeed")
	httpDest := pxDestName(t, px, 0)
	sent := map[string]bool{}
	for i := range 3 {
		sent[pxPost(t, px, testFeed, fmt.Sprintf("dead %d\n", i))] = true
	}
	apptest.WaitFor(t, "every part in the file destination", func() bool {
		return pxCountFileParts(pxFileItems(t, dir)) >= len(sent)
	})
	for _, it := range pxFileItems(t, dir) {
		for _, p := range it.parts {
			if !sent[p.meta.Value("ReceiptId")] {
				t.Errorf("unexpected part %q in %s", p.meta.Value("ReceiptId"), it.dir)
			}
		}
	}
	apptest.WaitFor(t, "the file forwards done and the HTTP ones retrying", func() bool {
		if len(pxForwards(t, px, meta.ForwardFilter{Destination: "files"})) != 0 {
			return false
		}
		fs := pxForwards(t, px, meta.ForwardFilter{Destination: httpDest})
		items := 0
		for _, f := range fs {
			if f.State != meta.ForwardQueued || f.Attempts < 1 {
				return false
			}
			items += f.Items
		}
		return items == len(sent)
	})
	if n := len(pxKept(t, px)); n != len(sent) {
		t.Errorf("the proxy keeps %d streams, want %d for the HTTP destination", n, len(sent))
	}
}

// ---------------------------------------------------------------------------
// 8. Instant forwarding.

// TestProxyInstant: each post is relayed during its request: the sender
// gets the proxy's receipt once the main service has the data (with both
// ids in ReceiptIdPath); the main service's refusal reaches the sender
// with its code; a main service that is down means 503.
func TestProxyInstant(t *testing.T) {
	t.Parallel()
	const rejected = "PXB-INSTANT-REJECT"
	main := start(t, nil)
	main.CreateFeed(rejected, feed.Reject, "")
	px := pxProxy(t, "proxy-instant", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Instant = true
	}, main.URL+"/datafeed")

	id := pxPost(t, px, testFeed, "instant event\n", "EffectiveTime", "2022-01-02T03:04:05.000Z", "X-Custom", "keep me")
	if !pxReceiptRE("proxy-instant").MatchString(id) {
		t.Fatalf("receipt %q is not the proxy's", id)
	}
	// Synchronous: the main service has it already.
	st := main.Streams()
	if len(st) != 1 || st[0].Status != meta.Unlocked || st[0].Feed != testFeed {
		t.Fatalf("main service streams right after the post: %+v", st)
	}
	mainID := st[0].ReceiptID
	if !receiptRE.MatchString(mainID) {
		t.Errorf("main service receipt %q", mainID)
	}
	parts := storedParts(t, main, st[0])
	if len(parts) != 1 || string(parts[0].data) != "instant event\n" ||
		parts[0].meta.Value("ReceiptIdPath") != id+","+mainID || parts[0].meta.Value("ReceiptId") != mainID ||
		st[0].Attributes.Value("ReceiptIdPath") != id+","+mainID {
		t.Errorf("stored: %d parts, ReceiptIdPath %q (stream %q), want %q",
			len(parts), parts[0].meta.Value("ReceiptIdPath"), st[0].Attributes.Value("ReceiptIdPath"), id+","+mainID)
	}
	// Nothing but the headers carries a relayed post's attributes: all of
	// them arrive, not only the allow list's (reference data is looked up
	// by its effective time).
	if st[0].EffectiveMs != time.Date(2022, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli() {
		t.Errorf("effective time %s, want the sender's 2022-01-02T03:04:05Z", time.UnixMilli(st[0].EffectiveMs).UTC())
	}
	for k, want := range map[string]string{"X-Custom": "keep me", "System": "sys", "EffectiveTime": "2022-01-02T03:04:05.000Z"} {
		if got := st[0].Attributes.Value(k); got != want {
			t.Errorf("stored %s %q, want %q", k, got, want)
		}
	}
	if n := len(pxKept(t, px)); n != 0 {
		t.Errorf("an instant proxy stored %d streams", n)
	}

	post(t, px, []byte("refused\n"), "Feed", rejected).fails(t, http.StatusNotAcceptable, 110)
	if n := len(main.Streams()); n != 1 {
		t.Errorf("main service has %d streams after a refusal, want 1", n)
	}

	main.Stop()
	r := post(t, px, []byte("nobody there\n"), "Feed", testFeed)
	r.fails(t, http.StatusServiceUnavailable, 503, "did not answer")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	if msg := r.header.Get("Service-Error"); strings.Count(msg, `Post "`) != 1 {
		t.Errorf("the cause should be said once: %s", msg)
	}
	if n := len(pxKept(t, px)); n != 0 {
		t.Errorf("an instant proxy stored %d streams", n)
	}
}

// ---------------------------------------------------------------------------
// 9. Feed status.

// TestProxyFeedStatus: in FEED_STATUS mode the proxy asks the main
// service and refuses, itself, what the main service would refuse; when
// the main service cannot be asked, feedStatus.fallback decides.
func TestProxyFeedStatus(t *testing.T) {
	t.Parallel()
	const rejected, unknown = "PXB-FS-REJECT", "PXB-FS-UNKNOWN"
	main := start(t, nil)
	main.CreateFeed(rejected, feed.Reject, "")
	key := pxAPIKey(t, main, "pxb-feed-status", "Feed Status Asker")
	px := pxProxy(t, "proxy-fs", func(c *config.Proxy) {
		c.Receive.ReceiptCheckMode = config.FeedStatus
		c.FeedStatus.APIKey = key
	}, main.URL+"/datafeed")

	id := pxPost(t, px, testFeed, "known feed\n")
	parts := pxWaitFeedParts(t, main, testFeed, 1)
	if pxFirstHop(parts[0]) != id {
		t.Errorf("arrived with ReceiptIdPath %q, want it to start with %s", parts[0].meta.Value("ReceiptIdPath"), id)
	}
	post(t, px, []byte("x\n"), "Feed", unknown).fails(t, http.StatusNotAcceptable, 110)
	post(t, px, []byte("x\n"), "Feed", rejected).fails(t, http.StatusNotAcceptable, 110)
	for _, s := range pxKept(t, px) {
		if s.Feed == unknown || s.Feed == rejected {
			t.Errorf("the proxy stored a refused post: %+v", s)
		}
	}

	dead := "http://" + pxDeadAddr(t) + "/datafeed"
	for _, fb := range []feed.Status{feed.Reject, feed.Receive} {
		p := pxProxy(t, "proxy-fallback-"+strings.ToLower(string(fb)), func(c *config.Proxy) {
			c.Receive.ReceiptCheckMode = config.FeedStatus
			c.FeedStatus.Fallback = fb
		}, dead)
		r := post(t, p, []byte("while the main service is down\n"), "Feed", testFeed)
		if fb == feed.Reject {
			r.fails(t, http.StatusNotAcceptable, 110, "fallback")
			if n := len(pxKept(t, p)); n != 0 {
				t.Errorf("fallback REJECT: %d streams stored", n)
			}
			continue
		}
		r.accepted(t)
		if n := len(pxKept(t, p)); n != 1 {
			t.Errorf("fallback RECEIVE: %d streams stored, want 1", n)
		}
	}
}

// TestProxyTypelessPostTakesTheFeedsDefault: a proxy that does not ask the
// main service about feeds (RECEIVE_ALL) does not decide the type of a
// post that names none: the post arrives without one and the main service
// stores it under the feed's default type. A post that names its type, or
// whose feed the proxy itself knows with a default type, keeps that type.
func TestProxyTypelessPostTakesTheFeedsDefault(t *testing.T) {
	t.Parallel()
	const ref, local = "PXB-TYPE-REF", "PXB-TYPE-LOCAL"
	main := start(t, nil)
	main.CreateFeed(ref, feed.Receive, "Raw Reference")
	main.CreateFeed(local, feed.Receive, "Raw Reference")
	px := pxProxy(t, "proxy-type", nil, main.URL+"/datafeed")
	px.CreateFeed(local, feed.Receive, "Raw Events") // the proxy's own definition wins there

	pxPost(t, px, ref, "no type\n")
	pxPost(t, px, ref, "typed\n", "Type", "Raw Events")
	pxPost(t, px, local, "no type, feed known to the proxy\n")
	want := map[string]string{
		"no type\n":                          "Raw Reference",
		"typed\n":                            "Raw Events",
		"no type, feed known to the proxy\n": "Raw Events",
	}
	for _, p := range pxWaitFeedParts(t, main, "", len(want)) {
		w, ok := want[string(p.data)]
		if !ok {
			continue
		}
		if p.typ != w {
			t.Errorf("%q (feed %s) stored as %q, want %q", p.data, p.feed, p.typ, w)
		}
		delete(want, string(p.data))
	}
	if len(want) > 0 {
		t.Errorf("not stored at the main service: %v", want)
	}
}

// ---------------------------------------------------------------------------
// 10 and 11. Repository limit and metrics.

// TestProxyRepositoryFull: once more than repository.maxSize waits to be
// forwarded, /readyz fails and posts get 503 with Retry-After; when the
// downstream takes the data again, both recover.
func TestProxyRepositoryFull(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	fake := pxFakeDownstream(t, func(int, string) pxAnswer {
		if down.Load() {
			return pxAnswer{status: http.StatusServiceUnavailable, code: 503}
		}
		return pxAnswer{status: http.StatusOK, body: "fake\n"}
	})
	px := pxProxy(t, "proxy-full", func(c *config.Proxy) {
		c.Repository.MaxSize = 1 << 10
	}, fake.URL+"/datafeed")
	if r := pxReadyz(t, px); r.code != http.StatusOK {
		t.Fatalf("/readyz before: %d %q", r.code, r.body)
	}
	random := make([]byte, 4<<10)
	_, _ = rand.Read(random)
	big := hex.EncodeToString(random) // 8 KiB that do not compress away
	id := pxPost(t, px, testFeed, big)
	// Refused at once: a stored post counts as soon as it is committed, not
	// at the next recount (a second's worth of posts got past the limit).
	post(t, px, []byte("right after\n"), "Feed", testFeed).fails(t, http.StatusServiceUnavailable, 503, "repository is full")
	var ready *resp
	apptest.WaitFor(t, "/readyz to fail", func() bool {
		ready = pxReadyz(t, px)
		return ready.code == http.StatusServiceUnavailable
	})
	if !strings.Contains(ready.body, "repository is full") || !strings.Contains(ready.body, "maxSize") {
		t.Errorf("/readyz says %q", ready.body)
	}
	r := post(t, px, []byte("one too many\n"), "Feed", testFeed)
	r.fails(t, http.StatusServiceUnavailable, 503, "repository is full")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	if n := len(pxKept(t, px)); n != 1 {
		t.Errorf("%d streams at the proxy, want only the first post", n)
	}

	down.Store(false)
	apptest.WaitFor(t, "/readyz to recover", func() bool { return pxReadyz(t, px).code == http.StatusOK })
	id2 := pxPost(t, px, testFeed, "accepted again\n")
	apptest.WaitFor(t, "both posts at the downstream", func() bool {
		got := fake.delivered(t)
		return got[id] == big && got[id2] == "accepted again\n"
	})
}

// TestProxyMetrics: the queue gauges, forward counters, oldest age and
// repository size, with one aggregate sent, one refused and one retrying.
func TestProxyMetrics(t *testing.T) {
	t.Parallel()
	const ok, refused, retrying = "PXB-M-OK", "PXB-M-REFUSED", "PXB-M-RETRYING"
	fake := pxFakeDownstream(t, func(_ int, feedName string) pxAnswer {
		switch feedName {
		case refused:
			return pxAnswer{status: http.StatusNotAcceptable, code: 110}
		case retrying:
			return pxAnswer{status: http.StatusServiceUnavailable, code: 503}
		}
		return pxAnswer{status: http.StatusOK, body: "fake\n"}
	})
	began := time.Now()
	px := pxProxy(t, "proxy-metrics", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Name = "fake"
	}, fake.URL+"/datafeed")
	for _, f := range []string{ok, refused, retrying} {
		pxPost(t, px, f, "metrics "+f+"\n")
	}
	q := func(state string) string {
		return `weir_proxy_queue_aggregates{destination="fake",state="` + state + `"}`
	}
	fw := func(outcome string) string {
		return `weir_proxy_forwards_total{destination="fake",outcome="` + outcome + `"}`
	}
	apptest.WaitFor(t, "queue gauges: 1 failed, 1 retrying, 0 queued", func() bool {
		return metric(t, px, q("failed")) == 1 && metric(t, px, q("retrying")) == 1 && metric(t, px, q("queued")) == 0
	})
	if v := metric(t, px, fw("sent")); v != 1 {
		t.Errorf("sent: %g, want 1", v)
	}
	if v := metric(t, px, fw("refused")); v != 1 {
		t.Errorf("refused: %g, want 1", v)
	}
	if v := metric(t, px, fw("retry")); v < 1 {
		t.Errorf("retry: %g, want at least 1", v)
	}
	// The oldest waiting (retrying) aggregate's age: positive once refreshed,
	// and never more than the test has run.
	oldest := `weir_proxy_queue_oldest_age_seconds{destination="fake"}`
	apptest.WaitFor(t, "the oldest age to be measured", func() bool { return metric(t, px, oldest) > 0 })
	if v := metric(t, px, oldest); v > time.Since(began).Seconds()+1 {
		t.Errorf("oldest age %g s, but the test started %s ago", v, time.Since(began))
	}
	// The repository holds the refused and the retrying posts; the sent one
	// is removed.
	apptest.WaitFor(t, "the repository size to be the two kept posts", func() bool {
		ss := pxKept(t, px)
		if len(ss) != 2 {
			return false
		}
		var n int64
		for _, s := range ss {
			if s.Feed == ok {
				return false
			}
			n += s.FileSize
		}
		return n > 0 && metric(t, px, "weir_proxy_repository_bytes") == float64(n)
	})
	if v := metric(t, px, `weir_proxy_destination_live{destination="fake"}`); v != 1 {
		t.Errorf("destination live: %g", v)
	}
	if v := metric(t, px, `weir_proxy_queue_bytes{destination="fake",state="failed"}`); v != float64(len("metrics "+refused+"\n")) {
		t.Errorf("failed bytes: %g", v)
	}
}

// ---------------------------------------------------------------------------
// 12. Authentication through the chain.

// TestProxyAuthenticatedDownstream: the main service requires
// authentication; a proxy that forwards with an API key gets its posts
// through (the main service records the key's user), while one with a
// wrong key keeps them queued and retrying: a 401 is not permanent.
func TestProxyAuthenticatedDownstream(t *testing.T) {
	t.Parallel()
	main := start(t, func(c *config.Config) { c.Receive.AuthenticationRequired = true })
	key := pxAPIKey(t, main, "pxb-forwarder", "PXB Forwarder")

	// Unauthenticated senders post to a proxy that authenticates onwards;
	// it asks for feed status with the same key.
	good := pxProxy(t, "proxy-auth", func(c *config.Proxy) {
		c.Receive.ReceiptCheckMode = config.FeedStatus
		c.ForwardHTTPDestinations[0].APIKey = key
	}, main.URL+"/datafeed")
	id := pxPost(t, good, testFeed, "authenticated onwards\n")
	parts := pxWaitFeedParts(t, main, testFeed, 1)
	if len(parts) != 1 || pxFirstHop(parts[0]) != id || string(parts[0].data) != "authenticated onwards\n" ||
		parts[0].meta.Value("UploadUserId") != "pxb-forwarder" || parts[0].meta.Value("UploadUsername") != "PXB Forwarder" {
		t.Errorf("stored: %d parts, first meta %q", len(parts), parts[0].meta.Sorted())
	}
	pxWaitDrained(t, good)

	bad := pxProxy(t, "proxy-bad-key", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].APIKey = damaged(key)
	}, main.URL+"/datafeed")
	pxPost(t, bad, testFeed, "wrong key\n")
	dest := pxDestName(t, bad, 0)
	apptest.WaitFor(t, "the wrongly authenticated item to be retried", func() bool {
		fs := pxForwards(t, bad, meta.ForwardFilter{Destination: dest})
		return len(fs) == 1 && fs[0].Attempts >= 2
	})
	f := pxForwards(t, bad, meta.ForwardFilter{Destination: dest})[0]
	if f.State != meta.ForwardQueued || f.LastStatus < 300 || f.LastStatus >= 400 || !strings.Contains(f.Error, "HTTP 401") {
		t.Errorf("forward with a wrong key: %+v; want queued for retry after a 401 with an authentication status", f)
	}
	if n := len(pxFeedParts(t, main, testFeed)); n != 1 {
		t.Errorf("%d parts at the main service, want only the good proxy's", n)
	}
}

// TestProxyTrustedForwarder: a main service keeps what a trusted
// forwarder's zip parts say about their senders (receive.trustedForwarders),
// so that a sender's account and identity survive the hop; an untrusted
// forwarder's parts get its own, as any other sender's would.
func TestProxyTrustedForwarder(t *testing.T) {
	t.Parallel()
	main := start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		// The type is part of the name (in any case): the same subject
		// authenticated another way is not trusted.
		c.Receive.TrustedForwarders = []string{"data_feed_key:data-feed-identity-2000", "TOKEN:data-feed-identity-3000"}
	})
	trustedKey, _ := dbDataFeedKey(t, main, "2000", time.Now().Add(time.Hour))
	otherKey, _ := dbDataFeedKey(t, main, "3000", time.Now().Add(time.Hour))
	via := func(name, key, owner string) *apptest.Server {
		return pxProxy(t, name, func(c *config.Proxy) {
			c.ForwardHTTPDestinations[0].DataFeedKey = key
			c.ForwardHTTPDestinations[0].DataFeedKeyOwner = owner
		}, main.URL+"/datafeed")
	}
	pxPost(t, via("proxy-trusted", trustedKey, "2000"), testFeed, "via the trusted proxy\n", "AccountId", "1000")
	pxPost(t, via("proxy-other", otherKey, "3000"), testFeed, "via another proxy\n", "AccountId", "1000")

	want := map[string][2]string{ // data -> AccountId, UploadUserId
		"via the trusted proxy\n": {"1000", "UNAUTHENTICATED_USER"},
		"via another proxy\n":     {"3000", "data-feed-identity-3000"},
	}
	for _, p := range pxWaitFeedParts(t, main, testFeed, 2) {
		w, ok := want[string(p.data)]
		if !ok {
			t.Errorf("unexpected part %q", p.data)
			continue
		}
		if got := [2]string{p.meta.Value("AccountId"), p.meta.Value("UploadUserId")}; got != w {
			t.Errorf("%q arrived with AccountId, UploadUserId %q, want %q", p.data, got, w)
		}
	}
}

// TestProxyForwarderWaitsWhileSending: while an aggregate is being sent the
// forwarder waits for the send to end (or another aggregate to close)
// instead of reading its queue over and over. It once took the aggregate in
// flight, still queued, for one due now, and read the queue every 5 ms for
// as long as a send took: two queries each time, on the proxy's busiest
// database.
func TestProxyForwarderWaitsWhileSending(t *testing.T) {
	t.Parallel()
	const feedName = "PXB-BUSY-WAIT"
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	fake := pxFakeDownstream(t, func(n int, _ string) pxAnswer {
		if n == 1 {
			close(arrived)
			<-release
		}
		return pxAnswer{status: http.StatusOK, body: "fake\n"}
	})
	// Registered after the fake's Close (cleanups run last first): a test
	// that fails while the send is held releases it before the server
	// waits for its handler.
	t.Cleanup(releaseOnce)
	px := pxProxy(t, "proxy-busy-wait", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Name = "fake"
	}, fake.URL+"/datafeed")
	pxPost(t, px, feedName, "held by the downstream\n")
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the aggregate never reached the downstream")
	}
	reads := `weir_proxy_queue_reads_total{destination="fake"}`
	before, began := metric(t, px, reads), time.Now()
	time.Sleep(time.Second) // the send is held: nothing is due
	during := metric(t, px, reads) - before
	took := time.Since(began) // a loaded machine can stretch the sleep
	releaseOnce()
	// Nothing else is queued: the forwarder may read the queue when the
	// 2 s poll comes round, not hundreds of times.
	if allowed := 2 + math.Floor(took.Seconds()/2); during > allowed {
		t.Errorf("the forwarder read its queue %g times in %v while its only aggregate was being sent (at most %g allowed)",
			during, took.Round(time.Millisecond), allowed)
	}
	apptest.WaitFor(t, "the held aggregate to be recorded as sent", func() bool {
		return metric(t, px, `weir_proxy_forwards_total{destination="fake",outcome="sent"}`) == 1
	})
}

// TestProxyKeepsReferenceGroupsTogether: a proxy stores a zip's groups of a
// reference type as the parts of one stream and forwards them so, as the
// reference proxy does; the main service stores each group as a stream of
// its own, with its own effective time.
func TestProxyKeepsReferenceGroupsTogether(t *testing.T) {
	t.Parallel()
	const ref = "PXB-REF-GROUPS"
	body := zipOf(t, "1.meta", "EffectiveTime:2024-03-01T12:00:00.000Z", "1.dat", "ref one",
		"2.meta", "EffectiveTime:2024-04-01T12:00:00.000Z", "2.dat", "ref two")

	fake := pxFakeDownstream(t, func(int, string) pxAnswer {
		return pxAnswer{status: http.StatusServiceUnavailable, code: 503}
	})
	held := pxProxy(t, "proxy-ref-held", nil, fake.URL+"/datafeed")
	post(t, held, body, "Feed", ref, "Type", "Raw Reference", "Compression", "ZIP").accepted(t)
	if kept := pxKept(t, held); len(kept) != 1 || kept[0].Parts != 2 || kept[0].Type != "Raw Reference" {
		t.Errorf("the proxy keeps %+v, want one Raw Reference stream of 2 parts", kept)
	}

	main := start(t, nil)
	main.CreateFeed(ref, feed.Receive, "Raw Reference")
	px := pxProxy(t, "proxy-ref", nil, main.URL+"/datafeed")
	id := post(t, px, body, "Feed", ref, "Compression", "ZIP").accepted(t)
	pxWaitFeedParts(t, main, ref, 2)
	st := main.Streams()
	if len(st) != 2 {
		t.Fatalf("main service: %d streams, want 2", len(st))
	}
	for i, want := range []int64{1709294400000, 1711972800000} {
		// The part's meta carries the path from the sender's receipt id.
		m := string(main.Read(st[i].ID, streamfile.Meta, 0))
		if st[i].Type != "Raw Reference" || st[i].Parts != 1 || st[i].EffectiveMs != want ||
			!strings.Contains(m, "ReceiptIdPath:"+id+",") {
			t.Errorf("main stream %d: type %q parts %d effective %d meta %q", i, st[i].Type, st[i].Parts, st[i].EffectiveMs, m)
		}
	}
}
