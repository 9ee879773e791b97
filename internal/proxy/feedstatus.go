package proxy

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/receive"
)

// Defaults for the zero values of FeedStatusOptions; they are the
// reference proxy's.
const (
	defaultFeedStatusTTL        = time.Minute
	defaultFeedStatusMaxEntries = 1000
	defaultFeedStatusTimeout    = 10 * time.Second
)

// feedStatusMaxFallbackTTL bounds how long a fallback answer (and a stale answer
// kept after a failed refresh) is used before the downstream is asked
// again, so that a recovered downstream is noticed soon.
const feedStatusMaxFallbackTTL = 10 * time.Second

// feedStatusMaxBody bounds the downstream's answer.
const feedStatusMaxBody = 64 << 10

// FeedStatusOptions configures a FeedStatusClient. Zero values get
// defaults: CacheTTL 1 minute, MaxEntries 1000, Timeout 10 seconds,
// Fallback RECEIVE.
type FeedStatusOptions struct {
	URL        string           // e.g. http://127.0.0.1:8080/api/feedStatus/v2/getFeedStatus
	Client     *http.Client     // nil: a client with Timeout
	Header     http.Header      // added to every request (e.g. Authorization: Bearer <api key>); may be nil
	CacheTTL   time.Duration    // an answer younger than this is used as is
	MaxEntries int              // bound on cached answers; the least recently stored is evicted
	Timeout    time.Duration    // one request
	Fallback   feed.Status      // the answer when the downstream cannot answer
	Log        *slog.Logger     // nil: discard
	Now        func() time.Time // nil: time.Now
	// StaleWait is how long a post waits for the fresh answer that is to
	// replace a stale refusal before the stale one is used (at most
	// Timeout); 0 means a second.
	StaleWait time.Duration
}

// FeedStatusClient asks a downstream (Stroom or another proxy, at
// /api/feedStatus/v2/getFeedStatus) whether a feed receives data. It
// implements receive.FeedStatuses.
//
// Answers are cached per feed name and sender (UploadUserId); the other
// attributes are sent but do not take part in the key. A cached answer
// younger than CacheTTL is used as is; an older acceptance is used at once
// while one background request refreshes it, and an older refusal or drop
// waits for the refreshed answer (up to a second, then it is used). When the downstream cannot answer,
// the configured fallback applies and is cached for min(CacheTTL, 10s); a
// refresh that fails keeps the stale answer for as long.
//
// Every request runs in a goroutine of its own, bounded by Timeout, so a
// synchronous caller that gives up does not waste the answer and no
// goroutine outlives Timeout; Close ends them at once.
type FeedStatusClient struct {
	o           FeedStatusOptions
	fallbackTTL time.Duration

	base   context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	entries  map[statusKey]*list.Element // of *statusEntry
	order    *list.List                  // least recently stored first
	inflight map[statusKey]*statusCall
}

type statusKey struct{ feed, user string }

type statusEntry struct {
	key  statusKey
	ans  receive.FeedAnswer
	next time.Time // the answer is fresh until then
}

// statusCall is one request to the downstream; ans is set before done is
// closed.
type statusCall struct {
	done chan struct{}
	ans  receive.FeedAnswer
}

var _ receive.FeedStatuses = (*FeedStatusClient)(nil)

// NewFeedStatusClient returns a client for o.URL. Call Close when done.
func NewFeedStatusClient(o FeedStatusOptions) *FeedStatusClient {
	if o.CacheTTL <= 0 {
		o.CacheTTL = defaultFeedStatusTTL
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = defaultFeedStatusMaxEntries
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultFeedStatusTimeout
	}
	if o.Fallback == "" {
		o.Fallback = feed.Receive
	}
	if o.StaleWait <= 0 {
		o.StaleWait = defaultStaleWait
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: o.Timeout}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Header = o.Header.Clone()
	base, cancel := context.WithCancel(context.Background())
	return &FeedStatusClient{
		o:           o,
		fallbackTTL: min(o.CacheTTL, feedStatusMaxFallbackTTL),
		base:        base,
		cancel:      cancel,
		entries:     make(map[statusKey]*list.Element),
		order:       list.New(),
		inflight:    make(map[statusKey]*statusCall),
	}
}

// Close stops the requests under way (their callers get the fallback) and
// waits for their goroutines. Afterwards cached answers are still used, but
// nothing new is asked: a missing answer is the fallback.
func (c *FeedStatusClient) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// FeedStatus answers from the cache or asks the downstream. It does not
// return an error: when the downstream cannot answer, or ctx ends while
// waiting for it, the answer is the fallback with Fallback set.
func (c *FeedStatusClient) FeedStatus(ctx context.Context, feedName string, attrs *attr.Map) (receive.FeedAnswer, error) {
	key := statusKey{feed: feedName, user: attrs.Value("UploadUserId")}
	now := c.o.Now()

	c.mu.Lock()
	var stale *receive.FeedAnswer
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*statusEntry)
		ans := e.ans
		if now.Before(e.next) {
			c.mu.Unlock()
			return ans, nil
		}
		if ans.Status == feed.Receive {
			// A stale acceptance is used at once while one request
			// refreshes it in the background: senders do not wait on
			// the downstream.
			start := c.inflight[key] == nil && !c.closed
			var cl *statusCall
			if start {
				cl = c.beginLocked(key)
			}
			c.mu.Unlock()
			if start {
				c.launch(key, cl, feedName, attrs)
			}
			return ans, nil
		}
		// A stale refusal (or drop) is not used again: the post waits for
		// the fresh answer, so that a feed switched back to RECEIVE is
		// received as soon as the refusal's time is up (an operator's
		// replay would otherwise be refused once more).
		stale = &ans
	}
	cl := c.inflight[key]
	if cl == nil {
		if c.closed {
			c.mu.Unlock()
			if stale != nil {
				return *stale, nil
			}
			return c.fallback(feedName, "the proxy is shutting down"), nil
		}
		cl = c.beginLocked(key)
		c.mu.Unlock()
		c.launch(key, cl, feedName, attrs)
	} else {
		c.mu.Unlock()
	}
	var staleAfter <-chan time.Time
	if stale != nil {
		// A downstream that does not answer promptly is not waited for
		// again and again (each post for Timeout, every fallbackTTL while
		// it hangs): the stale answer stands, and the request goes on.
		t := time.NewTimer(min(c.o.Timeout, c.o.StaleWait))
		defer t.Stop()
		staleAfter = t.C
	}
	select {
	case <-cl.done:
		return cl.ans, nil
	case <-staleAfter:
		return *stale, nil
	case <-ctx.Done():
		// The sender is gone or out of time; the request goes on and its
		// answer is cached for the next post.
		if stale != nil {
			return *stale, nil
		}
		return c.fallback(feedName, "the check was abandoned: "+ctx.Err().Error()), nil
	}
}

// defaultStaleWait is FeedStatusOptions.StaleWait's default.
const defaultStaleWait = time.Second

// beginLocked registers a request for key; c.mu is held and c is not closed.
func (c *FeedStatusClient) beginLocked(key statusKey) *statusCall {
	cl := &statusCall{done: make(chan struct{})}
	c.inflight[key] = cl
	c.wg.Add(1)
	return cl
}

// launch builds the request body (attrs are not safe to share, so they are
// read here, in the caller's goroutine) and asks in the background.
func (c *FeedStatusClient) launch(key statusKey, cl *statusCall, feedName string, attrs *attr.Map) {
	body, err := feedStatusRequestBody(feedName, attrs)
	go func() {
		defer c.wg.Done()
		var ans receive.FeedAnswer
		if err == nil {
			ans, err = c.ask(feedName, body)
		}
		c.finish(key, cl, feedName, ans, err)
	}()
}

// finish caches the outcome of a request and releases its waiters.
func (c *FeedStatusClient) finish(key statusKey, cl *statusCall, feedName string, ans receive.FeedAnswer, err error) {
	now := c.o.Now()
	c.mu.Lock()
	delete(c.inflight, key)
	switch {
	case err == nil:
		c.storeLocked(key, ans, now.Add(c.o.CacheTTL))
	case c.base.Err() != nil:
		// Closing: answer the waiters, remember nothing.
		ans = c.fallback(feedName, "the proxy is shutting down")
	default:
		old, ok := c.entries[key]
		if ok && !old.Value.(*statusEntry).ans.Fallback {
			// A stale real answer is better than a guess.
			ans = old.Value.(*statusEntry).ans
			c.o.Log.Log(context.Background(), feedStatusFailureLevel(err), "feed status: the downstream could not be asked; keeping the previous answer",
				"feed", feedName, "url", c.o.URL, "status", ans.Status, "error", err, "hint", feedStatusFailureHint(err))
		} else {
			ans = c.fallback(feedName, feedStatusFailureReason(err))
			c.o.Log.Log(context.Background(), feedStatusFailureLevel(err), "feed status: the downstream could not be asked; using the fallback",
				"feed", feedName, "url", c.o.URL, "fallback", c.o.Fallback, "error", err, "hint", feedStatusFailureHint(err))
		}
		c.storeLocked(key, ans, now.Add(c.fallbackTTL))
	}
	cl.ans = ans
	c.mu.Unlock()
	close(cl.done)
}

// storeLocked caches ans for key until next, evicting the least recently
// stored answers beyond MaxEntries.
func (c *FeedStatusClient) storeLocked(key statusKey, ans receive.FeedAnswer, next time.Time) {
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*statusEntry)
		e.ans, e.next = ans, next
		c.order.MoveToBack(el)
		return
	}
	c.entries[key] = c.order.PushBack(&statusEntry{key: key, ans: ans, next: next})
	for c.order.Len() > c.o.MaxEntries {
		oldest := c.order.Front()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*statusEntry).key)
	}
}

// fallback is the configured answer for when nobody could be asked.
func (c *FeedStatusClient) fallback(feedName, why string) receive.FeedAnswer {
	ans := receive.FeedAnswer{
		Status: c.o.Fallback,
		// Nobody said the feed does not exist.
		Known: true,
		Message: fmt.Sprintf("the downstream could not be asked for the status of feed %q (%s); the fallback %s applies",
			feedName, why, c.o.Fallback),
		Fallback: true,
	}
	if ans.Status == feed.Reject {
		ans.Code = receive.FeedNotReceiving
	}
	return ans
}

// feedStatusRequest is the reference system's GetFeedStatusRequestV2.
type feedStatusRequest struct {
	FeedName     string            `json:"feedName"`
	UserDesc     *feedStatusUser   `json:"userDesc,omitempty"`
	AttributeMap map[string]string `json:"attributeMap"`
}

type feedStatusUser struct {
	SubjectID   string `json:"subjectId"`
	DisplayName string `json:"displayName,omitempty"`
}

func feedStatusRequestBody(feedName string, attrs *attr.Map) ([]byte, error) {
	req := feedStatusRequest{FeedName: feedName, AttributeMap: make(map[string]string, attrs.Len())}
	if id, name := attrs.Value("UploadUserId"), attrs.Value("UploadUsername"); id != "" || name != "" {
		req.UserDesc = &feedStatusUser{SubjectID: id, DisplayName: name}
	}
	for k, v := range attrs.All() {
		req.AttributeMap[k] = v
	}
	return json.Marshal(req)
}

// feedStatusResponse is the reference system's GetFeedStatusResponse;
// statusCode is weir's addition, the code as a number.
type feedStatusResponse struct {
	Status           string          `json:"status"`
	Message          string          `json:"message"`
	StroomStatusCode json.RawMessage `json:"stroomStatusCode"`
	StatusCode       *int            `json:"statusCode"`
}

// feedStatusHTTPError is a non-200 answer.
type feedStatusHTTPError struct {
	status int
	body   string // the start of the body, for the log
}

func (e *feedStatusHTTPError) Error() string {
	if e.body == "" {
		return fmt.Sprintf("HTTP %d", e.status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.status, e.body)
}

// feedStatusBadAnswer is a 200 answer that cannot be understood.
type feedStatusBadAnswer struct{ msg string }

func (e *feedStatusBadAnswer) Error() string { return e.msg }

// ask sends one request and decodes the answer.
func (c *FeedStatusClient) ask(feedName string, body []byte) (receive.FeedAnswer, error) {
	ctx, cancel := context.WithTimeout(c.base, c.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.o.URL, bytes.NewReader(body))
	if err != nil {
		return receive.FeedAnswer{}, err
	}
	for k, vs := range c.o.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.o.Client.Do(req)
	if err != nil {
		return receive.FeedAnswer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, feedStatusMaxBody+1))
	if resp.StatusCode != http.StatusOK {
		return receive.FeedAnswer{}, &feedStatusHTTPError{status: resp.StatusCode, body: feedStatusSnippet(data)}
	}
	if err != nil {
		return receive.FeedAnswer{}, fmt.Errorf("reading the answer: %w", err)
	}
	if len(data) > feedStatusMaxBody {
		return receive.FeedAnswer{}, &feedStatusBadAnswer{fmt.Sprintf("the answer is larger than %d bytes", feedStatusMaxBody)}
	}
	return decodeFeedStatus(data)
}

// decodeFeedStatus turns a 200 answer into a FeedAnswer.
func decodeFeedStatus(data []byte) (receive.FeedAnswer, error) {
	var r feedStatusResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return receive.FeedAnswer{}, &feedStatusBadAnswer{"the answer is not a feed status: " + err.Error()}
	}
	st, err := feed.ParseStatus(r.Status)
	if err != nil {
		return receive.FeedAnswer{}, &feedStatusBadAnswer{"the answer is not a feed status: " + err.Error()}
	}
	var code receive.Code
	switch {
	case r.StatusCode != nil:
		code = receive.Code(*r.StatusCode)
	default:
		code = parseFeedStatusCode(r.StroomStatusCode)
	}
	if st == feed.Reject && code == receive.OK {
		code = receive.FeedNotReceiving
	}
	return receive.FeedAnswer{
		Status:  st,
		Known:   code != receive.FeedNotDefined,
		Code:    code,
		Message: r.Message,
	}, nil
}

// feedStatusCodeNames are the names of the reference system's
// StroomStatusCode enum, which is how its answers give the code, with the
// names older versions used.
var feedStatusCodeNames = map[string]receive.Code{
	"OK":                                     0,
	"FEED_MUST_BE_SPECIFIED":                 100,
	"FEED_IS_NOT_DEFINED":                    101,
	"INVALID_TYPE":                           102,
	"MISSING_MANDATORY_HEADER":               103,
	"INVALID_FORMAT":                         104,
	"FEED_IS_NOT_SET_TO_RECEIVE_DATA":        110,
	"FEED_IS_NOT_SET_TO_RECEIVED_DATA":       110, // older spelling
	"RECEIPT_POLICY_SET_TO_REJECT_DATA":      110, // older versions
	"INVALID_FEED_NAME":                      111,
	"INVALID_DATA_FEED_KEY":                  112,
	"REJECTED_BY_POLICY_RULES":               113,
	"UNEXPECTED_DATA_TYPE":                   120,
	"UNKNOWN_COMPRESSION":                    200,
	"CLIENT_CERTIFICATE_REQUIRED":            300,
	"CLIENT_TOKEN_REQUIRED":                  301,
	"CLIENT_TOKEN_OR_CERT_REQUIRED":          302,
	"CLIENT_DATA_FEED_KEY_REQUIRED":          303,
	"AUTHENTICATION_REQUIRED":                304,
	"CLIENT_CERTIFICATE_NOT_AUTHENTICATED":   310,
	"CLIENT_CERTIFICATE_NOT_AUTHORISED":      310, // older versions
	"CLIENT_TOKEN_NOT_AUTHENTICATED":         311,
	"CLIENT_TOKEN_OR_CERT_NOT_AUTHENTICATED": 312,
	"DATA_FEED_KEY_NOT_AUTHENTICATED":        313,
	"DATA_FEED_KEY_EXPIRED":                  314,
	"COMPRESSED_STREAM_INVALID":              400,
	"CONTENT_TOO_LARGE":                      410,
	"UNKNOWN_ERROR":                          999,
}

// parseFeedStatusCode reads stroomStatusCode: an enum name in any case,
// or a number; anything else (or nothing) is 0.
func parseFeedStatusCode(raw json.RawMessage) receive.Code {
	if len(raw) == 0 {
		return 0
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		name = strings.ToUpper(strings.TrimSpace(name))
		if c, ok := feedStatusCodeNames[name]; ok {
			return c
		}
		if n, err := strconv.Atoi(name); err == nil {
			return receive.Code(n)
		}
		return 0
	}
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return receive.Code(n)
	}
	return 0
}

// feedStatusFailureLevel is ERROR for an answer that says the proxy is not allowed
// to ask, which an operator must fix, and WARN otherwise.
func feedStatusFailureLevel(err error) slog.Level {
	if feedStatusAuthFailure(err) {
		return slog.LevelError
	}
	return slog.LevelWarn
}

func feedStatusFailureHint(err error) string {
	if feedStatusAuthFailure(err) {
		return "the downstream refused the proxy: its API key for the downstream (feedStatus.apiKey, or the HTTP destination's apiKey) is wrong or missing"
	}
	return ""
}

func feedStatusAuthFailure(err error) bool {
	var he *feedStatusHTTPError
	return errors.As(err, &he) && (he.status == http.StatusUnauthorized || he.status == http.StatusForbidden)
}

// feedStatusFailureReason says why the downstream could not answer, in words fit
// for a sender: without the downstream's address or its error text.
func feedStatusFailureReason(err error) string {
	var he *feedStatusHTTPError
	var be *feedStatusBadAnswer
	switch {
	case errors.As(err, &he):
		return fmt.Sprintf("it answered HTTP %d", he.status)
	case errors.As(err, &be):
		return "its answer could not be understood"
	case errors.Is(err, context.DeadlineExceeded) || feedStatusIsTimeout(err):
		return "it did not answer in time"
	default:
		return "it could not be reached"
	}
}

func feedStatusIsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// feedStatusSnippet is the start of a body as one line of printable text.
func feedStatusSnippet(b []byte) string {
	const max = 200
	s := strings.ToValidUTF8(string(b[:min(len(b), max)]), "?")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(b) > max {
		s += "..."
	}
	return s
}
