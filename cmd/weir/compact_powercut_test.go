package main_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// The compaction of packs (internal/store/compact.go) under a real crash:
// weir serve with store.deletePurgeAge 1s has packs holding both live
// streams and streams deleted longer ago than that; the purge, which runs
// at start, compacts them. The power is cut (and the server killed) at a
// different moment of that start in each cycle: after the k-th file or
// directory sync since the process was launched, k spread over the
// compaction's syncs (the start's own syncs measured first). On what the
// disk held, before weir starts again, no row may name bytes the disk
// lost and every pack file must be named by a row or covered by a
// recorded removal (pack_removals); after the restart (which finishes
// the compaction) every acknowledged stream that was not deleted must
// read back byte-exact through the API, every aged deleted one be gone,
// and no pack file be left that no row names, nor any recorded removal.

const (
	compactPerPack   = 40 // posts per pack, 2-48 KiB each: ~1 MiB packs
	compactFeed      = "COMPACT-PROOF"
	compactPurgeAge  = time.Second
	compactCutWithin = 30 * time.Second
)

// compactCutAt are the cut points, in syncs past a plain start's: every
// one of the first compaction's steps (a compaction of a pack makes 7: the
// claim, the recorded removal, the new pack and its directory, the
// transaction, the old pack's removal and its record's), and some later.
var compactCutAt = []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 17, 25}

// compactCycles is how many crashes the test makes.
var compactCycles = len(compactCutAt)

// compactProof is what the test posted and deleted.
type compactProof struct {
	t       *testing.T
	e       *weirEnv
	key     string
	rng     *rand.Rand
	data    map[int64][]byte // acknowledged streams by id
	deleted map[int64]bool   // deleted through the API
	errs    int
}

func TestPowerCutDuringCompaction(t *testing.T) {
	compactCrash(t, newPowerDisk(t))
}

// TestKillDuringCompaction is the kill -9 variant: the server is killed
// at a different delay after its start in each cycle.
func TestKillDuringCompaction(t *testing.T) {
	compactCrash(t, nil)
}

func compactCrash(t *testing.T, disk *powerDisk) {
	e := newEnvConfig(t, "receive:\n  authenticationRequired: false\nstore:\n  deletePurgeAge: 1s\n")
	if disk != nil {
		e.data, e.onOwnFUSE = disk.dir, true
	}
	e.mustAdmin("feed", "create", compactFeed)
	p := &compactProof{t: t, e: e, rng: rand.New(rand.NewPCG(11, 29)), data: map[int64][]byte{}, deleted: map[int64]bool{}}
	srv := e.startServer()
	key, err := os.ReadFile(filepath.Join(e.data, "bootstrap-admin-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	p.key = strings.TrimSpace(string(key))

	// The syncs of a start with nothing to compact: the cut points are
	// counted past them.
	var startSyncs int64
	if disk != nil {
		if code := srv.terminate(); code != 0 {
			t.Fatalf("weir serve exited with %d after SIGTERM", code)
		}
		before := syncCount(disk)
		srv = e.startServer()
		time.Sleep(300 * time.Millisecond)
		startSyncs = syncCount(disk) - before
	}

	midway := 0
	for cycle := 1; cycle <= compactCycles; cycle++ {
		// Two packs of this cycle's posts (a restart closes the open one),
		// then some of every cycle's live streams deleted, aged past
		// deletePurgeAge.
		p.postMany(srv, compactPerPack)
		if code := srv.terminate(); code != 0 {
			t.Fatalf("weir serve exited with %d after SIGTERM", code)
		}
		srv = e.startServer()
		p.postMany(srv, compactPerPack)
		p.deleteSome(srv, 0.4)
		time.Sleep(compactPurgeAge + 200*time.Millisecond)
		if code := srv.terminate(); code != 0 {
			t.Fatalf("weir serve exited with %d after SIGTERM", code)
		}

		// The start that compacts, cut short.
		var base int64
		if disk != nil {
			base = syncCount(disk)
		}
		srv = launchServer(t, e)
		var at string
		if disk != nil {
			k := startSyncs + compactCutAt[cycle-1]
			deadline := time.Now().Add(compactCutWithin)
			for syncCount(disk)-base < k && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			disk.cut()
			srv.kill()
			at = fmt.Sprintf("after sync %d of the start (%d are a plain start's)", syncCount(disk)-base, startSyncs)
			files, dirs := disk.restore()
			_ = files + dirs
		} else {
			// Killed a varied while after the first new pack file (a
			// compaction's) appeared.
			d := time.Duration(cycle-1) * 400 * time.Microsecond
			seen := map[string]bool{}
			for _, f := range e.storeFiles() {
				seen[f] = true
			}
			deadline := time.Now().Add(compactCutWithin)
			found := false
			for !found && time.Now().Before(deadline) {
				for _, f := range e.storeFiles() {
					if !seen[f] && strings.HasSuffix(f, ".wpk") {
						found = true
					}
				}
			}
			time.Sleep(d)
			srv.kill()
			at = fmt.Sprintf("%s after a new pack appeared (seen: %v)", d, found)
		}
		cut := p.checkDisk(fmt.Sprintf("cycle %d, as the crash left it", cycle), false)
		if cut {
			midway++
		}

		srv = e.startServer()
		p.settle(srv)
		p.checkDisk(fmt.Sprintf("cycle %d, after the restart", cycle), true)
		p.verifyAPI(srv, cycle)
		t.Logf("cycle %d: crash %s; compaction cut mid-way: %v; %d streams acknowledged, %d deleted", cycle, at, cut, len(p.data), len(p.deleted))
		if t.Failed() {
			break
		}
	}
	if midway == 0 && !t.Failed() {
		t.Errorf("no crash left a compaction mid-way: the test did not exercise one")
	}
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited with %d after SIGTERM, want 0", code)
	}
}

func syncCount(d *powerDisk) int64 {
	f, dd := d.fs.Syncs()
	return f + dd
}

// launchServer starts weir serve without waiting for it to be ready.
func launchServer(t *testing.T, e *weirEnv) *server {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := append([]string{"serve", "--listen", addr, "--node", e.node}, e.storageArgs()...)
	s := &server{t: t, addr: addr, url: "http://" + addr, logs: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(weirBin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	t.Cleanup(s.kill)
	return s
}

func (p *compactProof) do(srv *server, method, path string, body []byte, hdr ...string) (int, []byte) {
	p.t.Helper()
	req, err := http.NewRequest(method, srv.url+path, bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := newClient(30 * time.Second)
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// postMany posts n streams of incompressible data (packed: below
// store.packMaxSize) and records them by id.
func (p *compactProof) postMany(srv *server, n int) {
	p.t.Helper()
	receipts := map[string][]byte{}
	for i := 0; i < n; i++ {
		b := make([]byte, 2<<10+p.rng.IntN(46<<10))
		for j := range b {
			b[j] = byte(p.rng.Uint32())
		}
		code, body := p.do(srv, http.MethodPost, "/datafeed", b, "Feed", compactFeed, "Compression", "NONE")
		if code != http.StatusOK {
			p.t.Fatalf("post: %d %s", code, body)
		}
		receipts[strings.TrimSpace(string(body))] = b
	}
	ids := make([]string, 0, len(receipts))
	for r := range receipts {
		ids = append(ids, r)
	}
	for _, s := range p.e.listStreamsHaving(ids...) {
		if b, ok := receipts[s.ReceiptID]; ok {
			p.data[s.ID] = b
			delete(receipts, s.ReceiptID)
		}
	}
	if len(receipts) > 0 {
		p.t.Fatalf("%d acknowledged posts not listed", len(receipts))
	}
}

// deleteSome deletes a share of the live streams through the API.
func (p *compactProof) deleteSome(srv *server, share float64) {
	p.t.Helper()
	ids := make([]int64, 0, len(p.data))
	for id := range p.data {
		if !p.deleted[id] {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if p.rng.Float64() >= share {
			continue
		}
		if code, body := p.do(srv, http.MethodDelete, fmt.Sprintf("/api/streams/%d", id), nil); code != http.StatusOK {
			p.t.Fatalf("delete %d: %d %s", id, code, body)
		}
		p.deleted[id] = true
	}
}

// settle waits until the restarted server's purge removed every aged
// deleted stream (its rows) and then its recorded pack removals.
func (p *compactProof) settle(srv *server) {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for id := range p.deleted {
		for {
			code, _ := p.do(srv, http.MethodGet, fmt.Sprintf("/api/streams/%d", id), nil)
			if code == http.StatusNotFound {
				break
			}
			if time.Now().After(deadline) {
				p.t.Fatalf("deleted stream %d not purged within a minute of the restart (GET: %d)", id, code)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The old pack goes after the transaction that purged the rows, and
	// its recorded removal is forgotten only once the file is gone (and
	// its directory synced): wait for no removal to be recorded, rather
	// than a fixed time that a loaded machine (or the power-cut
	// filesystem) may not cover.
	for {
		if _, removals := p.readDB(); len(removals) == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatal("recorded pack removals still there a minute after the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// packState reads the rows' packs and the recorded removals.
type packRow struct {
	id, off, size int64
	pack, status  string
	statusMs      int64
}

func (p *compactProof) readDB() ([]packRow, map[string]bool) {
	p.t.Helper()
	driver, dsn := "pgx", p.e.db
	if p.e.db == "" {
		driver, dsn = "sqlite", "file:"+filepath.Join(p.e.copySQLite(), "weir.db")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, COALESCE(pack, ''), pack_offset, file_size, status, status_ms FROM streams`)
	if err != nil {
		p.t.Fatal(err)
	}
	var out []packRow
	for rows.Next() {
		var r packRow
		if err := rows.Scan(&r.id, &r.pack, &r.off, &r.size, &r.status, &r.statusMs); err != nil {
			p.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		p.t.Fatal(err)
	}
	rows.Close()
	removals := map[string]bool{}
	rr, err := db.Query(`SELECT pack FROM pack_removals`)
	if err != nil {
		p.t.Fatal(err)
	}
	for rr.Next() {
		var s string
		if err := rr.Scan(&s); err != nil {
			p.t.Fatal(err)
		}
		removals[s] = true
	}
	rr.Close()
	return out, removals
}

// checkDisk checks the store against the rows: every row's bytes are in
// its pack; every pack file is named by a row or a recorded removal
// (settled: by a row, and no removal is recorded). It returns whether a
// compaction was left mid-way (a recorded removal, or claimed rows).
func (p *compactProof) checkDisk(when string, settled bool) bool {
	p.t.Helper()
	rows, removals := p.readDB()
	root := filepath.Join(p.e.data, "store")
	named := map[string]bool{}
	midway := len(removals) > 0
	for _, r := range rows {
		if p.t.Failed() && p.errs > 20 {
			p.t.Fatalf("%s: too many errors", when)
		}
		if r.status == "DELETED" && r.statusMs < 0 {
			midway = true
		}
		if r.pack == "" {
			continue
		}
		named[r.pack] = true
		fi, err := os.Stat(filepath.Join(root, r.pack))
		if err != nil {
			p.t.Errorf("%s: stream %d (%s) names pack %s: %v", when, r.id, r.status, r.pack, err)
			p.errs++
			continue
		}
		if fi.Size() < r.off+r.size {
			p.t.Errorf("%s: stream %d (%s) names [%d, %d) of pack %s, which holds %d bytes", when, r.id, r.status, r.off, r.off+r.size, r.pack, fi.Size())
			p.errs++
		}
	}
	for _, f := range p.e.storeFiles() {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			p.t.Fatal(err)
		}
		if !strings.HasSuffix(rel, ".wpk") {
			continue
		}
		switch {
		case named[rel]:
		case removals[rel] && !settled:
		default:
			p.t.Errorf("%s: pack %s is named by no row (recorded for removal: %v)", when, rel, removals[rel])
		}
	}
	if settled && len(removals) > 0 {
		p.t.Errorf("%s: %d pack removals still recorded", when, len(removals))
	}
	return midway
}

// verifyAPI reads every acknowledged stream back through the API: those
// not deleted byte-exact, the deleted ones gone.
func (p *compactProof) verifyAPI(srv *server, cycle int) {
	p.t.Helper()
	bad := 0
	for id, b := range p.data {
		code, body := p.do(srv, http.MethodGet, fmt.Sprintf("/api/streams/%d/data", id), nil)
		switch {
		case p.deleted[id] && code != http.StatusNotFound:
			p.t.Errorf("cycle %d: purged stream %d: GET data %d", cycle, id, code)
			bad++
		case !p.deleted[id] && (code != http.StatusOK || !bytes.Equal(body, b)):
			p.t.Errorf("cycle %d: stream %d: GET data %d, %d bytes, want its %d bytes", cycle, id, code, len(body), len(b))
			bad++
		}
		if bad > 10 {
			p.t.Fatalf("cycle %d: too many bad streams", cycle)
		}
	}
}
