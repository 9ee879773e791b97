package app_test

// Helpers for the black-box datafeed tests: posting with a real HTTP client
// or a raw connection, asserting responses, and checking exactly what was
// stored (or that nothing was).

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

const (
	testFeed  = "TEST-FEED"
	userAgent = "weir-test"
	// sampleZip is the reference system's sample payload in the Stroom zip
	// format; the other samples are beside it (copies, kept byte for byte).
	sampleZip = "testdata/stroom-samples/ZIP_TEST-DATA_SPLITTER-EVENTS~1.zip"
)

var (
	receiptRE = regexp.MustCompile(`^\d{13}_\d{4}_S_test-node$`)
	dateRE    = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)
	uuidRE    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
)

// client sends no Accept-Encoding of its own, so what a test sends is exactly
// what the server sees. Its timeout is a generous upper bound, never a
// measure of speed.
var client = &http.Client{
	Timeout: 2 * time.Minute,
	Transport: func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DisableCompression = true
		tr.MaxIdleConnsPerHost = 64
		return tr
	}(),
}

// hostName is what weir appends to ReceivedPath (DOCKER_HOST_HOSTNAME,
// then DOCKER_HOST_IP, then the host name).
func hostName(t testing.TB) string {
	t.Helper()
	for _, key := range []string{"DOCKER_HOST_HOSTNAME", "DOCKER_HOST_IP"} {
		if v := strings.TrimSpace(os.Getenv(key)); v != "" {
			return v
		}
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		t.Fatalf("hostname: %v", err)
	}
	return h
}

// start starts a server with the feed TEST-FEED (RECEIVE, default type).
func start(t testing.TB, mutate func(*config.Config)) *apptest.Server {
	t.Helper()
	s := apptest.Start(t, mutate)
	s.CreateFeed(testFeed, "", "")
	return s
}

// resp is a response as the sender sees it.
type resp struct {
	code       int
	header     http.Header
	body       string
	sent, done time.Time // around the exchange, to bound server-side times
}

// send makes one request. hdr is name, value pairs; names are sent exactly as
// given (not canonicalised). A User-Agent is always sent so that stored
// attributes are predictable.
func send(t testing.TB, s *apptest.Server, method, path string, body io.Reader, hdr ...string) *resp {
	t.Helper()
	if len(hdr)%2 != 0 {
		t.Fatalf("odd header list %q", hdr)
	}
	req, err := http.NewRequest(method, s.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", userAgent)
	for i := 0; i < len(hdr); i += 2 {
		req.Header[hdr[i]] = append(req.Header[hdr[i]], hdr[i+1])
	}
	r := &resp{sent: time.Now()}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: read response: %v", method, path, err)
	}
	r.done = time.Now()
	r.code, r.header, r.body = res.StatusCode, res.Header, string(b)
	return r
}

// post POSTs body to /datafeed.
func post(t testing.TB, s *apptest.Server, body []byte, hdr ...string) *resp {
	t.Helper()
	return send(t, s, http.MethodPost, "/datafeed", bytes.NewReader(body), hdr...)
}

// ok asserts a success response and returns the receipt id.
func (r *resp) ok(t testing.TB) string {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("want 200, got %d Service-Status %q Service-Error %q body %q",
			r.code, r.header.Get("Service-Status"), r.header.Get("Service-Error"), r.body)
	}
	id, found := strings.CutSuffix(r.body, "\n")
	if !found || !receiptRE.MatchString(id) {
		t.Fatalf("success body %q: want a receipt id and a newline", r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("success Content-Type %q, want text/plain", ct)
	}
	for _, h := range []string{"ReceiptId", "Service-Status", "Service-Error", "Stroom-Status", "Stroom-Error"} {
		if v, ok := r.header[http.CanonicalHeaderKey(h)]; ok {
			t.Errorf("success response has header %s: %q", h, v)
		}
	}
	return id
}

// fails asserts a failure: the HTTP status, Service-Status and its Stroom-*
// copy, a Service-Error containing every substring, and a one-line body.
func (r *resp) fails(t testing.TB, httpCode, status int, contains ...string) {
	t.Helper()
	code := strconv.Itoa(status)
	msg := r.header.Get("Service-Error")
	if r.code != httpCode || r.header.Get("Service-Status") != code {
		t.Fatalf("want %d Service-Status %d, got %d Service-Status %q Service-Error %q body %q",
			httpCode, status, r.code, r.header.Get("Service-Status"), msg, r.body)
	}
	if r.header.Get("Stroom-Status") != code || r.header.Get("Stroom-Error") != msg {
		t.Errorf("Stroom-Status %q Stroom-Error %q, want the Service-* values %q %q",
			r.header.Get("Stroom-Status"), r.header.Get("Stroom-Error"), code, msg)
	}
	if msg == "" {
		t.Errorf("no Service-Error")
	}
	for _, sub := range contains {
		if !strings.Contains(msg, sub) {
			t.Errorf("Service-Error %q does not contain %q", msg, sub)
		}
	}
	if want := "Service Status " + code + " - " + msg + "\n"; r.body != want {
		t.Errorf("failure body %q, want %q", r.body, want)
	}
	if strings.Count(r.body, "\n") != 1 {
		t.Errorf("failure body %q is not one line", r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("failure Content-Type %q, want text/plain", ct)
	}
	if r.header.Get("ReceiptId") != "" {
		t.Errorf("failure has a ReceiptId header")
	}
}

// nothingStored asserts that no stream exists in any status and that no file
// is left under the store or the staging area (directories may remain).
func nothingStored(t testing.TB, s *apptest.Server) {
	t.Helper()
	if st := s.Streams(); len(st) != 0 {
		t.Errorf("want no streams, got %d: %+v", len(st), st)
	}
	for _, dir := range []string{"store", "tmp"} {
		root := filepath.Join(s.Cfg.Data, dir)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				t.Errorf("file left behind: %s", p)
			}
			return nil
		})
		if err != nil {
			t.Errorf("walk %s: %v", root, err)
		}
	}
}

// oneStream asserts that exactly one stream exists, unlocked, on feed with
// type typ and receipt id, and returns it.
func oneStream(t testing.TB, s *apptest.Server, feedName, typ, receipt string) meta.Stream {
	t.Helper()
	st := s.Streams()
	if len(st) != 1 {
		t.Fatalf("want 1 stream, got %d: %+v", len(st), st)
	}
	checkStream(t, st[0], feedName, typ, receipt)
	return st[0]
}

func checkStream(t testing.TB, st meta.Stream, feedName, typ, receipt string) {
	t.Helper()
	if st.Feed != feedName || st.Type != typ || st.Status != meta.Unlocked || st.ReceiptID != receipt || st.Node != "test-node" {
		t.Errorf("stream %d: feed %q type %q status %s receipt %q node %q; want %q %q UNLOCKED %q test-node",
			st.ID, st.Feed, st.Type, st.Status, st.ReceiptID, st.Node, feedName, typ, receipt)
	}
}

// attrs is an expected attribute set: exact keys (with case) and values.
type attrs map[string]string

func (a attrs) with(kv ...string) attrs {
	out := make(attrs, len(a)+len(kv)/2)
	for k, v := range a {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func (a attrs) without(keys ...string) attrs {
	out := a.with()
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// metaText is the meta file weir must write for a: one key:value line per
// attribute, keys sorted case-insensitively.
func (a attrs) metaText() string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int { return strings.Compare(strings.ToLower(x), strings.ToLower(y)) })
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + ":" + a[k] + "\n")
	}
	return b.String()
}

func toAttrs(m *attr.Map) attrs {
	out := attrs{}
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

// wantAttrs asserts that got holds exactly want (keys compared with case).
func wantAttrs(t testing.TB, what string, got *attr.Map, want attrs) {
	t.Helper()
	g := toAttrs(got)
	if g.metaText() != want.metaText() || got.Len() != len(want) {
		t.Errorf("%s attributes:\n got: %q\nwant: %q", what, g.metaText(), want.metaText())
	}
}

// firstHop checks the attributes weir adds to a post that arrived without
// receipt information, in got, and returns them as expected values:
// ReceiptId and ReceiptIdPath are the receipt; ReceivedTime and
// ReceivedTimeHistory one UTC time between sending and the answer; GUID a
// fresh UUID; RemoteAddress and RemoteHost the loopback address; ReceivedPath
// this host. User-Agent is the one the tests send, Host the server's address,
// UploadUserId and UploadUsername the unauthenticated sender.
func firstHop(t testing.TB, s *apptest.Server, r *resp, receipt string, got *attr.Map) attrs {
	t.Helper()
	rt := got.Value("ReceivedTime")
	checkTime(t, rt, r)
	guid := got.Value("GUID")
	if !uuidRE.MatchString(guid) {
		t.Errorf("GUID %q is not a random UUID", guid)
	}
	return attrs{
		"ReceiptId": receipt, "ReceiptIdPath": receipt,
		"ReceivedTime": rt, "ReceivedTimeHistory": rt, "ReceivedPath": hostName(t),
		"GUID": guid, "RemoteAddress": "127.0.0.1", "RemoteHost": "127.0.0.1",
		"User-Agent": userAgent, "Host": addr(s),
		// These servers do not authenticate senders; the identity is recorded anyway.
		"UploadUserId": "UNAUTHENTICATED_USER", "UploadUsername": "UNAUTHENTICATED_USER",
	}
}

// addr is the server's host:port, as senders put it in the Host header.
func addr(s *apptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// checkTime asserts that v is a weir date within the exchange r.
func checkTime(t testing.TB, v string, r *resp) {
	t.Helper()
	if !dateRE.MatchString(v) {
		t.Errorf("time %q is not yyyy-MM-ddTHH:mm:ss.SSSZ", v)
		return
	}
	tm, err := time.Parse(attr.DateLayout, v)
	if err != nil {
		t.Errorf("time %q: %v", v, err)
		return
	}
	if tm.Before(r.sent.Truncate(time.Millisecond)) || tm.After(r.done) {
		t.Errorf("time %s is not between %s and %s", v, r.sent.UTC().Format(attr.DateLayout), r.done.UTC().Format(attr.DateLayout))
	}
}

// part is what one part of a stream must hold. ctx nil: no Context child.
type part struct {
	data string
	ctx  *string
	meta attrs
}

func ptr(s string) *string { return &s }

// wantParts asserts the stream's parts exactly: count, data, context (or its
// absence) and meta bytes.
func wantParts(t testing.TB, s *apptest.Server, st meta.Stream, parts ...part) {
	t.Helper()
	r, err := s.App.Store().Open(t.Context(), st.ID)
	if err != nil {
		t.Fatalf("open stream %d: %v", st.ID, err)
	}
	defer r.Close()
	if r.Parts() != len(parts) || st.Parts != len(parts) {
		t.Fatalf("stream %d has %d parts (row says %d), want %d", st.ID, r.Parts(), st.Parts, len(parts))
	}
	var raw int64
	for i, p := range parts {
		if got := s.Read(st.ID, streamfile.Data, i); string(got) != p.data {
			t.Errorf("stream %d part %d data:\n got %q\nwant %q", st.ID, i, trunc(got), trunc([]byte(p.data)))
		}
		raw += int64(len(p.data))
		switch {
		case p.ctx == nil && r.Has(streamfile.Context, i):
			t.Errorf("stream %d part %d has a context, want none: %q", st.ID, i, s.Read(st.ID, streamfile.Context, i))
		case p.ctx != nil:
			if got := s.Read(st.ID, streamfile.Context, i); string(got) != *p.ctx {
				t.Errorf("stream %d part %d context %q, want %q", st.ID, i, got, *p.ctx)
			}
		}
		if got, want := string(s.Read(st.ID, streamfile.Meta, i)), p.meta.metaText(); got != want {
			t.Errorf("stream %d part %d meta:\n got %q\nwant %q", st.ID, i, got, want)
		}
	}
	if st.RawSize != raw {
		t.Errorf("stream %d raw size %d, want %d", st.ID, st.RawSize, raw)
	}
}

func trunc(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// gz gzips each string as one member and concatenates the members.
func gz(t testing.TB, members ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, m := range members {
		w := gzip.NewWriter(&b)
		if _, err := io.WriteString(w, m); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// zipOf builds a zip of name, content pairs (deflated, in order).
func zipOf(t testing.TB, nameContent ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for i := 0; i+1 < len(nameContent); i += 2 {
		f, err := w.Create(nameContent[i])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(f, nameContent[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// logLine is one JSON log line.
type logLine map[string]any

func (l logLine) str(k string) string {
	v, _ := l[k].(string)
	return v
}

func (l logLine) num(k string) float64 {
	v, _ := l[k].(float64)
	return v
}

// receiveLogs returns the receive-log lines logged so far.
func receiveLogs(t testing.TB, s *apptest.Server) []logLine {
	t.Helper()
	var out []logLine
	for _, line := range strings.Split(s.Logs.String(), "\n") {
		if line == "" {
			continue
		}
		var l logLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		if l.str("msg") == "receive" && l.str("log") == "receive" {
			out = append(out, l)
		}
	}
	return out
}

// receiveLog waits for the one receive-log line whose key has value and
// returns it.
func receiveLog(t testing.TB, s *apptest.Server, key, value string) logLine {
	t.Helper()
	var found []logLine
	apptest.WaitFor(t, "receive log line with "+key+"="+value, func() bool {
		found = found[:0]
		for _, l := range receiveLogs(t, s) {
			if l.str(key) == value {
				found = append(found, l)
			}
		}
		return len(found) > 0
	})
	if len(found) != 1 {
		t.Fatalf("want one receive log line with %s=%s, got %d: %v", key, value, len(found), found)
	}
	return found[0]
}

// metric returns the value of the sample whose line starts with series (the
// name and labels exactly as exposed), or -1 when it is absent.
func metric(t testing.TB, s *apptest.Server, series string) float64 {
	t.Helper()
	r := send(t, s, http.MethodGet, "/metrics", nil)
	if r.code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", r.code)
	}
	for _, line := range strings.Split(r.body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// waitMetric waits until the series has value want.
func waitMetric(t testing.TB, s *apptest.Server, series string, want float64) {
	t.Helper()
	apptest.WaitFor(t, fmt.Sprintf("%s = %g", series, want), func() bool { return metric(t, s, series) == want })
}

// dial opens a raw connection to the server; it is closed at cleanup and
// every read gives up after a generous deadline.
func dial(t testing.TB, s *apptest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return c
}

// rawRequest writes head (request line and headers, without the blank line
// that ends them) and body on a new connection and reads the response.
func rawRequest(t testing.TB, s *apptest.Server, head string, body []byte) *resp {
	t.Helper()
	c := dial(t, s)
	r := &resp{sent: time.Now()}
	if _, err := io.WriteString(c, strings.ReplaceAll(head, "\n", "\r\n")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, c, r)
}

// readResponse reads the final response (skipping 1xx) from c.
func readResponse(t testing.TB, c net.Conn, r *resp) *resp {
	t.Helper()
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	for err == nil && res.StatusCode < 200 {
		res, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	r.done = time.Now()
	r.code, r.header, r.body = res.StatusCode, res.Header, string(b)
	return r
}

// head builds a request head for rawRequest: the request line, a Host header
// with the server's address, then lines.
func head(s *apptest.Server, requestLine string, lines ...string) string {
	return strings.Join(append([]string{requestLine, "Host: " + addr(s)}, lines...), "\n")
}

// streamByReceipt returns the one stream with this receipt id.
func streamByReceipt(t testing.TB, s *apptest.Server, receipt string) meta.Stream {
	t.Helper()
	s.Sync()
	st, err := s.App.Repo().ListStreams(t.Context(), meta.StreamFilter{ReceiptID: receipt})
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 {
		t.Fatalf("want one stream with receipt %s, got %d", receipt, len(st))
	}
	return st[0]
}

// readSample reads one of the reference system's sample inputs.
func readSample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(sampleZip), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func itoa(n int) string { return strconv.Itoa(n) }
