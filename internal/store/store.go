// Package store keeps streams: one immutable stream file per stream on a
// volume, plus its metadata row. A stream becomes visible (UNLOCKED) only
// after its file is fsynced, renamed into place, its directory fsynced and its
// row committed; concurrent posts share directory fsyncs and one metadata
// transaction through a group committer.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/repeatlog"
	"github.com/weirhq/weir/internal/streamfile"
)

// Repo is the part of the metadata repository the store needs.
type Repo interface {
	Apply(ctx context.Context, b *meta.Batch) error
	GetStream(ctx context.Context, id int64) (meta.Stream, error)
	LockedStreams(ctx context.Context, node string) ([]meta.Stream, error)
	PackLive(ctx context.Context, pack string) (int64, error)
	DeletedStreamsBefore(ctx context.Context, node string, beforeMs int64, after meta.PurgeCursor, limit int) ([]meta.Stream, meta.PurgeCursor, error)
	ClaimPurge(ctx context.Context, node string, ids []int64, beforeMs int64) ([]int64, error)
	ClaimPack(ctx context.Context, pack string, beforeMs int64) ([]int64, error)
	PurgeStreams(ctx context.Context, ids []int64) error
	PackStreamIDs(ctx context.Context, pack string) ([]int64, error)
	PackReferenced(ctx context.Context, pack string) (bool, error)
	ClaimPackDeleted(ctx context.Context, pack string, beforeMs int64) ([]int64, error)
	PackStaying(ctx context.Context, pack string) ([]meta.PackMove, error)
	AddPackRemoval(ctx context.Context, node, pack string) error
	PackRemovals(ctx context.Context, node string) ([]string, error)
	DonePackRemoval(ctx context.Context, pack string) error
	CompactPack(ctx context.Context, node, old, newPack string, moves []meta.PackMove, purge []int64) error
	ReserveStreamIDs(ctx context.Context, n int) ([]meta.IDRange, error)
	AdvanceStreamIDs(ctx context.Context, max int64) error
	LogMark(ctx context.Context, node string) (meta.LogMark, bool, error)
	OpenLogPack(ctx context.Context, node, pack string, prevEnd int64) (int64, error)
	LogPacks(ctx context.Context, node string, from int64) ([]meta.LogPack, error)
}

// Options configures a Store.
type Options struct {
	Root      string // directory holding stream files
	Node      string // this node's name; its LOCKED rows are cleaned up at start
	BlockSize int    // uncompressed bytes per compressed block
	// PackMax is the largest stream file kept in memory and written into
	// the group commit's shared pack file; bigger streams get a file of
	// their own. 0: every stream gets its own file.
	PackMax int
	// PackSegment is the size past which the open pack is closed and the
	// next batch starts a new one; 0: packSegmentSize.
	PackSegment int64
	Logger      *slog.Logger
	Metrics     *Metrics // may be nil
	Now         func() time.Time
	// PurgeBatch is how many streams PurgeDeleted handles at a time; 0:
	// defaultPurgeBatch.
	PurgeBatch int
	// ReadOnly opens the store for reading only: no recovery and no
	// committer, so an admin command can read while a server writes.
	ReadOnly bool
	// Held, if set, says why this server may no longer act as its node
	// (its node lock lost: another server may have started as it), or
	// nil. A purge checks it before each batch of streams, a compaction
	// of packs before each pack and before the transaction that repoints
	// the rows, and each stops when it fails.
	Held func() error
	// Log makes the store answer a post whose streams are all packed as
	// soon as its record (rows and bytes) is durable in the pack, and
	// insert its rows after (store.commit: log); Sync waits for them.
	// Otherwise every post waits for its rows' transaction.
	Log bool
	// CommitTimeout bounds each group commit's metadata transaction: a
	// database that does not answer within it (cut off without a reset,
	// or stuck) fails the batch, and its posts are refused, instead of
	// every post waiting as long as TCP does. 0: no bound.
	CommitTimeout time.Duration
}

// Store writes and reads streams.
type Store struct {
	opt     Options
	packSeq atomic.Int64 // pack file names: unique per node across restarts
	// packMu guards pack, the pack batches append to, and packsInFlight,
	// the number of batches written to each pack whose rows are not yet
	// committed (or failed).
	packMu        sync.Mutex
	packWriteMu   sync.Mutex // held by writePack: one batch is written at a time
	pack          *openPack
	packsInFlight map[string]int
	// compacting are the packs being compacted (under packMu):
	// removePack leaves them alone.
	compacting map[string]bool
	// purgeMu makes PurgeDeleted's runs take turns: the recorded pack
	// removals it carries out must not meet a compaction's new pack.
	purgeMu     sync.Mutex
	compactHook func(step string) error      // tests: see compactStep
	stageHook   atomic.Pointer[func() error] // tests: an error fails stage one's batch
	zeros       []byte                       // packZeroAhead zero bytes, for zeroAhead (under packWriteMu)
	packBufs    sync.Pool                    // *bytes.Buffer for small streams
	repo        Repo
	codec       *streamfile.Codec
	commits     chan *request
	done        chan struct{}
	closeMu     sync.RWMutex // held for reading while a request is submitted; Close takes it to stop submissions
	closed      bool
	left        leftovers // rows of aborted posts still to remove (see retryLeftovers)
	dirs        durableDirs
	// syncDir flushes a directory's entries: fsutil.SyncDir, unless a
	// test watches.
	syncDir func(dir string) error
	// closing is closed when Close begins: a transaction of answered
	// posts' rows that keeps failing is then left to the next start.
	closing chan struct{}

	ids *idSource // stream ids for packed rows
	// tail is where the log ends when no pack is open (guarded by
	// packMu): the next pack is listed after it (meta.Repo.OpenLogPack).
	tail   logEnd
	recBuf []byte   // records' frames and rows (under packWriteMu)
	iov    [][]byte // a batch's buffers (under packWriteMu)

	// With Options.Log: rows of answered posts not yet inserted, and
	// the error of their failing transaction (which refuses new posts).
	pendingRows atomic.Int64
	failMu      sync.Mutex
	failing     error
	// tries counts the tries of the failing transaction begun, triesDone
	// those ended, and tried is closed and replaced at the end of each;
	// tryNow asks for one at once (see awaitRecovery).
	tries, triesDone uint64
	tried            chan struct{}
	tryNow           chan struct{}
	failLog          *repeatlog.Failures
	abandoned        bool // closing with rows not recorded: stage two records no more (its goroutine only)

	// Stage one's batches are numbered; acked is the last one written
	// (its early posts answered), synced the last one done with by stage
	// two, and syncCh is closed and replaced when it moves (see Sync).
	acked  atomic.Uint64
	syncMu sync.Mutex
	synced uint64
	syncCh chan struct{}
	hurry  chan struct{} // a caller of Sync waits: record now (see more)
}

// ErrNotReadable is returned by Open for a stream that exists but is not
// complete (LOCKED) or was deleted.
var ErrNotReadable = errors.New("stream is not readable")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("store is closed")

// Open starts a store: it cleans up streams this node left LOCKED (a crash
// while they were written) and starts the group committer.
func Open(ctx context.Context, repo Repo, codec *streamfile.Codec, opt Options) (*Store, error) {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.BlockSize == 0 {
		opt.BlockSize = streamfile.DefaultBlockSize
	}
	if opt.PackSegment <= 0 {
		opt.PackSegment = packSegmentSize
	}
	if err := os.MkdirAll(opt.Root, 0o750); err != nil {
		return nil, fmt.Errorf("create store root: %w", err)
	}
	s := &Store{opt: opt, repo: repo, codec: codec, commits: make(chan *request, 1024), done: make(chan struct{}),
		closing: make(chan struct{}), syncCh: make(chan struct{}), hurry: make(chan struct{}, 1),
		tried: make(chan struct{}), tryNow: make(chan struct{}, 1), failLog: repeatlog.New(time.Minute),
		ids: newIDSource(repo.ReserveStreamIDs, opt.CommitTimeout)}
	s.packSeq.Store(time.Now().UnixNano())
	s.packBufs.New = func() any { return new(bytes.Buffer) }
	if opt.ReadOnly {
		s.closed = true
		close(s.done)
		return s, nil
	}
	// The root's entry, which MkdirAll may just have made: every
	// directory below is made durable up to it (mkdirAllSync).
	if err := fsutil.SyncDir(filepath.Dir(filepath.Clean(opt.Root))); err != nil {
		return nil, fmt.Errorf("create store root: %w", err)
	}
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	// Before orphans are looked for: a pack whose records no transaction
	// recorded is one only once they are.
	if err := s.replay(ctx); err != nil {
		return nil, err
	}
	if err := s.removeOrphanPacks(ctx); err != nil {
		return nil, err
	}
	// Packs a compaction cut short left behind. One that cannot be
	// removed is garbage, not a reason not to start: the purge tries again.
	n, err := s.removeRecordedPacks(ctx)
	if n > 0 {
		s.opt.Logger.Warn("removed packs left by a compaction cut short", "count", n, "node", s.opt.Node)
	}
	if err != nil {
		s.opt.Logger.Warn("cannot remove packs left by a compaction cut short; trying again at the next purge", "node", s.opt.Node, "err", err)
	}
	go s.commitLoop()
	return s, nil
}

// Close stops the committer after the requests already submitted.
func (s *Store) Close() {
	s.closeMu.Lock()
	if !s.closed && !s.opt.ReadOnly {
		s.closed = true
		close(s.closing)
		close(s.commits)
	}
	s.closeMu.Unlock()
	<-s.done
}

// recover removes what a crash left behind: LOCKED rows of this node and
// their files (under either name). Nothing of theirs was ever acknowledged.
func (s *Store) recover(ctx context.Context) error {
	locked, err := s.repo.LockedStreams(ctx, s.opt.Node)
	if err != nil {
		return fmt.Errorf("recover: list locked streams: %w", err)
	}
	if len(locked) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(locked))
	dirs := map[string]bool{}
	for i := range locked {
		p := s.path(&locked[i])
		for _, name := range []string{p + lockSuffix, p} {
			if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("recover: remove %s: %w", name, err)
			}
		}
		dirs[filepath.Dir(p)] = true
		ids = append(ids, locked[i].ID)
	}
	// The removals must be durable before the rows go: a power cut after
	// the rows' deletion would otherwise bring a file back that no row
	// names, and no later recovery would find it.
	for dir := range dirs {
		if err := fsutil.SyncDir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("recover: %w", err)
		}
	}
	if err := s.repo.Apply(ctx, &meta.Batch{Delete: ids}); err != nil {
		return fmt.Errorf("recover: delete %d locked streams: %w", len(ids), err)
	}
	s.opt.Logger.Warn("removed streams left incomplete by an earlier stop", "count", len(ids), "node", s.opt.Node)
	return nil
}

const (
	fileSuffix = ".wst"
	lockSuffix = ".lock"
)

// path is the stream file of a stream:
// <root>/<TYPE>/<yyyy>/<MM>/<dd>/[<id groups>/]<FEED>=<padded id>.wst
// Everything in it is fixed when the row is created, so it is derived, not stored.
func (s *Store) path(st *meta.Stream) string {
	t := time.UnixMilli(st.CreateMs).UTC()
	padded := strconv.FormatInt(st.ID, 10)
	if r := len(padded) % 3; r != 0 {
		padded = strings.Repeat("0", 3-r) + padded
	}
	parts := []string{s.opt.Root, safeName(st.Type), t.Format("2006"), t.Format("01"), t.Format("02")}
	for i := 0; i+3 < len(padded); i += 3 {
		parts = append(parts, padded[i:i+3])
	}
	parts = append(parts, fileName(st.Feed, padded))
	return filepath.Join(parts...)
}

// maxFileName is the longest name of a directory entry (NAME_MAX on Linux
// and the common filesystems).
const maxFileName = 255

// fileName is a stream file's name, <FEED>=<padded id>.wst. A feed name
// long enough to take it (or its .lock while it is written) past
// maxFileName is cut, and the cut marked with a "~", which safeName never
// writes: the id alone keeps the name unique, and a feed name that long is
// as valid as any other (a sender may post to one in RECEIVE_ALL mode).
// Every name that fits maps as it always has, so the paths of existing
// streams never change.
func fileName(feed, padded string) string {
	name, tail := safeName(feed), "="+padded+fileSuffix
	if keep := maxFileName - len(lockSuffix) - len(tail) - 1; len(name) > keep+1 {
		name = name[:keep] + "~"
	}
	return name + tail
}

// safeName upper-cases a feed or type name and replaces every character
// outside [A-Z0-9_-] so that any name maps to one safe directory entry.
func safeName(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// Spec describes a stream about to be written.
type Spec struct {
	Feed        string
	Type        string
	CreateMs    int64
	EffectiveMs int64
	ReceiptID   string
}

// Post groups the streams written for one received post: they become
// visible together on Commit, or not at all.
type Post struct {
	s       *Store
	writers []*Writer
	held    int // bytes of the post's finished streams held in memory
	hopIDs  int // earlier hops' receipt ids recorded across its streams
	forward meta.ForwardKey
	// submitted: Commit handed the post's rows to the committer, so a
	// failure may still have committed them (see meta.Batch.Forget).
	submitted bool
}

// SetForward names the post as one a trusted forwarder sent (see
// meta.Stream.Forward): its commit records it, so that the same post sent
// again is recognised. Call it before Commit.
func (p *Post) SetForward(k meta.ForwardKey) { p.forward = k }

// MaxHopReceiptIDs bounds the earlier hops' receipt ids one post records
// across all its streams (distinct per stream): a sender controls the
// paths, and each becomes a row in the post's commit. Ids past it are not
// recorded (the stream is still found by those recorded and its own).
const MaxHopReceiptIDs = 20_000

// heldPerPost bounds the finished streams a post holds in memory, in
// multiples of PackMax: past it they move to files of their own (see Done).
const heldPerPost = 16

// Begin starts a post.
func (s *Store) Begin() *Post { return &Post{s: s} }

// Writer writes one stream's file. A stream starts in memory when packing
// is on; if it grows past PackMax it moves to a file of its own (with a
// LOCKED row, as every big stream has while it is written).
type Writer struct {
	post  *Post
	ctx   context.Context
	row   *meta.Stream
	path  string
	f     *os.File
	buf   *bytes.Buffer // in memory until it spills (nil once it has a file)
	sf    *streamfile.Writer
	attrs *attr.Map
	err   error               // the spill failed
	done  bool                // Done: the stream file is finished
	hops  map[string]struct{} // row.HopReceiptIDs, as a set
}

// NewStream starts a stream: in memory, or with its LOCKED row (which
// allocates its id) and its file under a temporary name.
func (p *Post) NewStream(ctx context.Context, spec Spec) (*Writer, error) {
	row := &meta.Stream{
		Feed: spec.Feed, Type: spec.Type, Status: meta.Locked,
		CreateMs: spec.CreateMs, EffectiveMs: spec.EffectiveMs,
		Node: p.s.opt.Node, ReceiptID: spec.ReceiptID, Attributes: &attr.Map{},
	}
	w := &Writer{post: p, ctx: ctx, row: row}
	// Track the writer before anything else can fail so that Abort cleans up.
	p.writers = append(p.writers, w)
	var out io.Writer = w
	if p.s.opt.PackMax > 0 {
		w.buf = p.s.packBufs.Get().(*bytes.Buffer)
		w.buf.Reset()
	} else {
		if err := w.createFile(); err != nil {
			return nil, err
		}
		out = w.f
	}
	sf, err := streamfile.NewWriter(out, p.s.codec, streamfile.WriterOptions{BlockSize: p.s.opt.BlockSize})
	if err != nil {
		return nil, fmt.Errorf("start stream file: %w", err)
	}
	w.sf = sf
	return w, nil
}

// createFile creates the stream's LOCKED row and its file.
func (w *Writer) createFile() error {
	s := w.post.s
	if err := s.submit(w.ctx, &request{create: []*meta.Stream{w.row}}); err != nil {
		return fmt.Errorf("create stream row: %w", err)
	}
	w.path = s.path(w.row)
	if err := s.mkdirAllSync(filepath.Dir(w.path)); err != nil {
		return fmt.Errorf("create stream directory: %w", err)
	}
	f, err := os.OpenFile(w.path+lockSuffix, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("create stream file: %w", err)
	}
	w.f = f
	return nil
}

// Write receives the stream file's bytes from the streamfile writer while
// the stream is in memory: past PackMax it moves to a file of its own.
func (w *Writer) Write(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.f != nil {
		return w.f.Write(b)
	}
	if w.buf.Len()+len(b) <= w.post.s.opt.PackMax {
		return w.buf.Write(b)
	}
	// Streams of a post get their ids in the order they were started: the
	// post's earlier streams still in memory move to files first.
	for _, x := range w.post.writers {
		if x == w {
			break
		}
		if x.packed() {
			if err := x.toFile(); err != nil {
				w.err = err
				return 0, err
			}
		}
	}
	if err := w.spill(); err != nil {
		return 0, err
	}
	return w.f.Write(b)
}

// spill moves a stream from memory to a file of its own.
func (w *Writer) spill() error {
	if err := w.createFile(); err != nil {
		w.err = err
		return err
	}
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		w.err = fmt.Errorf("write stream file: %w", err)
		return w.err
	}
	w.releaseBuf()
	return nil
}

// toFile moves a stream held in memory to a file of its own; a finished
// one's file is synced and closed at once.
func (w *Writer) toFile() error {
	n := w.buf.Len()
	if err := w.spill(); err != nil {
		return err
	}
	if w.done {
		w.post.held -= n
		return w.closeFile()
	}
	return nil
}

// closeFile syncs and closes a finished stream's own file; Commit renames it.
func (w *Writer) closeFile() error {
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("sync stream file: %w", err)
		return w.err
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		w.err = fmt.Errorf("close stream file: %w", err)
		return w.err
	}
	return nil
}

// Done finishes a stream before its post commits: no section is written
// to it after. A stream with a file of its own is synced and its file
// closed now, and a post's finished streams held in memory are bounded
// (past heldPerPost times PackMax they move to files of their own), so
// that a post of many streams (a zip's reference groups, one stream each)
// keeps neither a file open nor its bytes in memory per stream. Nothing
// is visible before Commit, which still makes every stream of the post
// durable and visible, or none.
func (w *Writer) Done() error {
	if w.done {
		return nil
	}
	if err := w.sf.Close(); err != nil {
		return fmt.Errorf("finish stream file: %w", err)
	}
	if w.err != nil {
		return w.err
	}
	w.done = true
	if !w.packed() {
		return w.closeFile()
	}
	p := w.post
	p.held += w.buf.Len()
	if p.held <= heldPerPost*p.s.opt.PackMax {
		return nil
	}
	// Every stream still in memory moves, in the order they were started,
	// so that the post's streams keep their ids in that order.
	for _, x := range p.writers {
		if x.packed() {
			if err := x.toFile(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *Writer) releaseBuf() {
	if w.buf != nil {
		if w.buf.Cap() <= 2*w.post.s.opt.PackMax {
			w.post.s.packBufs.Put(w.buf)
		}
		w.buf = nil
	}
}

// packed reports whether the stream stayed in memory (goes into a pack).
func (w *Writer) packed() bool { return w.f == nil && w.path == "" }

// ID is the stream's id.
func (w *Writer) ID() int64 { return w.row.ID }

// Open starts writing one section (channel, 0-based part) of the stream.
func (w *Writer) Open(ch streamfile.Channel, part int) (io.WriteCloser, error) {
	return w.sf.Open(ch, part)
}

// SectionSize is the number of uncompressed bytes written to a section so far.
func (w *Writer) SectionSize(ch streamfile.Channel, part int) int64 {
	return w.sf.SectionSize(ch, part)
}

// AddHopReceiptIDs records receipt ids that earlier hops gave data in the
// stream (see meta.Stream.HopReceiptIDs), each once, up to the post's
// MaxHopReceiptIDs; call it before Commit.
func (w *Writer) AddHopReceiptIDs(ids []string) {
	for _, id := range ids {
		if w.post.hopIDs >= MaxHopReceiptIDs {
			return
		}
		if _, dup := w.hops[id]; dup {
			continue
		}
		if w.hops == nil {
			w.hops = make(map[string]struct{})
		}
		w.hops[id] = struct{}{}
		w.row.HopReceiptIDs = append(w.row.HopReceiptIDs, id)
		w.post.hopIDs++
	}
}

// SetAttributes sets the stream-level attributes stored in its row.
func (w *Writer) SetAttributes(a *attr.Map) { w.attrs = a }

// finish completes the stream. A stream with a file of its own is made
// durable under its final name here, on the post's goroutine, so that the
// fsyncs of concurrent big posts overlap; the committer then shares the
// directory fsyncs. A packed stream's bytes are written by the committer.
func (w *Writer) finish() error {
	if !w.packed() {
		if w.f != nil {
			if err := w.f.Sync(); err != nil {
				return fmt.Errorf("sync stream file: %w", err)
			}
			if err := w.f.Close(); err != nil {
				return fmt.Errorf("close stream file: %w", err)
			}
			w.f = nil
		}
		if err := os.Rename(w.path+lockSuffix, w.path); err != nil {
			return fmt.Errorf("rename stream file: %w", err)
		}
	}
	var raw int64
	for part := 0; part < w.sf.Parts(); part++ {
		raw += w.sf.SectionSize(streamfile.Data, part)
	}
	w.row.Parts = w.sf.Parts()
	w.row.RawSize = raw
	w.row.FileSize = w.sf.Size()
	if w.attrs != nil {
		w.row.Attributes = w.attrs
	}
	return nil
}

// Commit makes every stream of the post durable and visible, or none.
func (p *Post) Commit(ctx context.Context) ([]meta.Stream, error) {
	if len(p.writers) == 0 {
		return nil, nil
	}
	req := &request{}
	// Closing a stream file writes its index, which can make it spill, and
	// a spill moves the post's earlier streams out of memory too: so every
	// stream is closed before any is sorted into packed or not.
	for _, w := range p.writers {
		var err error
		if !w.done {
			err = w.sf.Close()
		}
		if err == nil {
			err = w.err
		}
		if err != nil {
			p.Abort()
			return nil, fmt.Errorf("finish stream file: %w", err)
		}
	}
	for _, w := range p.writers {
		if err := w.finish(); err != nil {
			p.Abort()
			return nil, err
		}
		w.row.Forward = p.forward
		if w.packed() {
			req.pack = append(req.pack, packItem{row: w.row, data: w.buf.Bytes()})
			continue
		}
		req.unlock = append(req.unlock, w.row)
		req.dirs = append(req.dirs, filepath.Dir(w.path))
	}
	p.submitted = true
	if err := p.s.submit(ctx, req); err != nil {
		if errors.Is(err, meta.ErrCommitUnknown) {
			p.abandon(err)
		} else {
			p.Abort()
		}
		return nil, fmt.Errorf("commit streams: %w", err)
	}
	out := make([]meta.Stream, len(p.writers))
	for i, w := range p.writers {
		out[i] = *w.row
		w.releaseBuf()
	}
	p.writers = nil
	return out, nil
}

// abandon lets go of a post whose commit is in doubt (its answer lost,
// and the database could not say afterwards whether it had committed). Its
// files stay, and its rows are not deleted: if the commit happened, they
// are a complete, valid copy of the post (its sender, told it failed,
// sends it again), and deleting them now, while the database is failing,
// could leave rows whose files are gone. If it did not, its own-file
// streams' LOCKED rows and files are removed at the next start, as after
// a crash, and its pack bytes are named by no row.
func (p *Post) abandon(err error) {
	for _, w := range p.writers {
		w.releaseBuf()
		if w.f != nil {
			_ = w.f.Close()
		}
	}
	p.s.opt.Logger.Warn("a post's commit is in doubt (the connection to the metadata database failed while it committed): "+
		"its streams are left as they are; any that committed are complete, the others are removed at the next start",
		"receiptId", p.writers[0].row.ReceiptID, "streams", len(p.writers), "err", err)
	p.writers = nil
}

// Abort removes every stream of the post: files and rows (streams still
// in memory have neither). It is safe to call after a failed Commit and
// more than once.
func (p *Post) Abort() {
	if len(p.writers) == 0 {
		return
	}
	var ids []int64
	var forget []meta.ForwardedPost
	if p.submitted && p.forward.GUID != "" {
		// Defensive: should the failed commit have recorded the post as
		// forwarded while the rows of its own-file streams go below and
		// its pack is cut back, a resend must be stored again, not
		// answered with this post's receipt id. (A commit in doubt is
		// abandoned, not aborted.)
		forget = []meta.ForwardedPost{{Key: p.forward, ReceiptID: p.writers[0].row.ReceiptID}}
	}
	for _, w := range p.writers {
		w.releaseBuf()
		if w.f != nil {
			_ = w.f.Close()
		}
		if w.path != "" {
			_ = os.Remove(w.path + lockSuffix)
			_ = os.Remove(w.path)
		}
		if w.row.ID != 0 && w.path != "" {
			// A stream with a file of its own has a LOCKED row; a packed
			// one's row (its id given by the store) was never inserted.
			ids = append(ids, w.row.ID)
		}
	}
	p.writers = nil
	if len(ids) == 0 && len(forget) == 0 {
		return
	}
	// A failed delete (the database unavailable, most likely what failed
	// the post too) is tried again after the next commit that succeeds;
	// the next start's recovery removes the LOCKED rows anyway. The post
	// was never acknowledged, so nothing is lost either way. (A commit
	// whose answer was lost is not aborted but abandoned: its rows may be
	// committed, and their files must stay.)
	if err := p.s.submit(context.Background(), &request{delete: ids, forget: forget}); err != nil {
		p.s.opt.Logger.Warn("abort: stream rows left behind; removed after the next commit that succeeds, or at the next start", "ids", ids, "err", err)
		if !errors.Is(err, ErrClosed) {
			p.s.keepLeftovers(ids, forget)
		}
	}
}

// durableDirs are the directories this store has made durable: created
// (or found) and their entries in their parents flushed.
type durableDirs struct {
	mu  sync.Mutex
	set map[string]bool
}

// maxDurableDirs bounds durableDirs: past it the set starts again, and a
// directory used again costs its parent's flush once more.
const maxDurableDirs = 4096

func (d *durableDirs) has(dir string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set[dir]
}

func (d *durableDirs) add(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.set == nil || len(d.set) >= maxDurableDirs {
		d.set = make(map[string]bool)
	}
	d.set[dir] = true
}

// mkdirAllSync creates dir and any missing parents, fsyncing each parent
// after creating a child so that a new directory survives power loss. A
// directory that is there already is not trusted to be durable until this
// store has flushed its parent once: whoever created it may not have yet
// (compaction creates today's pack directory too, and stage one must not
// put an answered post's record in it before its entry is durable), or
// may have failed to.
func (s *Store) mkdirAllSync(dir string) error {
	// The root is made durable at Open; above it is not the store's.
	root := filepath.Clean(s.opt.Root)
	if s.dirs.has(dir) || !strings.HasPrefix(dir, root+string(filepath.Separator)) {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := s.mkdirAllSync(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if parent != dir {
		sync := fsutil.SyncDir
		if s.syncDir != nil {
			sync = s.syncDir
		}
		if err := sync(parent); err != nil {
			return err
		}
	}
	s.dirs.add(dir)
	return nil
}

// IsNoSpace reports whether err comes from a full disk.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// IsTooManyFiles reports whether err is the process (EMFILE) or the system
// (ENFILE) having as many files open as it may: connections count, so a
// flood of them leaves a post unable to open its stream file until some
// close.
func IsTooManyFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
