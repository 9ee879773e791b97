package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

type env struct {
	dir   string
	dsn   string
	repo  *meta.Repo
	codec *streamfile.Codec
}

func engines(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, newEnv(t, "")) })
	t.Run("postgres", func(t *testing.T) { fn(t, newEnv(t, metatest.PostgresDSN(t))) })
}

func newEnv(t *testing.T, dsn string) *env {
	t.Helper()
	dir := t.TempDir()
	repo, err := meta.Open(context.Background(), dsn, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	codec, err := streamfile.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codec.Close)
	return &env{dir: dir, dsn: dsn, repo: repo, codec: codec}
}

func (e *env) open(t *testing.T, reg prometheus.Registerer, readOnly bool) *store.Store {
	t.Helper()
	var m *store.Metrics
	if reg != nil {
		m = store.NewMetrics(reg)
	}
	s, err := store.Open(context.Background(), e.repo, e.codec, store.Options{
		Root: filepath.Join(e.dir, "store"), Node: "n1", BlockSize: 4096, Metrics: m, ReadOnly: readOnly,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func spec(feed string) store.Spec {
	now := time.Now().UnixMilli()
	return store.Spec{Feed: feed, Type: "Raw Events", CreateMs: now, EffectiveMs: now, ReceiptID: "r-" + feed}
}

func write(t *testing.T, w *store.Writer, ch streamfile.Channel, part int, data []byte) {
	t.Helper()
	sw, err := w.Open(ch, part)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, s *store.Store, id int64, ch streamfile.Channel, part int) []byte {
	t.Helper()
	r, err := s.Open(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sec, err := r.Section(ch, part)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(sec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// files lists the regular files under the store root.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, root+"/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWriteCommitRead(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.open(t, nil, false)
		post := s.Begin()
		a, err := post.NewStream(context.Background(), spec("FEED-A"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := post.NewStream(context.Background(), spec("FEED-B"))
		if err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat([]byte("0123456789abcdef"), 2000) // several blocks
		write(t, a, streamfile.Data, 0, big)
		write(t, a, streamfile.Meta, 0, []byte("StreamSize:32000\n"))
		write(t, a, streamfile.Data, 1, []byte("part two"))
		write(t, a, streamfile.Context, 1, []byte("ctx two"))
		write(t, b, streamfile.Data, 0, []byte("other feed"))
		attrs := &attr.Map{}
		attrs.Put("Feed", "FEED-A")
		a.SetAttributes(attrs)

		// Nothing is readable before the commit.
		if _, err := s.Open(context.Background(), a.ID()); !errors.Is(err, store.ErrNotReadable) {
			t.Fatalf("open before commit: %v", err)
		}
		streams, err := post.Commit(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(streams) != 2 || streams[0].Status != meta.Unlocked || streams[0].Parts != 2 ||
			streams[0].RawSize != int64(len(big))+8 || streams[1].RawSize != 10 || streams[0].FileSize == 0 {
			t.Fatalf("committed %+v", streams)
		}
		if got := read(t, s, a.ID(), streamfile.Data, 0); !bytes.Equal(got, big) {
			t.Fatal("part 0 data differs")
		}
		if got := read(t, s, a.ID(), streamfile.Context, 1); string(got) != "ctx two" {
			t.Fatalf("context %q", got)
		}
		if got := read(t, s, b.ID(), streamfile.Data, 0); string(got) != "other feed" {
			t.Fatalf("b data %q", got)
		}
		row, err := e.repo.GetStream(context.Background(), a.ID())
		if err != nil || row.Attributes.Value("Feed") != "FEED-A" || row.Status != meta.Unlocked {
			t.Fatalf("row %+v %v", row, err)
		}
		// Files are named by type, date and id, and none is left under a temporary name.
		for _, f := range files(t, filepath.Join(e.dir, "store")) {
			if !strings.HasPrefix(f, "RAW_EVENTS/") || !strings.HasSuffix(f, ".wst") {
				t.Errorf("unexpected file %s", f)
			}
		}
	})
}

func TestAbortLeavesNothing(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.open(t, nil, false)
		post := s.Begin()
		w, err := post.NewStream(context.Background(), spec("FEED-A"))
		if err != nil {
			t.Fatal(err)
		}
		write(t, w, streamfile.Data, 0, []byte("half a post"))
		post.Abort()
		post.Abort() // idempotent
		if got := files(t, filepath.Join(e.dir, "store")); len(got) != 0 {
			t.Fatalf("files left: %v", got)
		}
		rows, err := e.repo.ListStreams(context.Background(), meta.StreamFilter{})
		if err != nil || len(rows) != 0 {
			t.Fatalf("rows left: %+v %v", rows, err)
		}
	})
}

// TestRecoverAfterCrash simulates a crash at each point of a stream's life
// by stopping work there and opening a new Store on the same directory and
// database, as a restarted server does.
func TestRecoverAfterCrash(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.open(t, nil, false)
		ctx := context.Background()

		// Committed: must survive.
		done := s.Begin()
		w, _ := done.NewStream(ctx, spec("KEPT"))
		write(t, w, streamfile.Data, 0, []byte("acknowledged"))
		if _, err := done.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		// Row created, file half written (".lock").
		half := s.Begin()
		w2, _ := half.NewStream(ctx, spec("HALF"))
		write(t, w2, streamfile.Data, 0, []byte("in flight"))
		// Row created, file complete and renamed, but never unlocked: simulate by
		// renaming a copy of the lock file to the final name.
		renamed := s.Begin()
		w3, _ := renamed.NewStream(ctx, spec("RENAMED"))
		write(t, w3, streamfile.Data, 0, []byte("renamed"))
		var lockFiles []string
		for _, f := range files(t, filepath.Join(e.dir, "store")) {
			if strings.HasSuffix(f, ".lock") {
				lockFiles = append(lockFiles, f)
			}
		}
		if len(lockFiles) != 2 {
			t.Fatalf("lock files %v", lockFiles)
		}
		for _, f := range lockFiles {
			if strings.Contains(f, "RENAMED") {
				p := filepath.Join(e.dir, "store", f)
				if err := os.Rename(p, strings.TrimSuffix(p, ".lock")); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.Close() // the "crash": the in-flight posts never commit

		s2 := e.open(t, nil, false)
		rows, err := e.repo.ListStreams(ctx, meta.StreamFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Feed != "KEPT" || rows[0].Status != meta.Unlocked {
			t.Fatalf("after recovery: %+v", rows)
		}
		if got := read(t, s2, rows[0].ID, streamfile.Data, 0); string(got) != "acknowledged" {
			t.Fatalf("kept data %q", got)
		}
		if got := files(t, filepath.Join(e.dir, "store")); len(got) != 1 || !strings.Contains(got[0], "KEPT=") {
			t.Fatalf("files after recovery: %v", got)
		}
	})
}

// TestGroupCommit shows concurrent posts sharing commits: with many posts
// committing at once, some batch must hold more than one request.
func TestGroupCommit(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		reg := prometheus.NewRegistry()
		s := e.open(t, reg, false)
		const posts = 64
		var wg sync.WaitGroup
		errs := make(chan error, posts)
		start := make(chan struct{})
		for i := 0; i < posts; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				post := s.Begin()
				w, err := post.NewStream(context.Background(), spec(fmt.Sprintf("FEED-%d", i)))
				if err != nil {
					errs <- err
					return
				}
				sw, _ := w.Open(streamfile.Data, 0)
				fmt.Fprintf(sw, "post %d", i)
				sw.Close()
				if _, err := post.Commit(context.Background()); err != nil {
					errs <- err
				}
			}(i)
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		rows, err := e.repo.ListStreams(context.Background(), meta.StreamFilter{Status: meta.Unlocked})
		if err != nil || len(rows) != posts {
			t.Fatalf("%d unlocked rows, %v", len(rows), err)
		}
		for _, r := range rows {
			want := "post " + strings.TrimPrefix(r.Feed, "FEED-")
			if got := read(t, s, r.ID, streamfile.Data, 0); string(got) != want {
				t.Fatalf("stream %d: %q want %q", r.ID, got, want)
			}
		}
		var h *dto.Histogram
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "weir_store_commit_batch_size" {
				h = mf.GetMetric()[0].GetHistogram()
			}
		}
		if h == nil {
			t.Fatal("no batch size metric")
		}
		// 64 creates + 64 commits; fewer batches than requests proves sharing.
		if h.GetSampleCount() >= 2*posts || h.GetSampleSum() != 2*posts {
			t.Fatalf("batches %d for %v requests: no group commit", h.GetSampleCount(), h.GetSampleSum())
		}
	})
}

func TestReadOnlyDoesNotRecoverOrWrite(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.open(t, nil, false)
		post := s.Begin()
		w, err := post.NewStream(context.Background(), spec("LIVE"))
		if err != nil {
			t.Fatal(err)
		}
		write(t, w, streamfile.Data, 0, []byte("being written"))
		// An admin command opening the store now must not touch the in-flight stream.
		ro := e.open(t, nil, true)
		if _, err := ro.Begin().NewStream(context.Background(), spec("NO")); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("read-only write: %v", err)
		}
		if _, err := post.Commit(context.Background()); err != nil {
			t.Fatalf("commit beside read-only store: %v", err)
		}
		if got := read(t, ro, w.ID(), streamfile.Data, 0); string(got) != "being written" {
			t.Fatalf("read-only read %q", got)
		}
	})
}

func TestOpenMissingAndCorrupt(t *testing.T) {
	e := newEnv(t, "")
	s := e.open(t, nil, false)
	if _, err := s.Open(context.Background(), 12345); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	post := s.Begin()
	w, _ := post.NewStream(context.Background(), spec("FEED"))
	write(t, w, streamfile.Data, 0, bytes.Repeat([]byte("x"), 10000))
	streams, err := post.Commit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := s.Path(streams[0])
	b, _ := os.ReadFile(p)
	b[len(b)/3] ^= 0xff
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
	r, err := s.Open(context.Background(), streams[0].ID)
	if err == nil {
		defer r.Close()
		sec, _ := r.Section(streamfile.Data, 0)
		_, err = io.ReadAll(sec)
	}
	if !errors.Is(err, streamfile.ErrCorrupt) {
		t.Fatalf("corrupt stream read: %v", err)
	}
}

// TestHopReceiptIDs: earlier hops' receipt ids are recorded once per
// stream, at most store.MaxHopReceiptIDs across a post's streams, and a
// stream is then found by any of them.
func TestHopReceiptIDs(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := e.open(t, nil, false)
		post := s.Begin()
		a, err := post.NewStream(ctx, spec("FEED-A"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := post.NewStream(ctx, spec("FEED-B"))
		if err != nil {
			t.Fatal(err)
		}
		write(t, a, streamfile.Data, 0, []byte("a"))
		write(t, b, streamfile.Data, 0, []byte("b"))
		a.AddHopReceiptIDs([]string{"edge-1", "proxy-1"})
		a.AddHopReceiptIDs([]string{"edge-1", "proxy-2"}) // a second part from the same sender
		many := make([]string, store.MaxHopReceiptIDs)
		for i := range many {
			many[i] = fmt.Sprintf("hop-%05d", i)
		}
		b.AddHopReceiptIDs(many)
		streams, err := post.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := streams[0].HopReceiptIDs; !slices.Equal(got, []string{"edge-1", "proxy-1", "proxy-2"}) {
			t.Errorf("stream a records %q, want each id once", got)
		}
		if n := len(streams[1].HopReceiptIDs); n != store.MaxHopReceiptIDs-3 {
			t.Errorf("stream b records %d ids, want %d (the post's bound less a's 3)", n, store.MaxHopReceiptIDs-3)
		}
		for id, want := range map[string]int64{"proxy-2": a.ID(), "hop-00000": b.ID(), many[store.MaxHopReceiptIDs-4]: b.ID()} {
			got, err := e.repo.ListStreams(ctx, meta.StreamFilter{AnyReceiptID: id})
			if err != nil || len(got) != 1 || got[0].ID != want {
				t.Errorf("streams with receipt id %s: %v %v, want stream %d", id, got, err, want)
			}
		}
		if got, _ := e.repo.ListStreams(ctx, meta.StreamFilter{AnyReceiptID: many[store.MaxHopReceiptIDs-3]}); len(got) != 0 {
			t.Errorf("an id past the bound was recorded: %v", got)
		}
	})
}

// TestLongFeedNames writes streams of feeds whose names are too long for a
// file name as they are (a sender may post to any name in RECEIVE_ALL
// mode): they are stored and read back, their files' names fit NAME_MAX
// with the ".lock" of a stream being written, and a name that fits keeps
// the file name it always had, so existing streams are found where they are.
func TestLongFeedNames(t *testing.T) {
	e := newEnv(t, "")
	s := e.open(t, nil, false)
	fits := strings.Repeat("F", 240) // 240 + len("=001.wst.lock") = 253
	names := []string{fits, strings.Repeat("L", 243), strings.Repeat("x", 300), strings.Repeat("é", 2000)}
	ids := map[string]int64{}
	for _, name := range names {
		post := s.Begin()
		w, err := post.NewStream(context.Background(), spec(name))
		if err != nil {
			t.Fatal(err)
		}
		write(t, w, streamfile.Data, 0, []byte("data of "+name[:4]))
		if _, err := post.Commit(context.Background()); err != nil {
			t.Fatalf("feed of %d bytes: %v", len(name), err)
		}
		ids[name] = w.ID()
	}
	for _, name := range names {
		if got := read(t, s, ids[name], streamfile.Data, 0); string(got) != "data of "+name[:4] {
			t.Errorf("feed of %d bytes: read %q", len(name), got)
		}
	}
	var cut int
	for _, f := range files(t, filepath.Join(e.dir, "store")) {
		base := filepath.Base(f)
		if len(base)+len(".lock") > 255 {
			t.Errorf("file name of %d bytes: %s", len(base), base)
		}
		switch {
		case strings.HasPrefix(base, fits+"="):
			if base != fits+"=001.wst" {
				t.Errorf("a name that fits changed: %s", base)
			}
		case strings.Contains(base, "~="):
			cut++
		default:
			t.Errorf("unexpected file %s", base)
		}
	}
	if cut != 3 {
		t.Errorf("%d cut names, want 3", cut)
	}
}

// lostAnswerRepo commits each batch holding stream rows while lose is set,
// then reports a failure, as a database whose answer to COMMIT was lost
// does.
type lostAnswerRepo struct {
	*meta.Repo
	lose atomic.Bool
}

func (r *lostAnswerRepo) Apply(ctx context.Context, b *meta.Batch) error {
	if err := r.Repo.Apply(ctx, b); err != nil {
		return err
	}
	if r.lose.Load() && len(b.Unlock)+len(b.Packed) > 0 {
		return errors.New("injected failure: the answer to COMMIT was lost")
	}
	return nil
}

// TestForwardedPostForgottenWhenCommitFails: a trusted forwarder's post
// whose commit fails is not remembered as forwarded, even when the
// transaction did commit (its answer lost): the abort removes the post's
// own-file streams and its pack, so a resend answered with its receipt id
// would be lost. A post recorded under another receipt id stays.
func TestForwardedPostForgottenWhenCommitFails(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		repo := &lostAnswerRepo{Repo: e.repo}
		s, err := store.Open(ctx, repo, e.codec, store.Options{Root: e.root(), Node: "n1", BlockSize: 4096, PackMax: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		commit := func(k meta.ForwardKey, feed string, size int) error {
			t.Helper()
			post := s.Begin()
			post.SetForward(k)
			w, err := post.NewStream(ctx, spec(feed))
			if err != nil {
				t.Fatal(err)
			}
			write(t, w, streamfile.Data, 0, randomBytes(7, size))
			_, err = post.Commit(ctx)
			return err
		}
		stored := meta.ForwardKey{Sender: "TOKEN:proxy-1", GUID: "stored"}
		if err := commit(stored, "KEPT", 100); err != nil {
			t.Fatal(err)
		}
		repo.lose.Store(true)
		for _, c := range []struct {
			guid string
			size int
		}{{"own-file", 64 << 10}, {"packed", 100}} {
			k := meta.ForwardKey{Sender: "TOKEN:proxy-1", GUID: c.guid}
			if err := commit(k, "LOST", c.size); err == nil {
				t.Fatalf("%s: commit succeeded", c.guid)
			}
			if rid, ok, err := e.repo.ForwardedReceipt(ctx, k); err != nil || ok {
				t.Errorf("%s: remembered as forwarded after a failed commit: %q %v %v", c.guid, rid, ok, err)
			}
		}
		// The same key, failing under another receipt id, leaves the
		// stored post's record alone.
		if err := commit(stored, "OTHER", 100); err == nil {
			t.Fatal("commit succeeded")
		}
		if rid, ok, err := e.repo.ForwardedReceipt(ctx, stored); err != nil || rid != "r-KEPT" {
			t.Errorf("the stored post's record: %q %v %v", rid, ok, err)
		}
	})
}

// TestProblem: the few words a stream's reader is told about a file that
// cannot be read, and none for errors that are not about reading it.
func TestProblem(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("stream 3: %w", streamfile.ErrCorrupt), "its stored data is damaged"},
		{fmt.Errorf("stream 3: open file: %w", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}), "its stored file is missing"},
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, "its stored file may not be read (permissions)"},
		{&os.PathError{Op: "read", Path: "/x", Err: syscall.EIO}, "the disk failed to read its stored file (I/O error)"},
		{&os.PathError{Op: "write", Path: "/export.zip", Err: syscall.EIO}, ""},
		{errors.New("database is locked"), ""},
	} {
		if got := store.Problem(c.err); got != c.want {
			t.Errorf("Problem(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
