package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
)

func newTestSender(t *testing.T, cfg config.HTTPDestination) *HTTPSender {
	t.Helper()
	s, err := NewHTTPSender(cfg, "weir-test/1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// recorded is one request as a handler saw it.
type recorded struct {
	header           http.Header
	body             []byte
	contentLength    int64
	transferEncoding []string
}

func recordingServer(t *testing.T, answer func(w http.ResponseWriter)) (*httptest.Server, chan recorded) {
	t.Helper()
	got := make(chan recorded, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server read: %v", err)
		}
		got <- recorded{r.Header.Clone(), b, r.ContentLength, r.TransferEncoding}
		answer(w)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestHTTPSenderSuccess(t *testing.T) {
	srv, got := recordingServer(t, func(w http.ResponseWriter) {
		io.WriteString(w, "  0000000001-receipt\r\n")
	})
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL + "/datafeed", APIKey: " key-1 "})
	body := make([]byte, 300<<10)
	rand.Read(body)
	res := s.Post(context.Background(), http.Header{"Compression": {"ZIP"}}, bytes.NewReader(body))
	if !res.OK() || res.Err != nil || res.Permanent() {
		t.Fatalf("result %+v", res)
	}
	if res.Receipt != "0000000001-receipt" || res.HTTPStatus != 200 || res.Code != 0 || res.Bytes != int64(len(body)) {
		t.Fatalf("result %+v", res)
	}
	r := <-got
	if !bytes.Equal(r.body, body) {
		t.Fatalf("body differs: got %d bytes, sent %d", len(r.body), len(body))
	}
	if r.contentLength != -1 || len(r.transferEncoding) != 1 || r.transferEncoding[0] != "chunked" {
		t.Fatalf("not chunked: Content-Length %d, Transfer-Encoding %v", r.contentLength, r.transferEncoding)
	}
	for k, want := range map[string]string{
		"Content-Type":  "application/audit",
		"User-Agent":    "weir-test/1",
		"Authorization": "Bearer key-1",
		"Compression":   "ZIP",
	} {
		if v := r.header.Get(k); v != want {
			t.Errorf("%s: got %q, want %q", k, v, want)
		}
	}
	if s.URL() != srv.URL+"/datafeed" {
		t.Errorf("URL() = %q", s.URL())
	}
}

func TestHTTPSenderPostStreamSuccess(t *testing.T) {
	srv, got := recordingServer(t, func(w http.ResponseWriter) { io.WriteString(w, "rid-2\n") })
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL})
	var want bytes.Buffer
	res := s.PostStream(context.Background(), nil, func(w io.Writer) error {
		for i := range 1000 {
			line := fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", i%97))
			want.WriteString(line)
			if _, err := io.WriteString(w, line); err != nil {
				return err
			}
		}
		return nil
	})
	if !res.OK() || res.Receipt != "rid-2" || res.Bytes != int64(want.Len()) {
		t.Fatalf("result %+v (want %d bytes)", res, want.Len())
	}
	r := <-got
	if !bytes.Equal(r.body, want.Bytes()) || r.contentLength != -1 {
		t.Fatalf("body: %d bytes, Content-Length %d", len(r.body), r.contentLength)
	}
	if r.header.Get("Authorization") != "" {
		t.Errorf("Authorization sent without credentials: %q", r.header.Get("Authorization"))
	}
}

// rawServer answers one request on a plain TCP listener and reports the
// header lines exactly as they came (Go's server would canonicalise the
// names) and the de-chunked body.
func rawServer(t *testing.T) (addr string, got chan rawRequest) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan rawRequest, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var rr rawRequest
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				break
			}
			rr.lines = append(rr.lines, line)
		}
		rr.body, rr.err = io.ReadAll(httputil.NewChunkedReader(br))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nr-1\n")
		got <- rr
	}()
	return ln.Addr().String(), got
}

type rawRequest struct {
	lines []string // request line, then header lines
	body  []byte
	err   error
}

func (r rawRequest) has(line string) bool {
	for _, l := range r.lines {
		if l == line {
			return true
		}
	}
	return false
}

func (r rawRequest) named(name string) []string {
	var out []string
	for _, l := range r.lines[1:] {
		if k, _, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, name) {
			out = append(out, l)
		}
	}
	return out
}

func TestHTTPSenderHeadersOnTheWire(t *testing.T) {
	addr, got := rawServer(t)
	s := newTestSender(t, config.HTTPDestination{
		ForwardURL:                       "http://" + addr + "/datafeed",
		ForwardHeadersAdditionalAllowSet: []string{"foo"},
		APIKey:                           "k",
	})
	attrs := &attr.Map{}
	attrs.Put("FeEd", "TEST-FEED")
	attrs.Put("type", "Raw Events")
	attrs.Put("foo", "1")
	attrs.Put("bar", "2")
	attrs.Put("System", "bad\x01value") // not a header value: travels in the meta entries only
	attrs.Put("Environment", "Prod ünïcode")
	attrs.Put("ReceiptId", "r0")
	attrs.Put("Compression", "GZIP") // the aggregate's format decides, not the attribute
	attrs.Put("ſchema", "long s")    // Unicode-folds to "schema", but is no header name
	h := s.Headers(attrs, "ZIP")
	wantH := http.Header{"FeEd": {"TEST-FEED"}, "type": {"Raw Events"}, "foo": {"1"},
		"Environment": {"Prod ünïcode"}, "Compression": {"ZIP"}}
	if fmt.Sprint(h) != fmt.Sprint(wantH) {
		t.Fatalf("Headers() = %v, want %v", h, wantH)
	}
	// A caller's own headers: the body's encoding goes along, framing and
	// credentials are the sender's.
	h["Content-Encoding"] = []string{"identity"}
	h["content-length"] = []string{"4"}
	h["authorization"] = []string{"Basic eDp5"}
	h["X-Bad"] = []string{"a\r\nInjected: yes"}
	res := s.Post(context.Background(), h, strings.NewReader("data"))
	if !res.OK() || res.Receipt != "r-1" {
		t.Fatalf("result %+v", res)
	}
	r := <-got
	if r.err != nil || string(r.body) != "data" {
		t.Fatalf("body %q, %v", r.body, r.err)
	}
	for _, line := range []string{"POST /datafeed HTTP/1.1", "FeEd: TEST-FEED", "type: Raw Events", "foo: 1",
		"Compression: ZIP", "Transfer-Encoding: chunked", "Content-Type: application/audit",
		"Authorization: Bearer k", "User-Agent: weir-test/1", "Environment: Prod ünïcode",
		"Content-Encoding: identity"} {
		if !r.has(line) {
			t.Errorf("missing %q in %q", line, r.lines)
		}
	}
	for _, name := range []string{"bar", "System", "ReceiptId", "Content-Length", "ſchema", "X-Bad", "Injected"} {
		if l := r.named(name); len(l) > 0 {
			t.Errorf("%s sent: %q", name, l)
		}
	}
	for _, name := range []string{"Compression", "Authorization"} {
		if l := r.named(name); len(l) != 1 {
			t.Errorf("%s: %q", name, l)
		}
	}
}

func TestHTTPSenderDataFeedKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "dfk")
	if err := os.WriteFile(keyFile, []byte("sdk_abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, got := rawServer(t)
	s := newTestSender(t, config.HTTPDestination{
		ForwardURL:       "http://" + addr + "/datafeed",
		DataFeedKeyFile:  keyFile,
		DataFeedKeyOwner: "acct-1",
		DataFeedOwnerKey: "AccountId",
	})
	attrs := &attr.Map{}
	attrs.Put("Feed", "F")
	attrs.Put("accountid", "someone-else") // the configured owner wins
	h := s.Headers(attrs, "")
	if _, ok := h["accountid"]; ok {
		t.Fatalf("owner header taken from the attributes: %v", h)
	}
	h["ACCOUNTID"] = []string{"sneaked in"}
	res := s.Post(context.Background(), h, strings.NewReader("x"))
	if !res.OK() {
		t.Fatalf("result %+v", res)
	}
	r := <-got
	if l := r.named("AccountId"); len(l) != 1 || l[0] != "AccountId: acct-1" {
		t.Fatalf("owner header: %q", l)
	}
	if !r.has("Authorization: Bearer sdk_abc") || !r.has("Feed: F") {
		t.Fatalf("headers %q", r.lines)
	}
	if len(r.named("Compression")) != 0 {
		t.Errorf("Compression sent although empty: %q", r.lines)
	}
}

func TestHTTPSenderStatusHeaders(t *testing.T) {
	cases := []struct {
		name      string
		answer    func(w http.ResponseWriter)
		http      int
		code      int
		msg       string
		permanent bool
		retry     time.Duration
	}{
		{"service headers", func(w http.ResponseWriter) {
			w.Header().Set("Service-Status", "101")
			w.Header().Set("Service-Error", "Feed is not defined")
			w.Header().Set("Stroom-Status", "999")
			w.Header().Set("Stroom-Error", "other")
			w.WriteHeader(406)
		}, 406, 101, "Feed is not defined", false, 0},
		{"stroom fallback", func(w http.ResponseWriter) {
			w.Header().Set("Stroom-Status", "113")
			w.Header().Set("Stroom-Error", "Stroom Status 113 - rejected")
			w.WriteHeader(406)
			io.WriteString(w, "<html>error page</html>")
		}, 406, 113, "Stroom Status 113 - rejected", true, 0},
		{"406 110 permanent", func(w http.ResponseWriter) {
			w.Header().Set("Service-Status", "110")
			w.Header().Set("Service-Error", "Feed is not set to receive data")
			w.WriteHeader(406)
		}, 406, 110, "Feed is not set to receive data", true, 0},
		{"500 without headers", func(w http.ResponseWriter) {
			w.WriteHeader(500)
		}, 500, 999, "500 Internal Server Error", false, 0},
		{"unparseable status", func(w http.ResponseWriter) {
			w.Header().Set("Service-Status", "abc")
			w.Header().Set("Stroom-Status", "120")
			w.WriteHeader(406)
		}, 406, 120, "406 Not Acceptable", true, 0},
		{"503 retry after", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			w.Header().Set("Service-Status", "999")
			w.WriteHeader(503)
		}, 503, 999, "503 Service Unavailable", false, 7 * time.Second},
		{"redirect not followed", func(w http.ResponseWriter) {
			w.Header().Set("Location", "/login")
			w.WriteHeader(302)
		}, 302, 999, "302 Found", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := recordingServer(t, c.answer)
			s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL})
			res := s.Post(context.Background(), nil, strings.NewReader("body"))
			if res.OK() || res.Err != nil || res.HTTPStatus != c.http || res.Code != c.code ||
				res.Message != c.msg || res.Permanent() != c.permanent || res.RetryAfter != c.retry || res.Receipt != "" {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

func TestHTTPSenderRetryAfterDate(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                     0,
		"7":                    7 * time.Second,
		"-3":                   0,
		"soon":                 0,
		"99999999999999999999": maxRetryAfter,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestHTTPSenderConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := newTestSender(t, config.HTTPDestination{ForwardURL: "http://" + addr + "/datafeed"})
	res := s.Post(context.Background(), nil, strings.NewReader("x"))
	if res.Err == nil || res.OK() || res.Permanent() || res.HTTPStatus != 0 || !strings.Contains(res.Message, "refused") {
		t.Fatalf("result %+v", res)
	}
	res = s.PostStream(context.Background(), nil, func(w io.Writer) error {
		_, err := w.Write(make([]byte, 1<<20))
		return err
	})
	if res.Err == nil || res.Permanent() || strings.Contains(res.Message, "write body") {
		t.Fatalf("PostStream result %+v", res)
	}
}

func TestHTTPSenderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
	}))
	defer srv.Close()
	defer close(release)
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL, Timeout: config.Duration(200 * time.Millisecond)})
	res := s.Post(context.Background(), nil, strings.NewReader("x"))
	if res.Err == nil || res.Permanent() || !strings.Contains(res.Message, "timeout") {
		t.Fatalf("result %+v", res)
	}
}

// waitGoroutines waits (bounded) until no more goroutines run than before.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d now\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHTTPSenderPostStreamWriteError(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
		io.WriteString(w, "should not count\n")
	}))
	defer srv.Close()
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL})
	before := runtime.NumGoroutine()
	boom := errors.New("disk on fire")
	var returned atomic.Bool
	res := s.PostStream(context.Background(), nil, func(w io.Writer) error {
		defer returned.Store(true)
		if _, err := w.Write(bytes.Repeat([]byte("a"), 100<<10)); err != nil {
			return err
		}
		return boom
	})
	if !returned.Load() {
		t.Fatal("PostStream returned before the writer did")
	}
	if !errors.Is(res.Err, boom) || res.OK() || res.Permanent() || !strings.Contains(res.Message, "disk on fire") {
		t.Fatalf("result %+v", res)
	}
	s.CloseIdleConnections()
	srv.CloseClientConnections()
	waitGoroutines(t, before)
}

func TestHTTPSenderPostStreamPanic(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL})
	res := s.PostStream(context.Background(), nil, func(w io.Writer) error { panic("oops") })
	if res.Err == nil || res.OK() || !strings.Contains(res.Message, "oops") {
		t.Fatalf("result %+v", res)
	}
}

// An answer before the body is read is classified from the answer, and
// the writer, which can no longer write, is released.
func TestHTTPSenderEarlyAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Service-Status", "110")
		w.Header().Set("Service-Error", "Feed is not set to receive data")
		w.WriteHeader(406)
	}))
	defer srv.Close()
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL})
	before := runtime.NumGoroutine()
	for range 3 {
		var returned atomic.Bool
		res := s.PostStream(context.Background(), nil, func(w io.Writer) error {
			defer returned.Store(true)
			buf := make([]byte, 64<<10)
			for range 1 << 12 { // 256 MiB: far more than any socket buffer
				if _, err := w.Write(buf); err != nil {
					return err
				}
			}
			return nil
		})
		if !returned.Load() {
			t.Fatal("PostStream returned before the writer did")
		}
		if res.Err != nil || res.HTTPStatus != 406 || res.Code != 110 || !res.Permanent() {
			t.Fatalf("result %+v", res)
		}
		res = s.Post(context.Background(), nil, io.LimitReader(zeros{}, 256<<20))
		if res.Err != nil || res.HTTPStatus != 406 || res.Code != 110 || !res.Permanent() {
			t.Fatalf("Post result %+v", res)
		}
	}
	s.CloseIdleConnections()
	srv.CloseClientConnections()
	waitGoroutines(t, before)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestHTTPSenderPostStreamCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL})
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	res := s.PostStream(ctx, nil, func(w io.Writer) error {
		buf := make([]byte, 1<<10)
		for {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			once.Do(cancel) // cancelled mid-body; the writer must be released
		}
	})
	if res.Err == nil || res.OK() || res.Permanent() || strings.Contains(res.Message, "write body") {
		t.Fatalf("result %+v", res)
	}
	s.CloseIdleConnections()
	srv.CloseClientConnections()
	waitGoroutines(t, before)
}

func TestHTTPSenderLive(t *testing.T) {
	s := newTestSender(t, config.HTTPDestination{ForwardURL: "http://127.0.0.1:1/datafeed"})
	if err := s.Live(context.Background()); err != nil {
		t.Fatalf("no liveness URL: %v", err)
	}
	var status atomic.Int32
	status.Store(200)
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		if r.Method != http.MethodGet {
			w.WriteHeader(405)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	s = newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL + "/datafeed", LivenessCheckURL: srv.URL + "/status", APIKey: "k"})
	if err := s.Live(context.Background()); err != nil {
		t.Fatalf("200: %v", err)
	}
	if auth.Load() != "Bearer k" {
		t.Errorf("same-host liveness check without credentials: %q", auth.Load())
	}
	status.Store(500)
	if err := s.Live(context.Background()); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("500: %v", err)
	}
	// Another host gets no credentials.
	other := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	s = newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL + "/datafeed", LivenessCheckURL: other + "/status", APIKey: "k"})
	status.Store(200)
	if err := s.Live(context.Background()); err != nil {
		t.Fatalf("200: %v", err)
	}
	if auth.Load() != "" {
		t.Errorf("credentials sent to another host: %q", auth.Load())
	}
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	caFile, clientCert, clientKey string
	serverCert                    tls.Certificate
	pool                          *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "weir test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	write := func(name, typ string, der []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var p testPKI
	p.caFile = write("ca.pem", "CERTIFICATE", caDER, 0o644)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	srvDER, srvKey := issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.serverCert = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	cliDER, cliKey := issue(3, "weir proxy", x509.ExtKeyUsageClientAuth, nil)
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	p.clientCert = write("client.pem", "CERTIFICATE", cliDER, 0o644)
	p.clientKey = write("client-key.pem", "EC PRIVATE KEY", keyDER, 0o600)
	return p
}

func TestHTTPSenderMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	var peer atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		peer.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
		io.WriteString(w, "tls-receipt\n")
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pki.serverCert},
		ClientCAs:    pki.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failing handshakes below
	srv.StartTLS()
	defer srv.Close()
	s := newTestSender(t, config.HTTPDestination{
		ForwardURL: srv.URL + "/datafeed",
		TLS:        config.ClientTLS{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey},
	})
	res := s.Post(context.Background(), nil, strings.NewReader("secret data"))
	if !res.OK() || res.Receipt != "tls-receipt" {
		t.Fatalf("result %+v", res)
	}
	if peer.Load() != "weir proxy" {
		t.Fatalf("client certificate: %v", peer.Load())
	}
	// Without the client certificate the handshake fails: a transport error.
	s = newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL, TLS: config.ClientTLS{CAFile: pki.caFile}})
	if res := s.Post(context.Background(), nil, strings.NewReader("x")); res.Err == nil || res.Permanent() {
		t.Fatalf("no client certificate: %+v", res)
	}
	// Without the CA the server is not trusted.
	s = newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL,
		TLS: config.ClientTLS{CertFile: pki.clientCert, KeyFile: pki.clientKey}})
	if res := s.Post(context.Background(), nil, strings.NewReader("x")); res.Err == nil || !strings.Contains(res.Message, "certificate") {
		t.Fatalf("untrusted server: %+v", res)
	}
}

func TestHTTPSenderConfigErrors(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	open := filepath.Join(dir, "open-key")
	if err := os.WriteFile(open, []byte("k\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	openTLSKey := filepath.Join(dir, "client-key-open.pem")
	b, _ := os.ReadFile(pki.clientKey)
	if err := os.WriteFile(openTLSKey, b, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const u = "https://127.0.0.1:1/datafeed"
	for _, c := range []struct {
		cfg  config.HTTPDestination
		want []string
	}{
		{config.HTTPDestination{Name: "d", ForwardURL: u, TLS: config.ClientTLS{CertFile: pki.clientCert, KeyFile: openTLSKey}},
			[]string{`"d"`, "tls.keyFile", "chmod"}},
		{config.HTTPDestination{ForwardURL: u, APIKeyFile: open}, []string{"apiKeyFile", "chmod"}},
		{config.HTTPDestination{ForwardURL: u, DataFeedKeyFile: open, DataFeedKeyOwner: "a"}, []string{"dataFeedKeyFile", "chmod"}},
		{config.HTTPDestination{ForwardURL: u, APIKeyFile: empty}, []string{"apiKeyFile", "empty"}},
		{config.HTTPDestination{ForwardURL: u, APIKeyFile: filepath.Join(dir, "missing")}, []string{"apiKeyFile", "missing"}},
		{config.HTTPDestination{ForwardURL: u, DataFeedKey: "sdk_x"}, []string{"dataFeedKeyOwner"}},
		{config.HTTPDestination{ForwardURL: u, APIKey: "a", DataFeedKey: "b", DataFeedKeyOwner: "o"}, []string{"only one"}},
		{config.HTTPDestination{ForwardURL: "ftp://x/datafeed"}, []string{"forwardUrl"}},
		{config.HTTPDestination{ForwardURL: u, LivenessCheckURL: "status"}, []string{"livenessCheckUrl"}},
		{config.HTTPDestination{ForwardURL: u, TLS: config.ClientTLS{CAFile: pki.clientKey}}, []string{"tls.caFile", "no PEM certificates"}},
		{config.HTTPDestination{ForwardURL: u, TLS: config.ClientTLS{CertFile: pki.clientCert}}, []string{"certFile and keyFile"}},
		{config.HTTPDestination{ForwardURL: u, ForwardHeadersAdditionalAllowSet: []string{"Transfer-Encoding"}}, []string{"forwardHeadersAdditionalAllowSet"}},
		{config.HTTPDestination{ForwardURL: u, ForwardHeadersAdditionalAllowSet: []string{"bad name"}}, []string{"forwardHeadersAdditionalAllowSet"}},
	} {
		_, err := NewHTTPSender(c.cfg, "ua")
		if err == nil {
			t.Errorf("%+v: no error", c.cfg)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", c.cfg, err, w)
			}
		}
	}
}

// weir answers a dropped feed with 200 before reading the body: that is
// the downstream's verdict, a success.
func TestHTTPSenderEarlySuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "dropped-receipt\n")
	}))
	defer srv.Close()
	s := newTestSender(t, config.HTTPDestination{ForwardURL: srv.URL})
	res := s.PostStream(context.Background(), nil, func(w io.Writer) error {
		_, err := io.Copy(w, io.LimitReader(zeros{}, 256<<20))
		return err
	})
	if !res.OK() || res.Receipt != "dropped-receipt" {
		t.Fatalf("result %+v", res)
	}
}
