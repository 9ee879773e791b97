package app_test

// The purge of deleted streams (store.deletePurgeAge): streams deleted
// through the API stay restorable for deletePurgeAge, then the main
// service removes their files and rows for good. The tests age a stream's
// deletion by setting its status time in the database; the job runs at
// start and then every few milliseconds (store's PurgeInterval).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// pgConfig is a server's configuration for these tests: small streams are
// packed up to 4 KiB, and the purge runs every 20 ms.
func pgConfig(c *config.Config) {
	c.Store.PackMaxSize = 4 << 10
	c.Store.PurgeInterval = 20 * time.Millisecond
}

// pgBig is incompressible data well past store.packMaxSize: a file of its own.
func pgBig(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// pgAge sets the status time of streams to long ago, as if they had been
// deleted then, in one statement: a purge run sees all of them aged or
// none. The server may be running: SQLite waits for its writer.
func pgAge(t *testing.T, cfg config.Config, ids ...int64) {
	t.Helper()
	args := []any{time.Now().Add(-30 * 24 * time.Hour).UnixMilli()}
	marks := make([]string, len(ids))
	for i, id := range ids {
		args = append(args, id)
		marks[i] = fmt.Sprintf("$%d", i+2)
	}
	execDB(t, cfg, `UPDATE streams SET status_ms = $1 WHERE status = 'DELETED' AND id IN (`+strings.Join(marks, ", ")+`)`, args...)
}

// pgGone reports whether a stream's row is gone.
func pgGone(t *testing.T, s *apptest.Server, id int64) bool {
	t.Helper()
	_, err := s.App.Repo().GetStream(context.Background(), id)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		t.Fatal(err)
	}
	return err != nil
}

func pgExists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// pgStoreBytes is the size of every file in the server's store.
func pgStoreBytes(t *testing.T, s *apptest.Server) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(s.Cfg.Data, "store"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pgRestore restores one stream by id through the API and returns how
// many streams matched and changed.
func pgRestore(t *testing.T, c apiClient, id int64) (matched, changed int64) {
	t.Helper()
	var r struct {
		Matched int64 `json:"matched"`
		Changed int64 `json:"changed"`
	}
	c.do("POST", "/streams/restore", `{"expression":`+sxTerm("Id", "EQUALS", fmt.Sprint(id))+`}`).want(t, "restore", 200, &r)
	return r.Matched, r.Changed
}

// TestPurgeDeletedStreams: streams deleted longer than store.deletePurgeAge
// are removed (files and rows) by the periodic job: a stream's own file at
// once, a packed one by the compaction of its pack (here the open one,
// closed for it: see TestPurgeCompactsPacks), and a pack goes whole once
// every stream in it has; streams deleted more recently can still be
// restored, live streams are untouched, and a purged stream is gone (404,
// nothing to restore).
func TestPurgeDeletedStreams(t *testing.T) {
	t.Parallel()
	s := start(t, pgConfig)
	admin := user(t, s, "pgadmin", []string{access.Administrator}, nil)
	st := s.App.Store()
	small := func(i int) meta.Stream {
		return streamByReceipt(t, s, post(t, s, fmt.Appendf(nil, "small %d\n", i), "Feed", testFeed).ok(t))
	}
	big := func(i int) (meta.Stream, []byte) {
		b := pgBig(uint64(i))
		return streamByReceipt(t, s, post(t, s, b, "Feed", testFeed).ok(t)), b
	}
	s1, s2, s3 := small(1), small(2), small(3)
	b1, _ := big(1)
	b2, b2data := big(2)
	b3, b3data := big(3)
	pack := st.Path(s1)
	for _, x := range []meta.Stream{s2, s3} {
		if x.Pack == "" || st.Path(x) != pack {
			t.Fatalf("small streams not in one pack: %q %q", s1.Pack, x.Pack)
		}
	}
	for _, x := range []meta.Stream{b1, b2, b3} {
		if x.Pack != "" {
			t.Fatalf("big stream packed in %q", x.Pack)
		}
	}
	full := pgStoreBytes(t, s)

	admin.do("DELETE", fmt.Sprintf("/streams/%d", b1.ID), "").want(t, "delete b1", 200, nil)
	admin.do("DELETE", fmt.Sprintf("/streams/%d", b2.ID), "").want(t, "delete b2", 200, nil)
	admin.do("POST", "/streams/delete", `{"expression":`+sxOp("OR", sxTerm("Id", "EQUALS", fmt.Sprint(s1.ID)),
		sxTerm("Id", "EQUALS", fmt.Sprint(s2.ID)))+`}`).want(t, "delete s1, s2", 200, nil)
	pgAge(t, s.Cfg, b1.ID, s1.ID)

	// b1 goes, and s1: its pack (the open one) is compacted, s2 (deleted
	// too recently) and s3 (live) copied into a new pack.
	apptest.WaitFor(t, "the aged streams purged", func() bool { return pgGone(t, s, b1.ID) && pgGone(t, s, s1.ID) })
	if pgExists(t, st.Path(b1)) {
		t.Fatal("purged stream's file is still there")
	}
	apptest.WaitFor(t, "the compacted pack removed", func() bool { return !pgExists(t, pack) })
	var moved []meta.Stream
	for _, x := range []meta.Stream{s2, s3} {
		row, err := s.App.Repo().GetStream(context.Background(), x.ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Pack == "" || row.Pack == s1.Pack || !pgExists(t, st.Path(row)) {
			t.Fatalf("stream %d after the compaction: pack %q (was %q)", x.ID, row.Pack, s1.Pack)
		}
		moved = append(moved, row)
	}
	if moved[0].Pack != moved[1].Pack {
		t.Fatalf("the staying streams are in two packs: %q, %q", moved[0].Pack, moved[1].Pack)
	}
	pack = st.Path(moved[0])
	if r := admin.do("GET", fmt.Sprintf("/streams/%d/data", s3.ID), ""); r.status != 200 || string(r.body) != "small 3\n" {
		t.Fatalf("live packed stream after the compaction: %d %q", r.status, r.body)
	}
	admin.do("GET", fmt.Sprintf("/streams/%d", b1.ID), "").want(t, "get purged", 404, nil)
	admin.do("GET", fmt.Sprintf("/streams/%d/data", b1.ID), "").want(t, "data of purged", 404, nil)
	if m, c := pgRestore(t, admin, b1.ID); m != 0 || c != 0 {
		t.Fatalf("restore of a purged stream: matched %d changed %d", m, c)
	}
	// Deleted, not long enough: restorable, byte for byte.
	if m, c := pgRestore(t, admin, b2.ID); m != 1 || c != 1 {
		t.Fatalf("restore of a recently deleted stream: matched %d changed %d", m, c)
	}
	if r := admin.do("GET", fmt.Sprintf("/streams/%d/data", b2.ID), ""); r.status != 200 || string(r.body) != string(b2data) {
		t.Fatalf("restored stream's data: %d, %d bytes", r.status, len(r.body))
	}

	// The rest of the (new) pack deleted and aged: the pack goes whole.
	admin.do("DELETE", fmt.Sprintf("/streams/%d", s3.ID), "").want(t, "delete s3", 200, nil)
	pgAge(t, s.Cfg, s2.ID, s3.ID)
	// Its file goes first, then its rows.
	apptest.WaitFor(t, "the pack and its rows purged", func() bool {
		return !pgExists(t, pack) && pgGone(t, s, s2.ID) && pgGone(t, s, s3.ID)
	})
	// Live streams untouched.
	for _, x := range []struct {
		id   int64
		data []byte
	}{{b2.ID, b2data}, {b3.ID, b3data}} {
		if r := admin.do("GET", fmt.Sprintf("/streams/%d/data", x.id), ""); r.status != 200 || string(r.body) != string(x.data) {
			t.Fatalf("live stream %d: %d, %d bytes", x.id, r.status, len(r.body))
		}
	}
	if now := pgStoreBytes(t, s); now >= full-int64(len(b2data)/2) {
		t.Errorf("store holds %d bytes after the purge, %d before", now, full)
	}
	// Counted and logged once the run's rows are gone.
	waitMetric(t, s, "weir_store_purged_streams_total", 4)
	apptest.WaitFor(t, "a log line per run that removed something", func() bool {
		return strings.Count(s.Logs.String(), "removed streams deleted longer than store.deletePurgeAge for good") == 2
	})
}

// TestPurgeDeletedStreamsOff: with store.deletePurgeAge 0 deleted streams
// are kept for ever; set again, the next start removes them.
func TestPurgeDeletedStreamsOff(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) {
		pgConfig(c)
		c.Store.DeletePurgeAge = 0
	})
	admin := user(t, s, "pgadmin", []string{access.Administrator}, nil)
	b := streamByReceipt(t, s, post(t, s, pgBig(9), "Feed", testFeed).ok(t))
	small := streamByReceipt(t, s, post(t, s, []byte("small\n"), "Feed", testFeed).ok(t))
	for _, x := range []meta.Stream{b, small} {
		admin.do("DELETE", fmt.Sprintf("/streams/%d", x.ID), "").want(t, "delete", 200, nil)
	}
	pgAge(t, s.Cfg, b.ID, small.ID)
	// Long enough for many runs, had the job been on.
	time.Sleep(300 * time.Millisecond)
	if pgGone(t, s, b.ID) || pgGone(t, s, small.ID) || !pgExists(t, s.App.Store().Path(b)) || !pgExists(t, s.App.Store().Path(small)) {
		t.Fatal("a deleted stream was purged with store.deletePurgeAge 0")
	}
	if !strings.Contains(s.Logs.String(), "deleted streams are kept for ever") {
		t.Error("no log line says deleted streams are kept")
	}
	if m, c := pgRestore(t, admin, b.ID); m != 1 || c != 1 {
		t.Fatalf("restore: matched %d changed %d", m, c)
	}
	admin.do("DELETE", fmt.Sprintf("/streams/%d", b.ID), "").want(t, "delete again", 200, nil)
	pgAge(t, s.Cfg, b.ID)

	cfg := s.Cfg
	cfg.Store.DeletePurgeAge = config.Duration(7 * 24 * time.Hour)
	s.Stop()
	s = apptest.StartConfig(t, cfg)
	apptest.WaitFor(t, "both purged once on", func() bool { return pgGone(t, s, b.ID) && pgGone(t, s, small.ID) })
	if pgExists(t, s.App.Store().Path(b)) || pgExists(t, s.App.Store().Path(small)) {
		t.Fatal("files of purged streams are still there")
	}
}

// TestPurgeDeletedStreamsNodes: on PostgreSQL shared by two nodes (and
// their data directory), a node purges only the streams it wrote;
// the other node's stay until that node purges them.
func TestPurgeDeletedStreamsNodes(t *testing.T) {
	t.Parallel()
	a := start(t, func(c *config.Config) {
		pgConfig(c)
		c.Node = "node-a"
	})
	if a.Cfg.DB == "" {
		t.Skip("several nodes share a database only on PostgreSQL (WEIR_TEST_DB=postgres)")
	}
	bcfg := apptest.Config(t)
	pgConfig(&bcfg)
	// Nodes on one database share its data directory (checkDataDir).
	bcfg.Node, bcfg.DB, bcfg.Data = "node-b", a.Cfg.DB, a.Cfg.Data
	bcfg.Store.DeletePurgeAge = 0 // node b's purge off, to see what node a leaves
	b := apptest.StartConfig(t, bcfg)
	admin := user(t, a, "pgadmin", []string{access.Administrator}, nil)
	var ours, theirs []meta.Stream
	for i, s := range []*apptest.Server{a, b, a, b} {
		body := pgBig(uint64(i))
		if i >= 2 {
			body = fmt.Appendf(nil, "small %d\n", i)
		}
		r := post(t, s, body, "Feed", testFeed)
		if r.code != 200 {
			t.Fatalf("post: %d %s", r.code, r.body)
		}
		x := streamByReceipt(t, s, strings.TrimSpace(r.body))
		if s == a {
			ours = append(ours, x)
		} else {
			theirs = append(theirs, x)
		}
	}
	// Node a's API deletes every stream, both nodes'.
	admin.do("POST", "/streams/delete", `{"expression":`+sxTerm("Id", "GREATER_THAN", "0")+`}`).want(t, "delete all", 200, nil)
	var all []int64
	for _, x := range append(append([]meta.Stream{}, ours...), theirs...) {
		all = append(all, x.ID)
	}
	pgAge(t, a.Cfg, all...)
	apptest.WaitFor(t, "node a's streams purged", func() bool { return pgGone(t, a, ours[0].ID) && pgGone(t, a, ours[1].ID) })
	if pgExists(t, a.App.Store().Path(ours[0])) || pgExists(t, a.App.Store().Path(ours[1])) {
		t.Fatal("node a's purged files are still there")
	}
	// Many more of node a's runs: node b's streams stay, files and rows.
	time.Sleep(200 * time.Millisecond)
	for _, x := range theirs {
		if pgGone(t, a, x.ID) || !pgExists(t, b.App.Store().Path(x)) {
			t.Fatalf("node a purged node b's stream %d", x.ID)
		}
	}
	bcfg.Store.DeletePurgeAge = config.Duration(7 * 24 * time.Hour)
	b.Stop()
	b = apptest.StartConfig(t, bcfg)
	apptest.WaitFor(t, "node b's streams purged by node b", func() bool { return pgGone(t, b, theirs[0].ID) && pgGone(t, b, theirs[1].ID) })
	for _, x := range theirs {
		if pgExists(t, b.App.Store().Path(x)) {
			t.Fatalf("node b's purged stream %d: file still there", x.ID)
		}
	}
}

// TestPurgeCompactsPacks: a packed stream deleted longer than
// store.deletePurgeAge goes even though its pack holds live streams and
// recently deleted ones: the pack is rewritten without it (once closed:
// here by a restart). The purged stream is gone (404, nothing to
// restore), its bytes with the old pack; the others read back byte for
// byte from the new pack, the recently deleted one once restored.
func TestPurgeCompactsPacks(t *testing.T) {
	t.Parallel()
	s := start(t, pgConfig)
	data := func(i int) []byte { return fmt.Appendf(nil, "compact %d %s\n", i, strings.Repeat("x", 100*i)) }
	var ss []meta.Stream
	for i := range 3 {
		ss = append(ss, streamByReceipt(t, s, post(t, s, data(i), "Feed", testFeed).ok(t)))
	}
	oldPack := s.App.Store().Path(ss[0])
	for _, x := range ss[1:] {
		if x.Pack == "" || x.Pack != ss[0].Pack {
			t.Fatalf("small streams not in one pack: %q %q", ss[0].Pack, x.Pack)
		}
	}
	// The restart closes the open pack (as a compaction of it would).
	cfg := s.Cfg
	s.Stop()
	s = apptest.StartConfig(t, cfg)
	admin := user(t, s, "pgadmin", []string{access.Administrator}, nil)
	before := pgStoreBytes(t, s)
	admin.do("POST", "/streams/delete", `{"expression":`+sxOp("OR", sxTerm("Id", "EQUALS", fmt.Sprint(ss[0].ID)),
		sxTerm("Id", "EQUALS", fmt.Sprint(ss[1].ID)))+`}`).want(t, "delete", 200, nil)
	pgAge(t, s.Cfg, ss[0].ID)
	// The rows go in one transaction (step 4 of a compaction), the old
	// pack only after it (step 5): the test waits for both.
	apptest.WaitFor(t, "the aged packed stream purged and its old pack removed", func() bool {
		return pgGone(t, s, ss[0].ID) && !pgExists(t, oldPack)
	})
	admin.do("GET", fmt.Sprintf("/streams/%d", ss[0].ID), "").want(t, "get purged", 404, nil)
	admin.do("GET", fmt.Sprintf("/streams/%d/data", ss[0].ID), "").want(t, "data of purged", 404, nil)
	if m, c := pgRestore(t, admin, ss[0].ID); m != 0 || c != 0 {
		t.Fatalf("restore of a purged stream: matched %d changed %d", m, c)
	}
	if m, c := pgRestore(t, admin, ss[1].ID); m != 1 || c != 1 {
		t.Fatalf("restore of a recently deleted stream: matched %d changed %d", m, c)
	}
	for _, i := range []int{1, 2} {
		if r := admin.do("GET", fmt.Sprintf("/streams/%d/data", ss[i].ID), ""); r.status != 200 || string(r.body) != string(data(i)) {
			t.Fatalf("stream %d after the compaction: %d, %q", ss[i].ID, r.status, r.body)
		}
		row, err := s.App.Repo().GetStream(context.Background(), ss[i].ID)
		if err != nil || row.Pack == ss[i].Pack {
			t.Fatalf("stream %d still in the old pack: %+v, %v", ss[i].ID, row, err)
		}
	}
	if now := pgStoreBytes(t, s); now >= before {
		t.Errorf("store holds %d bytes after the compaction, %d before", now, before)
	}
	waitMetric(t, s, "weir_store_compacted_packs_total", 1)
	waitMetric(t, s, "weir_store_purged_streams_total", 1)
	// The run's log line comes once the whole purge has returned.
	apptest.WaitFor(t, "a log line counting the compacted pack", func() bool {
		return strings.Contains(s.Logs.String(), `"compactedPacks":1`)
	})
}
