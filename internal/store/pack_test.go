package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// packMax is the production default: streams up to 256 KiB are packed.
const packMax = 256 << 10

// openPacked opens a store with packing on, on repo (e.repo when nil).
func (e *env) openPacked(t *testing.T, repo store.Repo, node string, limit int) *store.Store {
	t.Helper()
	if repo == nil {
		repo = e.repo
	}
	s, err := store.Open(context.Background(), repo, e.codec, store.Options{
		Root: e.root(), Node: node, BlockSize: 4096, PackMax: limit,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (e *env) root() string { return filepath.Join(e.dir, "store") }

// section is one (channel, part) of a stream and its content.
type section struct {
	ch   streamfile.Channel
	part int
	data []byte
}

// writeSections writes the sections in order; usable off the test goroutine.
func writeSections(w *store.Writer, secs []section) error {
	for _, sec := range secs {
		sw, err := w.Open(sec.ch, sec.part)
		if err != nil {
			return err
		}
		if _, err := sw.Write(sec.data); err != nil {
			return err
		}
		if err := sw.Close(); err != nil {
			return err
		}
	}
	return nil
}

// randomBytes is incompressible content, so that its stream file is at
// least as big as the content.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// smallPost is the content of post i of goroutine g: 1-3 parts, every part
// with Data, part 0 with Meta, some parts with Context; sizes vary.
func smallPost(g, i int) []section {
	r := rand.New(rand.NewPCG(uint64(g), uint64(i)))
	parts := 1 + r.IntN(3)
	var secs []section
	for p := 0; p < parts; p++ {
		data := fmt.Appendf(nil, "g=%d i=%d part=%d\n", g, i, p)
		data = append(data, randomBytes(uint64(g*1000+i*10+p), r.IntN(3000))...)
		secs = append(secs, section{streamfile.Data, p, data})
		if (g+i+p)%2 == 0 {
			secs = append(secs, section{streamfile.Context, p, fmt.Appendf(nil, "context g=%d i=%d part=%d %s", g, i, p, strings.Repeat("c", r.IntN(500)))})
		}
		if p == 0 {
			secs = append(secs, section{streamfile.Meta, p, fmt.Appendf(nil, "Feed:FEED-%d\nPost:%d\n", g, i)})
		}
	}
	return secs
}

// checkStream reads every section of stream id back and compares it with
// secs, and checks that no other section is present.
func checkStream(s *store.Store, id int64, secs []section) error {
	r, err := s.Open(context.Background(), id)
	if err != nil {
		return err
	}
	defer r.Close()
	parts := 0
	present := map[[2]int]bool{}
	for _, sec := range secs {
		parts = max(parts, sec.part+1)
		present[[2]int{int(sec.ch), sec.part}] = true
		sr, err := r.Section(sec.ch, sec.part)
		if err != nil {
			return fmt.Errorf("stream %d %s part %d: %w", id, sec.ch, sec.part, err)
		}
		b, err := io.ReadAll(sr)
		if err != nil {
			return fmt.Errorf("stream %d %s part %d: read: %w", id, sec.ch, sec.part, err)
		}
		if !bytes.Equal(b, sec.data) {
			return fmt.Errorf("stream %d %s part %d: read %d bytes that differ from the %d written", id, sec.ch, sec.part, len(b), len(sec.data))
		}
	}
	if r.Parts() != parts {
		return fmt.Errorf("stream %d: %d parts, want %d", id, r.Parts(), parts)
	}
	for p := 0; p < parts; p++ {
		for _, ch := range []streamfile.Channel{streamfile.Data, streamfile.Context, streamfile.Meta} {
			if r.Has(ch, p) != present[[2]int{int(ch), p}] {
				return fmt.Errorf("stream %d: Has(%s, %d) = %v", id, ch, p, r.Has(ch, p))
			}
		}
	}
	return nil
}

// packSize is the length of a pack file (relative to the store root).
func packSize(t *testing.T, e *env, pack string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(e.root(), pack))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkPackEnd checks that the open pack at path holds nothing past its
// streams' end but the zeros written ahead of the next batch (at most
// 1 MiB more than a batch's end), or, if closed, ends there.
// checkPackLog reads pack rel as a log: post records back to back from
// its start, each row's stream file filling the end of its record, and
// only zeros written ahead past the last. It returns the rows of the post
// records in order.
func checkPackLog(t *testing.T, e *env, node, rel string) []meta.Stream {
	t.Helper()
	recs, end, err := store.ReadPackRecords(e.root(), node, rel)
	if err != nil {
		t.Fatalf("pack %s: %v", rel, err)
	}
	if len(recs) == 0 || recs[0].Start != 0 {
		t.Fatalf("pack %s does not start with a record: %+v", rel, recs)
	}
	var rows []meta.Stream
	for i, r := range recs {
		if i > 0 && r.Start != recs[i-1].End {
			t.Fatalf("pack %s: record %d (%+v) after %+v", rel, i, r, recs[i-1])
		}
		next := r.End
		for j := len(r.Rows) - 1; j >= 0; j-- {
			next -= r.Rows[j].FileSize
			if r.Rows[j].PackOffset != next {
				t.Fatalf("pack %s: record at %d: stream %d at %d, want %d", rel, r.Start, r.Rows[j].ID, r.Rows[j].PackOffset, next)
			}
		}
		rows = append(rows, r.Rows...)
	}
	if err := checkPackEnd(filepath.Join(e.root(), rel), end); err != nil {
		t.Fatal(err)
	}
	return rows
}

// firstStreamAt is where the first stream file of a new pack starts.
func firstStreamAt(t *testing.T, e *env, node, rel string) int64 {
	t.Helper()
	rows := checkPackLog(t, e, node, rel)
	if len(rows) == 0 {
		t.Fatalf("pack %s holds no post", rel)
	}
	return rows[0].PackOffset
}

func checkPackEnd(path string, end int64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if int64(len(b)) < end || int64(len(b)) > end+2<<20 {
		return fmt.Errorf("pack %s is %d bytes, its streams end at %d", path, len(b), end)
	}
	for i, c := range b[end:] {
		if c != 0 {
			return fmt.Errorf("pack %s: byte %d past its streams' end %d is %#x, not a zero written ahead", path, end+int64(i), end, c)
		}
	}
	return nil
}

// packFiles lists the pack files under the store root (relative to it).
func packFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, f := range files(t, root) {
		if strings.HasSuffix(f, ".wpk") {
			out = append(out, f)
		}
	}
	return out
}

func allRows(t *testing.T, e *env) []meta.Stream {
	t.Helper()
	rows, err := e.repo.ListStreams(context.Background(), meta.StreamFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// commitOne writes one stream of secs as its own post and commits it.
func commitOne(t *testing.T, s *store.Store, feed string, secs []section) meta.Stream {
	t.Helper()
	post := s.Begin()
	w, err := post.NewStream(context.Background(), spec(feed))
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSections(w, secs); err != nil {
		t.Fatal(err)
	}
	streams, err := post.Commit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(streams) != 1 || streams[0].ID != w.ID() || streams[0].Status != meta.Unlocked {
		t.Fatalf("committed %+v (writer id %d)", streams, w.ID())
	}
	return streams[0]
}

var packName = regexp.MustCompile(`^packs/\d{4}/\d{2}/\d{2}/N1-\d+\.wpk$`)

// TestPackConcurrentSmallPosts commits many small posts at once: every one
// lands in a pack shared with the other posts of its group commit, and
// reads back exactly.
func TestPackConcurrentSmallPosts(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.openPacked(t, nil, "n1", packMax)
		const goroutines, perG = 64, 10
		var (
			mu        sync.Mutex
			committed = map[int64]meta.Stream{}
			content   = map[int64][]section{}
			wg        sync.WaitGroup
			errs      = make(chan error, goroutines)
			start     = make(chan struct{})
		)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				<-start
				for i := 0; i < perG; i++ {
					secs := smallPost(g, i)
					post := s.Begin()
					w, err := post.NewStream(context.Background(), spec(fmt.Sprintf("FEED-%d", g)))
					if err != nil {
						errs <- err
						return
					}
					if err := writeSections(w, secs); err != nil {
						post.Abort()
						errs <- err
						return
					}
					if w.ID() != 0 {
						errs <- fmt.Errorf("small stream got id %d before its commit: not kept in memory", w.ID())
						post.Abort()
						return
					}
					streams, err := post.Commit(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if len(streams) != 1 || streams[0].ID == 0 || streams[0].ID != w.ID() {
						errs <- fmt.Errorf("commit returned %+v, writer id %d", streams, w.ID())
						return
					}
					mu.Lock()
					committed[streams[0].ID] = streams[0]
					content[streams[0].ID] = secs
					mu.Unlock()
				}
			}(g)
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		const posts = goroutines * perG
		if len(committed) != posts {
			t.Fatalf("%d distinct ids for %d posts", len(committed), posts)
		}

		rows := allRows(t, e)
		if len(rows) != posts {
			t.Fatalf("%d rows for %d posts", len(rows), posts)
		}
		byPack := map[string][]meta.Stream{}
		for _, r := range rows {
			c, ok := committed[r.ID]
			switch {
			case !ok:
				t.Fatalf("row %d was not returned by any commit", r.ID)
			case r.Status != meta.Unlocked:
				t.Fatalf("row %d is %s", r.ID, r.Status)
			case r.Pack == "" || !packName.MatchString(filepath.ToSlash(r.Pack)):
				t.Fatalf("row %d: pack %q", r.ID, r.Pack)
			case r.Pack != c.Pack || r.PackOffset != c.PackOffset || r.FileSize != c.FileSize || r.RawSize != c.RawSize || r.Parts != c.Parts:
				t.Fatalf("row %+v differs from the committed stream %+v", r, c)
			case r.FileSize <= 0 || r.FileSize > packMax:
				t.Fatalf("row %d: file size %d", r.ID, r.FileSize)
			}
			var raw int64
			parts := 0
			for _, sec := range content[r.ID] {
				parts = max(parts, sec.part+1)
				if sec.ch == streamfile.Data {
					raw += int64(len(sec.data))
				}
			}
			if r.RawSize != raw || r.Parts != parts {
				t.Fatalf("row %d: raw size %d parts %d, want %d and %d", r.ID, r.RawSize, r.Parts, raw, parts)
			}
			byPack[r.Pack] = append(byPack[r.Pack], r)
		}
		// Each pack is a log: a header, then a record per post, back to
		// back, and nothing else; its records name exactly the rows the
		// database has, at the same places.
		for pack, in := range byPack {
			sort.Slice(in, func(i, j int) bool { return in[i].PackOffset < in[j].PackOffset })
			logged := checkPackLog(t, e, "n1", pack)
			if len(logged) != len(in) {
				t.Fatalf("pack %s: %d rows in its records, %d in the database", pack, len(logged), len(in))
			}
			for i, r := range in {
				l := logged[i]
				if l.ID != r.ID || l.PackOffset != r.PackOffset || l.FileSize != r.FileSize || l.Feed != r.Feed ||
					l.ReceiptID != r.ReceiptID || l.RawSize != r.RawSize || l.Parts != r.Parts {
					t.Fatalf("pack %s: record row %+v, database row %+v", pack, l, r)
				}
			}
		}
		// Nothing but the packs is on disk: no stream files, no lock files,
		// no pack that no row names.
		onDisk := files(t, e.root())
		var want []string
		for pack := range byPack {
			want = append(want, filepath.ToSlash(pack))
		}
		slices.Sort(onDisk)
		slices.Sort(want)
		if !slices.Equal(onDisk, want) {
			t.Fatalf("files on disk %v, packs named by rows %v", onDisk, want)
		}
		if len(byPack) >= posts {
			t.Fatalf("%d packs for %d posts: no group commit shared a pack", len(byPack), posts)
		}
		t.Logf("%d posts in %d packs", posts, len(byPack))

		for id, secs := range content {
			if err := checkStream(s, id, secs); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestPackSpill covers streams that outgrow PackMax while written.
func TestPackSpill(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		const limit = 8 << 10
		s := e.openPacked(t, nil, "n1", limit)
		ctx := context.Background()
		big := []section{
			{streamfile.Data, 0, randomBytes(1, 3*limit)},
			{streamfile.Meta, 0, []byte("Size:big\n")},
			{streamfile.Data, 1, randomBytes(2, limit/2)},
			{streamfile.Context, 1, []byte("second part context")},
		}
		small := []section{{streamfile.Data, 0, []byte("small data")}, {streamfile.Meta, 0, []byte("Size:small\n")}}

		t.Run("alone", func(t *testing.T) {
			post := s.Begin()
			w, err := post.NewStream(ctx, spec("SPILL"))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(w, big); err != nil {
				t.Fatal(err)
			}
			if w.ID() == 0 {
				t.Fatal("a stream past PackMax has no row yet")
			}
			// While written it is LOCKED, with its own lock file.
			row, err := e.repo.GetStream(ctx, w.ID())
			if err != nil || row.Status != meta.Locked || row.Pack != "" {
				t.Fatalf("spilled row before commit %+v %v", row, err)
			}
			if _, err := os.Stat(s.Path(row) + ".lock"); err != nil {
				t.Fatalf("spilled stream's lock file: %v", err)
			}
			streams, err := post.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st := streams[0]
			if st.ID != w.ID() || st.Pack != "" || st.PackOffset != 0 || st.FileSize <= limit {
				t.Fatalf("spilled stream %+v", st)
			}
			row, err = e.repo.GetStream(ctx, st.ID)
			if err != nil || row.Status != meta.Unlocked || row.Pack != "" || row.FileSize != st.FileSize {
				t.Fatalf("spilled row %+v %v", row, err)
			}
			p := s.Path(row)
			fi, err := os.Stat(p)
			if err != nil || fi.Size() != st.FileSize || !strings.HasSuffix(p, ".wst") || !strings.Contains(p, "SPILL=") {
				t.Fatalf("spilled stream's file %s: %v %v", p, fi, err)
			}
			if _, err := os.Stat(p + ".lock"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("lock file left: %v", err)
			}
			if err := checkStream(s, st.ID, big); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("small then big", func(t *testing.T) {
			post := s.Begin()
			ws, err := post.NewStream(ctx, spec("SMALL-FIRST"))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(ws, small); err != nil {
				t.Fatal(err)
			}
			wb, err := post.NewStream(ctx, spec("BIG-SECOND"))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(wb, big); err != nil {
				t.Fatal(err)
			}
			streams, err := post.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sm, bg := streams[0], streams[1]
			if sm.ID == 0 || sm.ID >= bg.ID || sm.ID != ws.ID() || bg.ID != wb.ID() {
				t.Fatalf("ids not in creation order: small %d, big %d", sm.ID, bg.ID)
			}
			// The earlier stream moved to a file of its own before the big one.
			if sm.Pack != "" || bg.Pack != "" {
				t.Fatalf("packs: small %q, big %q", sm.Pack, bg.Pack)
			}
			for _, st := range streams {
				row, err := e.repo.GetStream(ctx, st.ID)
				if err != nil || row.Status != meta.Unlocked || row.Pack != st.Pack || row.FileSize != st.FileSize {
					t.Fatalf("row %+v %v, committed %+v", row, err, st)
				}
			}
			if err := checkStream(s, sm.ID, small); err != nil {
				t.Fatal(err)
			}
			if err := checkStream(s, bg.ID, big); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("big then small", func(t *testing.T) {
			post := s.Begin()
			wb, err := post.NewStream(ctx, spec("BIG-FIRST"))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(wb, big); err != nil {
				t.Fatal(err)
			}
			ws, err := post.NewStream(ctx, spec("SMALL-SECOND"))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(ws, small); err != nil {
				t.Fatal(err)
			}
			streams, err := post.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			bg, sm := streams[0], streams[1]
			if bg.ID == 0 || bg.ID >= sm.ID || sm.ID != ws.ID() || bg.ID != wb.ID() {
				t.Fatalf("ids not in creation order: big %d, small %d", bg.ID, sm.ID)
			}
			if bg.Pack != "" || sm.Pack == "" || sm.PackOffset != firstStreamAt(t, e, "N1", sm.Pack) {
				t.Fatalf("packs: big %q, small %q at %d", bg.Pack, sm.Pack, sm.PackOffset)
			}
			if rows := checkPackLog(t, e, "N1", sm.Pack); len(rows) != 1 || rows[0].ID != sm.ID {
				t.Fatalf("pack %s holds %+v, want the small stream only", sm.Pack, rows)
			}
			if err := checkStream(s, sm.ID, small); err != nil {
				t.Fatal(err)
			}
			if err := checkStream(s, bg.ID, big); err != nil {
				t.Fatal(err)
			}
		})

		// Nothing is left LOCKED or under a temporary name.
		for _, r := range allRows(t, e) {
			if r.Status != meta.Unlocked {
				t.Errorf("row %d (%s) is %s", r.ID, r.Feed, r.Status)
			}
		}
		for _, f := range files(t, e.root()) {
			if strings.HasSuffix(f, ".lock") {
				t.Errorf("lock file left: %s", f)
			}
		}
	})
}

// TestPackSpillAtClose: a stream whose sections fit in PackMax but whose
// index and trailer (written when the post commits) do not, spills in
// Commit. Alone that is fine; when an earlier stream of the same post was
// already handed to the pack, that stream must not end up both packed and
// spilled.
func TestPackSpillAtClose(t *testing.T) {
	small := []section{{streamfile.Data, 0, []byte("tiny")}}
	big := []section{{streamfile.Data, 0, randomBytes(7, 6000)}, {streamfile.Meta, 0, []byte("k:v\n")}}
	engines(t, func(t *testing.T, e *env) {
		// Measure the big stream's file before and after its index.
		sf, err := streamfile.NewWriter(io.Discard, e.codec, streamfile.WriterOptions{BlockSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range big {
			sw, _ := sf.Open(sec.ch, sec.part)
			sw.Write(sec.data)
			sw.Close()
		}
		sections := sf.Size()
		if err := sf.Close(); err != nil {
			t.Fatal(err)
		}
		if sf.Size() <= sections {
			t.Fatal("no index written")
		}
		// Sections fit exactly; the index does not.
		s := e.openPacked(t, nil, "n1", int(sections))
		ctx := context.Background()

		t.Run("alone", func(t *testing.T) {
			post := s.Begin()
			w, _ := post.NewStream(ctx, spec("CLOSE-ALONE"))
			if err := writeSections(w, big); err != nil {
				t.Fatal(err)
			}
			if w.ID() != 0 {
				t.Fatalf("spilled before its index: id %d", w.ID())
			}
			streams, err := post.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if streams[0].Pack != "" || streams[0].FileSize != sf.Size() {
				t.Fatalf("stream %+v, want its own file of %d bytes", streams[0], sf.Size())
			}
			if err := checkStream(s, streams[0].ID, big); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("after a small stream", func(t *testing.T) {
			post := s.Begin()
			ws, _ := post.NewStream(ctx, spec("CLOSE-SMALL"))
			wb, _ := post.NewStream(ctx, spec("CLOSE-BIG"))
			if err := writeSections(ws, small); err != nil {
				t.Fatal(err)
			}
			if err := writeSections(wb, big); err != nil {
				t.Fatal(err)
			}
			streams, err := post.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sm, bg := streams[0], streams[1]
			if sm.ID >= bg.ID {
				t.Errorf("ids not in creation order: small %d (pack %q), big %d", sm.ID, sm.Pack, bg.ID)
			}
			var feeds []string
			for _, r := range allRows(t, e) {
				if strings.HasPrefix(r.Feed, "CLOSE-") && r.Feed != "CLOSE-ALONE" {
					feeds = append(feeds, fmt.Sprintf("%d %s %s pack=%q", r.ID, r.Feed, r.Status, r.Pack))
				}
			}
			if len(feeds) != 2 {
				t.Errorf("rows for a post of 2 streams: %v", feeds)
			}
			for _, f := range files(t, e.root()) {
				if strings.HasSuffix(f, ".lock") {
					t.Errorf("lock file left after a successful commit: %s", f)
				}
			}
			if err := checkStream(s, sm.ID, small); err != nil {
				t.Error(err)
			}
			if err := checkStream(s, bg.ID, big); err != nil {
				t.Error(err)
			}
		})
	})
}

// TestPackAbort: aborting a post leaves nothing behind, whether its
// streams are still in memory or have spilled.
func TestPackAbort(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		const limit = 8 << 10
		s := e.openPacked(t, nil, "n1", limit)
		ctx := context.Background()
		nothingLeft := func(t *testing.T) {
			t.Helper()
			if got := files(t, e.root()); len(got) != 0 {
				t.Fatalf("files left: %v", got)
			}
			if rows := allRows(t, e); len(rows) != 0 {
				t.Fatalf("rows left: %+v", rows)
			}
		}

		t.Run("in memory", func(t *testing.T) {
			post := s.Begin()
			for _, feed := range []string{"MEM-A", "MEM-B"} {
				w, err := post.NewStream(ctx, spec(feed))
				if err != nil {
					t.Fatal(err)
				}
				if err := writeSections(w, []section{{streamfile.Data, 0, []byte("in memory " + feed)}}); err != nil {
					t.Fatal(err)
				}
				if w.ID() != 0 {
					t.Fatalf("in-memory stream has id %d", w.ID())
				}
			}
			post.Abort()
			post.Abort()
			nothingLeft(t)
			if streams, err := post.Commit(ctx); err != nil || len(streams) != 0 {
				t.Fatalf("commit after abort: %+v %v", streams, err)
			}
			nothingLeft(t)
		})

		t.Run("after spill", func(t *testing.T) {
			post := s.Begin()
			mem, _ := post.NewStream(ctx, spec("SPILL-MEM"))
			w, err := post.NewStream(ctx, spec("SPILL-BIG"))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(w, []section{{streamfile.Data, 0, randomBytes(3, 2*limit)}}); err != nil {
				t.Fatal(err)
			}
			// A later stream of the post, still in memory.
			late, _ := post.NewStream(ctx, spec("SPILL-LATE"))
			if err := writeSections(late, []section{{streamfile.Data, 0, []byte("late")}}); err != nil {
				t.Fatal(err)
			}
			if mem.ID() == 0 || w.ID() <= mem.ID() || late.ID() != 0 {
				t.Fatalf("ids: earlier %d, spilled %d, later %d", mem.ID(), w.ID(), late.ID())
			}
			locked, err := e.repo.ListStreams(ctx, meta.StreamFilter{Status: meta.Locked})
			if err != nil || len(locked) != 2 {
				t.Fatalf("locked rows while written: %+v %v", locked, err)
			}
			var locks []string
			for _, f := range files(t, e.root()) {
				if strings.HasSuffix(f, ".lock") {
					locks = append(locks, f)
				}
			}
			if len(locks) != 2 {
				t.Fatalf("lock files while written: %v", locks)
			}
			post.Abort()
			nothingLeft(t)
		})
	})
}

// failPackedRepo makes Apply fail for batches with packed rows while fail
// is set, as a crash or a database error between the pack write and the
// transaction would.
type failPackedRepo struct {
	*meta.Repo
	root     string
	fail     atomic.Bool
	failures atomic.Int64
	sawPack  atomic.Int64 // failed batches whose pack was on disk at the time
}

func (r *failPackedRepo) Apply(ctx context.Context, b *meta.Batch) error {
	if r.fail.Load() && len(b.Packed) > 0 {
		r.failures.Add(1)
		if _, err := os.Stat(filepath.Join(r.root, b.Packed[0].Pack)); err == nil {
			r.sawPack.Add(1)
		}
		return errors.New("injected failure")
	}
	return r.Repo.Apply(ctx, b)
}

// TestPackFailedTransaction: when the transaction after a pack write fails,
// the pack is removed at once and the post fails whole.
func TestPackFailedTransaction(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		const limit = 8 << 10
		repo := &failPackedRepo{Repo: e.repo, root: e.root()}
		s := e.openPacked(t, repo, "n1", limit)
		ctx := context.Background()
		repo.fail.Store(true)

		post := s.Begin()
		spilled, _ := post.NewStream(ctx, spec("FAIL-BIG"))
		if err := writeSections(spilled, []section{{streamfile.Data, 0, randomBytes(4, 2*limit)}}); err != nil {
			t.Fatal(err)
		}
		packed, _ := post.NewStream(ctx, spec("FAIL-SMALL"))
		if err := writeSections(packed, []section{{streamfile.Data, 0, []byte("never stored")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := post.Commit(ctx); err == nil {
			t.Fatal("commit succeeded with a failing transaction")
		}
		if repo.failures.Load() == 0 || repo.sawPack.Load() != repo.failures.Load() {
			t.Fatalf("%d failed transactions, %d with their pack on disk", repo.failures.Load(), repo.sawPack.Load())
		}
		if got := files(t, e.root()); len(got) != 0 {
			t.Fatalf("files left after a failed commit: %v", got)
		}
		if rows := allRows(t, e); len(rows) != 0 {
			t.Fatalf("rows left after a failed commit: %+v", rows)
		}

		// Concurrent posts failing in one batch: every pack goes.
		var wg sync.WaitGroup
		var ok atomic.Int64
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				post := s.Begin()
				w, err := post.NewStream(ctx, spec(fmt.Sprintf("FAIL-%d", i)))
				if err != nil {
					return
				}
				if writeSections(w, []section{{streamfile.Data, 0, []byte("x")}}) != nil {
					post.Abort()
					return
				}
				if _, err := post.Commit(ctx); err == nil {
					ok.Add(1)
				}
			}(i)
		}
		wg.Wait()
		if ok.Load() != 0 {
			t.Fatalf("%d commits succeeded with a failing transaction", ok.Load())
		}
		if got := files(t, e.root()); len(got) != 0 {
			t.Fatalf("files left after failed commits: %v", got)
		}

		// Once the database answers again, packing works.
		repo.fail.Store(false)
		st := commitOne(t, s, "RECOVERED", []section{{streamfile.Data, 0, []byte("stored")}})
		if got := packFiles(t, e.root()); len(got) != 1 || filepath.FromSlash(got[0]) != st.Pack {
			t.Fatalf("packs %v, stream in %q", got, st.Pack)
		}
		if got := read(t, s, st.ID, streamfile.Data, 0); string(got) != "stored" {
			t.Fatalf("read %q", got)
		}
	})
}

// failFeedRepo makes Apply fail for every batch holding a packed row of a
// feed that starts with "FAIL".
type failFeedRepo struct {
	*meta.Repo
}

func (r failFeedRepo) Apply(ctx context.Context, b *meta.Batch) error {
	for _, row := range b.Packed {
		if strings.HasPrefix(row.Feed, "FAIL") {
			return errors.New("injected failure")
		}
	}
	return r.Repo.Apply(ctx, b)
}

// TestPackFailuresBetweenWrites: stage one writes a batch's bytes while
// stage two ends the flight of the one before; when that one's
// transaction failed, its bytes must not be cut from under the batch
// being written. Failing and succeeding posts interleave from many
// senders: every success reads back exactly, every failure leaves no row.
func TestPackFailuresBetweenWrites(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.openPacked(t, failFeedRepo{e.repo}, "N1", packMax)
		ctx := context.Background()
		const senders, posts = 8, 40
		type stored struct {
			id   int64
			secs []section
		}
		var mu sync.Mutex
		var good []stored
		var wg sync.WaitGroup
		errs := make(chan error, senders*posts)
		for g := 0; g < senders; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < posts; i++ {
					feed := fmt.Sprintf("OK-%d", g)
					if (g+i)%3 == 0 {
						feed = fmt.Sprintf("FAIL-%d", g)
					}
					secs := smallPost(g, i)
					post := s.Begin()
					w, err := post.NewStream(ctx, spec(feed))
					if err != nil {
						errs <- err
						return
					}
					if err := writeSections(w, secs); err != nil {
						errs <- err
						return
					}
					_, err = post.Commit(ctx)
					switch {
					case strings.HasPrefix(feed, "FAIL") && err == nil:
						errs <- fmt.Errorf("post %d/%d of a failing feed committed", g, i)
					case !strings.HasPrefix(feed, "FAIL") && err != nil:
						errs <- fmt.Errorf("post %d/%d: %w", g, i, err)
					case err == nil:
						mu.Lock()
						good = append(good, stored{w.ID(), secs})
						mu.Unlock()
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, st := range good {
			if err := checkStream(s, st.id, st.secs); err != nil {
				t.Error(err)
			}
		}
		rows := allRows(t, e)
		if len(rows) != len(good) {
			t.Errorf("%d rows for %d committed posts", len(rows), len(good))
		}
		for _, row := range rows {
			if strings.HasPrefix(row.Feed, "FAIL") {
				t.Errorf("row of a failed post: %+v", row)
			}
		}
	})
}

// TestPackSegments: batches append to the open pack until it passes the
// segment size, then the next batch starts a new one; a batch whose
// transaction fails is cut off the pack, and the next batch goes where it
// was. Every committed stream reads back.
func TestPackSegments(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		repo := &failPackedRepo{Repo: e.repo, root: e.root()}
		s, err := store.Open(context.Background(), repo, e.codec, store.Options{
			Root: e.root(), Node: "n1", BlockSize: 4096, PackMax: 8 << 10, PackSegment: 6 << 10,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		content := map[int64][]byte{}
		commit := func(feed string, data []byte) meta.Stream {
			t.Helper()
			st := commitOne(t, s, feed, []section{{streamfile.Data, 0, data}})
			content[st.ID] = data
			return st
		}

		a := commit("SEG-A", []byte("first"))
		b := commit("SEG-B", []byte("second"))
		if rows := checkPackLog(t, e, "n1", a.Pack); len(rows) != 2 || rows[0].ID != a.ID || rows[1].ID != b.ID {
			t.Fatalf("two batches: A in %q at %d (%d bytes), B in %q at %d; want B right after A in one pack",
				a.Pack, a.PackOffset, a.FileSize, b.Pack, b.PackOffset)
		}
		end := b.PackOffset + b.FileSize

		// A failed transaction in the middle of a pack: its bytes go.
		repo.fail.Store(true)
		post := s.Begin()
		w, _ := post.NewStream(context.Background(), spec("SEG-FAIL"))
		if err := writeSections(w, []section{{streamfile.Data, 0, []byte("never stored")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := post.Commit(context.Background()); err == nil {
			t.Fatal("commit succeeded with a failing transaction")
		}
		repo.fail.Store(false)
		if got := packSize(t, e, a.Pack); got != end {
			t.Fatalf("pack is %d bytes after a failed batch, want %d (cut back)", got, end)
		}
		c := commit("SEG-C", randomBytes(9, 7<<10)) // takes the pack past its segment size
		if rows := checkPackLog(t, e, "n1", a.Pack); c.Pack != a.Pack || len(rows) != 3 || rows[2].ID != c.ID {
			t.Fatalf("after the failed batch: C in %q at %d, want %q right after %d", c.Pack, c.PackOffset, a.Pack, end)
		}
		d := commit("SEG-D", []byte("next pack"))
		if d.Pack == "" || d.Pack == a.Pack || d.PackOffset != firstStreamAt(t, e, "n1", d.Pack) {
			t.Fatalf("after the segment size: D in %q at %d, want a new pack's first", d.Pack, d.PackOffset)
		}
		// The new pack is listed as the log's second, with where the
		// first ended; the first is forgotten once the mark is past it.
		if lp, err := e.repo.LogPacks(context.Background(), "n1", 0); err != nil || len(lp) != 1 ||
			lp[0].Pack != d.Pack || lp[0].Seq != 2 || lp[0].PrevEnd != packSize(t, e, a.Pack) {
			t.Fatalf("log packs %+v (%v), want %s second, after %d", lp, err, d.Pack, packSize(t, e, a.Pack))
		}
		if got := packFiles(t, e.root()); len(got) != 2 {
			t.Fatalf("packs %v, want 2", got)
		}
		for id, want := range content {
			if got := read(t, s, id, streamfile.Data, 0); !bytes.Equal(got, want) {
				t.Errorf("stream %d reads %d bytes, want %d", id, len(got), len(want))
			}
		}
	})
}

// TestPackOrphansRemovedAtOpen simulates a crash between a pack's write and
// its transaction: at the next start the pack no row names is removed, if
// it is this node's; other nodes' packs and referenced packs stay.
func TestPackOrphansRemovedAtOpen(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.openPacked(t, nil, "n1", packMax)
		kept := commitOne(t, s, "KEPT", []section{{streamfile.Data, 0, []byte("acknowledged")}})
		if kept.Pack == "" {
			t.Fatal("small stream not packed")
		}
		s.Close()

		packBytes, err := os.ReadFile(filepath.Join(e.root(), kept.Pack))
		if err != nil {
			t.Fatal(err)
		}
		today := filepath.Join(e.root(), filepath.Dir(kept.Pack))
		// The day before, as the second newest day directory.
		yesterday := filepath.Join(e.root(), "packs", "2001", "02", "03")
		if err := os.MkdirAll(yesterday, 0o750); err != nil {
			t.Fatal(err)
		}
		orphans := []string{
			filepath.Join(today, "N1-1.wpk"),     // a complete pack that never committed
			filepath.Join(yesterday, "N1-2.wpk"), // same, written before midnight
		}
		others := []string{
			filepath.Join(today, "N2-1.wpk"),          // another node's, maybe in flight
			filepath.Join(today, "N1.wpk"),            // not a pack name of this node
			filepath.Join(today, "N1-3.tmp"),          // not a pack
			filepath.Join(yesterday, "OTHER-9.wpk"),   // another node's
			filepath.Join(e.root(), "packs", "x.wpk"), // not in a day directory
		}
		for _, p := range append(slices.Clone(orphans), others...) {
			if err := os.WriteFile(p, packBytes, 0o640); err != nil {
				t.Fatal(err)
			}
		}

		s2 := e.openPacked(t, nil, "n1", packMax)
		for _, p := range orphans {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("orphan pack %s: %v, want it removed", p, err)
			}
		}
		for _, p := range append(others, filepath.Join(e.root(), kept.Pack)) {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s removed at open: %v", p, err)
			}
		}
		if got := read(t, s2, kept.ID, streamfile.Data, 0); string(got) != "acknowledged" {
			t.Fatalf("kept stream %q", got)
		}
		// The new store's packs do not collide with the old one's.
		next := commitOne(t, s2, "NEXT", []section{{streamfile.Data, 0, []byte("after restart")}})
		if next.Pack == kept.Pack || next.Pack == "" {
			t.Fatalf("new pack %q, old %q", next.Pack, kept.Pack)
		}
		if got := read(t, s2, kept.ID, streamfile.Data, 0); string(got) != "acknowledged" {
			t.Fatalf("kept stream after the next commit %q", got)
		}
	})
}

// TestPackOrphansOfNodeWithLongerName: node "n1" must not take the packs of
// a node whose name starts with "n1-" (e.g. "n1-b", packs "N1-B-<seq>.wpk")
// for its own when both write under one store root: a pack of the other
// node whose transaction has not committed yet looks like an orphan.
func TestPackOrphansOfNodeWithLongerName(t *testing.T) {
	e := newEnv(t, "")
	s := e.openPacked(t, nil, "n1", packMax)
	kept := commitOne(t, s, "KEPT", []section{{streamfile.Data, 0, []byte("acknowledged")}})
	s.Close()
	today := filepath.Join(e.root(), filepath.Dir(kept.Pack))
	other := filepath.Join(today, "N1-B-1.wpk")
	if err := os.WriteFile(other, []byte("in flight"), 0o640); err != nil {
		t.Fatal(err)
	}
	e.openPacked(t, nil, "n1", packMax)
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("node n1 removed node n1-b's pack %s: %v", other, err)
	}
}

// TestPackRemoveDeleted: a pack goes with the last live stream in it; a
// stream with its own file goes at once.
func TestPackRemoveDeleted(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		const limit = 8 << 10
		s := e.openPacked(t, nil, "n1", limit)
		ctx := context.Background()

		// Three streams of one post share the open pack.
		post := s.Begin()
		content := map[string][]section{}
		for i, feed := range []string{"DEL-A", "DEL-B", "DEL-C"} {
			w, err := post.NewStream(ctx, spec(feed))
			if err != nil {
				t.Fatal(err)
			}
			content[feed] = []section{{streamfile.Data, 0, fmt.Appendf(nil, "stream %s %s", feed, strings.Repeat("z", i*100))}}
			if err := writeSections(w, content[feed]); err != nil {
				t.Fatal(err)
			}
		}
		streams, err := post.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pack := streams[0].Pack
		for _, st := range streams {
			if st.Pack == "" || st.Pack != pack {
				t.Fatalf("streams of one post in packs %q and %q", pack, st.Pack)
			}
		}
		packPath := filepath.Join(e.root(), pack)
		// A stream with its own file, and an unrelated packed stream.
		own := commitOne(t, s, "DEL-OWN", []section{{streamfile.Data, 0, randomBytes(5, 2*limit)}})
		if own.Pack != "" {
			t.Fatalf("big stream packed in %q", own.Pack)
		}
		deleted := func(ids ...int64) []meta.Stream {
			t.Helper()
			var out []meta.Stream
			for _, id := range ids {
				if err := e.repo.SetStreamStatus(ctx, id, meta.Deleted); err != nil {
					t.Fatal(err)
				}
				row, err := e.repo.GetStream(ctx, id)
				if err != nil || row.Status != meta.Deleted {
					t.Fatalf("row %+v %v", row, err)
				}
				out = append(out, row)
			}
			return out
		}

		// Two of three deleted: the pack stays for the third.
		ids, err := s.RemoveDeleted(ctx, deleted(streams[0].ID, streams[1].ID))
		if err != nil || len(ids) != 0 {
			t.Fatalf("remove 2 of 3 packed: ids %v, %v", ids, err)
		}
		if _, err := os.Stat(packPath); err != nil {
			t.Fatalf("pack with a live stream removed: %v", err)
		}
		if err := checkStream(s, streams[2].ID, content["DEL-C"]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Open(ctx, streams[0].ID); !errors.Is(err, store.ErrNotReadable) {
			t.Fatalf("open deleted stream: %v", err)
		}

		// The last one: the pack goes and all three rows may be purged.
		ids, err = s.RemoveDeleted(ctx, deleted(streams[2].ID))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		if want := []int64{streams[0].ID, streams[1].ID, streams[2].ID}; !slices.Equal(ids, want) {
			t.Fatalf("purge ids %v, want %v", ids, want)
		}
		if _, err := os.Stat(packPath); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("pack of deleted streams: %v", err)
		}
		// Again (a retry after a crash before the purge): same ids, no error.
		again, err := s.RemoveDeleted(ctx, []meta.Stream{mustRow(t, e, streams[2].ID)})
		slices.Sort(again)
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("retry: %v %v", again, err)
		}

		// That pack was the open one: the next batch starts a new pack.
		other := commitOne(t, s, "DEL-OTHER", []section{{streamfile.Data, 0, []byte("other pack")}})
		if other.Pack == "" || other.Pack == pack {
			t.Fatalf("stream after its pack was removed is in pack %q", other.Pack)
		}

		// A stream with its own file goes at once.
		ownPath := s.Path(own)
		ids, err = s.RemoveDeleted(ctx, deleted(own.ID))
		if err != nil || !slices.Equal(ids, []int64{own.ID}) {
			t.Fatalf("remove own file: ids %v, %v", ids, err)
		}
		if _, err := os.Stat(ownPath); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("own file of deleted stream: %v", err)
		}

		// A live stream is refused and its data kept.
		if ids, err := s.RemoveDeleted(ctx, []meta.Stream{mustRow(t, e, other.ID)}); err == nil || len(ids) != 0 {
			t.Fatalf("remove live stream: ids %v, err %v", ids, err)
		}
		if got := read(t, s, other.ID, streamfile.Data, 0); string(got) != "other pack" {
			t.Fatalf("live stream after refused removal %q", got)
		}
		if got := packFiles(t, e.root()); len(got) != 1 || filepath.FromSlash(got[0]) != other.Pack {
			t.Fatalf("packs left %v, want only %s", got, other.Pack)
		}
	})
}

func mustRow(t *testing.T, e *env, id int64) meta.Stream {
	t.Helper()
	row, err := e.repo.GetStream(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// TestPackMaxZero: without packing every stream has a file of its own, as
// before packs existed.
func TestPackMaxZero(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.openPacked(t, nil, "n1", 0)
		ctx := context.Background()
		post := s.Begin()
		w, err := post.NewStream(ctx, spec("ZERO-A"))
		if err != nil {
			t.Fatal(err)
		}
		// The row exists from the start, LOCKED.
		if w.ID() == 0 {
			t.Fatal("no row before commit with packing off")
		}
		if row := mustRow(t, e, w.ID()); row.Status != meta.Locked {
			t.Fatalf("row while written %+v", row)
		}
		if err := writeSections(w, []section{{streamfile.Data, 0, []byte("a")}}); err != nil {
			t.Fatal(err)
		}
		w2, _ := post.NewStream(ctx, spec("ZERO-B"))
		if err := writeSections(w2, []section{{streamfile.Data, 0, []byte("b")}, {streamfile.Meta, 0, []byte("m")}}); err != nil {
			t.Fatal(err)
		}
		streams, err := post.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			streams = append(streams, commitOne(t, s, fmt.Sprintf("ZERO-%d", i), []section{{streamfile.Data, 0, fmt.Appendf(nil, "post %d", i)}}))
		}
		for _, st := range streams {
			row := mustRow(t, e, st.ID)
			if row.Pack != "" || row.PackOffset != 0 || row.Status != meta.Unlocked {
				t.Fatalf("row %+v", row)
			}
			fi, err := os.Stat(s.Path(row))
			if err != nil || fi.Size() != row.FileSize || !strings.HasSuffix(s.Path(row), ".wst") {
				t.Fatalf("file of %d: %v %v", row.ID, fi, err)
			}
		}
		if got := read(t, s, w2.ID(), streamfile.Meta, 0); string(got) != "m" {
			t.Fatalf("read %q", got)
		}
		if got := files(t, e.root()); len(got) != len(streams) {
			t.Fatalf("%d files for %d streams: %v", len(got), len(streams), got)
		}
		if _, err := os.Stat(filepath.Join(e.root(), "packs")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("packs directory with packing off: %v", err)
		}
	})
}

// TestPackTruncated: a packed stream whose pack lost its end reads as an
// error (corruption), never a panic; streams wholly before the cut still read.
func TestPackTruncated(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.openPacked(t, nil, "n1", packMax)
		ctx := context.Background()
		post := s.Begin()
		var content [][]section
		for i, feed := range []string{"TRUNC-A", "TRUNC-B"} {
			w, _ := post.NewStream(ctx, spec(feed))
			secs := []section{{streamfile.Data, 0, randomBytes(uint64(10+i), 5000)}, {streamfile.Meta, 0, []byte("meta " + feed)}}
			if err := writeSections(w, secs); err != nil {
				t.Fatal(err)
			}
			content = append(content, secs)
		}
		streams, err := post.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a, b := streams[0], streams[1]
		if a.Pack == "" || a.Pack != b.Pack || b.PackOffset != a.PackOffset+a.FileSize {
			t.Fatalf("streams %+v %+v", a, b)
		}
		packPath := filepath.Join(e.root(), a.Pack)

		readErr := func(id int64) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
					t.Errorf("stream %d: read of a truncated pack panicked: %v", id, p)
				}
			}()
			r, err := s.Open(ctx, id)
			if err != nil {
				return err
			}
			defer r.Close()
			for _, ch := range []streamfile.Channel{streamfile.Data, streamfile.Meta} {
				sec, err := r.Section(ch, 0)
				if err != nil {
					return err
				}
				if _, err := io.ReadAll(sec); err != nil {
					return err
				}
			}
			return nil
		}

		for _, size := range []int64{
			b.PackOffset + b.FileSize - 1, // the last byte of the trailer
			b.PackOffset + b.FileSize/2,   // into B's blocks
			b.PackOffset + 10,             // into B's header
			b.PackOffset,                  // B entirely
			a.PackOffset + a.FileSize/2,   // into A
		} {
			if err := os.Truncate(packPath, size); err != nil {
				t.Fatal(err)
			}
			if err := readErr(b.ID); err == nil || !errors.Is(err, streamfile.ErrCorrupt) {
				t.Fatalf("pack cut at %d: read of B: %v, want corruption", size, err)
			}
			if size >= b.PackOffset {
				if err := checkStream(s, a.ID, content[0]); err != nil {
					t.Fatalf("pack cut at %d, inside B: A: %v", size, err)
				}
			} else if err := readErr(a.ID); err == nil || !errors.Is(err, streamfile.ErrCorrupt) {
				t.Fatalf("pack cut at %d: read of A: %v, want corruption", size, err)
			}
		}
		// A pack gone entirely: an error too.
		if err := os.Remove(packPath); err != nil {
			t.Fatal(err)
		}
		if err := readErr(a.ID); err == nil || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("missing pack: %v", err)
		}
	})
}

// TestPackZeroAhead: the open pack is zero-filled a megabyte past its
// last batch, so that the next batches overwrite blocks the file has
// (their fdatasync then changes no length); the zeros go when the pack is
// closed, at a segment's end or at Close, and every stream reads back.
func TestPackZeroAhead(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s, err := store.Open(context.Background(), e.repo, e.codec, store.Options{
			Root: e.root(), Node: "N1", BlockSize: 4096, PackMax: packMax, PackSegment: 2 << 20,
		})
		if err != nil {
			t.Fatal(err)
		}
		var rows []meta.Stream
		var content [][]section
		for i := range 12 { // 12 posts of 200 KiB: past the 2 MiB segment
			secs := []section{{streamfile.Data, 0, randomBytes(uint64(300+i), 200<<10)}}
			rows = append(rows, commitOne(t, s, "ZA", secs))
			content = append(content, secs)
		}
		first, last := rows[0], rows[len(rows)-1]
		if first.Pack == last.Pack {
			t.Fatalf("all posts in one pack %s; want the segment size to start a second", first.Pack)
		}
		ends := map[string]int64{}
		for _, r := range rows {
			ends[r.Pack] = max(ends[r.Pack], r.PackOffset+r.FileSize)
		}
		if got := packSize(t, e, first.Pack); got != ends[first.Pack] {
			t.Errorf("the closed segment %s is %d bytes, its streams end at %d", first.Pack, got, ends[first.Pack])
		}
		if got, end := packSize(t, e, last.Pack), ends[last.Pack]; got < end+1<<20 {
			t.Errorf("the open pack %s is %d bytes, its streams end at %d: want zeros a megabyte ahead", last.Pack, got, end)
		}
		if err := checkPackEnd(filepath.Join(e.root(), last.Pack), ends[last.Pack]); err != nil {
			t.Error(err)
		}
		s.Close()
		if got := packSize(t, e, last.Pack); got != ends[last.Pack] {
			t.Errorf("after Close the pack %s is %d bytes, its streams end at %d", last.Pack, got, ends[last.Pack])
		}
		s = e.openPacked(t, nil, "N1", packMax)
		for i, r := range rows {
			if err := checkStream(s, r.ID, content[i]); err != nil {
				t.Errorf("post %d: %v", i, err)
			}
		}
	})
}

// TestPostDoneStreams: a post of many streams finished one by one with
// Done (a zip's reference groups) holds at most 16 times PackMax of them in
// memory: past it they move to files of their own, in the order they were
// started, while a stream still being written stays usable. Commit makes
// all of them visible with ids in start order; Abort leaves nothing; with
// packing off, Done closes each stream's file.
func TestPostDoneStreams(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const limit, n = 4 << 10, 50 // 50 streams of 2000 incompressible bytes pass 16 × 4 KiB once
		content := func(i int) []section {
			return []section{{streamfile.Data, 0, randomBytes(uint64(100+i), 2000)}, {streamfile.Meta, 0, fmt.Appendf(nil, "Group:%d\n", i)}}
		}
		open := []section{{streamfile.Data, 0, []byte("open first part")}, {streamfile.Data, 1, []byte("open second part")}}
		run := func(t *testing.T, s *store.Store, commit bool) []meta.Stream {
			post := s.Begin()
			// A stream of another type stays open across the others.
			wo, err := post.NewStream(ctx, spec("OPEN"))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(wo, open[:1]); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				w, err := post.NewStream(ctx, spec(fmt.Sprintf("DONE-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				if err := writeSections(w, content(i)); err != nil {
					t.Fatal(err)
				}
				if err := w.Done(); err != nil {
					t.Fatal(err)
				}
				if err := w.Done(); err != nil { // idempotent
					t.Fatal(err)
				}
			}
			if err := writeSections(wo, open[1:]); err != nil {
				t.Fatal(err)
			}
			if !commit {
				post.Abort()
				return nil
			}
			streams, err := post.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(streams) != n+1 {
				t.Fatalf("%d streams committed", len(streams))
			}
			for i, st := range streams {
				if i > 0 && st.ID <= streams[i-1].ID {
					t.Errorf("stream %d has id %d after %d", i, st.ID, streams[i-1].ID)
				}
				want := open
				if i > 0 {
					want = content(i - 1)
				}
				if err := checkStream(s, st.ID, want); err != nil {
					t.Error(err)
				}
			}
			return streams
		}
		t.Run("packed", func(t *testing.T) {
			s := e.openPacked(t, nil, "n1", limit)
			streams := run(t, s, true)
			own, packed := 0, 0
			for _, st := range streams {
				if st.Pack == "" {
					own++
				} else {
					packed++
				}
			}
			// The first moves happen once 16 × PackMax is held; later
			// streams are packed again until the next.
			if own == 0 || packed == 0 || streams[0].Pack != "" {
				t.Errorf("%d streams with files of their own, %d packed; the open one's pack %q", own, packed, streams[0].Pack)
			}
			for _, f := range files(t, e.root()) {
				if strings.HasSuffix(f, ".lock") {
					t.Errorf("lock file left: %s", f)
				}
			}
		})
		t.Run("abort", func(t *testing.T) {
			e := newEnv(t, e.dsn)
			// On PostgreSQL the subtests share a schema: count what the
			// others left.
			before, err := e.repo.ListStreams(ctx, meta.StreamFilter{})
			if err != nil {
				t.Fatal(err)
			}
			s := e.openPacked(t, nil, "n1", limit)
			run(t, s, false)
			for _, f := range files(t, e.root()) {
				if strings.HasSuffix(f, ".wst") || strings.HasSuffix(f, ".lock") {
					t.Errorf("file left: %s", f)
				}
			}
			rows, err := e.repo.ListStreams(ctx, meta.StreamFilter{})
			if err != nil || len(rows) != len(before) {
				t.Fatalf("rows left: %d (%d before) %v", len(rows)-len(before), len(before), err)
			}
		})
		t.Run("unpacked", func(t *testing.T) {
			e := newEnv(t, e.dsn)
			s := e.openPacked(t, nil, "n1", 0)
			for _, st := range run(t, s, true) {
				if st.Pack != "" {
					t.Errorf("stream %d packed with packing off", st.ID)
				}
			}
		})
	})
}

// TestPurgeDeleted: the main service's purge removes this node's streams
// deleted before the cutoff, a batch at a time: an own file at once, a
// pack once every stream in it is to go; their rows go after their files.
// Streams deleted since, live streams and another node's streams stay, a
// reader opened before the purge still reads its stream, and a purged
// stream can be neither read nor restored.
func TestPurgeDeleted(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		const limit = 8 << 10
		ctx := context.Background()
		reg := prometheus.NewRegistry()
		open := func(node, root string, m *store.Metrics) *store.Store {
			s, err := store.Open(ctx, e.repo, e.codec, store.Options{
				Root: root, Node: node, BlockSize: 4096, PackMax: limit,
				PackSegment: 1, // a pack per batch
				PurgeBatch:  2, // pages, and packs seen across pages
				Metrics:     m,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s
		}
		s := open("n1", e.root(), store.NewMetrics(reg))
		s2 := open("n2", filepath.Join(e.dir, "store2"), nil)

		content := map[int64][]section{}
		post := func(s *store.Store, n, size int) []meta.Stream {
			t.Helper()
			p := s.Begin()
			var secs [][]section
			for i := range n {
				w, err := p.NewStream(ctx, spec(fmt.Sprintf("PURGE-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				sec := []section{{streamfile.Data, 0, randomBytes(uint64(len(content)*10+i), size)}}
				if err := writeSections(w, sec); err != nil {
					t.Fatal(err)
				}
				secs = append(secs, sec)
			}
			ss, err := p.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range ss {
				content[st.ID] = secs[i]
				if (st.Pack != "") != (size < limit/2) {
					t.Fatalf("stream of %d bytes in pack %q", size, st.Pack)
				}
			}
			return ss
		}
		packA := post(s, 3, 100)   // all deleted long enough: goes
		packB := post(s, 2, 100)   // one live: compacted
		packC := post(s, 2, 100)   // one deleted too recently: compacted
		own := post(s, 3, 2*limit) // two deleted long enough, one recently
		other := post(s2, 1, 100)  // another node's: stays
		otherOwn := post(s2, 1, 2*limit)
		live := post(s, 1, 100)[0] // the open pack, live
		del := func(ss ...meta.Stream) {
			t.Helper()
			for _, st := range ss {
				if err := e.repo.SetStreamStatus(ctx, st.ID, meta.Deleted); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A reader of own[0] opened while it was live.
		reading, err := s.Open(ctx, own[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		defer reading.Close()
		del(packA...)
		del(packB[0], packC[0], own[0], own[1], other[0], otherOwn[0])
		// Every status time from here on is at or after cut.
		cut := time.Now().UnixMilli() + 1
		for time.Now().UnixMilli() < cut {
			time.Sleep(time.Millisecond)
		}
		del(packC[1], own[2])

		before := storeBytes(t, e.root())
		res, err := s.PurgeDeleted(ctx, cut)
		if err != nil {
			t.Fatal(err)
		}
		gone := []meta.Stream{packA[0], packA[1], packA[2], own[0], own[1], packB[0], packC[0]}
		if res.Streams != int64(len(gone)) || res.Bytes <= 0 || res.Packs != 2 {
			t.Fatalf("PurgeDeleted = %+v, want %d streams", res, len(gone))
		}
		for _, st := range gone {
			if _, err := e.repo.GetStream(ctx, st.ID); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("purged stream %d: %v", st.ID, err)
			}
			if _, err := os.Stat(s.Path(st)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("file of purged stream %d: %v", st.ID, err)
			}
			if _, err := s.Open(ctx, st.ID); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("open purged stream %d: %v", st.ID, err)
			}
			if err := e.repo.SetStreamStatus(ctx, st.ID, meta.Unlocked); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("restore purged stream %d: %v", st.ID, err)
			}
		}
		if after := storeBytes(t, e.root()); after >= before {
			t.Errorf("store holds %d bytes after the purge, %d before", after, before)
		}
		if got := testutilCounter(t, reg, "weir_store_purged_streams_total"); got != float64(len(gone)) {
			t.Errorf("weir_store_purged_streams_total = %v", got)
		}
		// The reader opened before still reads its stream whole.
		sec, err := reading.Section(streamfile.Data, 0)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(sec); err != nil || !bytes.Equal(b, content[own[0].ID][0].data) {
			t.Fatalf("reader of a purged stream: %d bytes, %v", len(b), err)
		}
		// What stays: live streams byte-exact, deleted ones restorable.
		for _, st := range []meta.Stream{packB[1], live} {
			if err := checkStream(s, st.ID, content[st.ID]); err != nil {
				t.Errorf("live stream: %v", err)
			}
		}
		if got := testutilCounter(t, reg, "weir_store_compacted_packs_total"); got != 2 {
			t.Errorf("weir_store_compacted_packs_total = %v", got)
		}
		for _, st := range []meta.Stream{packC[1], own[2]} {
			if err := e.repo.SetStreamStatus(ctx, st.ID, meta.Unlocked); err != nil {
				t.Fatalf("restore stream %d: %v", st.ID, err)
			}
			if err := checkStream(s, st.ID, content[st.ID]); err != nil {
				t.Errorf("restored stream: %v", err)
			}
		}
		for _, st := range append(other, otherOwn...) {
			if row, err := e.repo.GetStream(ctx, st.ID); err != nil || row.Status != meta.Deleted {
				t.Errorf("another node's stream %d: %+v, %v", st.ID, row, err)
			}
			if err := checkStream(s2, st.ID, nil); !errors.Is(err, store.ErrNotReadable) {
				t.Errorf("another node's stream %d: %v", st.ID, err)
			}
		}
		// The other node purges its own.
		if res, err := s2.PurgeDeleted(ctx, cut); err != nil || res.Streams != 2 {
			t.Fatalf("other node's PurgeDeleted = %+v, %v", res, err)
		}
		for _, st := range append(other, otherOwn...) {
			if _, err := os.Stat(s2.Path(st)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("other node's purged file %d: %v", st.ID, err)
			}
		}
		// Once the last stream of (compacted) packB goes, its pack goes
		// with all its rows; the open pack too.
		del(packB[1])
		del(live)
		cut = time.Now().UnixMilli() + 1
		for time.Now().UnixMilli() < cut {
			time.Sleep(time.Millisecond)
		}
		if res, err := s.PurgeDeleted(ctx, cut); err != nil || res.Streams != 2 {
			t.Fatalf("second PurgeDeleted = %+v, %v", res, err)
		}
		if got, want := packFiles(t, e.root()), mustRow(t, e, packC[1].ID).Pack; len(got) != 1 || filepath.FromSlash(got[0]) != want || want == packC[1].Pack {
			t.Fatalf("packs left %v, want only %s (packC compacted)", got, want)
		}
		// A later post starts a new pack.
		next := post(s, 1, 100)[0]
		if err := checkStream(s, next.ID, content[next.ID]); err != nil || next.Pack == live.Pack {
			t.Fatalf("post after the open pack was purged: %v (pack %s)", err, next.Pack)
		}
	})
}

// storeBytes is the size of every file under root.
func storeBytes(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	for _, f := range files(t, root) {
		fi, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

func testutilCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
