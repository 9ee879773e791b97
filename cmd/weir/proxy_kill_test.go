package main_test

// Process-level durability proofs of `weir proxy`: the proxy is killed with
// SIGKILL while clients post to it (TestProxyKillDuringReceipt, forwarding
// to a real `weir serve`) and while it forwards large aggregates to a slow
// downstream (TestProxyKillDuringForwarding, a fake /datafeed in the test
// process). After the last restart the queue must drain, and every receipt
// a client got must have arrived downstream at least once, byte-exact.
// Duplicates are allowed only as resends the downstream can recognise (the
// same receipt id at the head of ReceiptIdPath and the same post GUID); the
// tests count and log them.

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/streamfile"
)

const (
	pxFeed    = "PROXY-KILL-PROOF"
	pxPrefix  = "WEIR-PROXY-KILL "
	pxProxyID = "proxy-kill"
	pxBufSize = 8 << 20
)

// pxPool is the random content posts are cut from: one buffer, half text
// and half binary, made once so that the clients stay cheap under the race
// detector. Everything about a post follows from its key (see post), so
// what arrives downstream is checked against the exact body that was sent
// without keeping the bodies.
type pxPool struct {
	buf       []byte
	size      func(r *rand.Rand) int // content size of a post
	gzipShare int                    // one post in gzipShare is sent gzipped (0: none)
}

func newPxPool(size func(r *rand.Rand) int, gzipShare int) *pxPool {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], 0x9e0c5eed)
	b := make([]byte, pxBufSize)
	_, _ = rand.NewChaCha8(seed).Read(b)
	for i, c := range b[:pxBufSize/2] {
		b[i] = textAlphabet[int(c)%len(textAlphabet)]
	}
	return &pxPool{buf: b, size: size, gzipShare: gzipShare}
}

// pxPost is one post: a first line naming its key, then a slice of the
// pool's buffer.
type pxPost struct {
	key           string
	off, n        int
	gzip, chunked bool
}

func (pool *pxPool) post(key string) pxPost {
	r := rand.New(rand.NewPCG(keySeed(key), 0x9e0c))
	p := pxPost{key: key, n: min(pool.size(r), pxBufSize)}
	p.off = r.IntN(pxBufSize - p.n + 1)
	p.gzip = pool.gzipShare > 0 && r.IntN(pool.gzipShare) == 0
	p.chunked = r.IntN(4) == 0
	return p
}

func (p pxPost) prefix() []byte {
	return fmt.Appendf(nil, "%s%s off=%d n=%d gzip=%t chunked=%t\n", pxPrefix, p.key, p.off, p.n, p.gzip, p.chunked)
}

func (p pxPost) size() int { return len(p.prefix()) + p.n }

// matches reports whether data is exactly the post's (decompressed) body.
func (p pxPost) matches(pool *pxPool, data []byte) bool {
	pre := p.prefix()
	return len(data) == len(pre)+p.n && bytes.Equal(data[:len(pre)], pre) && bytes.Equal(data[len(pre):], pool.buf[p.off:p.off+p.n])
}

func (p pxPost) body(pool *pxPool) []byte {
	return append(p.prefix(), pool.buf[p.off:p.off+p.n]...)
}

// wire is what is sent and its length (-1: chunked).
func (p pxPost) wire(pool *pxPool) (io.Reader, int64) {
	var r io.Reader
	var n int64
	if p.gzip {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		_, _ = zw.Write(p.prefix())
		_, _ = zw.Write(pool.buf[p.off : p.off+p.n])
		_ = zw.Close()
		r, n = &buf, int64(buf.Len())
	} else {
		pre := p.prefix()
		r, n = io.MultiReader(bytes.NewReader(pre), bytes.NewReader(pool.buf[p.off:p.off+p.n])), int64(len(pre)+p.n)
	}
	if p.chunked {
		n = -1
	}
	return r, n
}

// pxKeyOf parses the key from the first line of delivered data.
func pxKeyOf(data []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(pxPrefix))
	if !ok {
		return "", false
	}
	key, _, ok := bytes.Cut(rest, []byte(" "))
	return string(key), ok && len(key) > 0
}

// isProxyReceiptID checks <13-digit epoch ms>_<4-digit sequence>_P_<proxy id>.
func isProxyReceiptID(id, proxyID string) bool {
	f := strings.SplitN(id, "_", 4)
	if len(f) != 4 || len(f[0]) != 13 || len(f[1]) != 4 || f[2] != "P" || f[3] != proxyID {
		return false
	}
	for _, s := range f[:2] {
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// pxLedger is what the clients learnt across all kills.
type pxLedger struct {
	mu       sync.Mutex
	sent     map[string]bool   // keys of every post attempted
	receipts map[string]string // receipt id -> key
	keys     map[string]string // key -> receipt id
}

func newPxLedger() *pxLedger {
	return &pxLedger{sent: map[string]bool{}, receipts: map[string]string{}, keys: map[string]string{}}
}

func (l *pxLedger) markSent(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[key] = true
}

func (l *pxLedger) record(t *testing.T, id, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, dup := l.receipts[id]; dup {
		t.Errorf("receipt id %s was given to two posts: %s and %s", id, prev, key)
		return
	}
	l.receipts[id] = key
	l.keys[key] = id
}

func (l *pxLedger) acknowledged() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.receipts)
}

// pxProxy is a `weir proxy` child process on a fixed data directory and
// database (e, which has no config file: the proxy's own config file is
// not one `weir admin` reads) and proxy id, restarted on the same address
// when it can be.
type pxProxy struct {
	t      *testing.T
	e      *weirEnv
	config string
	addr   string
	srv    *server
	disk   *powerDisk // nil, or the power-cut disk e.data is on
}

func newPxProxy(t *testing.T, configYAML string) *pxProxy {
	t.Helper()
	e := newEnvConfig(t, "")
	e.node = pxProxyID
	p := &pxProxy{t: t, e: e, config: writeFile(t, "weir-proxy.yaml", configYAML)}
	t.Cleanup(func() {
		if s := p.srv; s != nil && t.Failed() {
			t.Logf("the last weir proxy (pid %d) log tail:\n%s", s.pid(), tail(s.logs.String(), 6000))
		}
	})
	return p
}

// start starts the proxy and waits until it is ready: on its previous
// address, or a free one the first time (or when another process took it).
func (p *pxProxy) start() {
	p.t.Helper()
	for attempt := 1; ; attempt++ {
		addr := p.addr
		if addr == "" || attempt > 1 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(p.t)))
		}
		s, err := p.tryStart(addr)
		if err == nil {
			engine := `"db":"sqlite"`
			if p.e.db != "" {
				engine = `"db":"postgres"`
			}
			if !strings.Contains(s.logs.String(), engine) {
				p.t.Fatalf("weir proxy did not log %s at start:\n%s", engine, s.logs.String())
			}
			p.addr, p.srv = addr, s
			return
		}
		if errors.Is(err, errAddrInUse) && attempt < 5 {
			p.t.Logf("proxy start attempt %d: %v; retrying on another port", attempt, err)
			continue
		}
		p.t.Fatalf("start weir proxy: %v", err)
	}
}

func (p *pxProxy) tryStart(addr string) (*server, error) {
	t := p.t
	args := []string{"proxy", "--listen", addr, "--proxy-id", pxProxyID, "--data", p.e.data, "--config", p.config}
	if p.e.db != "" {
		args = append(args, "--db", p.e.db)
	}
	s := &server{t: t, addr: addr, url: "http://" + addr, logs: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(weirBin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", weirBin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	t.Cleanup(s.kill)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(s.logs.String(), `"msg":"weir started"`) {
		select {
		case <-s.exited:
			logs := s.logs.String()
			if strings.Contains(logs, "address already in use") {
				return nil, fmt.Errorf("%s: %w", addr, errAddrInUse)
			}
			return nil, fmt.Errorf("weir proxy exited (%s) before it started:\n%s", s.state, logs)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("weir proxy did not log \"weir started\" within a minute:\n%s", s.logs.String())
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for {
		resp, err := client.Get(s.url + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
			err = fmt.Errorf("readyz: %d %s", resp.StatusCode, body)
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("weir proxy exited (%s) before it was ready:\n%s", s.state, s.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("weir proxy not ready within a minute: %v\n%s", err, s.logs.String())
		}
	}
}

// queue is what `weir proxy queue --json` prints: one line per aggregate
// still waiting for a destination.
func (p *pxProxy) queue() string {
	p.t.Helper()
	args := []string{"proxy", "queue", "--json", "--data", p.e.data}
	if p.e.db != "" {
		args = append(args, "--db", p.e.db)
	}
	r := run(p.t, args...)
	if r.code != 0 {
		p.t.Fatalf("%s", r)
	}
	return strings.TrimSpace(r.stdout)
}

// waitDrained waits until the proxy's repository is empty: nothing queued
// and no stream rows (received, aggregated or awaiting removal).
func (p *pxProxy) waitDrained(limit time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	for {
		q := p.queue()
		streams := p.e.listStreams()
		if q == "" && len(streams) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			lines := strings.Split(q, "\n")
			p.t.Fatalf("the proxy's repository did not empty within %s: %d queue line(s), e.g. %q; %d stream row(s)",
				limit, len(lines), lines[0], len(streams))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// verifyEmpty checks the proxy's store directory after the drain: no
// in-flight (.lock) files and no stream files at all.
func (p *pxProxy) verifyEmpty() {
	p.t.Helper()
	if files := p.e.lockFiles(); len(files) > 0 {
		p.t.Errorf("%d in-flight (.lock) file(s) remain under the proxy's store: %s", len(files), strings.Join(files[:min(5, len(files))], ", "))
	}
	if files := p.e.storeFiles(); len(files) > 0 {
		p.t.Errorf("%d file(s) remain under the proxy's store after everything was forwarded: %s", len(files), strings.Join(files[:min(5, len(files))], ", "))
	}
}

// pxLoad is the clients: they post continuously to the proxy, through its
// kills and restarts. epoch is odd while the proxy is up and changes at
// every kill and restart, so a failed post is the kill's (the epoch moved
// during it) or a real failure (it did not).
type pxLoad struct {
	t       *testing.T
	pool    *pxPool
	ledger  *pxLedger
	pause   time.Duration // between one client's posts
	url     atomic.Pointer[string]
	epoch   atomic.Int64
	stop    atomic.Bool
	broken  atomic.Bool
	tried   atomic.Int64
	got     atomic.Int64
	cutOff  atomic.Int64
	sent    atomic.Int64
	wg      sync.WaitGroup
	clients []*http.Client
}

func (l *pxLoad) up(url string) {
	l.url.Store(&url)
	if l.epoch.Add(1)%2 != 1 {
		panic("pxLoad.up while up")
	}
}

func (l *pxLoad) down() {
	if l.epoch.Add(1)%2 != 0 {
		panic("pxLoad.down while down")
	}
}

func (l *pxLoad) start(ctx context.Context, clients int) {
	for w := range clients {
		client := newClient(time.Minute)
		l.clients = append(l.clients, client)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for seq := 0; !l.stop.Load() && !l.broken.Load() && ctx.Err() == nil; {
				ep := l.epoch.Load()
				if ep%2 == 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				url := *l.url.Load()
				p := l.pool.post(fmt.Sprintf("w%02d-n%06d", w, seq))
				seq++
				body, length := p.wire(l.pool)
				headers := map[string]string{"Feed": pxFeed, "X-Proof-Key": p.key, "Compression": "NONE"}
				if p.gzip {
					headers["Compression"] = "GZIP"
				}
				l.ledger.markSent(p.key)
				l.tried.Add(1)
				resp, err := postBody(ctx, client, url, body, length, headers)
				switch {
				case (err != nil || resp.status != http.StatusOK) && l.epoch.Load() != ep:
					l.cutOff.Add(1) // a kill cut it off: it may or may not be stored
					continue
				case err != nil:
					if ctx.Err() == nil && !l.broken.Swap(true) {
						l.t.Errorf("post %s failed while the proxy was up: %v", p.key, err)
					}
					return
				case resp.status != http.StatusOK:
					if !l.broken.Swap(true) {
						l.t.Errorf("post %s: HTTP %d, Service-Status %s, Service-Error %q, body %q",
							p.key, resp.status, resp.header.Get("Service-Status"), resp.header.Get("Service-Error"), resp.body)
					}
					return
				}
				id, ok := strings.CutSuffix(resp.body, "\n")
				if !ok || !isProxyReceiptID(id, pxProxyID) {
					l.t.Errorf("post %s: 200 body %q is not a receipt id of proxy %s and a newline", p.key, resp.body, pxProxyID)
					l.broken.Store(true)
					return
				}
				l.ledger.record(l.t, id, p.key)
				l.got.Add(1)
				l.sent.Add(int64(p.size()))
				if l.pause > 0 {
					time.Sleep(l.pause)
				}
			}
		}()
	}
}

// finish stops the clients and waits for them.
func (l *pxLoad) finish() {
	l.t.Helper()
	l.stop.Store(true)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		l.t.Fatalf("clients did not stop within 2 minutes")
	}
	for _, c := range l.clients {
		c.CloseIdleConnections()
	}
}

// waitReceipts waits until n more posts were acknowledged (false if the
// load broke or limit passed).
func (l *pxLoad) waitReceipts(n int64, limit time.Duration) bool {
	want := l.got.Load() + n
	for deadline := time.Now().Add(limit); l.got.Load() < want; {
		if l.broken.Load() || time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// pxDelivery is one part as it arrived downstream.
type pxDelivery struct {
	where   string // for messages
	stream  int64  // at the main service: the stream and part (from 1) it is in
	part    int
	unit    string // the stream or zip it arrived in
	agg     string // the aggregate's GUID (the forward's GUID header)
	head    string // first element of ReceiptIdPath: the proxy's receipt id
	guid    string // the post's GUID (its part's .meta)
	key     string
	problem string
}

// inspect checks one delivered part: its data must be byte-exact the body
// of a post that was sent, its attributes the post's, and its
// ReceiptIdPath start with a receipt id of the proxy and have wantPath
// elements, the last being lastID when that is not "".
func (pool *pxPool) inspect(where, unit, agg string, m *attr.Map, data []byte, wantPath int, lastID string) pxDelivery {
	d := pxDelivery{where: where, unit: unit, agg: agg, guid: m.Value("GUID")}
	path := strings.Split(m.Value("ReceiptIdPath"), ",")
	d.head = path[0]
	key, ok := pxKeyOf(data)
	if !ok {
		d.problem = fmt.Sprintf("holds data no post sent: %d bytes starting %q", len(data), data[:min(80, len(data))])
		return d
	}
	d.key = key
	p := pool.post(key)
	var problems []string
	if !p.matches(pool, data) {
		want := p.body(pool)
		problems = append(problems, fmt.Sprintf("data of post %s: %d bytes, sent %d; first difference at byte %d", key, len(data), len(want), firstDiff(data, want)))
	}
	if !isProxyReceiptID(d.head, pxProxyID) || len(path) != wantPath || (lastID != "" && path[len(path)-1] != lastID) {
		want := fmt.Sprintf("%d id(s), the first one of proxy %s", wantPath, pxProxyID)
		if lastID != "" {
			want += ", the last " + lastID
		}
		problems = append(problems, fmt.Sprintf("ReceiptIdPath %q: want %s", m.Value("ReceiptIdPath"), want))
	}
	if got := m.Value("X-Proof-Key"); got != key {
		problems = append(problems, fmt.Sprintf("holds post %s but its X-Proof-Key is %q", key, got))
	}
	if got := m.Value("Feed"); got != pxFeed {
		problems = append(problems, fmt.Sprintf("Feed %q, want %s", got, pxFeed))
	}
	if d.guid == "" {
		problems = append(problems, "no GUID")
	}
	d.problem = strings.Join(problems, "; ")
	return d
}

// pxStats is what the deliveries showed.
type pxStats struct {
	parts          int // parts delivered
	units          int // streams or zips they arrived in
	receipts       int // acknowledged receipts
	dupReceipts    int // acknowledged receipts delivered more than once
	extraCopies    int // copies beyond the first, in all
	dupAggregates  int // aggregates (GUIDs) that arrived in more than one stream or zip
	resends        int // streams or zips beyond the first of each aggregate
	unacknowledged int // posts cut off by a kill that were stored and delivered all the same
}

// checkDeliveries checks that every acknowledged receipt arrived at least
// once, holding its post, and that every copy beyond the first is an
// identifiable resend (the same receipt id and post GUID).
func checkDeliveries(t *testing.T, ledger *pxLedger, ds []pxDelivery) pxStats {
	t.Helper()
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	st := pxStats{parts: len(ds), receipts: len(ledger.receipts)}
	bad := 0
	report := func(format string, a ...any) {
		bad++
		if bad <= 10 {
			t.Errorf(format, a...)
		}
	}
	byHead := map[string][]pxDelivery{}
	units := map[string]bool{}
	aggUnits := map[string]map[string]bool{}
	for _, d := range ds {
		units[d.unit] = true
		if aggUnits[d.agg] == nil {
			aggUnits[d.agg] = map[string]bool{}
		}
		aggUnits[d.agg][d.unit] = true
		if d.problem != "" {
			report("%s: %s", d.where, d.problem)
			continue
		}
		byHead[d.head] = append(byHead[d.head], d)
	}
	st.units = len(units)
	for _, us := range aggUnits {
		if len(us) > 1 {
			st.dupAggregates++
			st.resends += len(us) - 1
		}
	}
	ids := make([]string, 0, len(ledger.receipts))
	for id := range ledger.receipts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	missing := 0
	for _, id := range ids {
		key := ledger.receipts[id]
		got := byHead[id]
		if len(got) == 0 {
			missing++
			if missing <= 10 {
				t.Errorf("receipt %s (post %s) was acknowledged but never arrived downstream", id, key)
			}
			continue
		}
		for _, d := range got {
			if d.key != key {
				report("%s: receipt %s was given to post %s, but the part holds post %s", d.where, id, key, d.key)
			}
			if d.guid != got[0].guid {
				report("receipt %s arrived twice with different GUIDs (%s in %s, %s in %s): the copies cannot be told for resends",
					id, got[0].guid, got[0].where, d.guid, d.where)
			}
			// A resend is the same aggregate again (its GUID is sent with
			// every attempt); a post in two aggregates was aggregated twice.
			if d.agg != got[0].agg {
				report("receipt %s arrived in two different aggregates (%s in %s, %s in %s): a stored post was aggregated twice",
					id, got[0].agg, got[0].where, d.agg, d.where)
			}
		}
		if len(got) > 1 {
			st.dupReceipts++
			st.extraCopies += len(got) - 1
		}
	}
	if missing > 10 {
		t.Errorf("... %d acknowledged receipts never arrived in all", missing)
	}
	// Parts under a receipt no client got: posts a kill cut off after they
	// were stored. Their data must still be a post that was sent, and not
	// one that was acknowledged under another receipt.
	for head, got := range byHead {
		if _, ok := ledger.receipts[head]; ok {
			continue
		}
		d := got[0]
		switch {
		case !ledger.sent[d.key]:
			report("%s: receipt %s holds post %s, which was never sent", d.where, head, d.key)
		case ledger.keys[d.key] != "":
			report("%s: post %s arrived under receipt %s, but its client got receipt %s", d.where, d.key, head, ledger.keys[d.key])
		default:
			st.unacknowledged++
		}
	}
	if bad > 10 {
		t.Errorf("... %d problems with delivered parts in all", bad)
	}
	return st
}

// pxServeDeliveries reads every part of every stream the main service
// stored: each must be complete and hold one post forwarded by the proxy.
func pxServeDeliveries(t *testing.T, e *weirEnv, pool *pxPool) []pxDelivery {
	t.Helper()
	streams := e.listStreams()
	r := e.openStore()
	defer r.close()
	ctx := context.Background()
	var ds []pxDelivery
	for _, s := range streams {
		if s.Status != "UNLOCKED" || s.Feed != pxFeed {
			t.Errorf("main service stream %d (receipt %s): status %s feed %q, want UNLOCKED and %s", s.ID, s.ReceiptID, s.Status, s.Feed, pxFeed)
			continue
		}
		rd, err := r.store.Open(ctx, s.ID)
		if err != nil {
			t.Errorf("main service stream %d: %v", s.ID, err)
			continue
		}
		for part := range rd.Parts() {
			where := fmt.Sprintf("main service stream %d part %d", s.ID, part+1)
			read := func(ch streamfile.Channel) ([]byte, error) {
				if !rd.Has(ch, part) {
					return nil, fmt.Errorf("no %v", ch)
				}
				sec, err := rd.Section(ch, part)
				if err != nil {
					return nil, err
				}
				return io.ReadAll(sec)
			}
			mb, err := read(streamfile.Meta)
			if err != nil {
				t.Errorf("%s: meta: %v", where, err)
				continue
			}
			m, err := attr.ParseMeta(mb)
			if err != nil {
				t.Errorf("%s: meta: %v", where, err)
				continue
			}
			data, err := read(streamfile.Data)
			if err != nil {
				t.Errorf("%s: data: %v", where, err)
				continue
			}
			unit := strconv.FormatInt(s.ID, 10)
			d := pool.inspect(where, unit, attrValue(s.Attributes, "GUID"), m, data, 2, s.ReceiptID)
			d.stream, d.part = s.ID, part+1
			ds = append(ds, d)
		}
		rd.Close()
	}
	return ds
}

// verifyPxSample reads a few delivered parts through the admin CLI as an
// operator would: `stream cat --part N` gives the post's body exactly, and
// its "Meta Data" names the proxy's receipt id first in ReceiptIdPath.
func verifyPxSample(t *testing.T, e *weirEnv, pool *pxPool, ds []pxDelivery) {
	t.Helper()
	var ok []pxDelivery
	for _, d := range ds {
		if d.problem == "" {
			ok = append(ok, d)
		}
	}
	if len(ok) == 0 {
		return
	}
	for _, d := range []pxDelivery{ok[0], ok[len(ok)/2], ok[len(ok)-1]} {
		id, part := strconv.FormatInt(d.stream, 10), strconv.Itoa(d.part)
		data := e.admin("stream", "cat", id, "--part", part)
		if p := pool.post(d.key); data.code != 0 || !p.matches(pool, []byte(data.stdout)) {
			t.Errorf("admin stream cat %s --part %s: exit %d, %d bytes, want the %d bytes of post %s; stderr %q",
				id, part, data.code, len(data.stdout), p.size(), d.key, data.stderr)
		}
		md := e.admin("stream", "cat", id, "--part", part, "--child", "Meta Data")
		if md.code != 0 || !strings.Contains(md.stdout, "ReceiptIdPath:"+d.head+",") || !strings.Contains(md.stdout, "X-Proof-Key:"+d.key+"\n") {
			t.Errorf("admin stream cat %s --part %s --child \"Meta Data\": exit %d, got %q, want ReceiptIdPath:%s,... and X-Proof-Key:%s",
				id, part, md.code, md.stdout, d.head, d.key)
		}
	}
}

// pxProxyConfig is the proxy's config file: no sender authentication, no
// feed checks downstream (RECEIVE_ALL: these tests prove storage and
// forwarding), quick aggregation and short retries.
func pxProxyConfig(forwardURL string, maxItems int, maxBytes string, threads int, destination ...string) string {
	var extra strings.Builder
	for _, line := range destination {
		extra.WriteString("    " + line + "\n")
	}
	return fmt.Sprintf(`receive:
  authenticationRequired: false
  receiptCheckMode: RECEIVE_ALL
aggregator:
  aggregationFrequency: 500ms
  maxItemsPerAggregate: %d
  maxUncompressedByteSize: %s
forwardHttpDestinations:
  - name: downstream
    forwardUrl: %s
    queue:
      forwardThreadCount: %d
      retryDelay: 200ms
      maxRetryDelay: 1s
%s`, maxItems, maxBytes, forwardURL, threads, extra.String())
}

// killAndRestart kills the proxy (after cutting its disk's power, if it
// is on a power-cut disk), leaves it down for a moment (clients get
// connection refused) and restarts it on the same data directory and id.
// It returns how many incomplete streams the restart removed.
func (p *pxProxy) killAndRestart(l *pxLoad, r *rand.Rand) int {
	p.t.Helper()
	l.down() // before the kill: every failure from here on is the kill's
	if p.disk != nil {
		p.disk.cut()
	}
	p.srv.kill()
	if p.disk != nil {
		p.disk.restore()
	}
	time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
	p.start()
	l.up(p.srv.url)
	return removedAtStart(p.srv.logs.String())
}

// TestProxyKillDuringReceipt kills `weir proxy` with SIGKILL while clients
// post to it, restarts it on the same data directory (three times) while
// they go on posting, and then checks at the main service it forwards to
// that every receipt the clients got arrived, byte-exact. Afterwards the
// proxy's repository must empty.
func TestProxyKillDuringReceipt(t *testing.T) {
	proxyCrashDuringReceipt(t, false)
}

// proxyCrashDuringReceipt is TestProxyKillDuringReceipt, and with powerCut
// TestProxyPowerCutDuringReceipt.
func proxyCrashDuringReceipt(t *testing.T, powerCut bool) {
	const (
		clients = 8
		cycles  = 3
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testStart := time.Now()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))

	// The main service trusts the proxy (it sends with a data feed key of
	// account 2000), so it recognises an aggregate sent again after a
	// crash by its GUID: no aggregate may be stored twice.
	mainEnv := newEnvConfig(t, "receive:\n  authenticationRequired: true\n"+
		"  trustedForwarders: [\"DATA_FEED_KEY:data-feed-identity-2000\"]\n")
	mainEnv.mustAdmin("feed", "create", pxFeed)
	key := strings.TrimSpace(mainEnv.mustAdmin("datafeed-key", "create", "--account", "2000"))
	srv := mainEnv.startServer()
	px := newPxProxy(t, pxProxyConfig(srv.url+"/datafeed", 200, "16MiB", 5, "dataFeedKey: "+key, `dataFeedKeyOwner: "2000"`))
	crash := "killed"
	if powerCut {
		px.disk = newPowerDisk(t)
		px.e.data = px.disk.dir
		crash = "power cut and killed"
	}
	px.start()

	pool := newPxPool(func(r *rand.Rand) int {
		if r.IntN(4) == 0 {
			return 16<<10 + r.IntN(240<<10)
		}
		return r.IntN(16 << 10)
	}, 4)
	ledger := newPxLedger()
	load := &pxLoad{t: t, pool: pool, ledger: ledger}
	load.up(px.srv.url)
	load.start(ctx, clients)
	defer load.finish()

	mc := newClient(5 * time.Second)
	defer mc.CloseIdleConnections()
	for cycle := 1; cycle <= cycles; cycle++ {
		// Post for a random while (and at least until some posts were
		// acknowledged by this process), then kill with posts in flight.
		before, cutBefore := load.got.Load(), load.cutOff.Load()
		wait := time.Duration(500+r.IntN(1500)) * time.Millisecond
		time.Sleep(wait)
		if !load.waitReceipts(20, 20*time.Second) {
			t.Fatalf("cycle %d: fewer than 20 posts acknowledged in 20s after %s", cycle, wait)
		}
		var inflight float64
		for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(time.Millisecond) {
			n, err := inflightPosts(mc, px.srv.url)
			if err != nil {
				t.Fatalf("cycle %d: read the proxy's /metrics: %v", cycle, err)
			}
			if inflight = n; n >= 2 {
				break
			}
		}
		removed := px.killAndRestart(load, r)
		// The restart is ready; let the clients' failures come in.
		time.Sleep(50 * time.Millisecond)
		t.Logf("cycle %d: %s after %s: %d posts acknowledged in the cycle, %d in flight at the kill by the proxy's gauge, %d cut off; "+
			"restarted, %d incomplete stream(s) removed at start",
			cycle, crash, wait, load.got.Load()-before, int(inflight), load.cutOff.Load()-cutBefore, removed)
	}
	time.Sleep(500 * time.Millisecond)
	load.finish()
	if t.Failed() {
		t.FailNow()
	}
	if load.cutOff.Load() == 0 {
		t.Errorf("no post was cut off by any of the kills: the test did not kill the proxy during receipt")
	}

	drained := px.waitDrained(40 * time.Second)
	px.verifyEmpty()
	ds := pxServeDeliveries(t, mainEnv, pool)
	st := checkDeliveries(t, ledger, ds)
	verifyPxSample(t, mainEnv, pool, ds)
	t.Logf("%d posts attempted, %d acknowledged (%d MiB), %d cut off by %d kills; queue drained %s after the load stopped; "+
		"main service: %d parts in %d streams; duplicates: %d receipt(s) delivered more than once (%d extra copies), "+
		"%d aggregate(s) sent more than once (%d resends); %d cut-off post(s) delivered all the same; test took %s",
		load.tried.Load(), st.receipts, load.sent.Load()>>20, load.cutOff.Load(), cycles, drained.Round(time.Millisecond),
		st.parts, st.units, st.dupReceipts, st.extraCopies, st.dupAggregates, st.resends, st.unacknowledged, time.Since(testStart).Round(time.Millisecond))
	t.Logf("the main service recognised %d aggregate(s) sent again", strings.Count(srv.logs.String(), `"outcome":"duplicate"`))
	if st.resends != 0 {
		t.Errorf("the main service stored %d aggregate(s) more than once (%d extra copies): it trusts the proxy, so an aggregate sent again "+
			"(same GUID) must be answered with the first copy's receipt id, not stored again", st.dupAggregates, st.resends)
	}

	if code := px.srv.terminate(); code != 0 {
		t.Errorf("weir proxy exited with %d after SIGTERM, want 0", code)
	}
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited with %d after SIGTERM, want 0", code)
	}
}

// fakeDownstream is a slow /datafeed: it reads each body at a bounded rate
// (so that forwards take long enough to be killed in the middle), records
// every zip it received completely, and answers 200 with a receipt after a
// short delay (so that some kills land after the delivery and before the
// proxy recorded it: those are resent).
type fakeDownstream struct {
	t           *testing.T
	pool        *pxPool
	rate        int64 // body bytes per second, per request
	answerDelay time.Duration

	reading  atomic.Int64 // requests part way through their body
	partial  atomic.Int64 // bodies that ended early: the sender died
	complete atomic.Int64
	bytes    atomic.Int64

	mu         sync.Mutex
	deliveries []pxDelivery
}

func (f *fakeDownstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/datafeed" {
		http.NotFound(w, r)
		return
	}
	fail := func(format string, a ...any) {
		f.t.Errorf("fake downstream: "+format, a...)
		w.Header().Set("Service-Status", "400")
		w.Header().Set("Service-Error", fmt.Sprintf(format, a...))
		w.WriteHeader(http.StatusBadRequest)
	}
	if c := r.Header.Get("Compression"); c != "ZIP" {
		fail("Compression %q, want ZIP", c)
		return
	}
	agg := r.Header.Get("GUID")
	var body bytes.Buffer
	buf := make([]byte, 64<<10)
	start := time.Now()
	counted := false
	var err error
	for {
		var n int
		n, err = r.Body.Read(buf)
		body.Write(buf[:n])
		if n > 0 && !counted {
			counted = true
			f.reading.Add(1)
		}
		if err != nil {
			break
		}
		// Hold the pace: body.Len() bytes take body.Len()/rate seconds.
		if d := time.Duration(int64(body.Len())*int64(time.Second)/f.rate) - time.Since(start); d > 0 {
			time.Sleep(d)
		}
	}
	if counted {
		f.reading.Add(-1)
	}
	if !errors.Is(err, io.EOF) {
		f.partial.Add(1) // the proxy died mid-send: nothing to record or answer
		return
	}
	n := f.complete.Add(1)
	f.bytes.Add(int64(body.Len()))
	unit := fmt.Sprintf("zip %d", n)
	zr, err := zip.NewReader(bytes.NewReader(body.Bytes()), int64(body.Len()))
	if err != nil {
		fail("%s (aggregate %s, %d bytes) is not a zip: %v", unit, agg, body.Len(), err)
		return
	}
	groups := map[string]map[string]*zip.File{}
	var order []string
	for _, e := range zr.File {
		ext := path.Ext(e.Name)
		base := strings.TrimSuffix(e.Name, ext)
		if groups[base] == nil {
			groups[base] = map[string]*zip.File{}
			order = append(order, base)
		}
		groups[base][ext] = e
	}
	read := func(e *zip.File) ([]byte, error) {
		rc, err := e.Open()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	var ds []pxDelivery
	for _, base := range order {
		g := groups[base]
		where := fmt.Sprintf("%s (aggregate %s) part %s", unit, agg, base)
		if g[".meta"] == nil || g[".dat"] == nil {
			fail("%s: entries %v, want .meta and .dat", where, g)
			return
		}
		mb, err := read(g[".meta"])
		if err != nil {
			fail("%s: meta: %v", where, err)
			return
		}
		m, err := attr.ParseMeta(mb)
		if err != nil {
			fail("%s: meta: %v", where, err)
			return
		}
		data, err := read(g[".dat"])
		if err != nil {
			fail("%s: data: %v", where, err)
			return
		}
		d := f.pool.inspect(where, unit, agg, m, data, 1, "")
		if d.problem == "" && m.Value("ReceiptId") != d.head {
			d.problem = fmt.Sprintf("ReceiptId %q, want %q (the path's only id)", m.Value("ReceiptId"), d.head)
		}
		ds = append(ds, d)
	}
	f.mu.Lock()
	f.deliveries = append(f.deliveries, ds...)
	f.mu.Unlock()
	time.Sleep(f.answerDelay)
	_, _ = fmt.Fprintf(w, "fake-downstream-%d\n", n)
}

// TestProxyKillDuringForwarding kills `weir proxy` while it forwards
// large aggregates to a slow downstream, restarts it on the same data
// directory, and checks that after the queue drained every acknowledged
// receipt arrived downstream at least once, byte-exact. Resends of a zip
// the downstream had already received (a kill between its answer and the
// proxy's bookkeeping) are expected; they are counted.
func TestProxyKillDuringForwarding(t *testing.T) {
	const (
		clients = 3
		cycles  = 5
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testStart := time.Now()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))

	pool := newPxPool(func(r *rand.Rand) int { return 64<<10 + r.IntN(1472<<10) }, 0)
	fake := &fakeDownstream{t: t, pool: pool, rate: 12 << 20, answerDelay: 50 * time.Millisecond}
	// A small receive buffer on the downstream's connections, so that the
	// proxy cannot push a whole zip into the kernel's buffers and the
	// downstream's pace is the proxy's: a kill then cuts a body off.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 128<<10)
		})
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := httptest.NewUnstartedServer(fake)
	down.Listener.Close()
	down.Listener = ln
	down.Start()
	defer down.Close()

	px := newPxProxy(t, pxProxyConfig(down.URL+"/datafeed", 20, "8MiB", 2))
	px.start()
	ledger := newPxLedger()
	load := &pxLoad{t: t, pool: pool, ledger: ledger, pause: 150 * time.Millisecond}
	load.up(px.srv.url)
	load.start(ctx, clients)
	defer load.finish()

	for cycle := 1; cycle <= cycles; cycle++ {
		before, partialBefore, completeBefore := load.got.Load(), fake.partial.Load(), fake.complete.Load()
		// Wait for a forward part way through its body, then kill at a
		// random moment of it (or just after it).
		start := time.Now()
		for fake.reading.Load() == 0 {
			if time.Since(start) > 15*time.Second || load.broken.Load() {
				t.Fatalf("cycle %d: no forward was in flight within 15s", cycle)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(r.IntN(150)) * time.Millisecond)
		reading := fake.reading.Load()
		removed := px.killAndRestart(load, r)
		time.Sleep(100 * time.Millisecond) // the downstream sees the broken bodies
		t.Logf("cycle %d: killed %s into the cycle, with %d forward(s) part way through their body: %d posts acknowledged in the cycle, "+
			"%d zip(s) received whole, %d cut off; restarted, %d incomplete stream(s) removed at start",
			cycle, time.Since(start).Round(time.Millisecond), reading, load.got.Load()-before,
			fake.complete.Load()-completeBefore, fake.partial.Load()-partialBefore, removed)
	}
	time.Sleep(500 * time.Millisecond)
	load.finish()
	if t.Failed() {
		t.FailNow()
	}
	if fake.partial.Load() == 0 {
		t.Errorf("no forward was cut off by any of the kills: the test did not kill the proxy during forwarding")
	}

	drained := px.waitDrained(40 * time.Second)
	px.verifyEmpty()
	fake.mu.Lock()
	ds := fake.deliveries
	fake.mu.Unlock()
	st := checkDeliveries(t, ledger, ds)
	t.Logf("%d posts attempted, %d acknowledged (%d MiB), %d cut off by %d kills; queue drained %s after the load stopped; "+
		"downstream: %d zips received whole (%d MiB), %d cut off mid-body, %d parts; duplicates: %d receipt(s) delivered more than once "+
		"(%d extra copies), %d aggregate(s) received more than once (%d resends); %d cut-off post(s) delivered all the same; test took %s",
		load.tried.Load(), st.receipts, load.sent.Load()>>20, load.cutOff.Load(), cycles, drained.Round(time.Millisecond),
		fake.complete.Load(), fake.bytes.Load()>>20, fake.partial.Load(), st.parts, st.dupReceipts, st.extraCopies,
		st.dupAggregates, st.resends, st.unacknowledged, time.Since(testStart).Round(time.Millisecond))
	if code := px.srv.terminate(); code != 0 {
		t.Errorf("weir proxy exited with %d after SIGTERM, want 0", code)
	}
}
