package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/receive"
	"github.com/weirhq/weir/internal/stroomzip"
)

// defaultSendTimeout bounds one forward when the configuration sets none
// (the reference system's httpClient timeouts are all 3 minutes).
const defaultSendTimeout = 3 * time.Minute

// Bounds on what is read of a downstream's answer. The receipt is a short
// id; anything beyond the drain limit is not read and the connection is
// closed instead of reused.
const (
	maxReceiptBytes = 4 << 10
	maxDrainBytes   = 256 << 10
)

// maxRetryAfter caps a downstream's Retry-After, so that a silly value can
// neither overflow a time.Duration nor park a queue for weeks.
const maxRetryAfter = 24 * time.Hour

// forwardAllowSet is the attributes sent as headers besides Compression
// (the reference system's proxy sends the same set). Everything else
// travels only in the zip's meta entries. Keys are ASCII lower case.
var forwardAllowSet = func() map[string]bool {
	m := make(map[string]bool)
	for _, k := range []string{"AccountId", "AccountName", "Classification", "Component",
		"ContextEncoding", "ContextFormat", "Encoding", "Environment", "Feed", "Format",
		"GUID", "Schema", "SchemaVersion", "System", "Type"} {
		m[attr.FoldName(k)] = true
	}
	return m
}()

// senderOwnHeaders are headers the sender sets itself or that belong to
// the transport: never taken from a caller's header. Post sets
// Content-Type, User-Agent and the credentials.
var senderOwnHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true,
	"content-type": true, "content-length": true,
	"transfer-encoding": true, "trailer": true, "te": true, "expect": true,
	"connection": true, "keep-alive": true, "proxy-connection": true, "upgrade": true,
	"host": true, "user-agent": true,
}

// notFromAttributes are never sent from attributes, even when allowed by
// forwardHeadersAdditionalAllowSet: the sender's own headers, plus the
// body's encodings, which describe what is sent (the caller's Compression
// argument), not what the attributes say.
var notFromAttributes = func() map[string]bool {
	m := map[string]bool{"compression": true, "content-encoding": true, strings.ToLower(receive.RelayHeader): true}
	for k := range senderOwnHeaders {
		m[k] = true
	}
	return m
}()

// permanentCodes are the datafeed status codes retrying cannot change:
// no feed, feed not receiving, rejected by the receipt policy, unexpected
// data type. Everything else (unknown feed, authentication, size, 999,
// transport errors) may succeed later.
var permanentCodes = map[int]bool{100: true, 110: true, 113: true, 120: true}

// errBodyAbandoned is what a PostStream writer sees once the request no
// longer reads its body (the downstream answered early, or gave up).
var errBodyAbandoned = errors.New("request body no longer read: the downstream answered or the request ended")

// HTTPSender posts to one downstream /datafeed. It is safe for concurrent
// use; connections are kept alive and reused between posts.
type HTTPSender struct {
	url       string
	redacted  string
	liveURL   string
	liveAuth  bool // the liveness URL has the forward URL's origin: send credentials there too
	client    *http.Client
	transport *http.Transport
	userAgent string
	authz     string // Authorization value, or ""
	ownerKey  string // data feed key owner header, or ""
	owner     string
	allow     map[string]bool
	timeout   time.Duration
}

// Result is the outcome of one post.
type Result struct {
	HTTPStatus int           // 0 when no response
	Code       int           // datafeed status code: Service-Status, else Stroom-Status, else 0 for HTTP 200 and 999 otherwise (999 without a response too)
	Message    string        // Service-Error, else Stroom-Error, else the HTTP status text; or the transport or body error
	Receipt    string        // on success: the response body trimmed (the downstream's receipt id), bounded read
	RetryAfter time.Duration // from Retry-After (seconds or HTTP date); 0 if absent
	ReadsS2    bool          // the answer says the downstream reads zips of S2 entries (stroomzip.S2Header)
	Bytes      int64         // body bytes sent
	Duration   time.Duration
	// Err is a transport error (connection refused, timeout, TLS) or an
	// error producing the body ("read body: …" from Post's reader, "write
	// body: …" from PostStream's writer); nil when an HTTP answer came.
	// Exception: a PostStream writer that failed while the downstream
	// answered anyway sets Err beside the HTTP fields, since the body may
	// be incomplete.
	Err error
}

// OK reports a successful post: an HTTP 200 with status code 0 and no
// error producing the body.
func (r Result) OK() bool { return r.Err == nil && r.HTTPStatus == http.StatusOK && r.Code == 0 }

// Permanent reports an answer retrying cannot change (status 100, 110,
// 113 or 120). A post that failed on our side (Err set) is never permanent.
func (r Result) Permanent() bool { return r.Err == nil && permanentCodes[r.Code] }

// NewHTTPSender prepares posting to cfg's forward URL: it reads the
// credentials (secret files must not be readable by other users; their
// content is trimmed), builds the TLS configuration and the connection
// pool. Errors name the configuration key at fault.
func NewHTTPSender(cfg config.HTTPDestination, userAgent string) (*HTTPSender, error) {
	name := cfg.Name
	if name == "" {
		name = cfg.ForwardURL
	}
	fail := func(key string, format string, a ...any) error {
		return fmt.Errorf("forwardHttpDestinations %q: %s: %s", name, key, fmt.Sprintf(format, a...))
	}
	u, err := url.Parse(cfg.ForwardURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fail("forwardUrl", "%q is not an http:// or https:// URL", cfg.ForwardURL)
	}
	s := &HTTPSender{
		url:       cfg.ForwardURL,
		redacted:  u.Redacted(),
		liveURL:   cfg.LivenessCheckURL,
		userAgent: userAgent,
		timeout:   time.Duration(cfg.Timeout),
		allow:     make(map[string]bool, len(forwardAllowSet)+len(cfg.ForwardHeadersAdditionalAllowSet)),
	}
	if s.timeout <= 0 {
		s.timeout = defaultSendTimeout
	}
	if s.liveURL != "" {
		lu, err := url.Parse(s.liveURL)
		if err != nil || (lu.Scheme != "http" && lu.Scheme != "https") || lu.Host == "" {
			return nil, fail("livenessCheckUrl", "%q is not an http:// or https:// URL", s.liveURL)
		}
		s.liveAuth = strings.EqualFold(lu.Scheme, u.Scheme) && strings.EqualFold(lu.Host, u.Host)
	}
	for k := range forwardAllowSet {
		s.allow[k] = true
	}
	for _, k := range cfg.ForwardHeadersAdditionalAllowSet {
		k = strings.TrimSpace(k)
		if !validHeaderName(k) {
			return nil, fail("forwardHeadersAdditionalAllowSet", "%q is not a valid header name", k)
		}
		if notFromAttributes[attr.FoldName(k)] {
			return nil, fail("forwardHeadersAdditionalAllowSet", "%q is set by the proxy itself and cannot be forwarded from attributes", k)
		}
		s.allow[attr.FoldName(k)] = true
	}

	// Credentials: at most one kind.
	set := 0
	for _, v := range []string{cfg.APIKey, cfg.APIKeyFile, cfg.DataFeedKey, cfg.DataFeedKeyFile} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return nil, fail("apiKey", "set only one of apiKey, apiKeyFile, dataFeedKey, dataFeedKeyFile")
	}
	key, keyName := "", ""
	switch {
	case cfg.APIKey != "":
		key, keyName = strings.TrimSpace(cfg.APIKey), "apiKey"
	case cfg.APIKeyFile != "":
		keyName = "apiKeyFile"
		if key, err = readSecretFile(cfg.APIKeyFile); err != nil {
			return nil, fail(keyName, "%v", err)
		}
	case cfg.DataFeedKey != "":
		key, keyName = strings.TrimSpace(cfg.DataFeedKey), "dataFeedKey"
	case cfg.DataFeedKeyFile != "":
		keyName = "dataFeedKeyFile"
		if key, err = readSecretFile(cfg.DataFeedKeyFile); err != nil {
			return nil, fail(keyName, "%v", err)
		}
	}
	if keyName != "" {
		if key == "" {
			return nil, fail(keyName, "the key is empty")
		}
		if !validHeaderValue(key) || strings.ContainsAny(key, " \t") {
			return nil, fail(keyName, "the key contains spaces or control characters")
		}
		s.authz = "Bearer " + key
	}
	if cfg.DataFeedKey != "" || cfg.DataFeedKeyFile != "" {
		owner := strings.TrimSpace(cfg.DataFeedKeyOwner)
		if owner == "" {
			return nil, fail("dataFeedKeyOwner", "a data feed key needs its owner (the account it was made for)")
		}
		if !validHeaderValue(owner) {
			return nil, fail("dataFeedKeyOwner", "%q is not a valid header value", owner)
		}
		ownerKey := strings.TrimSpace(cfg.DataFeedOwnerKey)
		if ownerKey == "" {
			ownerKey = "AccountId"
		}
		if !validHeaderName(ownerKey) || notFromAttributes[attr.FoldName(ownerKey)] {
			return nil, fail("dataFeedOwnerKey", "%q cannot be used as a header name", ownerKey)
		}
		s.ownerKey, s.owner = ownerKey, owner
	}

	tc, err := clientTLS(cfg.TLS, fail)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	// HTTP/1.1 only: every post gets its own connection (no large uploads
	// competing inside one HTTP/2 connection's flow control), and header
	// names go out in the attributes' own case.
	tr.ForceAttemptHTTP2 = false
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	tr.DisableCompression = true
	tr.MaxIdleConnsPerHost = max(cfg.Queue.ForwardThreadCount, 16)
	// A chunked body is flushed after every chunk (up to 32 KiB): with
	// room for a whole chunk and its framing, each goes out in one system
	// call instead of three (the default buffer is 4 KiB).
	tr.WriteBufferSize = 64 << 10
	s.transport = tr
	s.client = &http.Client{
		Transport: tr,
		// A redirect is not followed: a 301/302 would turn the POST into
		// a GET of some page answering 200, which must not count as
		// delivery. The 3xx is reported (code 999) and retried.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s, nil
}

// clientTLS builds the TLS client configuration: the configured CAs (else
// the system's) and the client certificate for mutual TLS.
func clientTLS(c config.ClientTLS, fail func(key, format string, a ...any) error) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fail("tls.caFile", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fail("tls.caFile", "no PEM certificates in %s", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fail("tls", "certFile and keyFile must be set together")
	}
	if c.CertFile != "" {
		if err := auth.CheckSecretFile(c.KeyFile); err != nil {
			return nil, fail("tls.keyFile", "%v", err)
		}
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fail("tls.certFile", "load certificate %s and key %s: %v", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// readSecretFile reads a key from a file that other users cannot read,
// trimmed.
func readSecretFile(path string) (string, error) {
	if err := auth.CheckSecretFile(path); err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// URL is the forward URL, with any password in it redacted (for logs).
func (s *HTTPSender) URL() string { return s.redacted }

// CloseIdleConnections closes the kept-alive connections not in use.
func (s *HTTPSender) CloseIdleConnections() { s.transport.CloseIdleConnections() }

// Headers returns the headers to send for a post with these attributes:
// only the allow-listed attribute names (case-insensitive; the attribute's
// own spelling is sent), skipping values that cannot be header values
// (control characters) since the meta entries carry them anyway, plus
// Compression when non-empty. With a data feed key the configured owner
// header is never taken from the attributes: Post sets it.
func (s *HTTPSender) Headers(attrs *attr.Map, compression string) http.Header {
	return s.headers(attrs, compression, false)
}

// headers is Headers, or with every attribute it may send when all is
// set (the allow list left out).
func (s *HTTPSender) headers(attrs *attr.Map, compression string, all bool) http.Header {
	h := make(http.Header)
	for k, v := range attrs.All() {
		lk := attr.FoldName(k)
		if !(all || s.allow[lk]) || notFromAttributes[lk] || (s.ownerKey != "" && lk == attr.FoldName(s.ownerKey)) {
			continue
		}
		if !validHeaderName(k) || !validHeaderValue(v) {
			continue
		}
		h[k] = []string{v} // not Set: the attribute's own case is kept
	}
	if compression != "" {
		h["Compression"] = []string{compression}
	}
	return h
}

// Post sends body (streamed with chunked transfer encoding, never buffered
// whole) with headers h and classifies the answer. The body is not read
// after Post returns.
func (s *HTTPSender) Post(ctx context.Context, h http.Header, body io.Reader) Result {
	start := time.Now()
	gb := &guardedBody{r: body}
	res := s.send(ctx, h, gb)
	gb.stop()
	res.Bytes = gb.n.Load()
	res.Duration = time.Since(start)
	return res
}

// PostStream is Post with a body produced by write, which runs on its own
// goroutine into a pipe. A write error aborts the request and is reported
// in Result.Err. When the request stops reading early (the downstream
// answered, the context ended) write's next Write fails with an error
// wrapping errBodyAbandoned. PostStream returns only after write has.
func (s *HTTPSender) PostStream(ctx context.Context, h http.Header, write func(io.Writer) error) Result {
	start := time.Now()
	pr, pw := io.Pipe()
	var writeErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				writeErr = fmt.Errorf("writing the body panicked: %v", p)
				pw.CloseWithError(writeErr)
			}
		}()
		writeErr = write(pw)
		pw.CloseWithError(writeErr) // nil: the reader sees EOF
	}()
	gb := &guardedBody{r: pr}
	res := s.send(ctx, h, gb)
	pr.CloseWithError(errBodyAbandoned)
	gb.stop()
	<-done
	if writeErr != nil && !errors.Is(writeErr, errBodyAbandoned) {
		// The writer failed: that is the cause, whatever the transport
		// made of it. Should an answer have come all the same (raced, or
		// the downstream answered early) the body may be incomplete, so
		// this is never a success, nor the downstream's verdict.
		res.Err = fmt.Errorf("write body: %w", writeErr)
		res.Message = res.Err.Error()
		if res.HTTPStatus == 0 {
			res.Code = 999
		}
	}
	res.Bytes = gb.n.Load()
	res.Duration = time.Since(start)
	return res
}

// send runs one POST and classifies the outcome.
func (s *HTTPSender) send(ctx context.Context, h http.Header, body io.Reader) Result {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout,
		fmt.Errorf("no complete answer within the destination's timeout (%s)", s.timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, body)
	if err != nil {
		return failed(err)
	}
	req.ContentLength = -1 // unknown: chunked, whatever the reader
	req.GetBody = nil
	req.Header = s.requestHeader(h)
	req.Header["Content-Type"] = []string{"application/audit"}
	resp, err := s.client.Do(req)
	if err != nil {
		var rerr guardedReadError
		if errors.As(err, &rerr) {
			return failed(fmt.Errorf("read body: %w", rerr.err))
		}
		return failed(err)
	}
	defer resp.Body.Close()
	return classify(resp)
}

// requestHeader is h without what the sender or the transport sets
// (framing, hop-by-hop, credentials; Compression and Content-Encoding are
// the caller's), without names or values the transport would refuse, plus
// User-Agent and the credentials.
func (s *HTTPSender) requestHeader(h http.Header) http.Header {
	out := make(http.Header, len(h)+4)
	ownerLower := attr.FoldName(s.ownerKey)
	for k, vs := range h {
		lk := attr.FoldName(k)
		if senderOwnHeaders[lk] || (s.ownerKey != "" && lk == ownerLower) || !validHeaderName(k) {
			continue
		}
		var keep []string
		for _, v := range vs {
			if validHeaderValue(v) {
				keep = append(keep, v)
			}
		}
		if len(keep) > 0 {
			out[k] = keep
		}
	}
	if s.userAgent != "" {
		out["User-Agent"] = []string{s.userAgent}
	}
	if s.authz != "" {
		out["Authorization"] = []string{s.authz}
	}
	if s.ownerKey != "" {
		out[s.ownerKey] = []string{s.owner}
	}
	return out
}

// classify reads the downstream's answer. The body is read only within
// bounds and the rest drained (also bounded) so that the connection can
// be reused.
func classify(resp *http.Response) Result {
	res := Result{HTTPStatus: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxReceiptBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))
	res.Code = -1
	for _, k := range []string{"Service-Status", "Stroom-Status"} {
		if v := strings.TrimSpace(resp.Header.Get(k)); v != "" {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				res.Code = n
				break
			}
		}
	}
	if res.Code < 0 {
		res.Code = 999
		if resp.StatusCode == http.StatusOK {
			res.Code = 0
		}
	}
	for _, k := range []string{"Service-Error", "Stroom-Error"} {
		if v := strings.TrimSpace(resp.Header.Get(k)); v != "" {
			res.Message = v
			break
		}
	}
	if res.Message == "" {
		res.Message = strings.TrimSpace(strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode))
	}
	if res.HTTPStatus == http.StatusOK && res.Code == 0 {
		res.Receipt = strings.TrimSpace(string(b))
	}
	res.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	res.ReadsS2 = readsS2(resp.Header)
	return res
}

// readsS2 reports whether a downstream's answer lists the S2 zip method
// (stroomzip.S2Header: a comma-separated list, in any case).
func readsS2(h http.Header) bool {
	for _, v := range h.Values(stroomzip.S2Header) {
		for m := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(m), stroomzip.S2HeaderValue) {
				return true
			}
		}
	}
	return false
}

// failed is the result of a post that got no answer.
func failed(err error) Result {
	return Result{Code: 999, Message: err.Error(), Err: err}
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP
// date. Absent, unparseable or past: 0. Capped at maxRetryAfter.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter // only digits: too many for an int64
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// Live GETs the liveness URL: nil when it answers 200, or when no URL is
// configured. Credentials go along only when the URL is on the forward
// URL's host.
func (s *HTTPSender) Live(ctx context.Context) error {
	if s.liveURL == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.liveURL, nil)
	if err != nil {
		return fmt.Errorf("liveness check: %w", err)
	}
	if s.userAgent != "" {
		req.Header["User-Agent"] = []string{s.userAgent}
	}
	if s.liveAuth && s.authz != "" {
		req.Header["Authorization"] = []string{s.authz}
		if s.ownerKey != "" {
			req.Header[s.ownerKey] = []string{s.owner}
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("liveness check: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))
	if resp.StatusCode != http.StatusOK {
		lu, _ := url.Parse(s.liveURL)
		return fmt.Errorf("liveness check GET %s: answered %s, want 200 OK", lu.Redacted(), resp.Status)
	}
	return nil
}

// guardedBody counts what the transport reads and stops every read once
// stop has returned: the transport may still be reading a request body in
// the background after the response came, and the caller's reader must
// not be touched after Post returns.
type guardedBody struct {
	mu      sync.Mutex
	r       io.Reader
	stopped bool
	n       atomic.Int64
}

// guardedReadError marks an error of the caller's reader, to tell it
// apart from the transport's own errors.
type guardedReadError struct{ err error }

func (e guardedReadError) Error() string { return e.err.Error() }
func (e guardedReadError) Unwrap() error { return e.err }

func (g *guardedBody) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return 0, errBodyAbandoned
	}
	n, err := g.r.Read(p)
	g.n.Add(int64(n))
	if err != nil && err != io.EOF {
		err = guardedReadError{err}
	}
	return n, err
}

func (g *guardedBody) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether the transport accepts s as a header
// value: no control characters other than tab (bytes from 0x80, i.e.
// UTF-8, are sent as they are).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
