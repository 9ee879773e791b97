package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/operations"
)

// Operation kinds.
const (
	kindExport = "export"
	kindImport = "import"
)

// Operation is accepted-then-poll work as the API shows it.
type Operation struct {
	ID         string            `json:"id" format:"uuid"`
	Kind       string            `json:"kind" enum:"export,import"`
	State      string            `json:"state" enum:"PENDING,RUNNING,SUCCEEDED,FAILED,CANCELLED"`
	Owner      string            `json:"owner" doc:"The user who submitted it"`
	Done       int64             `json:"done" doc:"Progress: how much of total is done (streams for an export, bytes for an import)"`
	Total      int64             `json:"total" doc:"Progress: 0 while not yet known"`
	Result     json.RawMessage   `json:"result" doc:"The outcome once SUCCEEDED; {} before. An export's: {fileSize, streams, parts, skipped, download}; an import's: {streams: [ids], parts, bytes, receiptId}."`
	Error      string            `json:"error" doc:"Why it FAILED"`
	CreateTime string            `json:"createTime" doc:"UTC, yyyy-MM-ddTHH:mm:ss.SSSZ"`
	UpdateTime string            `json:"updateTime"`
	FinishTime string            `json:"finishTime" doc:"Empty until it reaches a final state (SUCCEEDED, FAILED, CANCELLED)"`
	Links      map[string]string `json:"links" doc:"self: this resource; download: the export's file, once SUCCEEDED"`
}

func (s *opsAPI) operationLink(id string) string { return s.BasePath + "/api/operations/" + id }

func (s *opsAPI) toOperation(op meta.Operation) Operation {
	links := map[string]string{"self": s.operationLink(op.ID)}
	if op.Kind == kindExport && op.State == meta.OpSucceeded {
		links["download"] = s.operationLink(op.ID) + "/download"
	}
	result := json.RawMessage(op.Result)
	if !json.Valid(result) {
		result = json.RawMessage("{}")
	}
	return Operation{ID: op.ID, Kind: op.Kind, State: string(op.State), Owner: op.Owner, Done: op.Done, Total: op.Total,
		Result: result, Error: op.Error, CreateTime: ms(op.CreateMs), UpdateTime: ms(op.UpdateMs),
		FinishTime: ms(op.FinishMs), Links: links}
}

type listOperationsInput struct {
	Owner string `query:"owner" doc:"Whose operations; default the caller's own, or everyone's for an Administrator. Another user's need Administrator."`
	Kind  string `query:"kind" enum:"export,import"`
	State string `query:"state" enum:"PENDING,RUNNING,SUCCEEDED,FAILED,CANCELLED"`
	Limit int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"At most this many, newest first"`
}

type listOperationsOutput struct {
	Body struct {
		Operations []Operation `json:"operations" doc:"Newest first"`
	}
}

type operationInput struct {
	ID string `path:"id" doc:"Operation id"`
}

type operationOutput struct{ Body Operation }

// acceptedOutput answers a submitted operation: 202 with its Location.
type acceptedOutput struct {
	Location string `header:"Location" doc:"The operation resource to poll"`
	Body     Operation
}

// opsAPI is the operations part of the API: the service that runs them
// and the routes that submit and report them.
type opsAPI struct {
	*server
	svc *operations.Service
	imp *importer
}

// registerOperations registers accepted-then-poll operations and starts
// their workers (stopped through s.closers).
func (s *server) registerOperations() error {
	o, err := newOpsAPI(s)
	if err != nil {
		return err
	}
	o.register()
	o.removeLeftovers()
	o.svc.Start()
	s.closers = append(s.closers, o.svc.Close)
	if stop := o.startExpiry(); stop != nil {
		s.closers = append(s.closers, stop)
	}
	return nil
}

func newOpsAPI(srv *server) (*opsAPI, error) {
	if srv.DataDir == "" {
		return nil, errors.New("api: operations need a data directory for their files")
	}
	s := &opsAPI{server: srv}
	for _, dir := range []string{s.exportDir(), s.importDir()} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("api: create %s: %w", dir, err)
		}
	}
	imp, err := newImporter(srv)
	if err != nil {
		return nil, err
	}
	s.imp = imp
	s.svc = operations.New(operations.Options{Repo: s.Repo, Node: s.Node, Log: s.Log.With("log", "operations")})
	s.svc.Register(kindExport, s.runExport)
	s.svc.Register(kindImport, s.runImport)
	return s, nil
}

func (s *opsAPI) register() {
	ops := s.svc
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "list-operations", Method: http.MethodGet, Path: "/operations", Tags: []string{"Operations"},
		Summary:     "List operations",
		Description: "Accepted-then-poll operations (exports, imports): the caller's own, or with Administrator everyone's.",
	}), func(ctx context.Context, in *listOperationsInput) (*listOperationsOutput, error) {
		p := caller(ctx)
		owner := in.Owner
		switch {
		case owner == "" && !p.IsAdmin():
			owner = p.User.Name
		case owner != "" && owner != p.User.Name && !p.IsAdmin():
			return nil, huma.Error403Forbidden("listing another user's operations needs the application permission " + access.Administrator)
		}
		list, err := ops.List(ctx, meta.OperationFilter{Owner: owner, Kind: in.Kind, State: meta.OpState(in.State), Limit: in.Limit})
		if err != nil {
			return nil, s.internal("list operations", err)
		}
		out := &listOperationsOutput{}
		out.Body.Operations = []Operation{}
		for _, op := range list {
			out.Body.Operations = append(out.Body.Operations, s.toOperation(op))
		}
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-operation", Method: http.MethodGet, Path: "/operations/{id}", Tags: []string{"Operations"},
		Summary: "Get an operation",
		Description: "Its state, progress and, once finished, result or error. Poll it after a 202 until finishTime is set. " +
			"Any node answers for any operation. Only its owner and Administrators see it: 404 for anyone else.",
		Errors: []int{http.StatusNotFound},
	}), func(ctx context.Context, in *operationInput) (*operationOutput, error) {
		op, err := s.visibleOperation(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		return &operationOutput{Body: s.toOperation(op)}, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "cancel-operation", Method: http.MethodDelete, Path: "/operations/{id}", Tags: []string{"Operations"},
		Summary: "Cancel or remove an operation",
		Description: "Cancels a PENDING or RUNNING operation (owner or Administrator). A running one stops within a second or so; " +
			"work it already committed stays (an import that has stored its streams keeps them). A finished operation is " +
			"removed, with its export file: the answer is the operation as it was, and it is gone afterwards.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}), func(ctx context.Context, in *operationInput) (*operationOutput, error) {
		if _, err := s.visibleOperation(ctx, in.ID); err != nil {
			return nil, err
		}
		op, err := ops.Cancel(ctx, in.ID)
		switch {
		case errors.Is(err, meta.ErrFinal):
			// Finished: remove it and what it left on disk.
			if err := s.removeFinished(ctx, op); err != nil {
				if errors.Is(err, meta.ErrNotFound) {
					return nil, huma.Error404NotFound("no operation " + in.ID)
				}
				return nil, s.internal("delete operation", err)
			}
			return &operationOutput{Body: s.toOperation(op)}, nil
		case errors.Is(err, meta.ErrNotFound):
			return nil, huma.Error404NotFound("no operation " + in.ID)
		case err != nil:
			return nil, s.internal("cancel operation", err)
		}
		if op.Kind == kindImport {
			// The staged upload is of no further use; a worker still reading
			// it keeps its open file until it notices the cancellation.
			if err := os.Remove(s.importFile(op.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.Log.Warn("remove staged import", "operation", op.ID, "err", err)
			}
		}
		return &operationOutput{Body: s.toOperation(op)}, nil
	})

	s.registerExports()
	s.registerImports()
}

// visibleOperation returns an operation its owner or an Administrator asks
// for; anyone else gets 404, as if it did not exist.
func (s *opsAPI) visibleOperation(ctx context.Context, id string) (meta.Operation, error) {
	op, err := s.svc.Get(ctx, id)
	if errors.Is(err, meta.ErrNotFound) {
		return op, huma.Error404NotFound("no operation " + id)
	}
	if err != nil {
		return op, s.internal("get operation", err)
	}
	if p := caller(ctx); op.Owner != p.User.Name && !p.IsAdmin() {
		return meta.Operation{}, huma.Error404NotFound("no operation " + id)
	}
	return op, nil
}

// underQuota refuses a new operation, 429 with Retry-After, to a user who
// has api.maxOperationsPerUser PENDING or RUNNING already: two workers per
// node run them in the order submitted, so one user's queue of thousands
// would hold up every other user's, and each waiting import keeps its
// upload on disk. Submissions at the same moment may each pass the check
// and go over the bound by a few.
func (s *opsAPI) underQuota(ctx context.Context, owner string) error {
	limit := s.Config.API.MaxOperationsPerUser
	if limit <= 0 {
		return nil
	}
	// One statement for both states: two lists read one after the other
	// both held an operation a worker started in between (found by CI: a
	// user with one export was refused a second at a limit of two).
	list, err := s.svc.List(ctx, meta.OperationFilter{Owner: owner, Unfinished: true, Limit: limit})
	if err != nil {
		return s.internal("count operations", err)
	}
	n := len(list)
	if n < limit {
		return nil
	}
	retry := s.retryAfter()
	return huma.ErrorWithHeaders(huma.NewError(http.StatusTooManyRequests, fmt.Sprintf(
		"you have %d operations pending or running, as many as api.maxOperationsPerUser allows: submit more once some have finished (or cancel some)", n)),
		http.Header{"Retry-After": {strconv.Itoa(retry)}})
}

// accepted answers a submitted operation.
func (s *opsAPI) accepted(ctx context.Context, id string) (*acceptedOutput, error) {
	op, err := s.svc.Get(ctx, id)
	if err != nil {
		return nil, s.internal("get operation", err)
	}
	return &acceptedOutput{Location: s.operationLink(id), Body: s.toOperation(op)}, nil
}

func (s *opsAPI) exportDir() string           { return filepath.Join(s.DataDir, "exports") }
func (s *opsAPI) importDir() string           { return filepath.Join(s.DataDir, "imports") }
func (s *opsAPI) exportFile(id string) string { return filepath.Join(s.exportDir(), id+".zip") }
func (s *opsAPI) importFile(id string) string { return filepath.Join(s.importDir(), id+".zip") }

// staleUpload is how long an upload's staged file may go unchanged and
// without an operation before it is taken for one that a crash cut short.
// An upload that is still arriving writes to it all the time (one that
// stops is cut off after receive.bodyIdleTimeout), and one that has just
// been staged gets its operation a moment later; on a data directory that
// other nodes share, either may be another node's.
const staleUpload = time.Hour

// removeLeftovers removes, at start, what a server killed in the middle
// of an operation (kill -9, a power cut) left under exports/ and imports/
// that no run will remove: a run removes the partial file of its own
// earlier run, but an operation cancelled or deleted before it ran again
// never does, nor does the staged zip of an upload whose operation was
// never recorded, or the zip of an export deleted just before the crash.
// Kept: every file of a PENDING or RUNNING operation (its run needs it or
// cleans it up), a SUCCEEDED export's zip, and a recent upload.
func (s *opsAPI) removeLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	removed := 0
	for _, dir := range []string{s.exportDir(), s.importDir()} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			s.Log.Warn("look for files left by interrupted operations", "dir", dir, "err", err)
			continue
		}
		for _, e := range entries {
			id, _, ok := strings.Cut(e.Name(), ".zip")
			if !ok || !e.Type().IsRegular() {
				continue // not an operation's file
			}
			keep, err := s.wantedFile(ctx, dir, id, e)
			if err != nil {
				s.Log.Warn("look for files left by interrupted operations", "file", e.Name(), "err", err)
				continue
			}
			if keep {
				continue
			}
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.Log.Warn("remove a file left by an interrupted operation", "file", e.Name(), "err", err)
				continue
			}
			removed++
			s.Log.Info("removed a file left by an interrupted operation", "dir", filepath.Base(dir), "file", e.Name())
		}
	}
	if removed > 0 {
		s.Log.Info("removed files left by interrupted operations", "files", removed)
	}
}

// wantedFile tells whether a file under exports/ or imports/ of the
// operation id is still of use.
func (s *opsAPI) wantedFile(ctx context.Context, dir, id string, e os.DirEntry) (bool, error) {
	op, err := s.svc.Get(ctx, id)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		if dir != s.importDir() {
			return false, nil // an export's files exist only while its operation does
		}
		info, err := e.Info()
		if err != nil {
			return false, err
		}
		return time.Since(info.ModTime()) < staleUpload, nil
	case err != nil:
		return false, err
	}
	switch op.State {
	case meta.OpPending, meta.OpRunning:
		return true, nil
	}
	return dir == s.exportDir() && e.Name() == id+".zip" && op.Kind == kindExport && op.State == meta.OpSucceeded, nil
}

// removeFinished removes a finished operation and what it left on disk.
func (s *opsAPI) removeFinished(ctx context.Context, op meta.Operation) error {
	if err := s.Repo.DeleteOperation(ctx, op.ID); err != nil {
		return err
	}
	for _, f := range []string{s.exportFile(op.ID), s.importFile(op.ID)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.Log.Warn("remove operation file", "operation", op.ID, "file", f, "err", err)
		}
	}
	return nil
}

// startExpiry removes finished exports, their operations and zips,
// api.exportRetention after they finished, now and then while the server
// runs: each export is a copy of the data it selected, and without an end
// they would fill the data volume. It returns what stops it (nil when
// exports are kept until deleted).
func (s *opsAPI) startExpiry() func() {
	keep := s.Config.API.ExportRetention.D()
	if keep <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(min(keep/4, time.Hour))
		defer t.Stop()
		for {
			s.expireExports(ctx, keep)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// expireExports removes the exports that finished more than keep ago. On
// a cluster every node does; one that finds an export already removed
// passes over it.
func (s *opsAPI) expireExports(ctx context.Context, keep time.Duration) {
	const page = 1000
	removed := 0
	for ctx.Err() == nil {
		list, err := s.svc.List(ctx, meta.OperationFilter{Kind: kindExport,
			FinishedBefore: time.Now().Add(-keep).UnixMilli(), Limit: page})
		if err != nil {
			if ctx.Err() == nil {
				s.Log.Warn("list expired exports", "err", err)
			}
			break
		}
		gone := 0
		for _, op := range list {
			switch err := s.removeFinished(ctx, op); {
			case err == nil:
				removed++
				gone++
			case errors.Is(err, meta.ErrNotFound):
			default:
				if ctx.Err() == nil {
					s.Log.Warn("remove expired export", "operation", op.ID, "err", err)
				}
			}
		}
		if len(list) < page || gone == 0 {
			break
		}
	}
	if removed > 0 {
		s.Log.Info("removed expired exports", "exports", removed, "exportRetention", keep.String())
	}
}
