package app_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// flipAt flips one bit of the file at off.
func flipAt(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x08
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestAPIUnreadableStreams: a stream whose file is damaged (a bit flipped
// in its trailer, in a pack; a file cut short), missing (removed) or may
// not be read (permissions) is answered by every reader of the REST API
// (data, text and hex views, zip, an export) with an error that names the
// stream and says why in a few words, not a bare "internal error", and
// never a server path. The stream's metadata still shows, and a stream
// next to the damaged one in its pack reads as before.
func TestAPIUnreadableStreams(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-ROT", "", "")
	post(t, s, []byte("alpha packed\n"), "Feed", "FEED-ROT").ok(t)
	post(t, s, []byte("beta packed\n"), "Feed", "FEED-ROT").ok(t)
	rng := rand.New(rand.NewPCG(7, 9))
	big := func() []byte { // incompressible, above store.packMaxSize: a file of its own
		b := make([]byte, 600<<10)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for range 3 {
		post(t, s, big(), "Feed", "FEED-ROT").ok(t)
	}
	ss := s.Streams()
	if len(ss) != 5 || ss[0].Pack == "" || ss[1].Pack != ss[0].Pack || ss[2].Pack != "" || ss[3].Pack != "" || ss[4].Pack != "" {
		t.Fatalf("streams %+v: want two in one pack, then three files of their own", ss)
	}
	packed, neighbour, missing, short, noperm := ss[0], ss[1], ss[2], ss[3], ss[4]
	st := s.App.Store()
	// The last byte of the packed stream's trailer: its checksum.
	flipAt(t, st.Path(packed), packed.PackOffset+packed.FileSize-9)
	if err := os.Remove(st.Path(missing)); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(st.Path(short), 300<<10); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		st  meta.Stream
		why string
	}{{packed, "its stored data is damaged"}, {missing, "its stored file is missing"}, {short, "its stored data is damaged"}}
	if os.Geteuid() != 0 {
		if err := os.Chmod(st.Path(noperm), 0); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			st  meta.Stream
			why string
		}{noperm, "its stored file may not be read"})
	} else {
		t.Log("running as root, which reads a file whatever its mode: the permissions case is skipped")
	}

	viewer := user(t, s, "rotviewer", []string{access.DataView, access.DataExport}, map[string]access.Level{"FEED-ROT": access.View})
	for _, c := range cases {
		id := c.st.ID
		for _, path := range []string{"/data", "/data?part=1&offset=10", "/text", "/text?mode=hex", "/zip"} {
			r := viewer.do("GET", fmt.Sprintf("/streams/%d%s", id, path), "")
			body := string(r.body)
			if r.status != 500 || !strings.Contains(body, fmt.Sprintf("stream %d cannot be read: %s", id, c.why)) {
				t.Errorf("GET /streams/%d%s: %d %s; want 500 naming the stream and %q", id, path, r.status, body, c.why)
			}
			if strings.Contains(body, s.Cfg.Data) || strings.Contains(body, ".wpk") || strings.Contains(body, ".wst") {
				t.Errorf("GET /streams/%d%s names a server path: %s", id, path, body)
			}
		}
		viewer.do("GET", fmt.Sprintf("/streams/%d", id), "").want(t, "metadata of an unreadable stream", 200, nil)
		loc := accepted(t, viewer.do("POST", "/exports", fmt.Sprintf(`{"ids":[%d]}`, id)), "export")
		op := poll(t, viewer, loc)
		if want := fmt.Sprintf("stream %d: %s", id, c.why); op.State != "FAILED" || !strings.Contains(op.Error, want) {
			t.Errorf("export of stream %d: %s %q; want FAILED with %q", id, op.State, op.Error, want)
		}
	}
	if got := string(s.Read(neighbour.ID, 0, 0)); got != "beta packed\n" {
		t.Errorf("the damaged stream's neighbour in its pack reads %q", got)
	}
}

// TestProxyDamagedStreamSetAside: a proxy's stream whose stored data is
// damaged (a bit flipped in its pack) or gone (its own file removed) is
// not forwarded, nor does it hold its aggregate's other streams back: it
// is set aside, alone in an aggregate of its own, in the failure area of
// each destination with an error naming it, and the rest of its aggregate
// reaches both destinations (HTTP and file) at once, byte for byte. A
// replay of a set-aside aggregate fails again, back to the failure area.
// The proxy keeps the damaged streams (for an operator to restore).
func TestProxyDamagedStreamSetAside(t *testing.T) {
	t.Parallel()
	main := start(t, nil)
	dir := t.TempDir()
	px := pxProxy(t, "proxy-damage", func(c *config.Proxy) {
		c.ForwardFileDestinations = []config.FileDestination{pxFileDest("files", dir, "${feed}")}
		c.Aggregator.MaxItemsPerAggregate = 5
		c.Aggregator.MaxUncompressedByteSize = 64 << 20
		c.Aggregator.AggregationFrequency = config.Duration(time.Hour)
	}, main.URL+"/datafeed")
	dest := pxDestName(t, px, 0)
	rng := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, 600<<10) // a file of its own
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	bodies := []string{"fine 0\n", "rotten 1\n", string(big), "fine 3\n"}
	for _, b := range bodies {
		pxPost(t, px, testFeed, b)
	}
	ss := px.Streams()
	if len(ss) != 4 || ss[1].Pack == "" || ss[2].Pack != "" {
		t.Fatalf("proxy streams %+v: want the second packed, the third in a file of its own", ss)
	}
	rotten, gone := ss[1], ss[2]
	flipAt(t, px.App.Store().Path(rotten), rotten.PackOffset+24+28+2)
	if err := os.Remove(px.App.Store().Path(gone)); err != nil {
		t.Fatal(err)
	}
	pxPost(t, px, testFeed, "fine 4\n") // the fifth item closes the aggregate

	pxWaitFeedParts(t, main, testFeed, 3)
	apptest.WaitFor(t, "three parts in the file destination", func() bool {
		return pxCountFileParts(pxFileItems(t, dir)) >= 3
	})
	var failed []meta.Forward
	apptest.WaitFor(t, "the damaged streams in both failure areas, nothing else left", func() bool {
		all := pxForwards(t, px, meta.ForwardFilter{})
		failed = pxForwards(t, px, meta.ForwardFilter{State: meta.ForwardFailed})
		return len(failed) == 4 && len(all) == 4
	})
	setAside := map[int64]bool{}
	for _, f := range failed {
		streams, err := px.App.Repo().AggregateStreams(context.Background(), f.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(streams) != 1 || f.Items != 1 || f.Attempts != 1 {
			t.Fatalf("failed forward %+v holds %d streams; want one damaged stream, one attempt", f, len(streams))
		}
		id := streams[0].ID
		want := map[int64]string{rotten.ID: "its stored data is damaged", gone.ID: "its stored file is missing"}[id]
		if want == "" || !strings.Contains(f.Error, fmt.Sprintf("stream %d cannot be sent: %s", id, want)) || !strings.Contains(f.ErrorLog, "set aside") {
			t.Errorf("failed forward for %s: stream %d, error %q, log %q", f.Destination, id, f.Error, f.ErrorLog)
		}
		setAside[id] = true
	}
	if len(setAside) != 2 {
		t.Errorf("set aside: %v, want streams %d and %d", setAside, rotten.ID, gone.ID)
	}
	var got []string
	for _, p := range pxFeedParts(t, main, testFeed) {
		got = append(got, string(p.data))
	}
	slices.Sort(got)
	if want := []string{"fine 0\n", "fine 3\n", "fine 4\n"}; !slices.Equal(got, want) {
		t.Errorf("the main service has %q, want %q", got, want)
	}
	if n := pxCountFileParts(pxFileItems(t, dir)); n != 3 {
		t.Errorf("the file destination has %d parts, want 3", n)
	}
	kept := pxKept(t, px)
	if len(kept) != 2 || !setAside[kept[0].ID] || !setAside[kept[1].ID] {
		t.Errorf("the proxy keeps %+v, want the two damaged streams", kept)
	}

	// A replay cannot help: back to the failure area after one attempt.
	if n, err := px.App.Repo().ReplayForwards(context.Background(), dest, nil, time.Now().UnixMilli()); err != nil || n != 2 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	apptest.WaitFor(t, "the replayed aggregates back in the failure area", func() bool {
		fs := pxForwards(t, px, meta.ForwardFilter{Destination: dest, State: meta.ForwardFailed})
		return len(fs) == 2 && fs[0].Attempts == 1 && fs[1].Attempts == 1 && fs[0].LastMs > failed[0].LastMs
	})
	if n := len(pxFeedParts(t, main, testFeed)); n != 3 {
		t.Errorf("the main service has %d parts after the replay, want 3", n)
	}
}

// TestMissingFilesAtStart: a pack and a stream file removed while the
// server was stopped (an operator's mistake, a backup restored without
// them) do not stop it starting; their streams answer 500 "missing", the
// others read as before and new posts are stored. The purge of deleted
// streams whose file is gone removes their rows; a pack that is gone
// cannot be compacted (the run says so, naming it, and changes nothing),
// and once all its streams are deleted it is purged whole.
func TestMissingFilesAtStart(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	small := func(i int) meta.Stream {
		return streamByReceipt(t, s, post(t, s, fmt.Appendf(nil, "small %d\n", i), "Feed", testFeed).ok(t))
	}
	s1, s2, s3 := small(1), small(2), small(3)
	rng := rand.New(rand.NewPCG(5, 6))
	bigs := make([][]byte, 2)
	var b []meta.Stream
	for i := range bigs {
		bigs[i] = make([]byte, 600<<10)
		for j := range bigs[i] {
			bigs[i][j] = byte(rng.Uint32())
		}
		b = append(b, streamByReceipt(t, s, post(t, s, bigs[i], "Feed", testFeed).ok(t)))
	}
	if s1.Pack == "" || s2.Pack != s1.Pack || s3.Pack != s1.Pack || b[0].Pack != "" || b[1].Pack != "" {
		t.Fatalf("streams %+v %+v %+v %+v %+v: want three in one pack, two in files of their own", s1, s2, s3, b[0], b[1])
	}
	packPath, lostPath := s.App.Store().Path(s1), s.App.Store().Path(b[0])
	s.Stop()
	for _, p := range []string{packPath, lostPath} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	s = s.Restart()
	admin := user(t, s, "rotadmin", []string{access.Administrator}, nil)
	for _, id := range []int64{s1.ID, s3.ID, b[0].ID} {
		r := admin.do("GET", fmt.Sprintf("/streams/%d/data", id), "")
		if want := fmt.Sprintf("stream %d cannot be read: its stored file is missing", id); r.status != 500 || !strings.Contains(string(r.body), want) {
			t.Errorf("stream %d: %d %s; want 500 %q", id, r.status, r.body, want)
		}
	}
	if r := admin.do("GET", fmt.Sprintf("/streams/%d/data", b[1].ID), ""); r.status != 200 || string(r.body) != string(bigs[1]) {
		t.Errorf("the intact stream %d: %d, %d bytes", b[1].ID, r.status, len(r.body))
	}
	id := streamByReceipt(t, s, post(t, s, []byte("after\n"), "Feed", testFeed).ok(t)).ID
	if got := string(s.Read(id, 0, 0)); got != "after\n" {
		t.Errorf("a post after the start reads %q", got)
	}

	ctx := context.Background()
	repo, st := s.App.Repo(), s.App.Store()
	for _, x := range []meta.Stream{s1, s2, b[0]} {
		if err := repo.SetStreamStatus(ctx, x.ID, meta.Deleted); err != nil {
			t.Fatal(err)
		}
	}
	cut := time.Now().UnixMilli() + 1
	for time.Now().UnixMilli() < cut {
		time.Sleep(time.Millisecond)
	}
	_, err := st.PurgeDeleted(ctx, cut)
	if err == nil || !strings.Contains(err.Error(), s1.Pack) {
		t.Errorf("purge with a pack gone, one of its streams staying: %v; want an error naming the pack", err)
	}
	if _, err := repo.GetStream(ctx, b[0].ID); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("deleted stream %d whose file was gone: %v after the purge, want its row gone", b[0].ID, err)
	}
	if _, err := repo.GetStream(ctx, s3.ID); err != nil {
		t.Errorf("the staying stream of the missing pack: %v", err)
	}
	if err := repo.SetStreamStatus(ctx, s3.ID, meta.Deleted); err != nil {
		t.Fatal(err)
	}
	cut = time.Now().UnixMilli() + 1
	for time.Now().UnixMilli() < cut {
		time.Sleep(time.Millisecond)
	}
	if res, err := st.PurgeDeleted(ctx, cut); err != nil {
		t.Errorf("purge of every stream of the missing pack: %+v, %v", res, err)
	}
	for _, x := range []meta.Stream{s1, s2, s3} {
		if _, err := repo.GetStream(ctx, x.ID); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("stream %d of the missing pack after the purge: %v", x.ID, err)
		}
	}
}
