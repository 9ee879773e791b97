package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/api"
	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/receipt"
	"github.com/weirhq/weir/internal/receive"
)

var update = flag.Bool("update", false, "rewrite testdata/openapi*.golden.json from the served documents")

// goldenVersion replaces info.version in the golden files: the version
// changes with every commit, the document's shape is what is reviewed.
const goldenVersion = "VERSION"

const regenerate = "go test ./internal/api -run TestOpenAPIGolden -update && go generate ./internal/apiclient"

// fetch GETs url without credentials and fails the test unless it is 200.
func fetch(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return resp, b
}

// decode parses JSON keeping numbers as written.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("parse document: %v", err)
	}
	return m
}

// normalise checks that the document carries the running build's version
// and renders it with a fixed version, indented and with sorted keys, so
// that the golden file is stable and its diffs are readable.
func normalise(t *testing.T, doc []byte) []byte {
	t.Helper()
	m := decode(t, doc)
	info, _ := m["info"].(map[string]any)
	if info == nil || info["version"] != app.Version() {
		t.Fatalf("info.version is %v, want the build's version %q", info["version"], app.Version())
	}
	info["version"] = goldenVersion
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // descriptions hold <, > and &
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestOpenAPIGolden keeps the served document reviewed: any change to an
// operation shows up as a diff of testdata/openapi.golden.json. The 3.0
// downgrade is kept too: the generated client in internal/apiclient is
// built from it.
func TestOpenAPIGolden(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	for _, g := range []struct{ path, golden string }{
		{"/api/openapi.json", "testdata/openapi.golden.json"},
		{"/api/openapi-3.0.json", "testdata/openapi-3.0.golden.json"},
	} {
		_, body := fetch(t, s.URL+g.path)
		got := normalise(t, body)
		if *update {
			if err := os.MkdirAll(filepath.Dir(g.golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(g.golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(g.golden)
		if err != nil {
			t.Fatalf("read golden (create it with -update): %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("GET %s differs from %s:\n%s\n"+
				"The document is built from the registered operations, so any change to an operation, its "+
				"types or its docs changes it. Review the change (is it intended? does it break clients?), then run\n\t%s\n"+
				"and commit the golden files and the regenerated client with the change.",
				g.path, g.golden, lineDiff(want, got), regenerate)
		}
	}
}

// lineDiff shows the first few differing lines, enough to see what changed;
// git diff after -update shows the rest.
func lineDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	// Trim the common head and tail; what is left is the change.
	head := 0
	for head < len(w) && head < len(g) && w[head] == g[head] {
		head++
	}
	tail := 0
	for tail < len(w)-head && tail < len(g)-head && w[len(w)-1-tail] == g[len(g)-1-tail] {
		tail++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "@@ line %d: %d lines in the golden file replaced by %d served lines @@\n", head+1, len(w)-head-tail, len(g)-head-tail)
	const most = 40
	show := func(prefix string, lines []string) {
		for i, l := range lines {
			if i == most {
				fmt.Fprintf(&b, "%s ... %d more\n", prefix, len(lines)-most)
				break
			}
			b.WriteString(prefix + l + "\n")
		}
	}
	show("-", w[head:len(w)-tail])
	show("+", g[head:len(g)-tail])
	return b.String()
}

// TestOpenAPIServed checks the served documents below a deployment base
// path: unauthenticated, in both formats, with the running version, the
// servers, the security scheme and the datafeed endpoint.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) { c.BasePath = "/weir" })
	base := s.URL + "/weir/api"

	resp, body := fetch(t, base+"/openapi.json")
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "json") {
		t.Errorf("openapi.json Content-Type %q", ct)
	}
	if v := resp.Header.Get(app.VersionHeader); v != app.Version() {
		t.Errorf("%s %q, want %q", app.VersionHeader, v, app.Version())
	}
	doc := decode(t, body)
	spec := parseDoc(t, body)
	if spec.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", spec.OpenAPI)
	}

	// The same document as YAML.
	_, yb := fetch(t, base+"/openapi.yaml")
	var fromYAML any
	if err := yaml.Unmarshal(yb, &fromYAML); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	if a, b := canonical(t, fromYAML), canonical(t, doc); !bytes.Equal(a, b) {
		t.Errorf("openapi.yaml is not the same document as openapi.json")
	}
	// The 3.0 downgrade that generators read.
	_, b30 := fetch(t, base+"/openapi-3.0.json")
	if v := decode(t, b30)["openapi"]; v != "3.0.3" {
		t.Errorf("openapi-3.0.json: openapi %v", v)
	}

	// The version everywhere is the build's.
	var ver api.ServiceVersion
	_, vb := fetch(t, base+"/version")
	if err := json.Unmarshal(vb, &ver); err != nil {
		t.Fatal(err)
	}
	if spec.Info.Version != app.Version() || ver.Version != app.Version() || ver.Node != "test-node" || ver.GoVersion == "" {
		t.Errorf("info.version %q, /version %+v; want version %q on node test-node", spec.Info.Version, ver, app.Version())
	}

	if len(spec.Servers) != 1 || spec.Servers[0].URL != "/weir/api" {
		t.Errorf("servers %+v, want /weir/api", spec.Servers)
	}
	if sc := spec.Components.SecuritySchemes["bearer"]; sc == nil || sc.Type != "http" || sc.Scheme != "bearer" {
		t.Errorf("bearer security scheme %+v", sc)
	}
	if op := spec.Paths["/node"].Get; op == nil || len(op.Security) == 0 {
		t.Errorf("GET /node is not documented as secured")
	}
	if op := spec.Paths["/version"].Get; op == nil || len(op.Security) != 0 {
		t.Errorf("GET /version is not documented as open")
	}

	checkDatafeed(t, spec.Paths["/datafeed"], "/weir")
	probe(t, s.URL+"/weir", spec)
}

// oasDoc is what the tests read of a document. huma's own types cannot be
// decoded (the schema registry is an interface), and only these parts are
// checked here; the golden test covers the rest.
type oasDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Version string `json:"version"`
	} `json:"info"`
	Servers    []oasServer             `json:"servers"`
	Paths      map[string]*oasPathItem `json:"paths"`
	Components struct {
		SecuritySchemes map[string]*struct {
			Type   string `json:"type"`
			Scheme string `json:"scheme"`
		} `json:"securitySchemes"`
	} `json:"components"`
}

type oasServer struct {
	URL string `json:"url"`
}

type oasPathItem struct {
	Description string      `json:"description"`
	Servers     []oasServer `json:"servers"`
	Parameters  []*oasParam `json:"parameters"`
	Get         *oasOp      `json:"get"`
	Put         *oasOp      `json:"put"`
	Post        *oasOp      `json:"post"`
	Delete      *oasOp      `json:"delete"`
	Options     *oasOp      `json:"options"`
	Head        *oasOp      `json:"head"`
	Patch       *oasOp      `json:"patch"`
	Trace       *oasOp      `json:"trace"`
}

type oasOp struct {
	OperationID string                `json:"operationId"`
	Security    []map[string][]string `json:"security"`
	RequestBody *struct {
		Content map[string]json.RawMessage `json:"content"`
	} `json:"requestBody"`
	Responses map[string]*struct {
		Headers map[string]*oasParam       `json:"headers"`
		Content map[string]json.RawMessage `json:"content"`
	} `json:"responses"`
}

type oasParam struct {
	Name   string `json:"name"`
	In     string `json:"in"`
	Schema *struct {
		Enum []any `json:"enum"`
	} `json:"schema"`
}

func parseDoc(t *testing.T, b []byte) *oasDoc {
	t.Helper()
	var d oasDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parse document: %v", err)
	}
	return &d
}

// canonical renders a decoded document for comparison: YAML and JSON
// decoders differ in their number types, JSON round trips do not.
func canonical(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if b, err = json.Marshal(out); err != nil {
		t.Fatal(err)
	}
	return b
}

// checkDatafeed checks the datafeed's documentation against the handler:
// its server, methods, headers, body and every status code it can send.
func checkDatafeed(t *testing.T, item *oasPathItem, basePath string) {
	t.Helper()
	if item == nil {
		t.Fatal("/datafeed is not documented")
	}
	if len(item.Servers) != 1 || item.Servers[0].URL != basePath {
		t.Errorf("/datafeed servers %+v, want %q: the datafeed is beside /api", item.Servers, basePath)
	}
	for _, p := range receive.Paths {
		if !strings.Contains(item.Description, "`"+p+"`") {
			t.Errorf("/datafeed description does not name the path %s", p)
		}
	}
	headers := map[string]*oasParam{}
	for _, p := range item.Parameters {
		if p.In == "header" {
			headers[p.Name] = p
		}
	}
	// The spec's Post table and its other recognised keys, and the credential.
	for _, h := range []string{"Feed", "Type", "Compression", "Content-Encoding", "EffectiveTime", "GUID", "Authorization",
		"AccountId", "AccountName", "System", "Environment", "Component", "Format", "Schema", "SchemaVersion",
		"Encoding", "Classification"} {
		if headers[h] == nil {
			t.Errorf("/datafeed does not document the header %s", h)
		}
	}
	if c := headers["Compression"]; c != nil && !reflect.DeepEqual(c.Schema.Enum, []any{"ZIP", "GZIP", "NONE"}) {
		t.Errorf("Compression enum %v", c.Schema.Enum)
	}

	for _, op := range []*oasOp{item.Post, item.Put} {
		if op == nil {
			t.Fatal("/datafeed: POST or PUT is not documented")
		}
		if op.RequestBody == nil || op.RequestBody.Content["application/octet-stream"] == nil || op.RequestBody.Content["*/*"] == nil {
			t.Errorf("%s: request body %+v, want any bytes", op.OperationID, op.RequestBody)
		}
		ok := op.Responses["200"]
		if ok == nil || ok.Content["text/plain"] == nil {
			t.Errorf("%s: 200 is not a text/plain receipt id", op.OperationID)
		}
		for _, c := range receive.Codes() {
			if c == receive.OK {
				continue
			}
			status := strconv.Itoa(c.HTTPStatus())
			r := op.Responses[status]
			if r == nil {
				t.Errorf("%s: status %s (code %d) is not documented", op.OperationID, status, c)
				continue
			}
			for _, h := range []string{"Service-Status", "Stroom-Status"} {
				if p := r.Headers[h]; p == nil || !slices.Contains(p.Schema.Enum, any(float64(c))) {
					t.Errorf("%s: %s response does not list code %d in %s", op.OperationID, status, c, h)
				}
			}
			for _, h := range []string{"Service-Error", "Stroom-Error"} {
				if r.Headers[h] == nil {
					t.Errorf("%s: %s response does not document %s", op.OperationID, status, h)
				}
			}
			if c == receive.Unavailable && r.Headers["Retry-After"] == nil {
				t.Errorf("%s: %s response does not document Retry-After", op.OperationID, status)
			}
			row := fmt.Sprintf("| %d | %s | %s |", c, status, c.Text())
			if !strings.Contains(item.Description, row) {
				t.Errorf("/datafeed description lacks the row %q", row)
			}
		}
	}
}

// probe requests every documented operation over HTTP and fails on an
// answer from the mux itself (404 or 405 in plain text): the route is not
// served. Only requests that cannot change anything are sent: operations
// that need credentials are sent none (authentication refuses them before
// their handler runs), open ones only when they are GETs, and the datafeed
// without a feed (refused before its body is read).
func probe(t *testing.T, root string, spec *oasDoc) {
	t.Helper()
	for path, item := range spec.Paths {
		prefix := root + "/api"
		if len(item.Servers) > 0 {
			prefix = root
		}
		for method, op := range operations(item) {
			if len(op.Security) == 0 && method != http.MethodGet && path != "/datafeed" {
				continue // covered without side effects by TestRoutesDocumented
			}
			req, err := http.NewRequest(method, prefix+fillParams(path), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// The mux's own answers are plain text; under /api, the
			// fallback for what no route takes answers problems that say so.
			fromMux := (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed) &&
				(!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") ||
					bytes.Contains(b, []byte("no API operation at")) || bytes.Contains(b, []byte("is not allowed on"))) &&
				resp.Header.Get("Service-Status") == ""
			if fromMux {
				t.Errorf("%s %s is documented but not served: %d %s", method, req.URL.Path, resp.StatusCode, b)
			}
		}
	}
}

// operations lists a path item's operations by method.
func operations(item *oasPathItem) map[string]*oasOp {
	out := map[string]*oasOp{}
	for m, op := range map[string]*oasOp{
		http.MethodGet: item.Get, http.MethodPut: item.Put, http.MethodPost: item.Post, http.MethodDelete: item.Delete,
		http.MethodOptions: item.Options, http.MethodHead: item.Head, http.MethodPatch: item.Patch, http.MethodTrace: item.Trace,
	} {
		if op != nil {
			out[m] = op
		}
	}
	return out
}

var paramRE = regexp.MustCompile(`\{[^}]+\}`)

// fillParams puts a value in each path parameter; "1" passes as a name
// and as an id, and the mux checks neither.
func fillParams(path string) string { return paramRE.ReplaceAllString(path, "1") }

// undocumentedAPI are the /api routes that are not operations: the
// document itself and the schemas it links to.
var undocumentedAPI = []string{
	"GET /api/openapi.json", "GET /api/openapi.yaml", "GET /api/openapi-3.0.json", "GET /api/openapi-3.0.yaml",
	"GET /api/schemas/{schema}",
}

// TestRoutesDocumented checks that every route registered on the mux is
// documented and that every documented operation reaches its own route.
// operational are the health and metrics routes served beside /api.
var operational = []string{"/healthz", "/readyz", "/metrics"}

// It builds the API as app.New does, on a mux it can inspect.
func TestRoutesDocumented(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	log := slog.New(slog.DiscardHandler)
	st, err := app.OpenStorage(context.Background(), cfg, cfg.Node, log, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	mux := http.NewServeMux()
	ids, err := receipt.NewGenerator(receipt.OriginService, cfg.Node, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := receive.New(receive.Options{Config: cfg.Receive, Feeds: st.Repo, Store: st.Store, IDs: ids})
	h.Register(mux)
	srv, err := api.Register(mux, api.Deps{Repo: st.Repo, Store: st.Store, Access: access.New(st.Repo, 0, nil),
		FeedNames: cfg.FeedNameRegexp(), Log: log, Version: app.Version(), Node: cfg.Node, DataDir: cfg.Data, Config: cfg,
		Receiver: h, Ready: http.NotFoundHandler(), Metrics: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	b, err := json.Marshal(srv.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	spec := parseDoc(t, b)
	datafeed := spec.Paths["/datafeed"]
	if datafeed == nil {
		t.Fatal("/datafeed is not documented")
	}

	// Every registered route is documented.
	patterns := muxPatterns(t, mux)
	for _, p := range []string{"GET /api/openapi.json", "POST /datafeed", "GET /api/version"} {
		if !slices.Contains(patterns, p) {
			t.Fatalf("the mux's patterns %q lack %q: muxPatterns no longer understands net/http's ServeMux", patterns, p)
		}
	}
	// The datafeed paths also take every other method, to answer 405 with
	// the status headers, and /api/ answers what no API route takes (404 or
	// 405, as problems): no operation to document.
	otherMethods := []string{"/api/"}
	for _, p := range receive.Paths {
		otherMethods = append(otherMethods, p, p+"/")
	}
	for _, p := range patterns {
		if slices.Contains(otherMethods, p) {
			continue
		}
		method, path, ok := strings.Cut(p, " ")
		if !ok || method == "" || !strings.HasPrefix(path, "/") {
			t.Errorf("route %q has no method or has a host: every route is one method on one path", p)
			continue
		}
		switch {
		case slices.Contains(undocumentedAPI, p):
		case strings.HasPrefix(path, "/api/"):
			item := spec.Paths[strings.TrimPrefix(path, "/api")]
			if item == nil || operations(item)[method] == nil {
				t.Errorf("route %s is served but not documented (a hidden operation, or a handler registered around huma)", p)
			}
		case slices.Contains(operational, path):
			if item := spec.Paths[path]; item == nil || operations(item)[method] == nil || len(item.Servers) == 0 {
				t.Errorf("route %s is served beside /api but not documented with its own server", p)
			}
		case slices.Contains(receive.Paths, strings.TrimSuffix(path, "/")):
			if operations(datafeed)[method] == nil {
				t.Errorf("route %s: /datafeed does not document %s", p, method)
			}
			if !strings.Contains(datafeed.Description, "`"+strings.TrimSuffix(path, "/")+"`") {
				t.Errorf("route %s: the /datafeed description does not name its path", p)
			}
		default:
			t.Errorf("route %s is neither under /api nor a datafeed path", p)
		}
	}

	// Every documented operation is routed to its own pattern.
	for path, item := range spec.Paths {
		for method := range operations(item) {
			want := method + " /api" + path
			if path == "/datafeed" || slices.Contains(operational, path) {
				want = method + " " + path
			}
			r := httptest.NewRequest(method, strings.SplitN(want, " ", 2)[1], nil)
			r.URL.Path = fillParams(r.URL.Path)
			if _, got := mux.Handler(r); got != want {
				t.Errorf("%s %s is documented but the mux routes it to %q, want %q", method, r.URL.Path, got, want)
			}
			for _, alias := range receive.Paths {
				if path != "/datafeed" {
					break
				}
				for _, p := range []string{alias, alias + "/any/thing"} {
					if _, got := mux.Handler(httptest.NewRequest(method, p, nil)); got == "" {
						t.Errorf("%s %s is documented but not served", method, p)
					}
				}
			}
		}
	}
}

// muxPatterns lists the patterns registered on mux. net/http has no API
// for it and api.Register takes a concrete *http.ServeMux, so this reads
// the mux's routing index by reflection: read-only and without unsafe. The
// caller checks that known patterns are found, so a Go release that changes
// the index fails the test instead of passing it vacuously.
func muxPatterns(t *testing.T, mux *http.ServeMux) []string {
	t.Helper()
	idx := reflect.ValueOf(mux).Elem().FieldByName("index")
	if !idx.IsValid() {
		t.Fatal("http.ServeMux has no routing index: muxPatterns needs updating for this Go release")
	}
	seen := map[string]bool{}
	add := func(pats reflect.Value) {
		for i := range pats.Len() {
			if s := pats.Index(i).Elem().FieldByName("str"); s.IsValid() {
				seen[s.String()] = true
			}
		}
	}
	if segs := idx.FieldByName("segments"); segs.IsValid() {
		for it := segs.MapRange(); it.Next(); {
			add(it.Value())
		}
	}
	if multis := idx.FieldByName("multis"); multis.IsValid() {
		add(multis)
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// TestServiceEndpoints: the version is open and is the build's; the node
// status needs a key, any valid one, and describes this node.
func TestServiceEndpoints(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	ctx := context.Background()
	if _, err := s.App.Access().CreateUser(ctx, "nobody", "Nobody", false); err != nil {
		t.Fatal(err)
	}
	key, _, err := s.App.Access().CreateAPIKey(ctx, access.NewKey{Owner: "nobody"})
	if err != nil {
		t.Fatal(err)
	}

	get := func(path, key string) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}

	code, h, b := get("/api/version", "")
	var v api.ServiceVersion
	if err := json.Unmarshal(b, &v); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/version: %d %v %s", code, err, b)
	}
	if v.Version != app.Version() || h.Get(app.VersionHeader) != v.Version || v.Node != "test-node" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Errorf("GET /api/version: %+v, %s %q", v, app.VersionHeader, h.Get(app.VersionHeader))
	}

	if code, _, b := get("/api/node", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /api/node without a key: %d %s", code, b)
	}
	code, _, b = get("/api/node", key)
	var n api.NodeStatus
	if err := json.Unmarshal(b, &n); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/node with a user's key: %d %v %s", code, err, b)
	}
	if n.Name != "test-node" || n.Version != app.Version() || n.Database != s.App.Repo().Engine() ||
		n.DataDir != "" || n.StorePath != "" || n.UptimeSeconds < 0 || n.Uptime == "" {
		t.Errorf("GET /api/node with a user's key (no paths): %+v", n)
	}
	// An Administrator also sees the paths on the server.
	if err := s.App.Access().GrantApp(ctx, "nobody", access.Administrator); err != nil {
		t.Fatal(err)
	}
	code, _, b = get("/api/node", key)
	n = api.NodeStatus{}
	if err := json.Unmarshal(b, &n); code != http.StatusOK || err != nil ||
		n.DataDir != s.Cfg.Data || n.StorePath != filepath.Join(s.Cfg.Data, "store") {
		t.Fatalf("GET /api/node as an Administrator: %d %v %+v", code, err, n)
	}
	if fi, err := os.Stat(n.StorePath); err != nil || !fi.IsDir() {
		t.Errorf("store path %s: %v", n.StorePath, err)
	}
	started, err := time.Parse(time.RFC3339, n.Started)
	if err != nil || time.Since(started) < 0 || time.Since(started) > time.Minute {
		t.Errorf("started %q: %v", n.Started, err)
	}
}
