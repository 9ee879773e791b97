package main_test

// Disk full (docs/reliability.md): `weir serve` and `weir proxy` with their
// data directory (stream files, zip staging and the SQLite database) on a
// small tmpfs that the test fills. Posts must fail with 503, Retry-After
// and a Service-Error that names the disk; nothing acknowledged may be
// lost; and when space returns, posts succeed again without a restart.
// The tests mount a tmpfs, so they need root (CI runs as root); elsewhere
// they skip and say why.

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of the given size (mount's syntax, e.g. 96m)
// on a fresh directory; it is unmounted at cleanup, after the processes
// using it were stopped (their cleanups were registered later).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs for the data directory")
	}
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v): %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s; unmounting lazily", dir, err, bytes.TrimSpace(out))
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// filler is a file that takes up space on a volume, so that the volume
// can be filled and emptied while weir runs.
type filler struct {
	t    *testing.T
	f    *os.File
	dir  string
	size int64
}

func newFiller(t *testing.T, dir string) *filler {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &filler{t: t, f: f, dir: dir}
}

// leave grows or shrinks the filler until the volume has free bytes free
// (to within a page).
func (fl *filler) leave(free int64) {
	fl.t.Helper()
	now := int64(freeDisk(fl.t, fl.dir))
	size := max(fl.size+now-free, 0)
	if size > fl.size {
		if err := syscall.Fallocate(int(fl.f.Fd()), 0, 0, size); err != nil {
			fl.t.Fatalf("fallocate the filler to %d bytes: %v", size, err)
		}
	} else if err := fl.f.Truncate(size); err != nil {
		fl.t.Fatal(err)
	}
	fl.size = size
}

// remove deletes the filler: the space returns.
func (fl *filler) remove() {
	fl.t.Helper()
	fl.f.Close()
	if err := os.Remove(fl.f.Name()); err != nil {
		fl.t.Fatal(err)
	}
	fl.size = 0
}

// getBody fetches a URL: status and body.
func getBody(c *http.Client, u string) (int, string) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// diskFailure is how one refused post was answered.
type diskFailure struct {
	key                 string
	status              int
	service, msg, retry string
	transport           error
}

func (f diskFailure) kind() string {
	if f.transport != nil {
		return "transport error: " + f.transport.Error()
	}
	msg := f.msg
	if _, rest, ok := strings.Cut(msg, "] - "); ok {
		msg = rest // the reason, without the feed context
	}
	msg = pathRE.ReplaceAllString(msg, "<path>")
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	return fmt.Sprintf("%d / %s: %s", f.status, f.service, msg)
}

// pathRE matches file paths in messages, so that refusals group by kind.
var pathRE = regexp.MustCompile(`/[^\s:]+`)

// problem says what is wrong with a refusal because of a full disk: it
// must be 503, Service-Status 503, Retry-After, and a Service-Error that
// names the disk (or the proxy's free-space limit).
func (f diskFailure) problem() string {
	switch {
	case f.transport != nil:
		return "the sender got no answer"
	case f.status != http.StatusServiceUnavailable || f.service != "503":
		if strings.Contains(f.msg, "database or disk is full") {
			return fmt.Sprintf("HTTP %d Service-Status %q, want 503 / 503. BUG: SQLite's SQLITE_FULL "+
				"(\"database or disk is full (13)\") is not taken for a full disk: store.IsNoSpace "+
				"(internal/store/store.go) matches only ENOSPC and EDQUOT, so receive.storeError "+
				"(internal/receive/body.go) answers 999 without Retry-After. Recognise modernc.org/sqlite "+
				"errors whose code is SQLITE_FULL (and PostgreSQL's SQLSTATE 53100 disk_full) as a full disk, "+
				"e.g. by wrapping them in the meta package so that they unwrap to syscall.ENOSPC", f.status, f.service)
		}
		return fmt.Sprintf("HTTP %d Service-Status %q, want 503 / 503", f.status, f.service)
	case f.retry == "":
		return "no Retry-After"
	case !strings.Contains(strings.ToLower(f.msg), "disk") && !strings.Contains(f.msg, "minFreeSpace"):
		return "the Service-Error does not name the disk"
	case pathRE.MatchString(f.msg):
		// The cause's paths are for the server's log.
		return "the Service-Error names a server path"
	}
	return ""
}

// diskTally collects refusals.
type diskTally struct {
	mu       sync.Mutex
	failures []diskFailure
}

func (d *diskTally) add(f diskFailure) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures = append(d.failures, f)
	return len(d.failures)
}

// report logs the refusals by kind and fails the test for each kind that
// is not a proper disk-full answer.
func (d *diskTally) report(t *testing.T, what string) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	kinds := map[string]int{}
	bad := map[string]string{}
	for _, f := range d.failures {
		kinds[f.kind()]++
		if p := f.problem(); p != "" {
			bad[f.kind()] = p
		}
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.Logf("%s: %3d x %s", what, kinds[k], k)
	}
	for _, k := range names {
		if p, ok := bad[k]; ok {
			t.Errorf("%s: %d post(s) answered %q: %s", what, kinds[k], k, p)
		}
	}
	seen := map[string]bool{}
	for _, f := range d.failures {
		if p := f.problem(); p != "" && !seen[f.kind()] {
			seen[f.kind()] = true
			t.Logf("%s: the full Service-Error of %q: %s", what, f.kind(), f.msg)
		}
	}
}

func (d *diskTally) keys() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := map[string]bool{}
	for _, f := range d.failures {
		m[f.key] = true
	}
	return m
}

// zipWire is a kill-proof post sent as a Stroom zip of one stored entry
// holding its body: stored as one part with the same data.
func (p killPost) zipWire(pool *killPool) (io.Reader, int64) {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "1.dat", Method: zip.Store})
	_, _ = w.Write(p.body(pool))
	_ = zw.Close()
	return &b, int64(b.Len())
}

// TestDiskFullServe fills the volume under `weir serve`'s data directory
// (stream files, zip staging and SQLite) while four clients post (plain,
// gzip and zip bodies of 0-4 MiB), until 40 posts were refused. Every
// refusal must be 503 / 503 with Retry-After naming the disk. Then the
// space returns and posts succeed at once, without a restart; after a
// restart every acknowledged receipt names its stream, byte-exact, and no
// refused post was stored.
func TestDiskFullServe(t *testing.T) {
	// /readyz wants 64 MiB free (at every start, too): room for that and
	// for what the test stores.
	vol := mountTmpfs(t, "128m")
	e := newEnv(t)
	e.data = filepath.Join(vol, "data")
	e.mustAdmin("feed", "create", killFeed)
	srv := e.startServer()
	ledger := &killLedger{pool: newKillPool(), sent: map[string]bool{}, receipts: map[string]string{}}
	fl := newFiller(t, vol)
	const room = 16 << 20
	fl.leave(room)
	t.Logf("volume %s: filler %d MiB, %d MiB free", vol, fl.size>>20, freeDisk(t, vol)>>20)

	var (
		tally  diskTally
		wg     sync.WaitGroup
		stop   atomic.Bool
		client = newClient(time.Minute)
	)
	defer client.CloseIdleConnections()
	postOne := func(key string) (ok bool) {
		p := ledger.pool.post(key)
		headers := map[string]string{"Feed": killFeed, "Compression": "NONE", "X-Proof-Key": p.key}
		var (
			body   io.Reader
			length int64
		)
		switch {
		case keySeed(key)%5 == 0:
			body, length = p.zipWire(ledger.pool)
			headers["Compression"] = "ZIP"
		default:
			zw, _ := gzip.NewWriterLevel(nil, gzip.NoCompression)
			body, length = p.wire(ledger.pool, zw)
			if p.gzip >= 0 {
				headers["Compression"] = "GZIP"
			}
		}
		if p.chunked {
			length = -1
		}
		ledger.markSent(p.key)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := postBody(ctx, client, srv.url, body, length, headers)
		if err == nil && resp.status == http.StatusOK {
			ledger.record(t, receiptID(t, e.node, resp), p.key)
			return true
		}
		f := diskFailure{key: key, transport: err}
		if err == nil {
			f = diskFailure{key: key, status: resp.status, service: resp.header.Get("Service-Status"),
				msg: resp.header.Get("Service-Error"), retry: resp.header.Get("Retry-After")}
		}
		if tally.add(f) >= 40 {
			stop.Store(true)
		}
		return false
	}
	began := time.Now()
	for w := range 4 {
		wg.Go(func() {
			for n := 0; !stop.Load() && time.Since(began) < 2*time.Minute; n++ {
				postOne(fmt.Sprintf("df-w%d-n%05d", w, n))
			}
		})
	}
	wg.Wait()
	full := len(ledger.receipts)
	free := freeDisk(t, vol)
	t.Logf("filling: %d posts acknowledged and %d refused in %s; %d KiB free at the end",
		full, len(tally.failures), time.Since(began).Round(time.Millisecond), free>>10)
	if full == 0 {
		t.Errorf("no post was acknowledged before the disk filled")
	}
	if len(tally.failures) < 40 {
		t.Fatalf("only %d posts were refused in 2 minutes: the disk never filled", len(tally.failures))
	}
	tally.report(t, "refused while full")
	mc := newClient(5 * time.Second)
	defer mc.CloseIdleConnections()
	code, body := getBody(mc, srv.url+"/readyz")
	t.Logf("/readyz while full: %d %q", code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "free") {
		t.Errorf("/readyz while full: %d %q, want 503 naming the free space", code, body)
	}
	if exited(srv) {
		t.Fatalf("weir serve exited while the disk was full:\n%s", tail(srv.logs.String(), 4000))
	}

	// Space returns: posts succeed at once, without a restart.
	fl.remove()
	freed := time.Now()
	var firstOK time.Duration
	failedAfter := 0
	for n := range 30 {
		if postOne(fmt.Sprintf("df-after-n%05d", n)) {
			if firstOK == 0 {
				firstOK = time.Since(freed)
			}
		} else {
			failedAfter++
		}
	}
	t.Logf("space returned: first post accepted %s later; %d of 30 posts refused", firstOK.Round(time.Millisecond), failedAfter)
	if failedAfter > 0 {
		t.Errorf("%d posts were refused after the space returned (no restart): weir did not recover by itself", failedAfter)
		tally.report(t, "all refusals, including after the space returned")
	}
	if code, body := getBody(mc, srv.url+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the space returned: %d %q", code, body)
	}

	// Restart: every acknowledged receipt is there, byte-exact; nothing
	// refused was stored; nothing is left staged.
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited %d after SIGTERM", code)
	}
	srv = e.startServer()
	streams := verifyKillStore(t, e, ledger)
	verifyKillSample(t, e, ledger, ledger.order)
	refused := tally.keys()
	for _, s := range e.listStreams() {
		if k := attrValue(s.Attributes, "X-Proof-Key"); refused[k] {
			t.Errorf("post %s was refused, yet stream %d (receipt %s) holds it", k, s.ID, s.ReceiptID)
		}
	}
	if staged := filesUnder(t, filepath.Join(e.data, "tmp")); len(staged) > 0 {
		t.Errorf("staged files left after restart: %v", staged)
	}
	t.Logf("after restart: %d receipts acknowledged in all, %d streams, every one byte-exact; %d refused posts, none stored; removed at start: %d",
		len(ledger.receipts), streams, len(refused), removedAtStart(srv.logs.String()))
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited %d after SIGTERM", code)
	}
}

func exited(s *server) bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// filesUnder lists the files under dir (none if it does not exist).
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDiskFullProxy: `weir proxy` with its repository (store and SQLite)
// on a small tmpfs, repository.minFreeSpace 1 MiB, and its downstream
// refusing everything (a gate in front of a real `weir serve`), so that
// what it receives stays on its disk:
//   - a post larger than the free space fails with 503 (the real ENOSPC),
//     and its partial file is removed;
//   - four clients post until 30 posts were refused: each refusal is 503
//     with Retry-After, out of disk space or below minFreeSpace;
//   - with less than minFreeSpace free, /readyz is 503 and every post is
//     refused before its body is read;
//   - when the space returns, /readyz and posts recover without a restart;
//   - after a SIGKILL and a restart, the gate opens and every acknowledged
//     receipt arrives at the main service byte-exact; no refused post does.
func TestDiskFullProxy(t *testing.T) {
	vol := mountTmpfs(t, "128m")
	mainEnv := newEnv(t)
	mainEnv.mustAdmin("feed", "create", pxFeed)
	srv := mainEnv.startServer()
	target, _ := url.Parse(srv.url)
	var open atomic.Bool
	rp := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !open.Load() {
			w.Header().Set("Service-Status", "503")
			w.Header().Set("Service-Error", "test gate closed")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer gate.Close()

	cfg := pxProxyConfig(gate.URL+"/datafeed", 1000, "1GiB", 2) + "repository:\n  minFreeSpace: 1MiB\n"
	px := newPxProxy(t, cfg)
	px.e.data = filepath.Join(vol, "data")
	px.start()
	pool := newPxPool(func(r *rand.Rand) int { return 64<<10 + r.IntN(960<<10) }, 4)
	ledger := newPxLedger()
	var tally diskTally
	client := newClient(time.Minute)
	defer client.CloseIdleConnections()
	mc := newClient(5 * time.Second)
	defer mc.CloseIdleConnections()
	var refusals atomic.Int64
	postOne := func(key string) bool {
		p := pool.post(key)
		body, length := p.wire(pool)
		headers := map[string]string{"Feed": pxFeed, "X-Proof-Key": p.key, "Compression": "NONE"}
		if p.gzip {
			headers["Compression"] = "GZIP"
		}
		ledger.markSent(p.key)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := postBody(ctx, client, px.srv.url, body, length, headers)
		if err == nil && resp.status == http.StatusOK {
			id, ok := strings.CutSuffix(resp.body, "\n")
			if !ok || !isProxyReceiptID(id, pxProxyID) {
				t.Errorf("post %s: 200 body %q is not a proxy receipt id", key, resp.body)
			}
			ledger.record(t, id, p.key)
			return true
		}
		f := diskFailure{key: key, transport: err}
		if err == nil {
			f = diskFailure{key: key, status: resp.status, service: resp.header.Get("Service-Status"),
				msg: resp.header.Get("Service-Error"), retry: resp.header.Get("Retry-After")}
		}
		refusals.Store(int64(tally.add(f)))
		return false
	}
	fl := newFiller(t, vol)

	// 1. One post larger than the free space: the store runs out of disk.
	fl.leave(6 << 20)
	time.Sleep(1500 * time.Millisecond) // the proxy samples free space every second
	before := freeDisk(t, vol)
	big := make([]byte, 16<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(big)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	resp, err := postBody(ctx, client, px.srv.url, bytes.NewReader(big), int64(len(big)), map[string]string{"Feed": pxFeed, "Compression": "NONE"})
	cancel()
	switch {
	case err != nil:
		t.Errorf("16 MiB post with 6 MiB free: %v", err)
	default:
		f := diskFailure{status: resp.status, service: resp.header.Get("Service-Status"), msg: resp.header.Get("Service-Error"), retry: resp.header.Get("Retry-After")}
		t.Logf("16 MiB post with 6 MiB free (minFreeSpace 1 MiB): %s", f.kind())
		if p := f.problem(); p != "" || !strings.Contains(f.msg, "out of disk space") {
			t.Errorf("16 MiB post with 6 MiB free: %s; want 503 out of disk space (%s)", f.kind(), p)
		}
	}
	if after := freeDisk(t, vol); after+(512<<10) < before {
		t.Errorf("the refused post left %d KiB behind on the volume", (before-after)>>10)
	}

	// 2. Fill the volume with posts.
	fl.leave(12 << 20)
	var (
		wg   sync.WaitGroup
		stop atomic.Bool
	)
	began := time.Now()
	for w := range 4 {
		wg.Go(func() {
			for n := 0; !stop.Load() && time.Since(began) < 2*time.Minute; n++ {
				if !postOne(fmt.Sprintf("df-w%d-n%05d", w, n)) && refusals.Load() >= 30 {
					stop.Store(true)
				}
			}
		})
	}
	wg.Wait()
	acked := ledger.acknowledged()
	t.Logf("filling: %d posts acknowledged, %d refused in %s; %d KiB free", acked, len(tally.failures),
		time.Since(began).Round(time.Millisecond), freeDisk(t, vol)>>10)
	if acked == 0 {
		t.Errorf("no post was acknowledged before the disk filled")
	}
	tally.report(t, "refused while filling")
	if exited(px.srv) {
		t.Fatalf("weir proxy exited while the disk was full:\n%s", tail(px.srv.logs.String(), 4000))
	}

	// 3. Below minFreeSpace: /readyz fails and posts are refused at once.
	fl.leave(512 << 10)
	var code int
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, body = getBody(mc, px.srv.url+"/readyz"); strings.Contains(body, "minFreeSpace") {
			break
		}
	}
	t.Logf("/readyz with 512 KiB free: %d %q", code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "minFreeSpace") {
		t.Errorf("/readyz below minFreeSpace: %d %q, want 503 naming minFreeSpace", code, body)
	}
	n0 := len(tally.failures)
	for n := range 5 {
		if postOne(fmt.Sprintf("df-low-n%05d", n)) {
			t.Errorf("a post was accepted with 512 KiB free, below minFreeSpace")
		}
	}
	for _, f := range tally.failures[n0:] {
		if f.problem() != "" || !strings.Contains(f.msg, "minFreeSpace") {
			t.Errorf("below minFreeSpace: %s; want 503 naming minFreeSpace", f.kind())
		}
	}

	// 4. The space returns: /readyz and posts recover without a restart.
	fl.remove()
	freed := time.Now()
	for code = 0; time.Since(freed) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if code, body = getBody(mc, px.srv.url+"/readyz"); code == http.StatusOK {
			break
		}
	}
	t.Logf("space returned: /readyz %d after %s", code, time.Since(freed).Round(time.Millisecond))
	if code != http.StatusOK {
		t.Errorf("/readyz after the space returned: %d %q", code, body)
	}
	refusedAfter := 0
	for n := range 10 {
		if !postOne(fmt.Sprintf("df-after-n%05d", n)) {
			refusedAfter++
		}
	}
	if refusedAfter > 0 {
		t.Errorf("%d of 10 posts refused after the space returned", refusedAfter)
		tally.report(t, "all refusals")
	}

	// 5. SIGKILL and restart, then let the data through.
	px.srv.kill()
	px.start()
	open.Store(true)
	drained := px.waitDrained(2 * time.Minute)
	px.verifyEmpty()
	ds := pxServeDeliveries(t, mainEnv, pool)
	st := checkDeliveries(t, ledger, ds)
	if st.unacknowledged > 0 {
		t.Errorf("%d refused post(s) arrived at the main service", st.unacknowledged)
	}
	t.Logf("after kill, restart and opening the gate: drained in %s; %d receipts acknowledged, %d parts in %d streams at the main service, all byte-exact; %d refused posts, none delivered",
		drained.Round(time.Millisecond), st.receipts, st.parts, st.units, len(tally.failures))
	if code := px.srv.terminate(); code != 0 {
		t.Errorf("weir proxy exited %d after SIGTERM", code)
	}
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited %d after SIGTERM", code)
	}
}
