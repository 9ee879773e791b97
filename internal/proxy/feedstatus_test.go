package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/receive"
)

// fsClock is a clock the test moves by hand.
type fsClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFSClock() *fsClock {
	return &fsClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fsClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fsClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fsServer is a downstream whose answer the test sets.
type fsServer struct {
	*httptest.Server
	requests atomic.Int64

	mu     sync.Mutex
	status int
	body   string
	// gate, when set, holds every request until it is closed; arrived gets
	// a value for each request that waits.
	gate    chan struct{}
	arrived chan struct{}
	last    []byte
	header  http.Header
}

func newFSServer(t *testing.T) *fsServer {
	t.Helper()
	s := &fsServer{status: http.StatusOK, body: `{"status":"Receive"}`}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.last, s.header = b, r.Header.Clone()
		gate, arrived := s.gate, s.arrived
		s.mu.Unlock()
		if gate != nil {
			if arrived != nil {
				arrived <- struct{}{}
			}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		s.mu.Lock()
		status, body := s.status, s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *fsServer) answer(status int, body string) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

// hold makes requests wait until the returned function is called.
func (s *fsServer) hold() (arrived <-chan struct{}, release func()) {
	gate, arr := make(chan struct{}), make(chan struct{}, 100)
	s.mu.Lock()
	s.gate, s.arrived = gate, arr
	s.mu.Unlock()
	var once sync.Once
	return arr, func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate, s.arrived = nil, nil
			s.mu.Unlock()
			close(gate)
		})
	}
}

func (s *fsServer) count() int64 { return s.requests.Load() }

func newTestFeedStatusClient(t *testing.T, url string, clock *fsClock, mod func(*FeedStatusOptions)) *FeedStatusClient {
	t.Helper()
	o := FeedStatusOptions{
		URL:        url,
		CacheTTL:   time.Minute,
		MaxEntries: 100,
		Timeout:    5 * time.Second,
		Fallback:   feed.Receive,
		Now:        clock.Now,
	}
	if mod != nil {
		mod(&o)
	}
	c := NewFeedStatusClient(o)
	t.Cleanup(c.Close)
	return c
}

// fsWaitIdle waits for the requests under way to finish.
func fsWaitIdle(t *testing.T, c *FeedStatusClient) {
	t.Helper()
	c.mu.Lock()
	var calls []*statusCall
	for _, cl := range c.inflight {
		calls = append(calls, cl)
	}
	c.mu.Unlock()
	for _, cl := range calls {
		select {
		case <-cl.done:
		case <-time.After(10 * time.Second):
			t.Fatal("a feed status request did not finish")
		}
	}
}

func fsAttrs(user string, kv ...string) *attr.Map {
	m := &attr.Map{}
	if user != "" {
		m.Put("UploadUserId", user)
		m.Put("UploadUsername", "name of "+user)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Put(kv[i], kv[i+1])
	}
	return m
}

func fsStatus(t *testing.T, c *FeedStatusClient, feedName string, attrs *attr.Map) receive.FeedAnswer {
	t.Helper()
	ans, err := c.FeedStatus(context.Background(), feedName, attrs)
	if err != nil {
		t.Fatalf("FeedStatus(%q): %v", feedName, err)
	}
	return ans
}

func TestFeedStatusMapping(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		want  receive.FeedAnswer
		wantF bool // fallback
	}{
		{name: "receive", body: `{"status":"Receive","message":"ok"}`,
			want: receive.FeedAnswer{Status: feed.Receive, Known: true, Message: "ok"}},
		{name: "receive upper case with OK", body: `{"status":"RECEIVE","stroomStatusCode":"OK"}`,
			want: receive.FeedAnswer{Status: feed.Receive, Known: true}},
		{name: "drop", body: `{"status":"drop"}`,
			want: receive.FeedAnswer{Status: feed.Drop, Known: true}},
		{name: "reject without a code", body: `{"status":"Reject","message":"no"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.FeedNotReceiving, Message: "no"}},
		{name: "reject not defined by name", body: `{"status":"Reject","message":"Feed is not defined","stroomStatusCode":"FEED_IS_NOT_DEFINED"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: false, Code: receive.FeedNotDefined, Message: "Feed is not defined"}},
		{name: "reject not defined by number", body: `{"status":"reject","statusCode":101}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: false, Code: receive.FeedNotDefined}},
		{name: "statusCode wins over the name", body: `{"status":"Reject","statusCode":113,"stroomStatusCode":"FEED_IS_NOT_DEFINED"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.RejectedByPolicy}},
		{name: "reject by policy", body: `{"status":"Reject","stroomStatusCode":"REJECTED_BY_POLICY_RULES"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.RejectedByPolicy}},
		{name: "not set to receive", body: `{"status":"Reject","stroomStatusCode":"feed_is_not_set_to_receive_data"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.FeedNotReceiving}},
		{name: "old spelling", body: `{"status":"Reject","stroomStatusCode":"FEED_IS_NOT_SET_TO_RECEIVED_DATA"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.FeedNotReceiving}},
		{name: "must be specified", body: `{"status":"Reject","stroomStatusCode":"FEED_MUST_BE_SPECIFIED"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.FeedMustBeSpecified}},
		{name: "unknown name", body: `{"status":"Reject","stroomStatusCode":"SOMETHING_NEW"}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.FeedNotReceiving}},
		{name: "numeric stroomStatusCode", body: `{"status":"Reject","stroomStatusCode":120}`,
			want: receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.UnexpectedType}},
		{name: "extra fields", body: `{"status":"Receive","other":{"a":[1,2]}}`,
			want: receive.FeedAnswer{Status: feed.Receive, Known: true}},
		{name: "not json", body: `<html>hello</html>`, wantF: true},
		{name: "unknown status", body: `{"status":"Maybe"}`, wantF: true},
		{name: "no status", body: `{}`, wantF: true},
		{name: "too large", body: `{"status":"Receive","message":"` + strings.Repeat("x", feedStatusMaxBody) + `"}`, wantF: true},
	}
	srv := newFSServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.answer(http.StatusOK, tt.body)
			c := newTestFeedStatusClient(t, srv.URL, newFSClock(), func(o *FeedStatusOptions) { o.Fallback = feed.Drop })
			got := fsStatus(t, c, "FEED", nil)
			if tt.wantF {
				if !got.Fallback || got.Status != feed.Drop || !got.Known {
					t.Fatalf("got %+v, want the DROP fallback", got)
				}
				if !strings.Contains(got.Message, "could not be understood") {
					t.Errorf("message %q does not say why", got.Message)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFeedStatusRequest(t *testing.T) {
	srv := newFSServer(t)
	h := http.Header{}
	h.Set("Authorization", "Bearer sekrit")
	c := newTestFeedStatusClient(t, srv.URL+"/api/feedStatus/v2/getFeedStatus", newFSClock(), func(o *FeedStatusOptions) { o.Header = h })
	h.Set("Authorization", "changed after construction")

	fsStatus(t, c, "MY_FEED", fsAttrs("user-1", "System", "sys", "Feed", "MY_FEED"))

	srv.mu.Lock()
	body, hdr := srv.last, srv.header
	srv.mu.Unlock()
	if got := hdr.Get("Authorization"); got != "Bearer sekrit" {
		t.Errorf("Authorization = %q", got)
	}
	if got := hdr.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	var req struct {
		FeedName string `json:"feedName"`
		UserDesc struct {
			SubjectID   string `json:"subjectId"`
			DisplayName string `json:"displayName"`
		} `json:"userDesc"`
		AttributeMap map[string]string `json:"attributeMap"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("request body %s: %v", body, err)
	}
	if req.FeedName != "MY_FEED" || req.UserDesc.SubjectID != "user-1" || req.UserDesc.DisplayName != "name of user-1" {
		t.Errorf("request %s", body)
	}
	want := map[string]string{"UploadUserId": "user-1", "UploadUsername": "name of user-1", "System": "sys", "Feed": "MY_FEED"}
	if len(req.AttributeMap) != len(want) {
		t.Errorf("attributeMap %v, want %v", req.AttributeMap, want)
	}
	for k, v := range want {
		if req.AttributeMap[k] != v {
			t.Errorf("attributeMap[%s] = %q, want %q", k, req.AttributeMap[k], v)
		}
	}

	// No sender: no userDesc.
	fsStatus(t, c, "OTHER", nil)
	srv.mu.Lock()
	body = srv.last
	srv.mu.Unlock()
	if bytes.Contains(body, []byte("userDesc")) || !bytes.Contains(body, []byte(`"attributeMap":{}`)) {
		t.Errorf("request without a sender: %s", body)
	}
	if srv.URL == "" || srv.count() != 2 {
		t.Errorf("requests = %d, want 2", srv.count())
	}
}

func TestFeedStatusCacheHit(t *testing.T) {
	srv := newFSServer(t)
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, nil)

	fsStatus(t, c, "A", fsAttrs("u1"))
	clock.Advance(59 * time.Second)
	// Other attributes do not take part in the key.
	if ans := fsStatus(t, c, "A", fsAttrs("u1", "System", "other")); ans.Status != feed.Receive {
		t.Fatalf("got %+v", ans)
	}
	if n := srv.count(); n != 1 {
		t.Fatalf("requests = %d, want 1 (cache hit)", n)
	}
	// Another sender or feed is asked about.
	fsStatus(t, c, "A", fsAttrs("u2"))
	fsStatus(t, c, "a", fsAttrs("u1"))
	if n := srv.count(); n != 3 {
		t.Fatalf("requests = %d, want 3", n)
	}
}

func TestFeedStatusStaleRefreshedInBackground(t *testing.T) {
	srv := newFSServer(t)
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, nil)

	if ans := fsStatus(t, c, "A", nil); ans.Status != feed.Receive {
		t.Fatalf("got %+v", ans)
	}
	srv.answer(http.StatusOK, `{"status":"Reject","stroomStatusCode":"FEED_IS_NOT_SET_TO_RECEIVE_DATA"}`)
	arrived, release := srv.hold()
	defer release()
	clock.Advance(time.Minute)

	// The downstream holds the refresh, yet the stale answer comes at once,
	// however often it is asked for, with one refresh.
	for range 5 {
		if ans := fsStatus(t, c, "A", nil); ans.Status != feed.Receive || ans.Fallback {
			t.Fatalf("stale answer: got %+v", ans)
		}
	}
	<-arrived
	if n := srv.count(); n != 2 {
		t.Fatalf("requests = %d, want 2", n)
	}
	release()
	fsWaitIdle(t, c)
	ans := fsStatus(t, c, "A", nil)
	if ans.Status != feed.Reject || ans.Code != receive.FeedNotReceiving {
		t.Fatalf("refreshed answer: got %+v", ans)
	}
	if n := srv.count(); n != 2 {
		t.Fatalf("requests = %d, want 2", n)
	}
}

func TestFeedStatusConcurrentCallersShareOneRequest(t *testing.T) {
	srv := newFSServer(t)
	srv.answer(http.StatusOK, `{"status":"Drop"}`)
	c := newTestFeedStatusClient(t, srv.URL, newFSClock(), nil)
	arrived, release := srv.hold()
	defer release()

	const n = 20
	var wg sync.WaitGroup
	answers := make([]receive.FeedAnswer, n)
	for i := range n {
		wg.Go(func() { answers[i] = fsStatus(t, c, "A", fsAttrs("u")) })
	}
	<-arrived
	// Callers arriving while the request is held join it; callers after it
	// use its cached answer: either way one request.
	release()
	wg.Wait()
	if got := srv.count(); got != 1 {
		t.Fatalf("requests = %d, want 1", got)
	}
	for i, a := range answers {
		if a.Status != feed.Drop || a.Fallback {
			t.Fatalf("answer %d: %+v", i, a)
		}
	}
}

func TestFeedStatusDownstreamDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()

	for _, fb := range []feed.Status{feed.Receive, feed.Reject, feed.Drop} {
		t.Run(string(fb), func(t *testing.T) {
			var logs fsLogBuffer
			c := newTestFeedStatusClient(t, url, newFSClock(), func(o *FeedStatusOptions) {
				o.Fallback = fb
				o.Log = slog.New(slog.NewTextHandler(&logs, nil))
			})
			ans := fsStatus(t, c, "A", nil)
			if !ans.Fallback || ans.Status != fb || !ans.Known {
				t.Fatalf("got %+v", ans)
			}
			if fb == feed.Reject && ans.Code != receive.FeedNotReceiving {
				t.Errorf("code %d, want 110", ans.Code)
			}
			if !strings.Contains(ans.Message, "could not be asked") || !strings.Contains(ans.Message, "could not be reached") {
				t.Errorf("message %q", ans.Message)
			}
			if strings.Contains(ans.Message, "127.0.0.1") {
				t.Errorf("message %q names the downstream", ans.Message)
			}
			if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "refused") {
				t.Errorf("log %q", s)
			}
		})
	}
}

func TestFeedStatusHTTPErrors(t *testing.T) {
	for _, tt := range []struct {
		status int
		level  string
		hint   bool
	}{
		{http.StatusInternalServerError, "level=WARN", false},
		{http.StatusNotFound, "level=WARN", false},
		{http.StatusUnauthorized, "level=ERROR", true},
		{http.StatusForbidden, "level=ERROR", true},
	} {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv := newFSServer(t)
			srv.answer(tt.status, "something broke\nbadly")
			var logs fsLogBuffer
			c := newTestFeedStatusClient(t, srv.URL, newFSClock(), func(o *FeedStatusOptions) {
				o.Log = slog.New(slog.NewTextHandler(&logs, nil))
			})
			ans := fsStatus(t, c, "A", nil)
			if !ans.Fallback || ans.Status != feed.Receive {
				t.Fatalf("got %+v", ans)
			}
			if !strings.Contains(ans.Message, "HTTP "+strconv.Itoa(tt.status)) || strings.Contains(ans.Message, "broke") {
				t.Errorf("message %q", ans.Message)
			}
			s := logs.String()
			if !strings.Contains(s, tt.level) || !strings.Contains(s, "something broke badly") {
				t.Errorf("log %q", s)
			}
			if strings.Contains(s, "API key") != tt.hint {
				t.Errorf("log %q: hint about the API key: want %v", s, tt.hint)
			}
		})
	}
}

func TestFeedStatusTimeout(t *testing.T) {
	srv := newFSServer(t)
	_, release := srv.hold()
	defer release()
	c := newTestFeedStatusClient(t, srv.URL, newFSClock(), func(o *FeedStatusOptions) { o.Timeout = 50 * time.Millisecond })
	ans := fsStatus(t, c, "A", nil)
	if !ans.Fallback || !strings.Contains(ans.Message, "in time") {
		t.Fatalf("got %+v", ans)
	}
}

func TestFeedStatusCallerGivesUp(t *testing.T) {
	srv := newFSServer(t)
	arrived, release := srv.hold()
	defer release()
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, nil)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	ans, err := c.FeedStatus(ctx, "A", nil)
	if err != nil || !ans.Fallback || !strings.Contains(ans.Message, "abandoned") {
		t.Fatalf("got %+v, %v", ans, err)
	}
	// The request goes on and its answer is kept.
	release()
	fsWaitIdle(t, c)
	if ans := fsStatus(t, c, "A", nil); ans.Fallback || ans.Status != feed.Receive {
		t.Fatalf("got %+v", ans)
	}
	if n := srv.count(); n != 1 {
		t.Fatalf("requests = %d, want 1", n)
	}
}

// TestFeedStatusStaleRefusalWaitsForFreshAnswer: a refusal past its time
// is not used again while it is refreshed: the caller gets the fresh
// answer, so a feed switched back to RECEIVE receives at once (an
// operator's replay after fixing a feed is not refused once more).
func TestFeedStatusStaleRefusalWaitsForFreshAnswer(t *testing.T) {
	for _, status := range []string{"Reject", "Drop"} {
		t.Run(status, func(t *testing.T) {
			srv := newFSServer(t)
			srv.answer(http.StatusOK, `{"status":"`+status+`"}`)
			clock := newFSClock()
			// The wait for the refresh is real time, not the clock's: long
			// enough for a loaded machine.
			c := newTestFeedStatusClient(t, srv.URL, clock, func(o *FeedStatusOptions) {
				o.Timeout, o.StaleWait = 30*time.Second, 30*time.Second
			})
			if ans := fsStatus(t, c, "A", nil); ans.Status == feed.Receive {
				t.Fatalf("got %+v", ans)
			}
			srv.answer(http.StatusOK, `{"status":"Receive"}`)
			clock.Advance(59 * time.Second)
			if ans := fsStatus(t, c, "A", nil); ans.Status == feed.Receive {
				t.Fatalf("a fresh refusal was asked again: %+v", ans)
			}
			clock.Advance(time.Second)
			if ans := fsStatus(t, c, "A", nil); ans.Status != feed.Receive || ans.Fallback {
				t.Fatalf("stale %s: got %+v, want the fresh Receive", status, ans)
			}
			if n := srv.count(); n != 2 {
				t.Fatalf("requests = %d, want 2", n)
			}
		})
	}
}

// TestFeedStatusStaleRefusalDuringOutage: while the downstream does not
// answer, a stale refusal is used after a short wait for the fresh answer,
// not after the whole request timeout (each post would wait that long,
// again and again while the downstream hangs; found by a review). The
// timeout here is 30 s, the wait a second: the bound leaves room for a
// slow machine.
func TestFeedStatusStaleRefusalDuringOutage(t *testing.T) {
	srv := newFSServer(t)
	srv.answer(http.StatusOK, `{"status":"Reject"}`)
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, func(o *FeedStatusOptions) { o.Timeout = 30 * time.Second })
	if ans := fsStatus(t, c, "A", nil); ans.Status != feed.Reject {
		t.Fatalf("got %+v", ans)
	}
	_, release := srv.hold() // the downstream stops answering
	defer release()
	for round := range 2 {
		clock.Advance(61 * time.Second)
		start := time.Now()
		ans := fsStatus(t, c, "A", nil)
		if ans.Status != feed.Reject || ans.Fallback {
			t.Fatalf("round %d: got %+v, want the stale Reject", round, ans)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("round %d: the post waited %s (the request timeout is 30 s)", round, d.Round(time.Millisecond))
		}
	}
}

func TestFeedStatusFallbackCachedBriefly(t *testing.T) {
	srv := newFSServer(t)
	srv.answer(http.StatusInternalServerError, "")
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, nil)

	if ans := fsStatus(t, c, "A", nil); !ans.Fallback {
		t.Fatalf("got %+v", ans)
	}
	clock.Advance(9 * time.Second)
	if ans := fsStatus(t, c, "A", nil); !ans.Fallback {
		t.Fatalf("got %+v", ans)
	}
	if n := srv.count(); n != 1 {
		t.Fatalf("requests = %d, want 1", n)
	}
	// The downstream recovers; after 10s the fallback is stale and refreshed.
	srv.answer(http.StatusOK, `{"status":"Reject"}`)
	clock.Advance(time.Second)
	if ans := fsStatus(t, c, "A", nil); !ans.Fallback {
		t.Fatalf("stale fallback: got %+v", ans)
	}
	fsWaitIdle(t, c)
	if ans := fsStatus(t, c, "A", nil); ans.Fallback || ans.Status != feed.Reject {
		t.Fatalf("got %+v", ans)
	}
	if n := srv.count(); n != 2 {
		t.Fatalf("requests = %d, want 2", n)
	}
}

func TestFeedStatusFallbackTTLNotAboveCacheTTL(t *testing.T) {
	srv := newFSServer(t)
	srv.answer(http.StatusBadGateway, "")
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, func(o *FeedStatusOptions) { o.CacheTTL = 2 * time.Second })
	fsStatus(t, c, "A", nil)
	clock.Advance(2 * time.Second)
	fsStatus(t, c, "A", nil)
	fsWaitIdle(t, c)
	if n := srv.count(); n != 2 {
		t.Fatalf("requests = %d, want 2", n)
	}
}

func TestFeedStatusStaleKeptWhenRefreshFails(t *testing.T) {
	srv := newFSServer(t)
	srv.answer(http.StatusOK, `{"status":"Reject","stroomStatusCode":"REJECTED_BY_POLICY_RULES","message":"policy"}`)
	clock := newFSClock()
	var logs fsLogBuffer
	c := newTestFeedStatusClient(t, srv.URL, clock, func(o *FeedStatusOptions) {
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	want := receive.FeedAnswer{Status: feed.Reject, Known: true, Code: receive.RejectedByPolicy, Message: "policy"}
	if ans := fsStatus(t, c, "A", nil); ans != want {
		t.Fatalf("got %+v", ans)
	}
	srv.answer(http.StatusServiceUnavailable, "")
	clock.Advance(time.Minute)
	if ans := fsStatus(t, c, "A", nil); ans != want {
		t.Fatalf("stale: got %+v", ans)
	}
	fsWaitIdle(t, c)
	if ans := fsStatus(t, c, "A", nil); ans != want {
		t.Fatalf("after a failed refresh: got %+v", ans)
	}
	if n := srv.count(); n != 2 {
		t.Fatalf("requests = %d, want 2", n)
	}
	if s := logs.String(); !strings.Contains(s, "keeping the previous answer") {
		t.Errorf("log %q", s)
	}
	// The downstream is asked again after the short interval, not at once.
	clock.Advance(9 * time.Second)
	fsStatus(t, c, "A", nil)
	if n := srv.count(); n != 2 {
		t.Fatalf("requests = %d, want 2", n)
	}
	clock.Advance(time.Second)
	if ans := fsStatus(t, c, "A", nil); ans != want {
		t.Fatalf("got %+v", ans)
	}
	fsWaitIdle(t, c)
	if n := srv.count(); n != 3 {
		t.Fatalf("requests = %d, want 3", n)
	}
}

func TestFeedStatusEviction(t *testing.T) {
	srv := newFSServer(t)
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, func(o *FeedStatusOptions) { o.MaxEntries = 2 })
	fsStatus(t, c, "A", nil)
	fsStatus(t, c, "B", nil)
	fsStatus(t, c, "C", nil) // evicts A
	if n := srv.count(); n != 3 {
		t.Fatalf("requests = %d, want 3", n)
	}
	fsStatus(t, c, "B", nil)
	fsStatus(t, c, "C", nil)
	if n := srv.count(); n != 3 {
		t.Fatalf("requests = %d, want 3 (B and C cached)", n)
	}
	fsStatus(t, c, "A", nil) // asked again, evicts B
	if n := srv.count(); n != 4 {
		t.Fatalf("requests = %d, want 4", n)
	}
	c.mu.Lock()
	size := len(c.entries)
	c.mu.Unlock()
	if size != 2 {
		t.Fatalf("%d cached answers, want 2", size)
	}
	fsStatus(t, c, "C", nil)
	if n := srv.count(); n != 4 {
		t.Fatalf("requests = %d, want 4 (C cached)", n)
	}
}

func TestFeedStatusClose(t *testing.T) {
	srv := newFSServer(t)
	clock := newFSClock()
	c := newTestFeedStatusClient(t, srv.URL, clock, nil)
	fsStatus(t, c, "A", nil)

	arrived, release := srv.hold()
	defer release()
	clock.Advance(time.Minute)
	fsStatus(t, c, "A", nil) // starts a refresh that the downstream holds
	<-arrived

	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the refresh")
	}
	c.Close() // twice is fine
	// Cached answers are still used; nothing new is asked.
	if ans := fsStatus(t, c, "A", nil); ans.Fallback || ans.Status != feed.Receive {
		t.Fatalf("got %+v", ans)
	}
	if ans := fsStatus(t, c, "B", nil); !ans.Fallback {
		t.Fatalf("got %+v", ans)
	}
	if n := srv.count(); n != 2 {
		t.Fatalf("requests = %d, want 2", n)
	}
}

func TestFeedStatusDefaults(t *testing.T) {
	c := NewFeedStatusClient(FeedStatusOptions{URL: "http://127.0.0.1:1/"})
	defer c.Close()
	if c.o.CacheTTL != time.Minute || c.o.MaxEntries != 1000 || c.o.Timeout != 10*time.Second ||
		c.o.Fallback != feed.Receive || c.o.Client == nil || c.o.Log == nil || c.o.Now == nil || c.fallbackTTL != 10*time.Second {
		t.Fatalf("defaults: %+v", c.o)
	}
}

// fsLogBuffer is a bytes.Buffer safe for a logger written from goroutines.
type fsLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *fsLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *fsLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
