package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
)

const (
	feedStatusV2 = "/api/feedStatus/v2/getFeedStatus"
	feedStatusV1 = "/api/feedStatus/v1/getFeedStatus"
)

// fsAnswer is a feed status answer as a proxy reads it.
type fsAnswer struct {
	Status           string `json:"status"`
	Message          string `json:"message"`
	StroomStatusCode string `json:"stroomStatusCode"`
	StatusCode       *int   `json:"statusCode"` // a pointer: a missing code must not read as 0
}

// askFeedStatus POSTs a JSON question to path with key as bearer ("" for
// none) and returns the HTTP status, the headers and the raw body.
func askFeedStatus(t *testing.T, s *apptest.Server, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", path, err)
	}
	return res.StatusCode, res.Header, b
}

// wantAnswer asks and checks a 200 answer with exactly this status, code
// and enum name; it returns the answer for further checks.
func wantAnswer(t *testing.T, s *apptest.Server, path, key, body, status string, code int, name string) fsAnswer {
	t.Helper()
	httpCode, h, b := askFeedStatus(t, s, path, key, body)
	if httpCode != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d: %s", path, body, httpCode, b)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q", path, body, ct)
	}
	var a fsAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s %s: %v: %s", path, body, err, b)
	}
	if a.Status != status || a.StatusCode == nil || *a.StatusCode != code || a.StroomStatusCode != name || a.Message == "" {
		t.Fatalf("%s %s: %s; want status %q statusCode %d stroomStatusCode %q and a message", path, body, b, status, code, name)
	}
	return a
}

// wantUnauthenticated checks the API's 401 for a question.
func wantUnauthenticated(t *testing.T, s *apptest.Server, path, key string) {
	t.Helper()
	code, h, b := askFeedStatus(t, s, path, key, `{"feedName":"FS-IN"}`)
	if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") ||
		h.Get("WWW-Authenticate") != `Bearer realm="weir"` {
		t.Fatalf("%s with key %q: %d %q %q %s, want a 401 problem with WWW-Authenticate", path, key, code, h.Get("Content-Type"), h.Get("WWW-Authenticate"), b)
	}
	if strings.Contains(string(b), "Receive") || strings.Contains(string(b), "stroomStatusCode") {
		t.Fatalf("%s with key %q: 401 carries an answer: %s", path, key, b)
	}
}

func feedNames(t *testing.T, s *apptest.Server) []string {
	t.Helper()
	fs, err := s.App.Repo().ListFeeds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

// TestFeedStatusAPI asks a service in the default FEED_STATUS mode about
// feeds of each status, an unknown feed and no feed, on both paths, and
// checks each refusal against what the datafeed itself answers a post.
func TestFeedStatusAPI(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil) // datafeed without authentication: posts below need none
	s.CreateFeed("FS-IN", feed.Receive, "")
	s.CreateFeed("FS-OUT", feed.Reject, "")
	s.CreateFeed("FS-BIN", feed.Drop, "")
	before := feedNames(t, s)
	// A user without any application permission: asking needs none.
	key := user(t, s, "proxy", nil, nil).key

	a := wantAnswer(t, s, feedStatusV2, key,
		`{"feedName":"FS-IN","userDesc":{"subjectId":"sender-1","displayName":"Sender One","fullName":"Sender One"},`+
			`"attributeMap":{"Type":"Raw Events","System":"EXAMPLE"}}`,
		"Receive", 0, "OK")
	if a.Message != "OK" {
		t.Errorf("Receive message %q", a.Message)
	}
	wantAnswer(t, s, feedStatusV2, key, `{"feedName":"FS-BIN"}`, "Drop", 0, "OK")

	// Refusals say what a post would be told, word for word.
	for _, tc := range []struct {
		name, body, header, value string
		code                      int
		enum                      string
	}{
		{"rejecting feed", `{"feedName":"FS-OUT"}`, "Feed", "FS-OUT", 110, "FEED_IS_NOT_SET_TO_RECEIVE_DATA"},
		{"unknown feed", `{"feedName":"FS-NONE"}`, "Feed", "FS-NONE", 110, "FEED_IS_NOT_SET_TO_RECEIVE_DATA"},
		{"bad type", `{"feedName":"FS-IN","attributeMap":{"type":"Nonsense"}}`, "Type", "Nonsense", 102, "INVALID_TYPE"},
	} {
		a := wantAnswer(t, s, feedStatusV2, key, tc.body, "Reject", tc.code, tc.enum)
		hdr := []string{"Feed", "FS-IN", tc.header, tc.value}
		if tc.header == "Feed" {
			hdr = hdr[2:]
		}
		r := post(t, s, []byte("data"), hdr...)
		r.fails(t, http.StatusNotAcceptable, tc.code)
		if got := r.header.Get("Service-Error"); got != a.Message {
			t.Errorf("%s: the answer says %q, a post is told %q", tc.name, a.Message, got)
		}
	}
	if got := wantAnswer(t, s, feedStatusV2, key, `{"feedName":"FS-NONE"}`, "Reject", 110, "FEED_IS_NOT_SET_TO_RECEIVE_DATA"); !strings.Contains(got.Message, "[Feed: FS-NONE]") {
		t.Errorf("unknown feed message %q does not name the feed", got.Message)
	}

	// No feed: Reject with 100 (an answer, not a 422), however it is missing.
	for _, body := range []string{`{}`, `{"feedName":""}`, `{"feedName":"  ","attributeMap":{"Feed":"FS-IN"}}`} {
		a := wantAnswer(t, s, feedStatusV2, key, body, "Reject", 100, "FEED_MUST_BE_SPECIFIED")
		if !strings.HasPrefix(a.Message, "Feed must be specified") {
			t.Errorf("%s: message %q", body, a.Message)
		}
	}

	// Members a newer or older proxy may send are ignored, not refused.
	wantAnswer(t, s, feedStatusV2, key, `{"feedName":"FS-OUT","userDesc":{"subjectId":"x","type":"USER"},"extra":1}`,
		"Reject", 110, "FEED_IS_NOT_SET_TO_RECEIVE_DATA")

	// The legacy path answers the same.
	wantAnswer(t, s, feedStatusV1, key, `{"feedName":"FS-IN","senderDn":"CN=sender-1"}`, "Receive", 0, "OK")
	wantAnswer(t, s, feedStatusV1, key, `{"feedName":"FS-OUT","senderDn":"CN=sender-1"}`, "Reject", 110, "FEED_IS_NOT_SET_TO_RECEIVE_DATA")
	wantAnswer(t, s, feedStatusV1, key, `{"feedName":"FS-BIN"}`, "Drop", 0, "OK")
	wantAnswer(t, s, feedStatusV1, key, `{}`, "Reject", 100, "FEED_MUST_BE_SPECIFIED")

	// The wire form: the reference's members, the statuses spelled as the
	// reference spells them, and the number beside the enum name.
	_, _, b := askFeedStatus(t, s, feedStatusV2, key, `{"feedName":"FS-OUT"}`)
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["status"] != "Reject" || raw["statusCode"] != float64(110) || raw["stroomStatusCode"] != "FEED_IS_NOT_SET_TO_RECEIVE_DATA" ||
		raw["message"] != "Feed is not set to receive data [Feed: FS-OUT] - feed \"FS-OUT\" has status REJECT" {
		t.Errorf("wire form %s", b)
	}

	// Questions changed nothing: no feed was created, nothing stored.
	if after := feedNames(t, s); !slices.Equal(before, after) {
		t.Errorf("feeds %q before the questions, %q after", before, after)
	}
	if st := s.Streams(); len(st) != 0 {
		t.Errorf("%d streams stored", len(st))
	}

	// Without a valid credential: 401, no answer.
	for _, p := range []string{feedStatusV2, feedStatusV1} {
		wantUnauthenticated(t, s, p, "")
		wantUnauthenticated(t, s, p, "sak_not-a-key")
	}
}

// TestFeedStatusAPIModes asks a service in FEED_EXISTENCE mode, with
// datafeed authentication required and feed name generation (with
// auto-creation) on: the answer follows the mode, an API key is enough to
// ask, and a question without a feed creates none.
func TestFeedStatusAPIModes(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.ReceiptCheckMode = config.FeedExistence
		c.Receive.FeedNameGenerationEnabled = true
		c.Receive.FeedNameGenerationAutoCreate = true
		c.Receive.FeedNameTemplate = "${accountid}-EVENTS"
		c.Receive.FeedNameGenerationMandatoryHeaders = []string{"AccountId"}
	})
	s.CreateFeed("FS-OUT", feed.Reject, "")
	before := feedNames(t, s)
	key := user(t, s, "proxy", nil, nil).key

	// The feed exists: Receive, whatever its status.
	wantAnswer(t, s, feedStatusV2, key, `{"feedName":"FS-OUT"}`, "Receive", 0, "OK")
	a := wantAnswer(t, s, feedStatusV2, key, `{"feedName":"FS-NONE"}`, "Reject", 101, "FEED_IS_NOT_DEFINED")
	if !strings.HasPrefix(a.Message, "Feed is not defined [Feed: FS-NONE]") {
		t.Errorf("unknown feed message %q", a.Message)
	}
	wantAnswer(t, s, feedStatusV1, key, `{"feedName":"FS-NONE"}`, "Reject", 101, "FEED_IS_NOT_DEFINED")
	// A post with these attributes and no Feed would create 123-EVENTS;
	// the question does not.
	wantAnswer(t, s, feedStatusV2, key, `{"attributeMap":{"AccountId":"123"}}`, "Reject", 100, "FEED_MUST_BE_SPECIFIED")
	if after := feedNames(t, s); !slices.Equal(before, after) {
		t.Errorf("feeds %q before the questions, %q after", before, after)
	}

	// The datafeed needs a sender's credential; the question does not take
	// one, only an API caller's.
	post(t, s, []byte("data"), "Feed", "FS-OUT").fails(t, http.StatusUnauthorized, 304)
	for _, p := range []string{feedStatusV2, feedStatusV1} {
		wantUnauthenticated(t, s, p, "")
	}
}
