package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// compactClock is a store's clock for the compaction tests: the mixed
// pack is written days before the compaction, so that its day directory
// is not among the two newest, which removeOrphanPacks looks at: only the
// recorded pack removals can then take a pack a compaction left behind.
type compactClock struct{ ms atomic.Int64 }

func newCompactClock() *compactClock {
	c := &compactClock{}
	c.ms.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
	return c
}

func (c *compactClock) now() time.Time  { return time.UnixMilli(c.ms.Load()).UTC() }
func (c *compactClock) nextDay()        { c.ms.Add(24 * time.Hour.Milliseconds()) }
func (c *compactClock) day() (d string) { return c.now().Format("2006/01/02") }
func (c *compactClock) dayOf(p string) bool {
	return filepath.Dir(p) == filepath.Join("packs", c.day())
}

// compactFix is a pack (old) of streams some of which the purge before cut
// may remove (purge), some live and some deleted after cut (recent).
type compactFix struct {
	e       *env
	clock   *compactClock
	reg     *prometheus.Registry
	node    string
	content map[int64][]section
	old     string
	oldSize int64
	purge   []meta.Stream
	live    []meta.Stream
	recent  []meta.Stream
	later   []meta.Stream // live, in later packs
	cut     int64
	held    func() error // the stores' Options.Held
}

func (f *compactFix) open(t *testing.T, repo store.Repo) *store.Store {
	t.Helper()
	if repo == nil {
		repo = f.e.repo
	}
	var m *store.Metrics
	if f.reg == nil {
		f.reg = prometheus.NewRegistry()
		m = store.NewMetrics(f.reg)
	}
	s, err := store.Open(context.Background(), repo, f.e.codec, store.Options{
		Root: f.e.root(), Node: f.node, BlockSize: 4096, PackMax: packMax,
		PackSegment: 1, // a pack per batch
		Now:         f.clock.now, Metrics: m, Held: f.held,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// postBatch commits n small streams as one post: one batch, one pack.
func (f *compactFix) postBatch(t *testing.T, s *store.Store, name string, n int) []meta.Stream {
	t.Helper()
	ctx := context.Background()
	p := s.Begin()
	var secs [][]section
	for i := range n {
		w, err := p.NewStream(ctx, spec(fmt.Sprintf("%s-%d", name, i)))
		if err != nil {
			t.Fatal(err)
		}
		sec := smallPost(len(f.content)+i, i)
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
		if st.Pack == "" {
			t.Fatalf("stream %d not packed", st.ID)
		}
		f.content[st.ID] = secs[i]
	}
	return ss
}

// assertUncompacted checks what a compaction that failed or was refused
// must leave: the packs as they were (before), no pack removal recorded,
// and each of streams still in the old pack, whose read error (nil when
// it reads back exactly) goes to check.
func (f *compactFix) assertUncompacted(t *testing.T, s *store.Store, before []string, streams []meta.Stream, check func(id int64, err error)) {
	t.Helper()
	e := f.e
	if after := packFiles(t, e.root()); !slices.Equal(before, after) {
		t.Errorf("packs %v after the compaction that did not happen, %v before", after, before)
	}
	if left, err := e.repo.PackRemovals(context.Background(), f.node); err != nil || len(left) > 0 {
		t.Errorf("pack removals left recorded: %v, %v", left, err)
	}
	for _, st := range streams {
		row := mustRow(t, e, st.ID)
		if row.Pack != f.old {
			t.Errorf("stream %d moved to %s", st.ID, row.Pack)
		}
		check(st.ID, readRow(s, row, f.content[st.ID]))
	}
}

// newCompactFix writes the mixed pack (n streams: a half to purge, a
// quarter live, a quarter deleted after cut) on day one, deletes, and
// posts on days two and three (closing the pack). The store is on day
// four.
func newCompactFix(t *testing.T, e *env, node string, n int) (*compactFix, *store.Store) {
	t.Helper()
	f := &compactFix{e: e, clock: newCompactClock(), node: node, content: map[int64][]section{}}
	s := f.open(t, nil)
	ss := f.postBatch(t, s, "MIXED-"+node, n)
	f.old = ss[0].Pack
	for i, st := range ss {
		if st.Pack != f.old {
			t.Fatalf("stream %d in pack %s, not %s", st.ID, st.Pack, f.old)
		}
		switch i % 4 {
		case 0, 1:
			f.purge = append(f.purge, st)
		case 2:
			f.live = append(f.live, st)
		case 3:
			f.recent = append(f.recent, st)
		}
	}
	del(t, e, f.purge...)
	f.cut = time.Now().UnixMilli() + 1
	for time.Now().UnixMilli() < f.cut {
		time.Sleep(time.Millisecond)
	}
	del(t, e, f.recent...)
	for range 2 {
		f.clock.nextDay()
		f.later = append(f.later, f.postBatch(t, s, "LATER-"+node, 1)...)
	}
	f.clock.nextDay()
	f.oldSize = packSize(t, e, f.old)
	return f, s
}

func del(t *testing.T, e *env, ss ...meta.Stream) {
	t.Helper()
	for _, st := range ss {
		if err := e.repo.SetStreamStatus(context.Background(), st.ID, meta.Deleted); err != nil {
			t.Fatal(err)
		}
	}
}

// readRow reads every section of the stream a row names, whatever its
// status (a deleted stream's bytes must be there too, to be restored).
func readRow(s *store.Store, row meta.Stream, secs []section) error {
	row.Status = meta.Unlocked
	r, err := s.OpenRow(row)
	if err != nil {
		return err
	}
	defer r.Close()
	if r.Parts() == 0 && len(secs) > 0 {
		return fmt.Errorf("stream %d: no parts", row.ID)
	}
	for _, sec := range secs {
		sr, err := r.Section(sec.ch, sec.part)
		if err != nil {
			return fmt.Errorf("stream %d: %w", row.ID, err)
		}
		b, err := io.ReadAll(sr)
		if err != nil || string(b) != string(sec.data) {
			return fmt.Errorf("stream %d %s part %d: %d bytes read (%v), not those written", row.ID, sec.ch, sec.part, len(b), err)
		}
	}
	return nil
}

// checkConsistent checks what must hold at any time once a store is open:
// every row names a pack that is there and holds its stream byte-exact,
// every pack file on disk is named by a row, and no pack removal is left
// recorded.
func (f *compactFix) checkConsistent(t *testing.T, s *store.Store) {
	t.Helper()
	named := map[string]bool{}
	for _, row := range allRows(t, f.e) {
		if row.Node != f.node {
			continue
		}
		named[row.Pack] = true
		if err := readRow(s, row, f.content[row.ID]); err != nil {
			t.Errorf("row %+v: %v", row, err)
		}
	}
	for _, p := range packFiles(t, f.e.root()) {
		if !strings.HasPrefix(filepath.Base(p), strings.ToUpper(f.node)+"-") {
			continue // another node's
		}
		if !named[filepath.FromSlash(p)] {
			t.Errorf("pack %s on disk, named by no row", p)
		}
	}
	if left, err := f.e.repo.PackRemovals(context.Background(), f.node); err != nil || len(left) > 0 {
		t.Errorf("pack removals left recorded: %v, %v", left, err)
	}
}

// checkCompacted checks the end state: the purged streams gone, the
// others read back (the recent ones once restored) from the new pack,
// the old pack gone.
func (f *compactFix) checkCompacted(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	f.checkConsistent(t, s)
	for _, st := range f.purge {
		if _, err := f.e.repo.GetStream(ctx, st.ID); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("purged stream %d: %v", st.ID, err)
		}
		if _, err := s.Open(ctx, st.ID); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("open purged stream %d: %v", st.ID, err)
		}
		if err := f.e.repo.SetStreamStatus(ctx, st.ID, meta.Unlocked); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("restore purged stream %d: %v", st.ID, err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.e.root(), f.old)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old pack %s: %v", f.old, err)
	}
	var newPack string
	var want int64
	for _, st := range append(slices.Clone(f.live), f.recent...) {
		row := mustRow(t, f.e, st.ID)
		if newPack == "" {
			newPack = row.Pack
		}
		if row.Pack != newPack || row.Pack == f.old || !f.clock.dayOf(row.Pack) {
			t.Errorf("stream %d in pack %s, want all in one new pack of today", st.ID, row.Pack)
		}
		want += row.FileSize
	}
	if got := packSize(t, f.e, newPack); got != want || got >= f.oldSize {
		t.Errorf("new pack %s is %d bytes, want %d (the old was %d)", newPack, got, want, f.oldSize)
	}
	for _, st := range append(slices.Clone(f.live), f.later...) {
		if err := checkStream(s, st.ID, f.content[st.ID]); err != nil {
			t.Errorf("live stream: %v", err)
		}
	}
	for _, st := range f.recent {
		if row := mustRow(t, f.e, st.ID); row.Status != meta.Deleted {
			t.Errorf("recently deleted stream %d is %s", st.ID, row.Status)
		}
		if err := f.e.repo.SetStreamStatus(ctx, st.ID, meta.Unlocked); err != nil {
			t.Fatalf("restore stream %d: %v", st.ID, err)
		}
		if err := checkStream(s, st.ID, f.content[st.ID]); err != nil {
			t.Errorf("restored stream: %v", err)
		}
	}
}

// TestCompactPack: a pack holding streams to purge, live ones and ones
// deleted too recently is rewritten without the first, whose rows go;
// the others read back byte-exact from the new pack, the old one is gone.
// Another node's pack (a PostgreSQL shared by two servers) is its own.
func TestCompactPack(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 40)
		f2, s2 := newCompactFix(t, e, "n2", 8)
		s2.Close()
		res, err := s.PurgeDeleted(ctx, f.cut)
		if err != nil {
			t.Fatal(err)
		}
		if res.Streams != int64(len(f.purge)) || res.Packs != 1 || res.Bytes <= 0 {
			t.Fatalf("PurgeDeleted = %+v, want %d streams of 1 pack", res, len(f.purge))
		}
		newPack := mustRow(t, e, f.live[0].ID).Pack
		if got := res.Bytes; got != f.oldSize-packSize(t, e, newPack) {
			t.Errorf("PurgeDeleted gave back %d bytes; the pack shrank from %d to %d", got, f.oldSize, packSize(t, e, newPack))
		}
		if got := testutilCounter(t, f.reg, "weir_store_compacted_packs_total"); got != 1 {
			t.Errorf("weir_store_compacted_packs_total = %v", got)
		}
		if got := testutilCounter(t, f.reg, "weir_store_purged_bytes_total"); got != float64(res.Bytes) {
			t.Errorf("weir_store_purged_bytes_total = %v, want %d", got, res.Bytes)
		}
		if got := testutilCounter(t, f.reg, "weir_store_purged_streams_total"); got != float64(len(f.purge)) {
			t.Errorf("weir_store_purged_streams_total = %v", got)
		}
		// n2's pack was left alone.
		if _, err := os.Stat(filepath.Join(e.root(), f2.old)); err != nil {
			t.Errorf("the other node's pack: %v", err)
		}
		for _, st := range f2.purge {
			if row, err := e.repo.GetStream(ctx, st.ID); err != nil || row.Pack != f2.old {
				t.Errorf("the other node's stream %d: %+v, %v", st.ID, row, err)
			}
		}
		// Nothing more to do.
		if res, err := s.PurgeDeleted(ctx, f.cut); err != nil || res != (store.PurgeResult{}) {
			t.Fatalf("second PurgeDeleted = %+v, %v", res, err)
		}
		// And so after a restart.
		s.Close()
		s = f.open(t, nil)
		f.checkCompacted(t, s)

		// n2 compacts its own.
		s2 = f2.open(t, nil)
		if res, err := s2.PurgeDeleted(ctx, f2.cut); err != nil || res.Packs != 1 || res.Streams != int64(len(f2.purge)) {
			t.Fatalf("other node's PurgeDeleted = %+v, %v", res, err)
		}
		f2.checkCompacted(t, s2)
	})
}

// failCompactRepo makes CompactPack fail: before its transaction, or
// after it committed (the answer lost).
type failCompactRepo struct {
	*meta.Repo
	mode atomic.Value // "", "before" or "lost"
}

var errInjected = errors.New("injected failure")

func (r *failCompactRepo) CompactPack(ctx context.Context, node, old, newPack string, moves []meta.PackMove, purge []int64) error {
	switch r.mode.Load() {
	case "before":
		return errInjected
	case "lost":
		if err := r.Repo.CompactPack(ctx, node, old, newPack, moves, purge); err != nil {
			return err
		}
		return errInjected
	}
	return r.Repo.CompactPack(ctx, node, old, newPack, moves, purge)
}

// TestCompactCrash stops a compaction after each of its steps, as a crash
// there would (or makes its transaction fail, or lose its answer), and
// restarts: whatever the point, every row names bytes that are there and
// byte-exact, and no pack file is left that no row names (the old pack
// is in a day directory the start's look for orphan packs does not see).
// The next purge finishes the compaction.
func TestCompactCrash(t *testing.T) {
	for _, step := range []string{"claimed", "copied", "before", "lost", "committed", "removed"} {
		t.Run(step, func(t *testing.T) {
			engines(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				f, s := newCompactFix(t, e, "n1", 12)
				s.Close()
				repo := &failCompactRepo{Repo: e.repo}
				repo.mode.Store("")
				s = f.open(t, repo)
				switch step {
				case "before", "lost":
					repo.mode.Store(step)
				default:
					store.SetCompactHook(s, func(at string) error {
						if at == step {
							return errInjected
						}
						return nil
					})
				}
				if _, err := s.PurgeDeleted(ctx, f.cut); !errors.Is(err, errInjected) {
					t.Fatalf("PurgeDeleted stopped at %s: %v", step, err)
				}
				s.Close() // the crash
				s = f.open(t, nil)
				f.checkConsistent(t, s)
				if _, err := s.PurgeDeleted(ctx, f.cut); err != nil {
					t.Fatal(err)
				}
				f.checkCompacted(t, s)
			})
		})
	}
}

// TestCompactRestoreRace: a restore racing with a compaction either wins
// (its stream stays, in the new pack) or finds the stream gone; never is
// a stream restored whose bytes are gone.
func TestCompactRestoreRace(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 8)
		// Once the compaction has claimed its streams, restoring one of
		// them fails, and restoring a stream it leaves works.
		store.SetCompactHook(s, func(at string) error {
			if at != "claimed" {
				return nil
			}
			if err := e.repo.SetStreamStatus(ctx, f.purge[0].ID, meta.Unlocked); !errors.Is(err, meta.ErrPurging) {
				return fmt.Errorf("restore of a claimed stream: %v", err)
			}
			return e.repo.SetStreamStatus(ctx, f.recent[0].ID, meta.Unlocked)
		})
		if _, err := s.PurgeDeleted(ctx, f.cut); err != nil {
			t.Fatal(err)
		}
		f.live = append(f.live, f.recent[0])
		f.recent = f.recent[1:]
		f.checkCompacted(t, s)
	})
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 80)
		var restored sync.Map
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			for _, st := range f.purge {
				err := e.repo.SetStreamStatus(ctx, st.ID, meta.Unlocked)
				switch {
				case err == nil:
					restored.Store(st.ID, true)
				case !errors.Is(err, meta.ErrNotFound):
					t.Errorf("restore %d: %v", st.ID, err)
				}
			}
		})
		close(start)
		if _, err := s.PurgeDeleted(ctx, f.cut); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		won := 0
		for _, st := range f.purge {
			_, ok := restored.Load(st.ID)
			row, err := e.repo.GetStream(ctx, st.ID)
			switch {
			case ok:
				won++
				if err != nil || row.Status != meta.Unlocked {
					t.Errorf("restored stream %d: %+v, %v", st.ID, row, err)
				} else if err := checkStream(s, st.ID, f.content[st.ID]); err != nil {
					t.Errorf("restored stream: %v", err)
				}
			case !errors.Is(err, meta.ErrNotFound):
				t.Errorf("stream %d neither restored nor gone: %+v, %v", st.ID, row, err)
			}
		}
		t.Logf("%d of %d restores won", won, len(f.purge))
		f.checkConsistent(t, s)
	})
}

// openRaceRepo runs fn (once) after a GetStream of stream id read its
// row: a reader then opens the pack that row names after fn.
type openRaceRepo struct {
	*meta.Repo
	id   atomic.Int64
	fn   func()
	once sync.Once
}

func (r *openRaceRepo) GetStream(ctx context.Context, id int64) (meta.Stream, error) {
	row, err := r.Repo.GetStream(ctx, id)
	if id == r.id.Load() {
		r.once.Do(r.fn)
	}
	return row, err
}

// TestCompactReadRace: a reader that read a stream's row before the
// compaction repointed it, and opens the old pack after it was removed,
// reads the stream from the new pack; one that opened the old pack
// before reads on from it.
func TestCompactReadRace(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 8)
		s.Close()
		repo := &openRaceRepo{Repo: e.repo}
		s = f.open(t, repo)
		st := f.live[0]
		opened, err := s.Open(ctx, f.live[1].ID)
		if err != nil {
			t.Fatal(err)
		}
		defer opened.Close()
		stale := mustRow(t, e, st.ID)
		repo.fn = func() {
			if res, err := s.PurgeDeleted(ctx, f.cut); err != nil || res.Packs != 1 {
				t.Errorf("PurgeDeleted = %+v, %v", res, err)
			}
		}
		repo.id.Store(st.ID)
		// Open reads the row, the pack is compacted, Open opens the file.
		if err := checkStream(s, st.ID, f.content[st.ID]); err != nil {
			t.Fatalf("read racing with the compaction: %v", err)
		}
		// A caller that read the row before (OpenRow).
		if err := readRow(s, stale, f.content[st.ID]); err != nil {
			t.Fatalf("read of a row read before the compaction: %v", err)
		}
		// A reader that had the old pack open.
		for _, sec := range f.content[f.live[1].ID] {
			sr, err := opened.Section(sec.ch, sec.part)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(sr); err != nil || string(b) != string(sec.data) {
				t.Fatalf("reader opened before the compaction: %d bytes, %v", len(b), err)
			}
		}
		f.checkCompacted(t, s)
	})
}

// TestCompactWhilePosting: posts go on (into the open pack, which is never
// compacted, and packs with batches in flight) and readers read while the
// purge compacts packs again and again; every live stream reads back
// byte-exact, and in the end every purgeable stream is gone and no pack
// is left that no row names.
func TestCompactWhilePosting(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s, err := store.Open(ctx, e.repo, e.codec, store.Options{
			Root: e.root(), Node: "n1", BlockSize: 4096, PackMax: packMax,
			PackSegment: 64 << 10, // packs close often
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		var mu sync.Mutex
		content := map[int64][]section{}
		var posted []int64
		var kept []int64 // never deleted
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					secs := smallPost(g+10, i)
					p := s.Begin()
					w, err := p.NewStream(ctx, spec(fmt.Sprintf("POST-%d", g)))
					if err == nil {
						err = writeSections(w, secs)
					}
					var ss []meta.Stream
					if err == nil {
						ss, err = p.Commit(ctx)
					}
					if err != nil {
						t.Errorf("post: %v", err)
						return
					}
					mu.Lock()
					content[ss[0].ID] = secs
					posted = append(posted, ss[0].ID)
					if i%2 == 1 {
						kept = append(kept, ss[0].ID)
					}
					mu.Unlock()
					// Every other stream deleted at once (purgeable).
					if i%2 == 0 {
						if err := e.repo.SetStreamStatus(ctx, ss[0].ID, meta.Deleted); err != nil {
							t.Errorf("delete: %v", err)
							return
						}
					}
				}
			})
		}
		// A reader of live streams.
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				var id int64
				var secs []section
				if len(kept) > 0 {
					id = kept[rand.IntN(len(kept))]
					secs = content[id]
				}
				mu.Unlock()
				if id != 0 {
					if err := checkStream(s, id, secs); err != nil {
						t.Errorf("read during compaction: %v", err)
					}
				}
			}
		})
		packs := int64(0)
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			res, err := s.PurgeDeleted(ctx, time.Now().UnixMilli())
			if err != nil {
				t.Error(err)
				break
			}
			packs += res.Packs
			time.Sleep(20 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		// Streams in the open pack wait for it to close: close it.
		s.Close()
		s, err = store.Open(ctx, e.repo, e.codec, store.Options{Root: e.root(), Node: "n1", BlockSize: 4096, PackMax: packMax})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		time.Sleep(2 * time.Millisecond)
		res, err := s.PurgeDeleted(ctx, time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		packs += res.Packs
		t.Logf("%d posts, %d packs compacted", len(posted), packs)
		if packs == 0 {
			t.Fatal("no pack compacted")
		}
		named := map[string]bool{}
		for _, id := range posted {
			row, err := e.repo.GetStream(ctx, id)
			if errors.Is(err, meta.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != meta.Unlocked {
				t.Errorf("stream %d is %s after the last purge", id, row.Status)
				continue
			}
			named[row.Pack] = true
			if err := checkStream(s, id, content[id]); err != nil {
				t.Errorf("after compaction: %v", err)
			}
		}
		for _, p := range packFiles(t, e.root()) {
			if !named[filepath.FromSlash(p)] {
				t.Errorf("pack %s named by no row", p)
			}
		}
	})
}

// TestCompactPackMeasure measures the compaction of a full (32 MiB) pack
// of 8 KiB streams (WEIR_MEASURE_COMPACT_KIB), half of them purged: its time, and what it allocates
// (the copy goes through a fixed buffer: no whole-pack read). Run with
// WEIR_MEASURE_COMPACT=1.
func TestCompactPackMeasure(t *testing.T) {
	if os.Getenv("WEIR_MEASURE_COMPACT") == "" {
		t.Skip("set WEIR_MEASURE_COMPACT=1 to measure")
	}
	kib := 8
	if n, err := strconv.Atoi(os.Getenv("WEIR_MEASURE_COMPACT_KIB")); err == nil && n > 0 {
		kib = n // streams of this many KiB
	}
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := e.openPacked(t, nil, "n1", packMax)
		p := s.Begin()
		n := 0
		var size int64
		for size < 32<<20 {
			w, err := p.NewStream(ctx, spec(fmt.Sprintf("M-%d", n%50)))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeSections(w, []section{{streamfile.Data, 0, randomBytes(uint64(n), kib<<10)}}); err != nil {
				t.Fatal(err)
			}
			n++
			size += int64(kib) << 10
		}
		ss, err := p.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Close() // closes the pack
		timed := &timedRepo{Repo: e.repo}
		s = e.openPacked(t, timed, "n1", packMax)
		old := ss[0].Pack
		oldSize := packSize(t, e, old)
		for i, st := range ss {
			if i%2 == 0 {
				del(t, e, st)
			}
		}
		time.Sleep(2 * time.Millisecond)
		// Only the compaction is timed: the pack's other rows go with it.
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		res, err := s.PurgeDeleted(ctx, time.Now().UnixMilli())
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if err != nil || res.Packs != 1 {
			t.Fatalf("PurgeDeleted = %+v, %v", res, err)
		}
		t.Logf("pack of %d streams, %d bytes: purge run of %v (CompactPack's transaction %v) compacted it to %d bytes (%d streams purged); allocated %d KiB in %d allocations, heap in use %d -> %d KiB",
			len(ss), oldSize, took, timed.took, packSize(t, e, mustRow(t, e, ss[1].ID).Pack), res.Streams,
			(after.TotalAlloc-before.TotalAlloc)>>10, after.Mallocs-before.Mallocs, before.HeapInuse>>10, after.HeapInuse>>10)
		for i := 1; i < len(ss); i += 2 {
			if err := checkStream(s, ss[i].ID, []section{{streamfile.Data, 0, randomBytes(uint64(i), kib<<10)}}); err != nil {
				t.Error(err)
			}
		}
	})
}

// timedRepo times CompactPack.
type timedRepo struct {
	*meta.Repo
	took time.Duration
}

func (r *timedRepo) CompactPack(ctx context.Context, node, old, newPack string, moves []meta.PackMove, purge []int64) error {
	start := time.Now()
	defer func() { r.took += time.Since(start) }()
	return r.Repo.CompactPack(ctx, node, old, newPack, moves, purge)
}

// failStayingRepo fails PackStaying for one pack.
type failStayingRepo struct {
	*meta.Repo
	bad atomic.Value // string
}

func (r *failStayingRepo) PackStaying(ctx context.Context, pack string) ([]meta.PackMove, error) {
	if pack == r.bad.Load() {
		return nil, errInjected
	}
	return r.Repo.PackStaying(ctx, pack)
}

// TestCompactOnePackFails: a pack that cannot be compacted does not hold
// up the others; the next run compacts it.
func TestCompactOnePackFails(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f := &compactFix{e: e, clock: newCompactClock(), node: "n1", content: map[int64][]section{}}
		repo := &failStayingRepo{Repo: e.repo}
		repo.bad.Store("")
		s := f.open(t, repo)
		a := f.postBatch(t, s, "A", 4)
		b := f.postBatch(t, s, "B", 4)
		f.later = f.postBatch(t, s, "C", 1) // closes b's pack
		if a[0].Pack >= b[0].Pack {
			t.Fatalf("packs %s and %s not in name order", a[0].Pack, b[0].Pack)
		}
		del(t, e, a[0], b[0])
		time.Sleep(2 * time.Millisecond)
		cut := time.Now().UnixMilli()
		repo.bad.Store(a[0].Pack)
		res, err := s.PurgeDeleted(ctx, cut)
		if !errors.Is(err, errInjected) || res.Packs != 1 || res.Streams != 1 {
			t.Fatalf("PurgeDeleted = %+v, %v; want b's pack compacted and the error of a's", res, err)
		}
		if _, err := e.repo.GetStream(ctx, b[0].ID); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("purged stream of b: %v", err)
		}
		repo.bad.Store("")
		if res, err := s.PurgeDeleted(ctx, cut); err != nil || res.Packs != 1 || res.Streams != 1 {
			t.Fatalf("next PurgeDeleted = %+v, %v", res, err)
		}
		f.purge = []meta.Stream{a[0], b[0]}
		f.live = append(slices.Clone(a[1:]), b[1:]...)
		f.checkConsistent(t, s)
		for _, st := range append(f.live, f.later...) {
			if err := checkStream(s, st.ID, f.content[st.ID]); err != nil {
				t.Error(err)
			}
		}
		for _, st := range f.purge {
			if _, err := e.repo.GetStream(ctx, st.ID); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("purged stream %d: %v", st.ID, err)
			}
		}
	})
}

// TestCompactOpenPack: the open pack of a server that has received
// nothing since is compacted too (closed first, the next batch starting a
// new pack): streams deleted in it longer than the purge age go, whatever
// the server receives after.
func TestCompactOpenPack(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f := &compactFix{e: e, clock: newCompactClock(), node: "n1", content: map[int64][]section{}}
		s, err := store.Open(ctx, e.repo, e.codec, store.Options{
			Root: e.root(), Node: f.node, BlockSize: 4096, PackMax: packMax, Now: f.clock.now,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		ss := f.postBatch(t, s, "OPEN", 8)
		f.old = ss[0].Pack
		for i, st := range ss {
			if i%2 == 0 {
				f.purge = append(f.purge, st)
			} else {
				f.live = append(f.live, st)
			}
		}
		del(t, e, f.purge...)
		cut := time.Now().UnixMilli() + 1
		for time.Now().UnixMilli() < cut {
			time.Sleep(time.Millisecond)
		}
		res, err := s.PurgeDeleted(ctx, cut)
		if err != nil {
			t.Fatal(err)
		}
		if res.Streams != int64(len(f.purge)) || res.Packs != 1 {
			t.Fatalf("PurgeDeleted = %+v, want %d streams of the open pack", res, len(f.purge))
		}
		if _, err := os.Stat(filepath.Join(e.root(), f.old)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the open pack %s: %v, want it gone", f.old, err)
		}
		f.later = f.postBatch(t, s, "AFTER", 2)
		if p := f.later[0].Pack; p == f.old {
			t.Errorf("a post after the compaction went to the compacted pack %s", p)
		}
		for _, st := range f.purge {
			if _, err := e.repo.GetStream(ctx, st.ID); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("purged stream %d: %v", st.ID, err)
			}
		}
		for _, st := range append(slices.Clone(f.live), f.later...) {
			if err := checkStream(s, st.ID, f.content[st.ID]); err != nil {
				t.Errorf("live stream: %v", err)
			}
		}
		f.checkConsistent(t, s)
	})
}

// TestCompactNameCollision: the compaction's new pack is named as the
// writer names packs, from a sequence that starts at the clock's
// nanoseconds; after a start with the clock set back it can meet a pack
// of an earlier run in the same day's directory. The new pack's creation
// then fails (O_EXCL), and the compaction must leave that file alone: it
// removed it as its own new pack, and with it every stream in it.
func TestCompactNameCollision(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 8)
		// A pack of today's, whose name the compaction is about to take.
		today := f.postBatch(t, s, "TODAY-n1", 2)
		f.later = append(f.later, today...)
		seq, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(today[0].Pack), "N1-"), ".wpk"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		store.SetPackSeq(s, seq-1)
		if _, err := s.PurgeDeleted(ctx, f.cut); err == nil {
			t.Fatal("PurgeDeleted succeeded though the new pack's name was taken")
		}
		if _, err := os.Stat(filepath.Join(e.root(), today[0].Pack)); err != nil {
			t.Fatalf("today's pack, whose name the compaction tried: %v", err)
		}
		for _, st := range today {
			if err := readRow(s, mustRow(t, e, st.ID), f.content[st.ID]); err != nil {
				t.Errorf("stream %d of today's pack: %v", st.ID, err)
			}
		}
		// The next run, under a free name, compacts.
		res, err := s.PurgeDeleted(ctx, f.cut)
		if err != nil || res.Packs != 1 {
			t.Fatalf("PurgeDeleted = %+v, %v", res, err)
		}
		f.checkCompacted(t, s)
	})
}

// TestCompactShortPack: a pack whose file is shorter than its rows claim
// (damaged, or cut by a disk that lost its tail) cannot be copied whole.
// The compaction then changes nothing it cannot undo: the old pack stays
// as it is (the evidence), every staying stream that is readable reads as
// before, the new pack and its record go, and the rows still name the
// old pack.
func TestCompactShortPack(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 16)
		// The last stream of the pack (a staying one) loses its tail.
		last := f.recent[len(f.recent)-1]
		row := mustRow(t, e, last.ID)
		if row.PackOffset+row.FileSize != f.oldSize {
			t.Fatalf("stream %d is not the pack's last", last.ID)
		}
		path := filepath.Join(e.root(), f.old)
		if err := os.Truncate(path, f.oldSize-10); err != nil {
			t.Fatal(err)
		}
		before := packFiles(t, e.root())
		res, err := s.PurgeDeleted(ctx, f.cut)
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("PurgeDeleted = %+v, %v; want the short pack's error", res, err)
		}
		if res.Packs != 0 {
			t.Errorf("PurgeDeleted = %+v: a pack compacted", res)
		}
		if got := packSize(t, e, f.old); got != f.oldSize-10 {
			t.Errorf("the damaged pack is %d bytes, was %d", got, f.oldSize-10)
		}
		f.assertUncompacted(t, s, before, append(slices.Clone(f.live), f.recent[:len(f.recent)-1]...), func(id int64, err error) {
			if err != nil {
				t.Errorf("readable stream %d of the damaged pack: %v", id, err)
			}
		})
		for _, st := range f.purge {
			if _, err := e.repo.GetStream(ctx, st.ID); err != nil {
				t.Errorf("claimed stream %d of the damaged pack: %v", st.ID, err)
			}
		}
		// Every run tries again, and changes nothing.
		if _, err := s.PurgeDeleted(ctx, f.cut); err == nil {
			t.Fatal("second PurgeDeleted succeeded")
		}
		if after := packFiles(t, e.root()); !slices.Equal(before, after) {
			t.Errorf("packs %v after the second run, %v before", after, before)
		}
	})
}

// TestCompactDamagedStream: a staying stream whose bytes in the pack were
// damaged (bit rot, a bad disk) is not copied into a new pack as if it
// were good: the pack is not compacted, the error names the stream and
// says it is damaged, and nothing changes (the damaged pack stays, the
// evidence; no new pack or record is left; the other streams read as
// before). Once the damaged stream is deleted and purgeable, the pack
// compacts without it.
func TestCompactDamagedStream(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 16)
		bad := mustRow(t, e, f.live[1].ID)
		path := filepath.Join(e.root(), f.old)
		pf, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A bit in the payload of its first block (after the 24-byte
		// file header and the 28-byte block header).
		b := make([]byte, 1)
		at := bad.PackOffset + 24 + 28 + 3
		if _, err := pf.ReadAt(b, at); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x10
		if _, err := pf.WriteAt(b, at); err != nil {
			t.Fatal(err)
		}
		pf.Close()
		damaged, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		before := packFiles(t, e.root())

		res, err := s.PurgeDeleted(ctx, f.cut)
		if err == nil || !errors.Is(err, streamfile.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("stream %d", bad.ID)) {
			t.Fatalf("PurgeDeleted = %+v, %v; want an error naming stream %d as damaged", res, err, bad.ID)
		}
		if res.Packs != 0 {
			t.Errorf("PurgeDeleted = %+v: a pack compacted", res)
		}
		if now, err := os.ReadFile(path); err != nil || string(now) != string(damaged) {
			t.Errorf("the damaged pack changed (%v)", err)
		}
		f.assertUncompacted(t, s, before, append(slices.Clone(f.live), f.recent...), func(id int64, err error) {
			switch {
			case id == bad.ID && (err == nil || !strings.Contains(err.Error(), "checksum mismatch")):
				t.Errorf("damaged stream %d read: %v, want a checksum mismatch", id, err)
			case id != bad.ID && err != nil:
				t.Errorf("stream %d of the damaged pack: %v", id, err)
			}
		})
		for _, st := range f.purge {
			if _, err := e.repo.GetStream(ctx, st.ID); err != nil {
				t.Errorf("claimed stream %d of the damaged pack: %v", st.ID, err)
			}
		}

		// The operator deletes the damaged stream; once it may be purged,
		// the pack compacts without it.
		del(t, e, bad)
		cut := time.Now().UnixMilli() + 1
		for time.Now().UnixMilli() < cut {
			time.Sleep(time.Millisecond)
		}
		res, err = s.PurgeDeleted(ctx, cut)
		if err != nil || res.Packs != 1 {
			t.Fatalf("PurgeDeleted after the damaged stream's deletion = %+v, %v; want the pack compacted", res, err)
		}
		if _, err := e.repo.GetStream(ctx, bad.ID); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("the damaged stream after its purge: %v", err)
		}
		for _, st := range append(slices.Clone(f.live), f.later...) {
			if st.ID == bad.ID {
				continue
			}
			row := mustRow(t, e, st.ID)
			if row.Pack == f.old {
				t.Errorf("stream %d still in the old pack", st.ID)
			}
			if err := readRow(s, row, f.content[st.ID]); err != nil {
				t.Errorf("stream %d after the compaction: %v", st.ID, err)
			}
		}
	})
}

// TestCompactTakeover: a server that lost its node's lock (PostgreSQL)
// may be compacting when another server starts as that node on the same
// data directory; that start carries out the node's recorded pack
// removals (and removes its unnamed packs), the compaction's new pack
// among them. The compaction must then not repoint the rows to it: the
// staying streams would name a removed file.
func TestCompactTakeover(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 12)
		var s2 *store.Store
		store.SetCompactHook(s, func(at string) error {
			if at == "copied" && s2 == nil {
				s2 = f.open(t, nil) // the other server's start
			}
			return nil
		})
		if _, err := s.PurgeDeleted(ctx, f.cut); err == nil {
			t.Error("PurgeDeleted succeeded though its new pack was removed by another start")
		}
		s.Close()
		for _, st := range append(append(slices.Clone(f.live), f.recent...), f.later...) {
			if err := readRow(s2, mustRow(t, e, st.ID), f.content[st.ID]); err != nil {
				t.Errorf("staying stream %d: %v", st.ID, err)
			}
		}
		// The server that holds the lock now compacts.
		if _, err := s2.PurgeDeleted(ctx, f.cut); err != nil {
			t.Fatal(err)
		}
		f.checkCompacted(t, s2)
	})
}

// TestCompactLockLost: a server that lost its node's lock (PostgreSQL)
// stops compacting: no transaction repoints rows to a new pack that a
// server that took over the node may have removed, and no further pack
// is compacted. The recorded removal takes the new pack once the lock is
// held again.
func TestCompactLockLost(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 12)
		s.Close()
		var lost atomic.Bool
		errLost := errors.New("node lock lost")
		f.held = func() error {
			if lost.Load() {
				return errLost
			}
			return nil
		}
		s = f.open(t, nil)
		store.SetCompactHook(s, func(at string) error {
			if at == "copied" {
				lost.Store(true)
			}
			return nil
		})
		if _, err := s.PurgeDeleted(ctx, f.cut); !errors.Is(err, errLost) {
			t.Fatalf("PurgeDeleted after the lock was lost: %v", err)
		}
		for _, st := range append(slices.Clone(f.live), f.recent...) {
			if row := mustRow(t, e, st.ID); row.Pack != f.old {
				t.Errorf("stream %d repointed to %s after the lock was lost", st.ID, row.Pack)
			}
		}
		// Not while it is lost either.
		if _, err := s.PurgeDeleted(ctx, f.cut); !errors.Is(err, errLost) {
			t.Fatalf("PurgeDeleted while the lock is lost: %v", err)
		}
		lost.Store(false)
		store.SetCompactHook(s, nil)
		if _, err := s.PurgeDeleted(ctx, f.cut); err != nil {
			t.Fatal(err)
		}
		f.checkCompacted(t, s)
	})
}

// TestCompactDiskFull: the store's disk fills during the compaction's
// copy (a tmpfs with a few KiB left). The copy fails, and everything stays
// as it was: the rows name the old pack, whose streams read as before, and
// the new pack and its recorded removal go. With space again the next run
// compacts. Needs root (to mount the tmpfs).
func TestCompactDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := os.MkdirAll(e.root(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", e.root(), "tmpfs", 0, "size=4m"); err != nil {
			t.Skipf("mount tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(e.root(), syscall.MNT_DETACH) })
		f, s := newCompactFix(t, e, "n1", 24)
		// Fill the disk, then leave a page free: less than the staying
		// streams' bytes.
		filler := filepath.Join(e.root(), "filler")
		fl, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		var n int64
		for {
			w, err := fl.Write(buf)
			n += int64(w)
			if err != nil {
				break
			}
		}
		if err := fl.Truncate(n - 4096); err != nil {
			t.Fatal(err)
		}
		fl.Close()
		before := packFiles(t, e.root())
		res, err := s.PurgeDeleted(ctx, f.cut)
		if !errors.Is(err, syscall.ENOSPC) || res.Packs != 0 {
			t.Fatalf("PurgeDeleted on a full disk = %+v, %v; want ENOSPC", res, err)
		}
		f.assertUncompacted(t, s, before, append(slices.Clone(f.live), f.recent...), func(id int64, err error) {
			if err != nil {
				t.Errorf("stream %d: %v", id, err)
			}
		})
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if res, err := s.PurgeDeleted(ctx, f.cut); err != nil || res.Packs != 1 {
			t.Fatalf("PurgeDeleted with space again = %+v, %v", res, err)
		}
		f.checkCompacted(t, s)
	})
}

// TestCompactRecordedRemovalFails: a recorded pack removal that cannot be
// carried out (here its path is a directory that is not empty; in life a
// file the server may not remove) must not hold up the start, the purge
// or the other records: those go on, and the error is returned (and
// tried again by the next run).
func TestCompactRecordedRemovalFails(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		f, s := newCompactFix(t, e, "n1", 12)
		s.Close()
		// A stuck record, sorted first, and a plain leftover after it.
		stuck := filepath.Join("packs", "2025", "01", "01", "N1-1.wpk")
		if err := os.MkdirAll(filepath.Join(e.root(), stuck, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		leftover := filepath.Join("packs", "2025", "01", "01", "N1-2.wpk")
		if err := os.WriteFile(filepath.Join(e.root(), leftover), []byte("left"), 0o640); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{stuck, leftover} {
			if err := e.repo.AddPackRemoval(ctx, f.node, p); err != nil {
				t.Fatal(err)
			}
		}
		s = f.open(t, nil) // must start
		if _, err := os.Stat(filepath.Join(e.root(), leftover)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the leftover after the stuck record: %v", err)
		}
		res, err := s.PurgeDeleted(ctx, f.cut)
		if err == nil {
			t.Error("PurgeDeleted hid the stuck removal's error")
		}
		if res.Packs != 1 || res.Streams != int64(len(f.purge)) {
			t.Fatalf("PurgeDeleted = %+v, %v: the stuck record held up the purge", res, err)
		}
		if err := os.RemoveAll(filepath.Join(e.root(), stuck)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PurgeDeleted(ctx, f.cut); err != nil {
			t.Fatal(err)
		}
		f.checkCompacted(t, s)
	})
}
