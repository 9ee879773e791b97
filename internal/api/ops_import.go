package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/operations"
	"github.com/weirhq/weir/internal/receive"
	"github.com/weirhq/weir/internal/store"
)

// importer stores imported zips the way /datafeed stores zip posts, with
// the server's own receive handler: its checks, its limits and its receipt
// ids (one generator per node keeps them unique).
type importer struct {
	h *receive.Handler
}

func newImporter(srv *server) (*importer, error) {
	if srv.Receiver == nil {
		return nil, fmt.Errorf("api: imports need the receive handler (Deps.Receiver)")
	}
	return &importer{h: srv.Receiver}, nil
}

// importRequest is what an import operation stores. The receipt id and
// receive time are fixed at upload, so that a re-run after a restart
// stores the same attributes and can tell whether the first run committed.
type importRequest struct {
	ReceiptID  string `json:"receiptId"`
	ReceivedMs int64  `json:"receivedMs"`
	UserID     string `json:"userId"`
	Username   string `json:"username"`
	Size       int64  `json:"size"`
}

// ImportResult is an import operation's result.
type ImportResult struct {
	Streams   []int64 `json:"streams" doc:"Ids of the streams created"`
	Parts     int     `json:"parts" doc:"Parts stored, over all streams"`
	Bytes     int64   `json:"bytes" doc:"Uncompressed data bytes stored"`
	ReceiptID string  `json:"receiptId" doc:"The receipt id of the import, on every stream it created"`
}

// importInput takes the request itself: the zip is streamed to disk, never
// held in memory, so huma must not read the body.
type importInput struct {
	r *http.Request
	w http.ResponseWriter
}

func (in *importInput) Resolve(ctx huma.Context) []error {
	in.r, in.w = humago.Unwrap(ctx)
	return nil
}

func (s *opsAPI) registerImports() {
	limit := int64(s.Config.Receive.MaxRequestSize)
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "import-streams", Method: http.MethodPost, Path: "/imports", Tags: []string{"Operations"},
		Summary: "Import a zip of streams",
		Description: "Takes a zip in the Stroom zip format as the request body (at most receive.maxRequestSize) and answers 202 " +
			"with the operation to poll. The operation stores the zip exactly as a post of it to /datafeed with " +
			"`Compression: ZIP` would be stored: each part goes to the feed its meta entry names, through the same receipt " +
			"checks, with the caller recorded as UploadUserId and UploadUsername. A zip that such a post would be refused for " +
			"fails the operation, with the message the post would get. A full disk is 503 with Retry-After, as for a post; 429 with Retry-After when the caller " +
			"has api.maxOperationsPerUser operations pending or running. " +
			"Needs Data - Import.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests},
		RequestBody: &huma.RequestBody{Required: true, Description: "The zip",
			Content: binaryContent("application/zip")},
	}), func(ctx context.Context, in *importInput) (*acceptedOutput, error) {
		if err := require(ctx, access.DataImport); err != nil {
			return nil, err
		}
		// Each call to the database is bounded by itself: the upload
		// between them may take longer than receive.databaseTimeout.
		qctx, qcancel := s.dbContext(ctx)
		err := s.underQuota(qctx, caller(ctx).User.Name)
		qcancel()
		if err != nil {
			return nil, err
		}
		if limit > 0 && in.r.ContentLength > limit {
			return nil, tooLarge(limit)
		}
		id := operations.NewID()
		size, err := s.stageImport(in, id, limit)
		if err != nil {
			return nil, err
		}
		p := caller(ctx)
		display := p.User.DisplayName
		if display == "" {
			display = p.User.Name
		}
		req := importRequest{ReceiptID: s.imp.h.NextReceiptID(), ReceivedMs: time.Now().UnixMilli(),
			UserID: p.User.Name, Username: display, Size: size}
		sctx, scancel := s.dbContext(ctx)
		defer scancel()
		if err := s.svc.SubmitID(sctx, id, kindImport, p.User.Name, req); err != nil {
			_ = os.Remove(s.importFile(id))
			return nil, s.internal("submit import", err)
		}
		return s.accepted(sctx, id)
	})
}

func tooLarge(limit int64) error {
	return huma.NewError(http.StatusRequestEntityTooLarge,
		fmt.Sprintf("the zip is larger than receive.maxRequestSize (%s)", config.ByteSize(limit)))
}

// stageImport writes the request body to the import's file, durably (the
// operation may run after a restart), and returns its size.
func (s *opsAPI) stageImport(in *importInput, id string, limit int64) (int64, error) {
	tmp, err := os.CreateTemp(s.importDir(), id+".zip.*.partial")
	if err != nil {
		return 0, s.stageFailed(err)
	}
	staged := false
	defer func() {
		if !staged {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	body := &idleReader{r: in.r.Body, rc: http.NewResponseController(in.w), idle: s.Config.Receive.BodyIdleTimeout.D()}
	var src io.Reader = body
	if limit > 0 {
		src = io.LimitReader(body, limit+1)
	}
	n, err := io.Copy(tmp, src)
	switch {
	case limit > 0 && n > limit:
		return 0, tooLarge(limit)
	case err != nil && body.err != nil:
		return 0, huma.Error400BadRequest("reading the zip failed: " + err.Error())
	case err != nil:
		return 0, s.stageFailed(err)
	case n == 0:
		return 0, huma.Error400BadRequest("the request body is empty: send the zip as the body")
	}
	if err := tmp.Sync(); err != nil {
		return 0, s.stageFailed(err)
	}
	if err := tmp.Close(); err != nil {
		return 0, s.stageFailed(err)
	}
	if err := os.Rename(tmp.Name(), s.importFile(id)); err != nil {
		return 0, s.stageFailed(err)
	}
	staged = true
	if err := fsutil.SyncDir(s.importDir()); err != nil {
		return 0, s.stageFailed(err)
	}
	return n, nil
}

// stageFailed answers an upload that could not be staged: on a full disk
// as a post to /datafeed is answered then, 503 with Retry-After and the
// reason (the sender can retry once space is freed), else 500.
func (s *opsAPI) stageFailed(err error) error {
	if !store.IsNoSpace(err) {
		return s.internal("stage import", err)
	}
	s.Log.Warn("stage import: the disk is full", "err", err)
	retry := s.retryAfter()
	return huma.ErrorWithHeaders(
		huma.Error503ServiceUnavailable(fmt.Sprintf("the disk is full: the zip cannot be staged; retry after %d s", retry)),
		http.Header{"Retry-After": {strconv.Itoa(retry)}})
}

// idleReader gives up on a client that stops sending, as the datafeed
// does (receive.bodyIdleTimeout), and remembers read failures so they can
// be told from failures to write the staged file.
type idleReader struct {
	r    io.Reader
	rc   *http.ResponseController
	idle time.Duration
	err  error
}

func (b *idleReader) Read(p []byte) (int, error) {
	if b.idle > 0 {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.idle)) // unsupported transports keep their own timeouts
	}
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// runImport is the import operation's handler.
func (s *opsAPI) runImport(ctx context.Context, run *operations.Run) (any, error) {
	var req importRequest
	if err := run.Decode(&req); err != nil {
		return nil, err
	}
	file := s.importFile(run.Op.ID)
	// A run before a restart may have committed its streams and stopped
	// before it recorded the result: they carry this import's receipt id.
	stored, err := s.Repo.ListStreams(ctx, meta.StreamFilter{ReceiptID: req.ReceiptID, Status: meta.Unlocked})
	if err != nil {
		return nil, s.opError(ctx, run, "look for streams of an earlier run", err)
	}
	if len(stored) > 0 {
		s.removeStaged(file)
		return importResult(req, stored), nil
	}
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("the uploaded zip is no longer staged; upload it again")
	}
	// The import is decided when it runs, as a post is when it arrives:
	// an owner disabled, or no longer holding Data - Import, since it was
	// queued stores nothing.
	if s.Access != nil {
		p, err := s.Access.PrincipalFor(ctx, run.Op.Owner)
		var ae *access.AuthError
		switch {
		case errors.As(err, &ae):
			s.removeStaged(file)
			return nil, fmt.Errorf("the zip was not imported: %s", ae.Error())
		case err != nil:
			return nil, s.opError(ctx, run, "check the owner's permissions", err)
		case !p.Has(access.DataImport):
			s.removeStaged(file)
			return nil, fmt.Errorf("the zip was not imported: user %q no longer holds the application permission %s", run.Op.Owner, access.DataImport)
		}
	}
	run.Progress(0, req.Size)
	ing, err := s.imp.h.IngestZip(ctx, receive.ZipImport{
		File: file, ReceiptID: req.ReceiptID, Received: time.UnixMilli(req.ReceivedMs),
		Identity: &auth.Identity{SubjectID: req.UserID, DisplayName: req.Username},
		Path:     s.operationLink(run.Op.ID),
		Progress: func(read int64) { run.Progress(min(read, req.Size), req.Size) },
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.removeStaged(file)
		return nil, fmt.Errorf("the zip was not imported: %w", err)
	}
	// Its posts may be answered before their rows are in (store.commit:
	// log).
	if err := s.Store.Sync(ctx); err != nil {
		return nil, s.opError(ctx, run, "wait for the imported streams' rows", err)
	}
	stored = stored[:0]
	for _, id := range ing.Streams {
		st, err := s.Repo.GetStream(ctx, id)
		if err != nil {
			return nil, s.opError(ctx, run, "read the imported streams", err)
		}
		stored = append(stored, st)
	}
	run.Progress(req.Size, req.Size)
	s.removeStaged(file)
	return importResult(req, stored), nil
}

func importResult(req importRequest, streams []meta.Stream) ImportResult {
	res := ImportResult{Streams: []int64{}, ReceiptID: req.ReceiptID}
	for _, st := range streams {
		res.Streams = append(res.Streams, st.ID)
		res.Parts += st.Parts
		res.Bytes += st.RawSize
	}
	return res
}

func (s *opsAPI) removeStaged(file string) {
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.Log.Warn("remove staged import", "file", file, "err", err)
	}
}
