package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/receive"
)

// ServiceVersion is the build that answered.
type ServiceVersion struct {
	Version   string `json:"version" doc:"The running build's version; every response carries it in the Weir-Version header too."`
	GoVersion string `json:"goVersion" doc:"The Go release the build was compiled with."`
	Node      string `json:"node" doc:"The node that answered; behind a load balancer a call may reach any node."`
}

// NodeStatus describes the node that answered.
type NodeStatus struct {
	Name          string `json:"name" doc:"The node's name, as used in its receipt ids."`
	Version       string `json:"version" doc:"The running build's version."`
	GoVersion     string `json:"goVersion"`
	Started       string `json:"started" format:"date-time" doc:"When this node's API started, UTC, yyyy-MM-ddTHH:mm:ss.SSSZ."`
	UptimeSeconds int64  `json:"uptimeSeconds" minimum:"0"`
	Uptime        string `json:"uptime" doc:"The uptime for people, e.g. 26h3m4s."`
	Database      string `json:"database" enum:"sqlite,postgres" doc:"The metadata database engine."`
	DataDir       string `json:"dataDir,omitempty" doc:"The data directory on the node (shown to Administrators only)."`
	StorePath     string `json:"storePath,omitempty" doc:"Where the node keeps stream files (shown to Administrators only)."`
}

type versionOutput struct{ Body ServiceVersion }

type nodeOutput struct{ Body NodeStatus }

// registerService registers the version and node operations and documents
// the datafeed endpoint.
func (s *server) registerService() {
	// Captured here rather than kept globally: the API's start is close
	// enough to the process's, and a second API in one process (tests)
	// has its own.
	started := time.Now()

	huma.Register(s.api, huma.Operation{
		OperationID: "get-version", Method: http.MethodGet, Path: "/version", Tags: []string{"Service"},
		Summary: "Build version",
		Description: "The version of the running build, which is also the version of this API and of its OpenAPI " +
			"document (`info.version`): an upgrade can change request and response shapes, so re-test automation " +
			"when it changes. Needs no credentials.",
	}, func(context.Context, *struct{}) (*versionOutput, error) {
		return &versionOutput{Body: ServiceVersion{Version: s.Version, GoVersion: runtime.Version(), Node: s.Node}}, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-node", Method: http.MethodGet, Path: "/node", Tags: []string{"Service"},
		Summary: "Node status", Description: "The node that answered: name, build, uptime and storage. Any valid key may call it; the paths on the server are shown to Administrators only.",
	}), func(ctx context.Context, _ *struct{}) (*nodeOutput, error) {
		up := time.Since(started)
		out := &nodeOutput{Body: NodeStatus{
			Name: s.Node, Version: s.Version, GoVersion: runtime.Version(),
			Started: attr.FormatTime(started), UptimeSeconds: int64(up.Seconds()), Uptime: up.Truncate(time.Second).String(),
			Database: s.Repo.Engine(),
		}}
		// Paths on the server are an operator's business, not every key's.
		if p := caller(ctx); p != nil && p.Has(access.Administrator) {
			out.Body.DataDir = s.DataDir
			// The store's root as the app opens it (app.OpenStorage).
			out.Body.StorePath = filepath.Join(s.DataDir, "store")
		}
		return out, nil
	})

	addDatafeed(s.api.OpenAPI(), s.BasePath)
	addOperational(s.api.OpenAPI(), s.BasePath)
}

// registerOperational serves the health and metrics endpoints beside /api.
func (s *server) registerOperational(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	if s.Ready != nil {
		mux.Handle("GET /readyz", s.Ready)
	}
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
	}
}

// addOperational documents the health and metrics endpoints, which the app
// serves beside /api (for load balancers and Prometheus), so that every
// route the service answers is in the document.
func addOperational(oapi *huma.OpenAPI, basePath string) {
	root := basePath
	if root == "" {
		root = "/"
	}
	text := func(id, path, summary, description string, codes ...int) {
		responses := map[string]*huma.Response{}
		for _, code := range codes {
			responses[strconv.Itoa(code)] = &huma.Response{Description: http.StatusText(code),
				Content: map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{Type: "string"}}}}
		}
		oapi.Paths[path] = &huma.PathItem{
			Servers: []*huma.Server{{URL: root, Description: "The service root (the deployment base path), not /api."}},
			Get: &huma.Operation{OperationID: id, Method: http.MethodGet, Path: path, Tags: []string{"Service"},
				Summary: summary, Description: description, Responses: responses},
		}
	}
	text("get-healthz", "/healthz", "Liveness", "200 while the process runs. Needs no credentials.", http.StatusOK)
	text("get-readyz", "/readyz", "Readiness",
		"200 when the metadata database answers and the data volume has space; 503 with a short reason otherwise and "+
			"while shutting down (a database error itself is logged, not sent). Needs no credentials.", http.StatusOK, http.StatusServiceUnavailable)
	text("get-metrics", "/metrics", "Prometheus metrics",
		"Metrics in the Prometheus text format (receipts by feed and outcome, bytes, latency, group commit batch sizes). "+
			"Needs no credentials.", http.StatusOK)
}

// datafeedScheme is the security scheme of senders' data feed keys; it is
// not the API's scheme because the two kinds of key are not interchangeable.
const datafeedScheme = "datafeedKey"

// addDatafeed documents the datafeed endpoint. The receive handler serves it,
// not huma, so only the document learns about it here; the status codes come
// from receive.Codes so that the document cannot drift from the handler.
func addDatafeed(oapi *huma.OpenAPI, basePath string) {
	if oapi.Components.SecuritySchemes == nil {
		oapi.Components.SecuritySchemes = map[string]*huma.SecurityScheme{}
	}
	oapi.Components.SecuritySchemes[datafeedScheme] = &huma.SecurityScheme{
		Type: "http", Scheme: "bearer",
		Description: "A data feed key (sdk_...) or a sender's token. The `Bearer ` prefix is optional on the datafeed. " +
			"Senders may authenticate with a client certificate (mutual TLS) instead.",
	}

	// The document's servers end in /api; the datafeed is beside /api, so
	// its path item names its own server (OpenAPI allows per-path servers).
	root := basePath
	if root == "" {
		root = "/"
	}
	item := &huma.PathItem{
		Summary:     "Receive data",
		Description: datafeedDescription(),
		Servers:     []*huma.Server{{URL: root, Description: "The service root (the deployment base path), not /api."}},
		Parameters:  datafeedHeaders(),
	}
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		op := &huma.Operation{
			OperationID: strings.ToLower(method) + "-datafeed", Method: method, Path: "/datafeed",
			Tags:    []string{"Datafeed"},
			Summary: "Post data (" + method + ")",
			Description: "Stores the body as a stream on a feed and answers with its receipt id. " +
				"POST and PUT behave the same. See the path's description for the paths, compression rules and status codes.",
			// Optional: when receive.authenticationRequired is false anyone may send.
			Security: []map[string][]string{{datafeedScheme: {}}, {}},
			RequestBody: &huma.RequestBody{
				Required: true,
				Description: "The data as binary, unmodified: text, or compressed as declared by Compression or " +
					"Content-Encoding. With Compression: ZIP, a zip in the Stroom zip format. Any Content-Type is accepted.",
				Content: binaryContent("application/octet-stream", "*/*"),
			},
			Responses: datafeedResponses(),
		}
		switch method {
		case http.MethodPost:
			item.Post = op
		case http.MethodPut:
			item.Put = op
		}
	}
	if oapi.Paths == nil {
		oapi.Paths = map[string]*huma.PathItem{}
	}
	oapi.Paths["/datafeed"] = item
}

// binaryContent documents a body of any bytes in each of mediaTypes. An
// empty media type is OpenAPI 3.1's way of saying so, and is valid 3.0 too
// (the downgrade adds format: binary to application/octet-stream). A schema
// with format binary is not: huma renders it with contentMediaType, a 3.1
// keyword its 3.0 downgrade keeps, which makes the document that
// generators read invalid.
func binaryContent(mediaTypes ...string) map[string]*huma.MediaType {
	out := make(map[string]*huma.MediaType, len(mediaTypes))
	for _, mt := range mediaTypes {
		out[mt] = &huma.MediaType{}
	}
	return out
}

func datafeedDescription() string {
	var b strings.Builder
	b.WriteString("The datafeed endpoint. Senders POST (or PUT) a body of event data with headers that describe it; " +
		"the service stores it as a stream on the named feed and answers `200` with the receipt id as plain text.\n\n" +
		"It lives beside `/api`, at the service root (after any deployment base path). " +
		"Every path below is served the same way, and so is anything below each of them (`/datafeed/anything`):\n\n" +
		"| path | note |\n|---|---|\n")
	notes := map[string]string{
		"/datafeed":               "canonical",
		"/stroom/datafeed":        "legacy alias (authenticated prefix)",
		"/stroom/noauth/datafeed": "legacy alias (no-authentication prefix); authentication is as configured, as on every path",
	}
	for _, p := range receive.Paths {
		note := notes[p]
		if note == "" {
			note = "alias"
		}
		fmt.Fprintf(&b, "| `%s`, `%s/*` | %s |\n", p, p, note)
	}
	b.WriteString("\nOther methods get `405`.\n\n" +
		"**Headers.** Every request header and query parameter becomes an attribute of the stream " +
		"(query parameters win over headers), except credentials, hop-by-hop and transport headers, and the " +
		"compression declarations. The recognised ones are listed as parameters; any other is kept as sent.\n\n" +
		"**Compression.** Declare a compressed body in exactly one way: `Compression: GZIP` or `ZIP` " +
		"(the service decompresses it), or the standard `Content-Encoding` (inflated before anything else). " +
		"Never both: the post fails with `500`, status `400`. A compressed body declared uncompressed is " +
		"stored as sent, and the stream is flagged `UndeclaredCompression` (or refused with status `201`, by configuration).\n\n" +
		"**Failures** carry `Service-Status` (the code) and `Service-Error` (the reason in words), the same values " +
		"again as `Stroom-Status` and `Stroom-Error`, and the body `Service Status <code> - <reason>`. " +
		"Read them first. The codes:\n\n" +
		"| Service-Status | HTTP status | text |\n|---|---|---|\n")
	for _, c := range receive.Codes() {
		if c == receive.OK {
			continue // success sends no status headers
		}
		fmt.Fprintf(&b, "| %d | %d | %s |\n", c, c.HTTPStatus(), c.Text())
	}
	b.WriteString("\nA request line and headers over `receive.maxHeaderBytes` get `431` with status `431`, up to twice that size; " +
		"beyond it the HTTP server stops reading and answers `431` itself, without status headers.\n")
	return b.String()
}

func headerParam(name, description string, schema *huma.Schema) *huma.Param {
	if schema == nil {
		schema = &huma.Schema{Type: huma.TypeString}
	}
	return &huma.Param{Name: name, In: "header", Description: description, Schema: schema}
}

// datafeedHeaders are the request headers the spec names (Post table and
// "other recognised header keys"), plus the credential and Content-Encoding.
func datafeedHeaders() []*huma.Param {
	return []*huma.Param{
		headerParam("Feed", "The feed. Required unless feed name generation is enabled, or the body is a zip whose meta entries name their feeds.", nil),
		headerParam("Type", "The stream type, e.g. `Raw Events` or `Events` (any case); default: the feed's default type.", nil),
		headerParam("Compression", "How the body is compressed, in any case; absent or empty is NONE. Never together with Content-Encoding.",
			&huma.Schema{Type: huma.TypeString, Enum: []any{"ZIP", "GZIP", "NONE"}}),
		headerParam("Content-Encoding", "Standard HTTP compression, inflated before anything else; never together with Compression: GZIP or ZIP.",
			&huma.Schema{Type: huma.TypeString, Enum: []any{"gzip", "x-gzip", "deflate", "zstd", "identity"}}),
		headerParam("EffectiveTime", "The time of the events, as distinct from receipt time: ISO-8601 or epoch milliseconds.", nil),
		headerParam("GUID", "The sender's identifier of this post, to trace it; generated when absent.", nil),
		headerParam("Authorization", "The sender's credential: a data feed key (`sdk_...`) or a token, with or without `Bearer ` (never stored). "+
			"Also expressed as the datafeedKey security scheme.", nil),
		headerParam("AccountId", "The account that owns the data feed key; required with a data feed key.", nil),
		headerParam("AccountName", "", nil),
		headerParam("System", "", nil),
		headerParam("Environment", "", nil),
		headerParam("Component", "", nil),
		headerParam("Format", "", nil),
		headerParam("Schema", "", nil),
		headerParam("SchemaVersion", "", nil),
		headerParam("Encoding", "The character encoding of the data.", nil),
		headerParam("Classification", "", nil),
	}
}

// datafeedResponses documents success and every failure status, with the
// codes each can carry.
func datafeedResponses() map[string]*huma.Response {
	out := map[string]*huma.Response{
		"200": {
			Description: "Stored (or dropped by the feed's status, or nothing to store). The body is the receipt id and a newline; " +
				"there is no receipt id header.",
			Content: map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{
				Type: huma.TypeString, Examples: []any{"1795307221484_0000_S_myhost\n"},
				Description: "`<receipt time, epoch ms>_<sequence>_<origin: S>_<node>`",
			}}},
		},
	}
	byStatus := map[int][]receive.Code{}
	for _, c := range receive.Codes() {
		if c != receive.OK {
			byStatus[c.HTTPStatus()] = append(byStatus[c.HTTPStatus()], c)
		}
	}
	for status, codes := range byStatus {
		var enum []any
		var texts []string
		for _, c := range codes {
			enum = append(enum, int(c))
			texts = append(texts, fmt.Sprintf("%d %s", c, c.Text()))
		}
		statusSchema := func() *huma.Schema {
			return &huma.Schema{Type: huma.TypeInteger, Enum: slices.Clone(enum)}
		}
		reason := func() *huma.Schema { return &huma.Schema{Type: huma.TypeString} }
		r := &huma.Response{
			Description: http.StatusText(status) + ": " + strings.Join(texts, "; ") + ".",
			Headers: map[string]*huma.Param{
				"Service-Status": {Description: "The status code.", Schema: statusSchema(), Required: true},
				"Service-Error":  {Description: "The reason in words: `<text> [Feed: X, Compression: Y, Type: Z] - <what exactly was wrong>`.", Schema: reason(), Required: true},
				"Stroom-Status":  {Description: "Service-Status again, under the reference system's name.", Schema: statusSchema(), Required: true},
				"Stroom-Error":   {Description: "Service-Error again, under the reference system's name.", Schema: reason(), Required: true},
			},
			Content: map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{
				Type: huma.TypeString, Description: "`Service Status <code> - <reason>`",
			}}},
		}
		if slices.Contains(codes, receive.Unavailable) {
			r.Headers["Retry-After"] = &huma.Param{Description: "Seconds to wait before retrying.", Schema: &huma.Schema{Type: huma.TypeInteger}}
		}
		out[strconv.Itoa(status)] = r
	}
	return out
}
