// Package api is weir's REST API under /api. Every operation is registered
// with huma, which builds the OpenAPI document from the running code.
// Callers authenticate with a bearer API key (or an OIDC token of a known
// user); each operation checks the caller's permissions, and queries are
// narrowed to the feeds the caller may see rather than refused.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receive"
	"github.com/weirhq/weir/internal/store"
)

// Tokens verifies bearer credentials that are not weir API keys (OIDC tokens).
type Tokens interface {
	Verify(ctx context.Context, raw string) (*auth.Identity, error)
}

// Deps are what the API works on.
type Deps struct {
	Repo   *meta.Repo
	Store  *store.Store
	Access *access.Service
	Tokens Tokens // nil: only API keys are accepted
	// FeedNames is the feed name pattern new feeds must match.
	FeedNames *regexp.Regexp
	Log       *slog.Logger
	Version   string
	BasePath  string // deployment base path, for the server URL in the OpenAPI document
	Node      string // this node's name
	DataDir   string // where operations keep their files (exports, imports)
	Config    config.Config
	// Receiver is the datafeed handler; imports store through it.
	Receiver *receive.Handler
	// ReceiptRules, if set, is told when the data receipt rules change, so
	// that this node decides the next post by the new ones.
	ReceiptRules interface{ Invalidate() }
	// Ready and Metrics serve /readyz and /metrics beside /api; the API
	// registers them (and /healthz) so that they are documented too.
	Ready, Metrics http.Handler
}

type server struct {
	Deps
	slots     chan struct{} // bounds API requests in flight
	downloads chan struct{} // bounds downloads being sent (see download)
	api       huma.API
	closers   []func() // background work started by the API, stopped by Close
}

// Server is the registered API.
type Server struct{ s *server }

// Close stops the API's background work (running operations pause and
// resume on the next start).
func (srv *Server) Close() {
	for i := len(srv.s.closers) - 1; i >= 0; i-- {
		srv.s.closers[i]()
	}
}

// OpenAPI is the API's OpenAPI document, built from the registered operations.
func (srv *Server) OpenAPI() *huma.OpenAPI { return srv.s.api.OpenAPI() }

type principalKey struct{}

const securityScheme = "bearer"

// Register adds the API's routes to mux under /api.
func Register(mux *http.ServeMux, d Deps) (*Server, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	cfg := huma.DefaultConfig("weir", d.Version)
	cfg.Info.Description = "The weir REST API. Authenticate with `Authorization: Bearer <API key>`. " +
		"Results are narrowed to what the caller may see: an empty answer does not prove that nothing matched."
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		securityScheme: {Type: "http", Scheme: "bearer", Description: "A weir API key (sak_...) or an OIDC access token of a weir user."},
	}
	cfg.DocsPath = "" // no docs page: it would load scripts from the internet
	// huma's schema route answers 200 with null for a schema it does not
	// have; registerSchemas serves them instead, with 404 for those. The
	// path is cleared after the create hooks that need it (the $schema
	// links in responses) have taken it, so that huma registers no route.
	schemasPath := cfg.SchemasPath
	serverURL := d.BasePath + "/api"
	cfg.CreateHooks = append(cfg.CreateHooks, func(c huma.Config) huma.Config {
		c.SchemasPath = ""
		// After huma's own hook has added the transformer that writes
		// $schema links, which this one repairs.
		c.Transformers = append(c.Transformers, localSchemaLink(serverURL))
		return c
	})
	cfg.Servers = []*huma.Server{{URL: serverURL}}
	cfg.Transformers = append(cfg.Transformers, boundErrorValues)
	cfg.OpenAPI.OnAddOperation = append(cfg.OpenAPI.OnAddOperation, documentCommonErrors)
	s := &server{Deps: d, slots: make(chan struct{}, max(d.Config.API.MaxConcurrentRequests, 1)),
		downloads: make(chan struct{}, max(d.Config.API.MaxConcurrentDownloads, 1))}
	s.api = humago.NewWithPrefix(mux, "/api", cfg)
	s.api.UseMiddleware(s.headerLimit, canonicalJSONType, s.refuseJSONPatch, s.limit, s.boundDatabase, s.authenticate, s.seeReceived)
	s.registerAccount()
	s.registerFeeds()
	s.registerFeedStatus()
	s.registerStreams()
	s.registerAPIKeys()
	s.registerReceiptRules()
	s.registerAdmin()
	s.registerService()
	s.registerOperational(mux)
	s.registerSchemas(schemasPath)
	s.registerFallback(mux)
	if err := s.registerOperations(); err != nil {
		(&Server{s}).Close()
		return nil, err
	}
	// huma renders each OpenAPI document on its first request and caches it
	// without a lock; rendering them here, before the server accepts
	// requests, keeps concurrent first requests from racing.
	for _, doc := range []string{"openapi.json", "openapi.yaml", "openapi-3.0.json", "openapi-3.0.yaml"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/api/"+doc, nil))
	}
	return &Server{s}, nil
}

// headerLimit answers 431 to a call whose request line and headers are
// over receive.maxHeaderBytes, the limit the datafeed applies too (the
// server reads up to twice that, so that this answer can say why).
func (s *server) headerLimit(ctx huma.Context, next func(huma.Context)) {
	r, _ := humago.Unwrap(ctx)
	if n, limit := receive.HeaderBytes(r), int(s.Config.Receive.MaxHeaderBytes); limit > 0 && n > limit {
		_ = huma.WriteErr(s.api, ctx, http.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("the request line and headers take about %d bytes, more than receive.maxHeaderBytes (%s)", n, s.Config.Receive.MaxHeaderBytes))
		return
	}
	next(ctx)
}

// canonicalJSONType shows huma the Content-Type of a JSON request body in
// its canonical form: huma picks the body's decoder by the bytes before the
// first ';' (after a '+'), compared exactly, so Application/JSON,
// "application/json ; charset=utf-8" or application/merge-patch+JSON got
// 415, although media type names are case-insensitive and whitespace may
// surround the ';' (RFC 9110 §8.3.1, §5.6.6). A JSON type (application/json
// or a +json one) is given as its lowercase type and subtype alone: JSON
// defines no parameters (RFC 8259 §11), huma reads none, and a '+' in a
// parameter's value would make huma's parse fail. Any other Content-Type,
// and one that does not parse, is left as sent, so that huma refuses it
// naming what was sent (415); the request itself is not changed.
func canonicalJSONType(ctx huma.Context, next func(huma.Context)) {
	if op := ctx.Operation(); op != nil && op.RequestBody != nil {
		sent := ctx.Header("Content-Type")
		if mt, _, err := mime.ParseMediaType(sent); err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			if canon := mime.FormatMediaType(mt, nil); canon != "" && canon != sent {
				ctx = contentTypeContext{humaContext: ctx, contentType: canon}
			}
		}
	}
	next(ctx)
}

// contentTypeContext is a huma context whose request has another
// Content-Type (see canonicalJSONType).
type contentTypeContext struct {
	humaContext
	contentType string
}

// humaContext names huma.Context for embedding: embedded as itself, its
// field would be named Context, as is one of its methods.
type humaContext = huma.Context

func (c contentTypeContext) Header(name string) string {
	if http.CanonicalHeaderKey(name) == "Content-Type" {
		return c.contentType
	}
	return c.humaContext.Header(name)
}

func (c contentTypeContext) EachHeader(cb func(name, value string)) {
	c.humaContext.EachHeader(func(name, value string) {
		if http.CanonicalHeaderKey(name) == "Content-Type" {
			value = c.contentType
		}
		cb(name, value)
	})
}

// Unwrap lets humago.Unwrap reach the request and its writer.
func (c contentTypeContext) Unwrap() huma.Context { return c.humaContext }

// refuseJSONPatch answers 415 to a body sent as a JSON Patch (RFC 6902),
// which huma would otherwise decode as JSON like any +json type and refuse
// with a 422 about the schema that does not say what was wrong: weir's
// PATCH operations take a merge patch (RFC 7396).
func (s *server) refuseJSONPatch(ctx huma.Context, next func(huma.Context)) {
	if op := ctx.Operation(); op != nil && op.RequestBody != nil {
		if mt, _, err := mime.ParseMediaType(ctx.Header("Content-Type")); err == nil && mt == "application/json-patch+json" {
			_ = huma.WriteErr(s.api, ctx, http.StatusUnsupportedMediaType,
				"the body is a JSON Patch (application/json-patch+json), which weir does not take: send JSON "+
					"(application/json), for PATCH a merge patch (application/merge-patch+json) naming the fields to change")
			return
		}
	}
	next(ctx)
}

// limit answers 503 with Retry-After when api.maxConcurrentRequests calls
// are already running, rather than queueing without bound.
func (s *server) limit(ctx huma.Context, next func(huma.Context)) {
	select {
	case s.slots <- struct{}{}:
		sl := &slot{ch: s.slots}
		defer sl.release()
		next(huma.WithValue(ctx, slotKey{}, sl))
	default:
		retry := s.retryAfter()
		ctx.SetHeader("Retry-After", strconv.Itoa(retry))
		_ = huma.WriteErr(s.api, ctx, http.StatusServiceUnavailable,
			fmt.Sprintf("more than %d API calls are running; retry after %d s", cap(s.slots), retry))
	}
}

// unboundedOps are the operations boundDatabase leaves alone: an import's
// upload may take longer than receive.databaseTimeout, so its handler
// bounds each of its database calls itself (dbContext).
var unboundedOps = map[string]bool{"import-streams": true}

// boundDatabase bounds a call's waits for the metadata database by
// receive.databaseTimeout, as a post's look-ups are: a PostgreSQL server
// cut off without a reset (a partition) or stuck otherwise held every call
// until its client gave up (its API slot and a pooled connection with it),
// since the request's context has no deadline. A call that runs out of
// time is answered 503 with Retry-After (see internal). A download's body
// is not bounded (see download): only what precedes it.
func (s *server) boundDatabase(ctx huma.Context, next func(huma.Context)) {
	d := s.Config.Receive.DatabaseTimeout.D()
	if d <= 0 || unboundedOps[ctx.Operation().OperationID] {
		next(ctx)
		return
	}
	outer := ctx.Context()
	bounded, cancel := context.WithTimeout(context.WithValue(outer, unboundedKey{}, outer), d)
	defer cancel()
	next(huma.WithContext(ctx, bounded))
}

// seeReceived makes a call see every post this node answered before the
// call: with store.commit: log, a post is answered before its rows are in
// the database (see store.Store.Sync), usually by milliseconds. It waits
// at most receive.databaseTimeout, and not at all while those rows cannot
// be recorded: the call then goes on, and may not see the latest posts.
func (s *server) seeReceived(ctx huma.Context, next func(huma.Context)) {
	if s.Store != nil {
		c, cancel := s.dbContext(ctx.Context())
		_ = s.Store.Sync(c)
		cancel()
	}
	next(ctx)
}

// dbContext bounds ctx by receive.databaseTimeout, for a handler that
// boundDatabase leaves alone.
func (s *server) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := s.Config.Receive.DatabaseTimeout.D(); d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

// unboundedKey is the context key of a call's context before
// boundDatabase bounded it.
type unboundedKey struct{}

// unbounded is ctx without boundDatabase's deadline: cancelled when the
// call's own context is (the client went away), with ctx's values (the
// caller, the API slot).
func unbounded(ctx context.Context) context.Context {
	outer, ok := ctx.Value(unboundedKey{}).(context.Context)
	if !ok {
		return ctx
	}
	return valuesOf{Context: outer, values: ctx}
}

// valuesOf is a context's lifetime with another's values.
type valuesOf struct {
	context.Context
	values context.Context
}

func (c valuesOf) Value(key any) any { return c.values.Value(key) }

func (s *server) retryAfter() int { return max(int(s.Config.API.RetryAfter.D().Seconds()), 1) }

// slotKey is the context key of a request's API slot.
type slotKey struct{}

// slot is a request's place among api.maxConcurrentRequests, given back
// once, whichever of the request's end and its download's start is first.
type slot struct {
	once sync.Once
	ch   chan struct{}
}

func (sl *slot) release() { sl.once.Do(func() { <-sl.ch }) }

// download makes body, which sends a stream or an export, the answer of
// the request of ctx. Sending takes one of api.maxConcurrentDownloads
// (503 with Retry-After when all are taken) and gives the request's API
// slot back as it starts: a client that reads slowly, or a few dozen of
// them, would otherwise hold every slot for as long as they read, and
// every other call would get 503. On an error the caller closes what body
// would have.
//
// body writes through w, not hc's own writer: a client that stops reading
// (its socket buffers full) fails the download after
// receive.bodyIdleTimeout without taking anything, as a sender that stops
// sending fails its post, instead of holding the download slot and its
// goroutine for as long as it stays connected.
func (s *server) download(ctx context.Context, body func(hc huma.Context, w http.ResponseWriter)) (*huma.StreamResponse, error) {
	select {
	case s.downloads <- struct{}{}:
	default:
		retry := s.retryAfter()
		return nil, huma.ErrorWithHeaders(
			huma.Error503ServiceUnavailable(fmt.Sprintf("%d downloads are being sent (api.maxConcurrentDownloads); retry after %d s", cap(s.downloads), retry)),
			http.Header{"Retry-After": {strconv.Itoa(retry)}})
	}
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		defer func() { <-s.downloads }()
		if sl, ok := ctx.Value(slotKey{}).(*slot); ok {
			sl.release()
		}
		r, w := humago.Unwrap(hc)
		iw := newIdleResponseWriter(r, w, s.Config.Receive.BodyIdleTimeout.D())
		defer iw.stop()
		// Sending takes as long as the client takes to read: it is bounded
		// by bodyIdleTimeout, not by the database's.
		body(huma.WithContext(hc, unbounded(hc.Context())), iw)
	}}, nil
}

// secured marks an operation as needing a caller.
func secured(op huma.Operation) huma.Operation {
	op.Security = []map[string][]string{{securityScheme: {}}}
	op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden)
	return op
}

// authenticate resolves the caller of every secured operation: 401 when the
// credential is missing or bad (saying which, never more), else the
// caller's principal goes into the context.
func (s *server) authenticate(ctx huma.Context, next func(huma.Context)) {
	if len(ctx.Operation().Security) == 0 {
		next(ctx)
		return
	}
	// Bounded here too for the calls boundDatabase leaves alone.
	pctx, cancel := s.dbContext(ctx.Context())
	p, err := s.principal(pctx, ctx.Header("Authorization"))
	cancel()
	if err != nil {
		var msg string
		var ae *access.AuthError
		var f *auth.Failure
		switch {
		case errors.As(err, &ae):
			msg = ae.Error()
		case errors.As(err, &f):
			msg = f.Detail
		case meta.IsUnavailable(err):
			s.Log.Error("api authentication", "err", err)
			ctx.SetHeader("Retry-After", strconv.Itoa(s.retryAfter()))
			_ = huma.WriteErr(s.api, ctx, http.StatusServiceUnavailable,
				"the credential cannot be checked now: the metadata database is unavailable; try again later")
			return
		default:
			// Not the credential's fault (the database failed): 401 would
			// tell the caller its key is bad, and it would throw it away.
			s.Log.Error("api authentication", "err", err)
			_ = huma.WriteErr(s.api, ctx, http.StatusInternalServerError,
				"the credential cannot be checked now (an internal error, logged); try again later")
			return
		}
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="weir"`)
		_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, msg)
		return
	}
	next(huma.WithValue(ctx, principalKey{}, p))
}

func (s *server) principal(ctx context.Context, header string) (*access.Principal, error) {
	if scheme := auth.ForeignScheme(header); scheme != "" {
		// "Basic ..." would otherwise be judged as an API key or a token,
		// and refused as a malformed one: say what the API takes instead.
		accepts := []string{"an API key (sak_...)"}
		if s.Tokens != nil {
			accepts = append(accepts, "an OIDC access token of a weir user")
		}
		return nil, &auth.Failure{Code: auth.TokenFailed, Detail: auth.UnsupportedScheme(scheme, accepts, ""),
			Err: &auth.SchemeError{Scheme: scheme}}
	}
	raw := strings.TrimSpace(header)
	if len(raw) > 7 && strings.EqualFold(raw[:7], "bearer ") {
		raw = strings.TrimSpace(raw[7:])
	}
	if raw == "" || strings.HasPrefix(raw, "sak_") || s.Tokens == nil {
		return s.Access.Authenticate(ctx, raw)
	}
	id, err := s.Tokens.Verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	return s.Access.PrincipalFor(ctx, id.SubjectID)
}

// caller is the authenticated principal of a secured operation.
func caller(ctx context.Context) *access.Principal {
	p, _ := ctx.Value(principalKey{}).(*access.Principal)
	return p
}

// require fails with 403 unless the caller holds an application permission.
func require(ctx context.Context, permission string) error {
	if p := caller(ctx); p == nil || !p.Has(permission) {
		return huma.Error403Forbidden("this needs the application permission " + permission)
	}
	return nil
}

// requireFeed fails with 403 unless the caller holds level on feed.
func requireFeed(ctx context.Context, feed string, level access.Level) error {
	if p := caller(ctx); p == nil || p.FeedLevel(feed) < level {
		return huma.Error403Forbidden("this needs " + level.String() + " permission on feed " + feed)
	}
	return nil
}

// visibleFeeds narrows a query: nil for callers who see every feed.
func visibleFeeds(ctx context.Context) []string {
	all, feeds := caller(ctx).Feeds(access.View)
	if all {
		return nil
	}
	if feeds == nil {
		feeds = []string{}
	}
	return feeds
}

// internal logs an unexpected error and hides its details from the caller:
// 503 with Retry-After when the metadata database could not be reached
// (the call may succeed later), else 500.
// streamUnreadable answers a stream whose file could not be opened or
// read: 500 naming the stream and saying why in a few words (damaged,
// missing, not readable: see store.Problem), not a bare "internal error";
// the log has the file and the details. Any other error is internal.
func (s *server) streamUnreadable(id int64, op string, err error) error {
	why := store.Problem(err)
	if why == "" {
		return s.internal(op, err)
	}
	s.Log.Error("api: stream cannot be read", "op", op, "stream", id, "err", err)
	return huma.Error500InternalServerError(fmt.Sprintf("stream %d cannot be read: %s; the server log has the details", id, why))
}

func (s *server) internal(op string, err error) error {
	s.Log.Error("api", "op", op, "err", err)
	if meta.IsUnavailable(err) {
		return s.unanswered("the metadata database is unavailable; try again later")
	}
	return huma.Error500InternalServerError("internal error; the server log has the details")
}

// registerSchemas serves the JSON schemas that responses link to in their
// $schema member, as huma's own route would, but answers 404 (a problem,
// as every API error) for a name the registry does not have.
func (s *server) registerSchemas(schemasPath string) {
	if schemasPath == "" {
		return
	}
	oapi := s.api.OpenAPI()
	// The schemas' own references point into the document; served alone,
	// they point to the sibling schema files instead (as huma does).
	refs := regexp.MustCompile(`#/components/schemas/([^"]+)`)
	s.api.Adapter().Handle(&huma.Operation{Method: http.MethodGet, Path: schemasPath + "/{schema}"}, func(ctx huma.Context) {
		name := strings.TrimSuffix(ctx.Param("schema"), ".json")
		schema, ok := oapi.Components.Schemas.Map()[name]
		if !ok {
			_ = huma.WriteErr(s.api, ctx, http.StatusNotFound, "no schema named "+name)
			return
		}
		b, err := json.Marshal(schema)
		if err != nil {
			_ = huma.WriteErr(s.api, ctx, http.StatusInternalServerError, "cannot encode schema "+name)
			return
		}
		ctx.SetHeader("Content-Type", "application/json")
		_, _ = ctx.BodyWriter().Write(refs.ReplaceAll(b, []byte(schemasPath+`/$1.json`)))
	})
}

// fallbackMethods are the methods probed for a 405's Allow header.
var fallbackMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// registerFallback answers what no API route takes, as API errors are
// answered (application/problem+json), rather than with the mux's plain
// text: 405 with Allow when the path has routes for other methods, else 404.
// A pattern without a method matches any method, so once this one is
// registered the mux never answers 405 for /api itself; the methods are
// found by asking it which pattern each would reach.
func (s *server) registerFallback(mux *http.ServeMux) {
	const pattern = "/api/"
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range fallbackMethods {
			probe := *r
			probe.Method = m
			if _, p := mux.Handler(&probe); p != "" && p != pattern {
				allow = append(allow, m)
			}
		}
		ctx := humago.NewContext(&huma.Operation{}, r, w)
		if len(allow) == 0 {
			_ = huma.WriteErr(s.api, ctx, http.StatusNotFound, "no API operation at "+r.URL.Path+"; the OpenAPI document at /api/openapi.json lists them")
			return
		}
		ctx.SetHeader("Allow", strings.Join(allow, ", "))
		_ = huma.WriteErr(s.api, ctx, http.StatusMethodNotAllowed,
			fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
	})
}

// documentCommonErrors adds to every operation the error responses that
// weir sends for it outside its handler, so that no operation has to list
// them by hand: 431 and 503 (the headerLimit and limit middlewares, on
// every operation) and, for an operation whose JSON body huma decodes, 400
// (not JSON, trailing data, nested too deep, or missing), 413 (over the
// operation's body limit) and 415 (another Content-Type). A response the
// operation documents itself is kept.
func documentCommonErrors(oapi *huma.OpenAPI, op *huma.Operation) {
	proto := huma.NewError(0, "")
	contentType := "application/json"
	if f, ok := proto.(huma.ContentTypeFilter); ok {
		contentType = f.ContentType(contentType)
	}
	errType := reflect.TypeOf(proto)
	if errType.Kind() == reflect.Pointer {
		errType = errType.Elem()
	}
	schema := oapi.Components.Schemas.Schema(errType, true, "Error")
	add := func(status int, description string, headers map[string]*huma.Param) {
		code := strconv.Itoa(status)
		if op.Responses == nil {
			op.Responses = map[string]*huma.Response{}
		}
		cur := op.Responses[code]
		switch {
		case cur == nil:
		case cur.Description == http.StatusText(status):
			// Listed in op.Errors, for a cause of the handler's own, which
			// the operation's description names.
			description += " Also for the causes the operation's description names."
		default:
			return // documented by the operation itself
		}
		op.Responses[code] = &huma.Response{Description: http.StatusText(status) + ": " + description, Headers: headers,
			Content: map[string]*huma.MediaType{contentType: {Schema: schema}}}
	}
	add(http.StatusRequestHeaderFieldsTooLarge, "the request line and headers are over receive.maxHeaderBytes.", nil)
	add(http.StatusServiceUnavailable, "more than api.maxConcurrentRequests API calls are running (or, for a download of a stream or an export, api.maxConcurrentDownloads downloads are being sent); retry after Retry-After seconds.",
		map[string]*huma.Param{"Retry-After": {Description: "Seconds to wait before retrying.", Schema: &huma.Schema{Type: huma.TypeInteger}}})
	if op.RequestBody == nil {
		return
	}
	// huma decodes a body whose media types have a schema; a body of any
	// bytes (an import's zip, documented without one) is its handler's.
	decoded := false
	for _, m := range op.RequestBody.Content {
		decoded = decoded || m != nil && m.Schema != nil
	}
	if !decoded {
		return
	}
	add(http.StatusBadRequest, "the body is missing, is not valid JSON, has data after the JSON value or nests too deeply.", nil)
	if op.MaxBodyBytes > 0 {
		add(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes.", op.MaxBodyBytes), nil)
	}
	// huma decodes any JSON media type (application/json, or a +json one
	// such as application/merge-patch+json), and a body sent without a
	// Content-Type as the operation's own.
	add(http.StatusUnsupportedMediaType, "the body's Content-Type is not JSON: application/json or a +json type such as "+
		"application/merge-patch+json (but not a JSON Patch, application/json-patch+json).", nil)
}

// maxEchoedValue bounds a string that an error detail echoes back (huma
// puts the whole request body in errors[].value when it is not valid JSON):
// a 1 MB body must not come back as a 1 MB answer.
const maxEchoedValue = 256

// localSchemaLink repairs the $schema link of an answer to a request whose
// Host is localhost. huma then writes its first server URL instead of the
// host, and weir's is a path (/api), so the link came out as
// "https:///api/api/schemas/Caller.json" over HTTP and HTTPS alike. It is
// written as for any other host: the scheme, the Host and the schema path.
func localSchemaLink(serverURL string) huma.Transformer {
	bad := "https://" + serverURL + "/"
	return func(ctx huma.Context, _ string, v any) (any, error) {
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct || rv.Elem().NumField() == 0 {
			return v, nil
		}
		f := rv.Elem().Field(0)
		if name, _, _ := strings.Cut(rv.Elem().Type().Field(0).Tag.Get("json"), ","); name != "$schema" ||
			f.Kind() != reflect.String || !f.CanSet() || !strings.HasPrefix(f.String(), bad) {
			return v, nil
		}
		scheme := "http://"
		if ctx.TLS() != nil {
			scheme = "https://"
		}
		f.SetString(scheme + ctx.Host() + f.String()[len(bad)-1:])
		return v, nil
	}
}

// boundErrorValues cuts long values in error details to maxEchoedValue
// bytes (on a character boundary) and says that they were cut and how long
// they were. A value that is not a string is cut as its JSON text.
func boundErrorValues(_ huma.Context, _ string, v any) (any, error) {
	em, ok := v.(*huma.ErrorModel)
	if !ok {
		return v, nil
	}
	// A message may quote what was sent too (a path, a name): bounded as
	// well, more loosely, since weir's own words can be long.
	em.Detail = cutEcho(em.Detail, maxEchoedMessage)
	for _, d := range em.Errors {
		if d == nil {
			continue
		}
		d.Message = cutEcho(d.Message, maxEchoedMessage)
		if d.Value == nil {
			continue
		}
		str, isString := d.Value.(string)
		if !isString {
			b, err := json.Marshal(d.Value)
			if err != nil || len(b) <= maxEchoedValue {
				continue
			}
			str = string(b)
		}
		if len(str) > maxEchoedValue {
			d.Value = cutEcho(str, maxEchoedValue)
		}
	}
	return v, nil
}

// maxEchoedMessage bounds an error's detail and messages (see
// boundErrorValues).
const maxEchoedMessage = 4096

// cutEcho cuts s after max bytes, on a character boundary, and says so.
func cutEcho(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (cut: the first %d of %d bytes)", s[:cut], cut, len(s))
}
