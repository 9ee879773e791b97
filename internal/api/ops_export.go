package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/operations"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
	"github.com/weirhq/weir/internal/stroomzip"
)

// exportRequest is what an export operation stores: the selection, and the
// feeds the submitter could view when submitting it (the narrowing is
// fixed then, so a resumed export exports the same).
type exportRequest struct {
	Feed     string   `json:"feed,omitempty"`
	IDs      []int64  `json:"ids,omitempty"`
	AllFeeds bool     `json:"allFeeds"`
	Feeds    []string `json:"feeds"` // when !AllFeeds: the feeds the owner may view
}

// ExportResult is an export operation's result.
type ExportResult struct {
	FileSize int64    `json:"fileSize" doc:"Bytes of the zip"`
	Streams  int      `json:"streams" doc:"Streams exported"`
	Parts    int      `json:"parts" doc:"Parts exported: one group of entries each"`
	Skipped  int      `json:"skipped" doc:"Selected streams that were not exported: deleted, missing or not visible"`
	Download string   `json:"download" doc:"Where to download the zip (its owner and Administrators)"`
	Feeds    []string `json:"feeds" doc:"The feeds whose streams the zip holds, sorted: its owner needs VIEW on each of them still to download it"`
}

type exportInput struct {
	Body struct {
		Feed   string  `json:"feed,omitempty" doc:"Only streams of this feed"`
		IDs    []int64 `json:"ids,omitempty" maxItems:"10000" doc:"Only these streams"`
		Status string  `json:"status,omitempty" enum:"UNLOCKED" default:"UNLOCKED" doc:"Only complete, undeleted streams can be exported"`
	}
}

type streamZipInput struct {
	ID int64 `path:"id" minimum:"1"`
}

// maxMetaSection bounds the Meta Data child read into memory per part; the
// receiver refuses larger meta entries by default anyway.
const maxMetaSection = 16 << 20

func (s *opsAPI) registerExports() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "export-streams", Method: http.MethodPost, Path: "/exports", Tags: []string{"Operations"},
		Summary: "Export streams as a zip",
		Description: "Starts writing the selected streams to a zip in the Stroom zip format (one group of entries per part: " +
			"0000000001.meta, .ctx when present, .dat) and answers 202 with the operation to poll. Once it has SUCCEEDED " +
			"its owner (or an Administrator) downloads the zip from the download link; posted back to /datafeed with `Compression: ZIP` it recreates " +
			"the same data, context and attributes, each part in the feed and type its meta entry names. " +
			"Needs Data - Export. The selection (feed and ids both narrow it; neither selects everything) is narrowed to the feeds " +
			"on which the caller holds VIEW, so it can be empty: the result counts what was exported and skipped. " +
			"429 with Retry-After when the caller has api.maxOperationsPerUser operations pending or running.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{http.StatusTooManyRequests},
	}), func(ctx context.Context, in *exportInput) (*acceptedOutput, error) {
		if err := require(ctx, access.DataExport); err != nil {
			return nil, err
		}
		p := caller(ctx)
		if err := s.underQuota(ctx, p.User.Name); err != nil {
			return nil, err
		}
		req := exportRequest{Feed: in.Body.Feed, IDs: in.Body.IDs}
		req.AllFeeds, req.Feeds = p.Feeds(access.View)
		id, err := s.svc.Submit(ctx, kindExport, p.User.Name, req)
		if err != nil {
			return nil, s.internal("submit export", err)
		}
		return s.accepted(ctx, id)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "download-export", Method: http.MethodGet, Path: "/operations/{id}/download", Tags: []string{"Operations"},
		Summary: "Download an export",
		Description: "The zip an export operation wrote, once it has SUCCEEDED: to its owner, who must still hold Data - Export " +
			"and VIEW on every feed whose streams it holds (403 otherwise), " +
			"and to Administrators (an operation is its owner's and administrators'; anyone else gets 404). Supports Range requests. " +
			"A finished export is removed, operation and zip, api.exportRetention (7 days by default) after it finished.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
		Responses: map[string]*huma.Response{"200": {Description: "The zip",
			Content: binaryContent("application/zip")}},
	}), func(ctx context.Context, in *operationInput) (*huma.StreamResponse, error) {
		op, err := s.visibleOperation(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		if op.Kind != kindExport {
			return nil, huma.Error404NotFound(fmt.Sprintf("operation %s is an %s; only exports have a download", op.ID, op.Kind))
		}
		if err := require(ctx, access.DataExport); err != nil {
			return nil, err
		}
		if op.State != meta.OpSucceeded {
			return nil, huma.Error409Conflict(fmt.Sprintf("export %s is %s; its zip can be downloaded once it has SUCCEEDED", op.ID, op.State))
		}
		if err := mayStillView(caller(ctx), op); err != nil {
			return nil, err
		}
		f, err := os.Open(s.exportFile(op.ID))
		if errors.Is(err, os.ErrNotExist) {
			return nil, huma.Error404NotFound(fmt.Sprintf("the zip of export %s no longer exists", op.ID))
		}
		if err != nil {
			return nil, s.internal("open export", err)
		}
		resp, err := s.download(ctx, func(hc huma.Context, w http.ResponseWriter) {
			defer f.Close()
			r, _ := humago.Unwrap(hc)
			w.Header().Set("Content-Type", "application/zip")
			w.Header().Set("Content-Disposition", `attachment; filename="weir-export-`+op.ID+`.zip"`)
			http.ServeContent(w, r, "", time.UnixMilli(op.FinishMs), f)
		})
		if err != nil {
			f.Close()
		}
		return resp, err
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-stream-zip", Method: http.MethodGet, Path: "/streams/{id}/zip", Tags: []string{"Streams"},
		Summary: "Download a stream as a zip",
		Description: "The stream in the Stroom zip format, as an export of just this stream would write it, at once. " +
			"Needs Data - Export and VIEW on the stream's feed.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
		Responses: map[string]*huma.Response{"200": {Description: "The zip",
			Content: binaryContent("application/zip")}},
	}), func(ctx context.Context, in *streamZipInput) (*huma.StreamResponse, error) {
		if err := require(ctx, access.DataExport); err != nil {
			return nil, err
		}
		st, r, err := s.openVisible(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		resp, err := s.download(ctx, func(hc huma.Context, w http.ResponseWriter) {
			defer r.Close()
			hc.SetHeader("Content-Type", "application/zip")
			hc.SetHeader("Content-Disposition", `attachment; filename="weir-stream-`+strconv.FormatInt(st.ID, 10)+`.zip"`)
			hc.SetStatus(http.StatusOK)
			zw := stroomzip.NewWriter(w)
			_, err := writeStreamParts(hc.Context(), zw, r)
			if err == nil {
				err = zw.Close()
			}
			if err != nil {
				s.Log.Warn("stream zip download ended early", "stream", st.ID, "err", err)
				// The answer is chunked and its 200 may be out already:
				// cut the connection, so that the client sees a failed
				// download, not a complete-looking short one.
				panic(http.ErrAbortHandler)
			}
		})
		if err != nil {
			r.Close()
		}
		return resp, err
	})
}

// runExport is the export operation's handler. It writes the zip under a
// temporary name and renames it into place when complete, so a download
// never sees a partial zip and a re-run after a restart starts afresh.
func (s *opsAPI) runExport(ctx context.Context, run *operations.Run) (any, error) {
	var req exportRequest
	if err := run.Decode(&req); err != nil {
		return nil, err
	}
	ids, skipped, err := s.exportSelection(ctx, req)
	if err != nil {
		return nil, s.opError(ctx, run, "select the streams to export", err)
	}
	total := int64(len(ids))
	run.Progress(0, total)

	// A run that a stop or a crash interrupted left its partial file.
	stale, _ := filepath.Glob(filepath.Join(s.exportDir(), run.Op.ID+".zip.*.partial"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
	tmp, err := os.CreateTemp(s.exportDir(), run.Op.ID+".zip.*.partial")
	if err != nil {
		return nil, s.opError(ctx, run, "create the export file", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	guard := &spaceGuard{w: tmp, dir: s.exportDir(), min: int64(s.Config.API.ExportMinFreeSpace)}
	bw := bufio.NewWriterSize(guard, 256<<10)
	zw := stroomzip.NewWriter(bw)
	streams := 0
	feeds := map[string]bool{}
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := s.Store.Open(ctx, id)
		if errors.Is(err, store.ErrNotReadable) || errors.Is(err, meta.ErrNotFound) {
			skipped++ // deleted since it was selected
			run.Progress(int64(i+1), total)
			continue
		}
		if err != nil {
			return nil, s.opError(ctx, run, fmt.Sprintf("read stream %d", id), err)
		}
		feeds[r.Stream.Feed] = true
		_, err = writeStreamParts(ctx, zw, r)
		r.Close()
		if err != nil {
			return nil, s.opError(ctx, run, fmt.Sprintf("export stream %d", id), err)
		}
		streams++
		run.Progress(int64(i+1), total)
	}
	if err := zw.Close(); err != nil {
		return nil, s.opError(ctx, run, "finish the export file", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, s.opError(ctx, run, "write the export file", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, s.opError(ctx, run, "write the export file", err)
	}
	fi, err := tmp.Stat()
	if err != nil {
		return nil, s.opError(ctx, run, "write the export file", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, s.opError(ctx, run, "write the export file", err)
	}
	if err := os.Rename(tmp.Name(), s.exportFile(run.Op.ID)); err != nil {
		return nil, s.opError(ctx, run, "write the export file", err)
	}
	renamed = true
	if err := fsutil.SyncDir(s.exportDir()); err != nil {
		return nil, s.opError(ctx, run, "write the export file", err)
	}
	exported := slices.Sorted(maps.Keys(feeds))
	if exported == nil {
		exported = []string{} // none, as opposed to unknown (an older result)
	}
	return ExportResult{FileSize: fi.Size(), Streams: streams, Parts: zw.Parts(), Skipped: skipped,
		Download: s.operationLink(run.Op.ID) + "/download", Feeds: exported}, nil
}

// mayStillView refuses the download of an export whose caller no longer
// holds VIEW on every feed whose streams it holds: the zip is a copy of
// data, and losing VIEW on a feed must stop its owner reading that feed's
// streams in any form, not only through the streams endpoints.
func mayStillView(p *access.Principal, op meta.Operation) error {
	all, held := p.Feeds(access.View)
	if all {
		return nil
	}
	anyFeed, feeds, err := exportedFeeds(op)
	if err != nil {
		return err
	}
	if anyFeed {
		return huma.Error403Forbidden(fmt.Sprintf("export %s may hold streams of any feed: only an Administrator may download it now", op.ID))
	}
	for _, f := range feeds {
		if _, ok := slices.BinarySearch(held, f); !ok {
			// Like every 403, this one names no feed.
			return huma.Error403Forbidden(fmt.Sprintf("export %s holds streams of a feed you no longer hold VIEW on", op.ID))
		}
	}
	return nil
}

// exportedFeeds lists the feeds whose streams an export's zip may hold:
// those its result records, or, for an export recorded before results
// listed them, the feeds its owner could view when submitting it (a
// superset; anyFeed when that was every feed).
func exportedFeeds(op meta.Operation) (anyFeed bool, feeds []string, err error) {
	var res struct {
		Feeds *[]string `json:"feeds"`
	}
	if err := json.Unmarshal([]byte(op.Result), &res); err != nil {
		return false, nil, fmt.Errorf("read the result of export %s: %w", op.ID, err)
	}
	if res.Feeds != nil {
		return false, *res.Feeds, nil
	}
	var req exportRequest
	if err := json.Unmarshal([]byte(op.Request), &req); err != nil {
		return false, nil, fmt.Errorf("read the request of export %s: %w", op.ID, err)
	}
	return req.AllFeeds, req.Feeds, nil
}

// exportSelection lists the ids of the streams an export selects, narrowed
// to the owner's feeds, and counts the named ids left out.
func (s *opsAPI) exportSelection(ctx context.Context, req exportRequest) (ids []int64, skipped int, err error) {
	var feedIn []string
	if !req.AllFeeds {
		feedIn = req.Feeds
		if feedIn == nil {
			feedIn = []string{}
		}
	}
	visible := func(feed string) bool {
		if feedIn == nil {
			return true
		}
		for _, f := range feedIn {
			if f == feed {
				return true
			}
		}
		return false
	}
	if len(req.IDs) > 0 {
		seen := make(map[int64]bool, len(req.IDs))
		for _, id := range req.IDs {
			if seen[id] {
				continue
			}
			seen[id] = true
			st, err := s.Repo.GetStream(ctx, id)
			switch {
			case errors.Is(err, meta.ErrNotFound):
				skipped++
				continue
			case err != nil:
				return nil, 0, err
			}
			if st.Status != meta.Unlocked || !visible(st.Feed) || (req.Feed != "" && st.Feed != req.Feed) {
				skipped++
				continue
			}
			ids = append(ids, id)
		}
		return ids, skipped, nil
	}
	const page = 1000
	f := meta.StreamFilter{Feed: req.Feed, Status: meta.Unlocked, FeedIn: feedIn, Limit: page}
	for {
		rows, err := s.Repo.ListStreams(ctx, f)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if len(rows) < page {
			return ids, 0, nil
		}
		f.AfterID = rows[len(rows)-1].ID
	}
}

// writeStreamParts writes every part of a stream as one group of entries:
// its Meta Data child as the .meta (with Feed and Type added when the
// part's attributes lack them, so that the zip alone says where each part
// belongs), its context as the .ctx when it has one, its data as the .dat.
func writeStreamParts(ctx context.Context, zw *stroomzip.Writer, r *store.Reader) (int, error) {
	st := r.Stream
	for part := range r.Parts() {
		metaText, err := partMeta(r, part)
		if err != nil {
			return part, err
		}
		p := stroomzip.Part{Meta: ctxReader{ctx, metaText}, Modified: time.UnixMilli(st.CreateMs)}
		if r.Has(streamfile.Context, part) {
			sec, err := r.Section(streamfile.Context, part)
			if err != nil {
				return part, err
			}
			p.Context = ctxReader{ctx, sec}
		}
		if r.Has(streamfile.Data, part) {
			sec, err := r.Section(streamfile.Data, part)
			if err != nil {
				return part, err
			}
			p.Data = ctxReader{ctx, sec}
		}
		if _, err := zw.WritePart(p); err != nil {
			return part, err
		}
	}
	return r.Parts(), nil
}

// partMeta is the .meta entry of one part: the stored Meta Data child
// byte for byte, unless it lacks Feed or Type.
func partMeta(r *store.Reader, part int) (io.Reader, error) {
	st := r.Stream
	var b []byte
	if r.Has(streamfile.Meta, part) {
		sec, err := r.Section(streamfile.Meta, part)
		if err != nil {
			return nil, err
		}
		if sec.Size() > maxMetaSection {
			return nil, fmt.Errorf("part %d: its attributes are %d bytes, more than %d", part+1, sec.Size(), maxMetaSection)
		}
		if b, err = io.ReadAll(sec); err != nil {
			return nil, err
		}
	}
	m, err := attr.ParseMeta(b)
	if err != nil {
		return nil, fmt.Errorf("part %d: attributes: %w", part+1, err)
	}
	if m.Value("Feed") != "" && m.Value("Type") != "" {
		return bytes.NewReader(b), nil
	}
	if m.Len() == 0 {
		// No per-part attributes: the stream's stand in.
		m = st.Attributes.Clone()
	}
	m.Put("Feed", st.Feed)
	m.Put("Type", st.Type)
	return bytes.NewReader(attr.AppendMeta(nil, m)), nil
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// opError fails an operation on an unexpected error: the log gets the
// details (paths, causes) and the owner a message that says what failed.
// An error because the operation was interrupted is passed on as it is.
func (s *opsAPI) opError(ctx context.Context, run *operations.Run, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var low *lowSpaceError
	if errors.As(err, &low) {
		s.Log.Warn("operation failed", "operation", run.Op.ID, "kind", run.Op.Kind, "step", what, "err", err)
		return fmt.Errorf("%s: %w", what, low)
	}
	s.Log.Error("operation failed", "operation", run.Op.ID, "kind", run.Op.Kind, "step", what, "err", err)
	if store.IsNoSpace(err) {
		return fmt.Errorf("%s: the disk is full", what)
	}
	if why := store.Problem(err); why != "" {
		// A stream that cannot be read (damaged, missing): the owner
		// is told which (what names it) and why.
		return fmt.Errorf("%s: %s", what, why)
	}
	return fmt.Errorf("%s: failed; the server log has the details", what)
}

// spaceCheckEvery is how many bytes an export writes between two looks at
// the free space: it may go this much (and a buffer) below its minimum.
const spaceCheckEvery = 16 << 20

// spaceGuard writes an export's file until the data volume's free space
// would go below min (api.exportMinFreeSpace): exports share the volume
// with the streams, and one large export (or several) must not fill the
// disk that posts are received on.
type spaceGuard struct {
	w     io.Writer
	dir   string
	min   int64
	since int64 // bytes written since the last look; the first write looks
	began bool
}

func (g *spaceGuard) Write(p []byte) (int, error) {
	if g.min > 0 && (!g.began || g.since+int64(len(p)) > spaceCheckEvery) {
		free, err := freeSpace(g.dir)
		if err != nil {
			return 0, fmt.Errorf("look at the free space: %w", err)
		}
		if free-int64(len(p)) < g.min {
			return 0, &lowSpaceError{free: free, min: g.min}
		}
		g.began, g.since = true, 0
	}
	n, err := g.w.Write(p)
	g.since += int64(n)
	return n, err
}

// lowSpaceError is an export stopped by its free space minimum.
type lowSpaceError struct{ free, min int64 }

func (e *lowSpaceError) Error() string {
	return fmt.Sprintf("the disk is nearly full: the data volume has %.1f MiB free and exports leave at least "+
		"api.exportMinFreeSpace (%s) for the data received", float64(e.free)/(1<<20), config.ByteSize(e.min))
}

// freeSpace is the space on dir's volume available to this process.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(min(st.Bavail*uint64(st.Bsize), math.MaxInt64)), nil
}
