package main_test

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/streamfile"
)

const (
	killFeed      = "KILL-PROOF"
	killClients   = 16
	killCycles    = 3
	killReceipts  = 200              // receipts per cycle before the kill
	killCycleWait = 60 * time.Second // upper bound on waiting for them
	killPrefix    = "WEIR-KILL-PROOF "
)

// killPool holds the random content posts are cut from, made once so that
// the clients stay cheap (even under the race detector) and the server, not
// the load generator, is what is busy when it is killed.
type killPool struct {
	payloads [][]byte   // random text and random binary
	gzips    []killGzip // slices of the payloads, gzipped once
}

// killGzip is a payload slice and its gzip encoding.
type killGzip struct {
	payload, off, n int
	data            []byte
}

const (
	killPayloads    = 4
	killPayloadSize = 5 << 20
	killGzipItems   = 32
	textAlphabet    = "abcdefghijklmnopqrstuvwxyz0123456789 ,.:=;-_/ABCDEF\n\n\t<>{}\"'()[]!?"
)

func newKillPool() *killPool {
	pool := &killPool{}
	for i := range killPayloads {
		var seed [32]byte
		binary.LittleEndian.PutUint64(seed[:], uint64(i)+0x5eed)
		b := make([]byte, killPayloadSize)
		_, _ = rand.NewChaCha8(seed).Read(b)
		if i%2 == 0 {
			for j, c := range b {
				b[j] = textAlphabet[int(c)%len(textAlphabet)]
			}
		}
		pool.payloads = append(pool.payloads, b)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range killGzipItems {
		it := killGzip{payload: i % killPayloads, n: killSize(r)}
		it.off = r.IntN(killPayloadSize - it.n + 1)
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		_, _ = zw.Write(pool.payloads[it.payload][it.off : it.off+it.n])
		_ = zw.Close()
		it.data = buf.Bytes()
		pool.gzips = append(pool.gzips, it)
	}
	return pool
}

// killSize draws a content size: mostly 0-64 KiB, a quarter 1-4 MiB.
func killSize(r *rand.Rand) int {
	if r.IntN(4) == 0 {
		return 1<<20 + r.IntN(3<<20+1)
	}
	return r.IntN(64<<10 + 1)
}

// killPost is one post of TestKillDuringPosts. Everything about it follows
// from its key, so a stored stream can be checked against the exact body
// that was sent without keeping the bodies. The body is a unique first line
// naming the key, then a slice of random content.
type killPost struct {
	key             string
	gzip            int // index into the pool's gzips (sent with Compression: GZIP), or -1 (NONE)
	payload, off, n int // the content after the first line
	chunked         bool
	// groups > 0: a zip (Compression: ZIP, Type: Raw Reference) of that
	// many groups, each stored as a stream of its own (reference data is
	// never aggregated): all of them or none. Group g's data is its own
	// first line, then the content.
	groups int
}

// killZipKey marks the keys of reference zip posts: the kind of a post
// follows from its key alone, so the other tests that share killPost
// (their keys never start with it) keep their kinds.
const killZipKey = "z"

func keySeed(key string) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, key)
	return h.Sum64()
}

func (pool *killPool) post(key string) killPost {
	r := rand.New(rand.NewPCG(keySeed(key), 0x77e1))
	p := killPost{key: key, gzip: -1}
	if r.IntN(2) == 0 {
		p.gzip = r.IntN(len(pool.gzips))
		it := pool.gzips[p.gzip]
		p.payload, p.off, p.n = it.payload, it.off, it.n
	} else {
		p.payload, p.n = r.IntN(killPayloads), killSize(r)
		p.off = r.IntN(killPayloadSize - p.n + 1)
	}
	p.chunked = r.IntN(3) == 0
	if strings.HasPrefix(key, killZipKey) {
		p.gzip, p.groups = -1, 2+r.IntN(3)
		p.n = r.IntN(256<<10 + 1)
		p.off = r.IntN(killPayloadSize - p.n + 1)
	}
	return p
}

// parts is how many streams the post is stored as.
func (p killPost) parts() int { return max(p.groups, 1) }

// prefix is the post's first line.
func (p killPost) prefix() []byte { return p.groupPrefix(0) }

// groupPrefix is the first line of group g of a zip post (g is ignored
// for other posts).
func (p killPost) groupPrefix(g int) []byte {
	if p.groups > 0 {
		return fmt.Appendf(nil, "%s%s zip group=%d/%d payload=%d off=%d n=%d\n",
			killPrefix, p.key, g, p.groups, p.payload, p.off, p.n)
	}
	return fmt.Appendf(nil, "%s%s gzip=%t chunked=%t payload=%d off=%d n=%d\n",
		killPrefix, p.key, p.gzip >= 0, p.chunked, p.payload, p.off, p.n)
}

// content is what follows the first line.
func (p killPost) content(pool *killPool) []byte {
	return pool.payloads[p.payload][p.off : p.off+p.n]
}

func (p killPost) size() int { return len(p.prefix()) + p.n }

// matches reports whether data is exactly the post's (decompressed) body,
// or for a zip post one group's.
func (p killPost) matches(pool *killPool, data []byte) bool {
	_, ok := p.group(pool, data)
	return ok
}

// group finds which of the post's groups data is exactly (0 for a post
// that is not a zip).
func (p killPost) group(pool *killPool, data []byte) (int, bool) {
	for g := range p.parts() {
		pre := p.groupPrefix(g)
		if len(data) == len(pre)+p.n && bytes.Equal(data[:len(pre)], pre) && bytes.Equal(data[len(pre):], p.content(pool)) {
			return g, true
		}
	}
	return 0, false
}

// body is the exact (decompressed) body; for messages and the CLI check.
func (p killPost) body(pool *killPool) []byte {
	return append(p.prefix(), p.content(pool)...)
}

// wire is what is sent: the first line and the content, or for GZIP a
// gzip member holding the first line followed by the pool's gzip member
// of the content (a multi-member body, read as one stream).
func (p killPost) wire(pool *killPool, zw *gzip.Writer) (io.Reader, int64) {
	if p.groups > 0 {
		var b bytes.Buffer
		z := zip.NewWriter(&b)
		for g := range p.groups {
			w, _ := z.Create(fmt.Sprintf("%03d.dat", g+1))
			_, _ = w.Write(p.groupPrefix(g))
			_, _ = w.Write(p.content(pool))
		}
		_ = z.Close()
		return &b, int64(b.Len())
	}
	if p.gzip < 0 {
		pre := p.prefix()
		return io.MultiReader(bytes.NewReader(pre), bytes.NewReader(p.content(pool))), int64(len(pre) + p.n)
	}
	var head bytes.Buffer
	zw.Reset(&head)
	_, _ = zw.Write(p.prefix())
	_ = zw.Close()
	data := pool.gzips[p.gzip].data
	return io.MultiReader(bytes.NewReader(head.Bytes()), bytes.NewReader(data)), int64(head.Len() + len(data))
}

// keyOf parses the key from a stored stream's first line.
func keyOf(data []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(killPrefix))
	if !ok {
		return "", false
	}
	key, _, ok := bytes.Cut(rest, []byte(" "))
	return string(key), ok && len(key) > 0
}

// killLedger is what the clients learnt across all cycles.
type killLedger struct {
	pool     *killPool
	mu       sync.Mutex
	sent     map[string]bool   // keys of every post that was attempted
	receipts map[string]string // receipt id -> key of the post that got it
	order    []string          // receipt ids in the order they arrived
}

func (l *killLedger) markSent(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[key] = true
}

func (l *killLedger) wasSent(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[key]
}

func (l *killLedger) record(t *testing.T, id, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, dup := l.receipts[id]; dup {
		t.Errorf("receipt id %s was given to two posts: %s and %s", id, prev, key)
		return
	}
	l.receipts[id] = key
	l.order = append(l.order, id)
}

// killCycleStats describes one cycle.
type killCycleStats struct {
	attempted, receipts, cutOff, inflightAtKill int64
	zipReceipts                                 int64 // of receipts, those of reference zips
	serverInflight                              int64 // weir_receive_inflight just before the kill
	sentBytes                                   int64
	elapsed                                     time.Duration
}

// TestKillDuringPosts is the durability proof: a server is killed with
// SIGKILL while 16 clients post, restarted, and every receipt a client got
// must name exactly its post's complete, byte-exact streams: one, or one
// per group for the zips of reference groups (every eighth post), which
// are stored whole or not at all; nothing partial may be visible and
// nothing in flight may be left behind. Three kill cycles run on the same
// data directory and database.
func TestKillDuringPosts(t *testing.T) {
	crashDuringPosts(t, nil)
}

// crashDuringPosts is TestKillDuringPosts, and with the data directory on
// a power-cut disk TestPowerCutDuringPosts: each crash cuts the disk's
// power before the kill, and the server restarts on what the disk held.
func crashDuringPosts(t *testing.T, disk *powerDisk) {
	hardDeadline := time.Now().Add(7 * time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), hardDeadline)
	defer cancel()

	crash := "kill"
	e := newEnv(t)
	if disk != nil {
		crash = "power cut"
		e.data, e.onOwnFUSE = disk.dir, true
	}
	e.mustAdmin("feed", "create", killFeed)
	ledger := &killLedger{pool: newKillPool(), sent: map[string]bool{}, receipts: map[string]string{}}
	srv := e.startServer()
	var totalCutOff int64
	for cycle := 1; cycle <= killCycles; cycle++ {
		before := len(ledger.receipts)
		st := runKillCycle(ctx, t, e, srv, ledger, cycle, func() {
			if disk != nil {
				disk.cut()
			}
			srv.kill()
		})
		totalCutOff += st.cutOff
		if st.receipts == 0 {
			t.Errorf("cycle %d: no post was acknowledged before the %s", cycle, crash)
		}
		syncs := ""
		if disk != nil {
			// The machine comes back with what its disk held.
			files, dirs := disk.restore()
			syncs = fmt.Sprintf("%d file and %d directory syncs before the cut; ", files, dirs)
		}

		// The restart must be clean: the server starts, recovers what the
		// crash left and is ready.
		start := time.Now()
		srv = e.startServer()
		restart := time.Since(start)
		removed := removedAtStart(srv.logs.String())

		start = time.Now()
		streams := verifyKillStore(t, e, ledger)
		verifyKillSample(t, e, ledger, ledger.order[before:])
		t.Logf("cycle %d: %d posts attempted (%d MiB sent), %d acknowledged (%d of them zips of 2-4 reference groups, a stream each), %d cut off by the %s (in flight: %d by the clients' count, %d by the server's gauge), posting for %s; "+
			"%srestart %s, %d incomplete stream(s) removed at start; verified %d receipts in all (%d streams) byte-exact in %s",
			cycle, st.attempted, st.sentBytes>>20, st.receipts, st.zipReceipts, st.cutOff, crash, st.inflightAtKill, st.serverInflight, st.elapsed.Round(time.Millisecond),
			syncs, restart.Round(time.Millisecond), removed, len(ledger.receipts), streams, time.Since(start).Round(time.Millisecond))
		if t.Failed() || ctx.Err() != nil {
			break
		}
	}
	if totalCutOff == 0 && !t.Failed() {
		t.Errorf("no post was in flight at any %s: the test did not exercise a crash during posts", crash)
	}
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited with %d after SIGTERM, want 0", code)
	}
	if ctx.Err() != nil {
		t.Fatalf("the test ran into its hard deadline")
	}
}

// runKillCycle posts from killClients clients until killReceipts receipts
// arrived (or killCycleWait passed), then crashes the server (crash kills
// it, after cutting its disk's power if the test does that) while posts
// are in flight and waits for every client to stop. A post that fails or
// is refused once the crash began is cut off by it: it may or may not be
// stored, and it was not acknowledged.
func runKillCycle(ctx context.Context, t *testing.T, e *weirEnv, srv *server, ledger *killLedger, cycle int, crash func()) killCycleStats {
	var (
		st       killCycleStats
		stop     atomic.Bool
		broken   atomic.Bool // a post failed with the server up: the cycle ends
		inflight atomic.Int64
		got      atomic.Int64
		zips     atomic.Int64
		tried    atomic.Int64
		cutOff   atomic.Int64
		sent     atomic.Int64
		wg       sync.WaitGroup
	)
	client := newClient(2 * time.Minute)
	defer client.CloseIdleConnections()
	start := time.Now()
	for w := range killClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			zw, _ := gzip.NewWriterLevel(nil, gzip.NoCompression)
			for seq := 0; !stop.Load() && !broken.Load() && ctx.Err() == nil; seq++ {
				kind := "c"
				if seq%8 == 7 {
					kind = killZipKey
				}
				p := ledger.pool.post(fmt.Sprintf("%s%d-w%02d-n%05d", kind, cycle, w, seq))
				body, length := p.wire(ledger.pool, zw)
				headers := map[string]string{"Feed": killFeed, "Compression": "NONE", "X-Proof-Key": p.key}
				switch {
				case p.groups > 0:
					headers["Compression"], headers["Type"] = "ZIP", "Raw Reference"
				case p.gzip >= 0:
					headers["Compression"] = "GZIP"
				}
				sent.Add(length)
				if p.chunked {
					length = -1
				}
				ledger.markSent(p.key)
				tried.Add(1)
				inflight.Add(1)
				resp, err := postBody(ctx, client, srv.url, body, length, headers)
				inflight.Add(-1)
				switch {
				case (err != nil || resp.status != http.StatusOK) && stop.Load():
					cutOff.Add(1) // the crash cut it off: it may or may not be stored
					return
				case err != nil:
					if ctx.Err() == nil && !broken.Swap(true) {
						t.Errorf("cycle %d: post %s failed while the server was up: %v", cycle, p.key, err)
					}
					return
				case resp.status != http.StatusOK:
					if !broken.Swap(true) {
						t.Errorf("cycle %d: post %s: HTTP %d, Service-Status %s, Service-Error %q, body %q",
							cycle, p.key, resp.status, resp.header.Get("Service-Status"), resp.header.Get("Service-Error"), resp.body)
					}
					return
				}
				ledger.record(t, receiptID(t, e.node, resp), p.key)
				got.Add(1)
				if p.groups > 0 {
					zips.Add(1)
				}
			}
		}()
	}

	// Let receipts accumulate, then make sure posts are in flight and kill.
	for got.Load() < killReceipts && time.Since(start) < killCycleWait && ctx.Err() == nil && !broken.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	// The server's own gauge says how many posts it is receiving or
	// committing; wait (briefly) for several before killing it.
	mc := newClient(5 * time.Second)
	for wait := time.Now(); ; {
		n, err := inflightPosts(mc, srv.url)
		if err != nil {
			t.Errorf("cycle %d: read /metrics before the kill: %v", cycle, err)
		}
		st.serverInflight = int64(n)
		if n >= killClients/4 || err != nil || broken.Load() || time.Since(wait) > 5*time.Second {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	mc.CloseIdleConnections()
	st.inflightAtKill = inflight.Load()
	stop.Store(true) // before the crash: every error after this is the crash's
	crash()
	st.elapsed = time.Since(start)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("cycle %d: clients did not stop within 3 minutes of the kill", cycle)
	}
	st.attempted, st.receipts, st.cutOff, st.sentBytes = tried.Load(), got.Load(), cutOff.Load(), sent.Load()
	st.zipReceipts = zips.Load()
	return st
}

// removedAtStart is the count the server logged for streams it cleaned up.
func removedAtStart(logs string) int {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "removed streams left incomplete") {
			continue
		}
		var rec struct {
			Count int `json:"count"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil {
			return rec.Count
		}
	}
	return 0
}

// attrValue looks an attribute up case-insensitively.
func attrValue(a map[string]string, key string) string {
	for k, v := range a {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

// verifyKillStore checks the whole store after a restart and returns the
// number of streams: no LOCKED streams and no in-flight files remain; every
// stream is complete and byte-exact the body of a post that was sent (and
// stored once); every receipt names exactly one stream, holding its post.
func verifyKillStore(t *testing.T, e *weirEnv, ledger *killLedger) int {
	t.Helper()
	if locked := e.listStreams("--status", "LOCKED"); len(locked) > 0 {
		t.Errorf("%d LOCKED stream(s) remain after restart, e.g. id %d receipt %s", len(locked), locked[0].ID, locked[0].ReceiptID)
	}
	if files := e.lockFiles(); len(files) > 0 {
		t.Errorf("%d in-flight stream file(s) remain under the store after restart: %s", len(files), strings.Join(files[:min(5, len(files))], ", "))
	}
	streams := e.listStreams()
	r := e.openStore()
	defer r.close()

	// Every file in the store belongs to a stream: nothing a killed post
	// wrote is left behind under any name.
	owned := make(map[string]bool, len(streams))
	for _, s := range streams {
		p, err := r.path(s.ID)
		if err != nil {
			t.Fatalf("stream %d: %v", s.ID, err)
		}
		owned[filepath.Clean(p)] = true
	}
	var orphans []string
	for _, f := range e.storeFiles() {
		if !owned[filepath.Clean(f)] {
			orphans = append(orphans, f)
		}
	}
	if len(orphans) > 0 {
		t.Errorf("%d file(s) under the store belong to no stream after restart, e.g. %s", len(orphans), strings.Join(orphans[:min(5, len(orphans))], ", "))
	}

	byReceipt := make(map[string][]int64)
	keyOfStream := make(map[int64]string)
	streamOfKey := make(map[string]int64) // by key#group
	groupsOfKey := make(map[string]int)
	for _, s := range streams {
		byReceipt[s.ReceiptID] = append(byReceipt[s.ReceiptID], s.ID)
		if s.Status != "UNLOCKED" {
			t.Errorf("stream %d (receipt %s) is %s after restart, want UNLOCKED", s.ID, s.ReceiptID, s.Status)
			continue
		}
		sec, closeFn, err := r.section(s.ID, streamfile.Data, 0)
		if err != nil {
			t.Errorf("stream %d (receipt %s): open data: %v", s.ID, s.ReceiptID, err)
			continue
		}
		data, err := io.ReadAll(sec)
		closeFn()
		if err != nil {
			t.Errorf("stream %d (receipt %s): read data: %v", s.ID, s.ReceiptID, err)
			continue
		}
		key, ok := keyOf(data)
		if !ok || !ledger.wasSent(key) {
			t.Errorf("stream %d (receipt %s) holds data no post sent: %d bytes starting %q", s.ID, s.ReceiptID, len(data), data[:min(80, len(data))])
			continue
		}
		p := ledger.pool.post(key)
		g, ok := p.group(ledger.pool, data)
		if !ok {
			want := p.body(ledger.pool)
			t.Errorf("stream %d (receipt %s, post %s): stored %d bytes, sent %d; first difference at byte %d",
				s.ID, s.ReceiptID, key, len(data), len(want), firstDiff(data, want))
			continue
		}
		wantType := "Raw Events"
		if p.groups > 0 {
			wantType = "Raw Reference"
		}
		if s.Feed != killFeed || s.Type != wantType || s.Parts != 1 {
			t.Errorf("stream %d: feed %q type %q parts %d, want %s, %s, 1", s.ID, s.Feed, s.Type, s.Parts, killFeed, wantType)
		}
		size := len(p.groupPrefix(g)) + p.n
		if s.RawSize != int64(size) || attrValue(s.Attributes, "StreamSize") != strconv.Itoa(size) {
			t.Errorf("stream %d: rawSize %d, StreamSize %q, want %d", s.ID, s.RawSize, attrValue(s.Attributes, "StreamSize"), size)
		}
		if got := attrValue(s.Attributes, "X-Proof-Key"); got != key {
			t.Errorf("stream %d holds post %s but its X-Proof-Key attribute is %q", s.ID, key, got)
		}
		if got := attrValue(s.Attributes, "ReceiptId"); got != s.ReceiptID {
			t.Errorf("stream %d: ReceiptId attribute %q, row receipt %q", s.ID, got, s.ReceiptID)
		}
		part := fmt.Sprintf("%s#%d", key, g)
		if prev, dup := streamOfKey[part]; dup {
			t.Errorf("post %s (group %d) is stored twice: streams %d and %d", key, g, prev, s.ID)
		}
		streamOfKey[part] = s.ID
		keyOfStream[s.ID] = key
		groupsOfKey[key]++
	}
	// A post is stored whole or not at all, acknowledged or not: a zip's
	// groups are all there, or none is.
	for key, n := range groupsOfKey {
		if want := ledger.pool.post(key).parts(); n != want {
			t.Errorf("post %s is stored as %d of its %d streams: a partial post is visible", key, n, want)
		}
	}

	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	ids := make([]string, 0, len(ledger.receipts))
	for id := range ledger.receipts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	missing := 0
	for _, id := range ids {
		key := ledger.receipts[id]
		ss := byReceipt[id]
		switch {
		case len(ss) == 0:
			missing++
			if missing <= 10 {
				t.Errorf("receipt %s (post %s) was acknowledged but names no stream after restart", id, key)
			}
		case len(ss) != ledger.pool.post(key).parts():
			t.Errorf("receipt %s (post %s) names %d streams %v, want %d", id, key, len(ss), ss, ledger.pool.post(key).parts())
		default:
			for _, sid := range ss {
				if keyOfStream[sid] != key {
					t.Errorf("receipt %s was given to post %s but its stream %d holds %q", id, key, sid, keyOfStream[sid])
				}
			}
		}
	}
	if missing > 10 {
		t.Errorf("... %d acknowledged receipts name no stream in all", missing)
	}
	return len(streams)
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// verifyKillSample reads a few of this cycle's receipts through the admin
// CLI as an operator would: data and Meta Data exactly.
func verifyKillSample(t *testing.T, e *weirEnv, ledger *killLedger, ids []string) {
	t.Helper()
	if len(ids) == 0 {
		return
	}
	streams := e.listStreams()
	byReceipt := make(map[string]streamJSON, len(streams))
	for _, s := range streams {
		byReceipt[s.ReceiptID] = s
	}
	for _, i := range []int{0, len(ids) / 2, len(ids) - 1} {
		id := ids[i]
		ledger.mu.Lock()
		key := ledger.receipts[id]
		ledger.mu.Unlock()
		s, ok := byReceipt[id]
		if !ok {
			continue // reported by verifyKillStore
		}
		p := ledger.pool.post(key)
		data := e.admin("stream", "cat", strconv.FormatInt(s.ID, 10))
		if data.code != 0 || !p.matches(ledger.pool, []byte(data.stdout)) {
			t.Errorf("admin stream cat %d (receipt %s): exit %d, %d bytes, want the %d bytes of post %s; stderr %q",
				s.ID, id, data.code, len(data.stdout), p.size(), key, data.stderr)
		}
		md := e.admin("stream", "cat", strconv.FormatInt(s.ID, 10), "--child", "Meta Data")
		if md.code != 0 || !strings.Contains(md.stdout, "ReceiptId:"+id+"\n") || !strings.Contains(md.stdout, "Feed:"+killFeed+"\n") {
			t.Errorf("admin stream cat %d --child \"Meta Data\": exit %d, got %q, want ReceiptId:%s and Feed:%s lines", s.ID, md.code, md.stdout, id, killFeed)
		}
	}
}
