package receive

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
)

// fakeFeeds is a feed table that records what it is asked.
type fakeFeeds struct {
	feeds   map[string]feed.Feed
	err     error // returned by every lookup when set
	lookups []string
	created []string
}

func (f *fakeFeeds) GetFeed(_ context.Context, name string) (feed.Feed, error) {
	f.lookups = append(f.lookups, name)
	if f.err != nil {
		return feed.Feed{}, f.err
	}
	fd, ok := f.feeds[name]
	if !ok {
		return feed.Feed{}, meta.ErrNotFound
	}
	return fd, nil
}

func (f *fakeFeeds) CreateFeed(_ context.Context, fd feed.Feed) error {
	f.created = append(f.created, fd.Name)
	return nil
}

func statusHandler(t *testing.T, mutate func(*config.Receive)) (*Handler, *fakeFeeds) {
	t.Helper()
	ff := &fakeFeeds{feeds: map[string]feed.Feed{}}
	for name, st := range map[string]feed.Status{"IN": feed.Receive, "OUT": feed.Reject, "BIN": feed.Drop} {
		ff.feeds[name] = feed.Feed{Name: name, Status: st}.WithDefaults()
	}
	cfg := config.Default().Receive
	if mutate != nil {
		mutate(&cfg)
	}
	return New(Options{Config: cfg, Feeds: ff}), ff
}

func TestFeedStatusModes(t *testing.T) {
	t.Parallel()
	type want struct {
		status feed.Status
		code   Code
		known  bool
	}
	for _, tc := range []struct {
		mode config.CheckMode
		feed string
		want want
	}{
		{config.FeedStatus, "IN", want{feed.Receive, OK, true}},
		{config.FeedStatus, "OUT", want{feed.Reject, FeedNotReceiving, true}},
		{config.FeedStatus, "BIN", want{feed.Drop, OK, true}},
		{config.FeedStatus, "NONE", want{feed.Reject, FeedNotReceiving, false}},
		{config.FeedExistence, "OUT", want{feed.Receive, OK, true}},
		{config.FeedExistence, "NONE", want{feed.Reject, FeedNotDefined, false}},
		{config.ReceiveAll, "NONE", want{feed.Receive, OK, false}},
		{config.DropAll, "IN", want{feed.Drop, OK, false}},
		{config.RejectAll, "IN", want{feed.Reject, RejectedByPolicy, false}},
	} {
		h, _ := statusHandler(t, func(c *config.Receive) { c.ReceiptCheckMode = tc.mode })
		got, err := h.FeedStatus(context.Background(), tc.feed, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.mode, tc.feed, err)
		}
		if (want{got.Status, got.Code, got.Known}) != tc.want {
			t.Errorf("%s %s: %+v, want %+v", tc.mode, tc.feed, got, tc.want)
		}
		if got.Message == "" || got.Fallback {
			t.Errorf("%s %s: message %q fallback %v", tc.mode, tc.feed, got.Message, got.Fallback)
		}
		if tc.want.status == feed.Reject && !strings.HasPrefix(got.Message, tc.want.code.Text()+" [Feed: "+tc.feed+"]") {
			t.Errorf("%s %s: message %q does not start with the code's text and the feed", tc.mode, tc.feed, got.Message)
		}
	}
}

func TestFeedStatusBlankFeed(t *testing.T) {
	t.Parallel()
	// Generation and auto-creation are on: a post without a Feed would
	// create one, a question must not.
	h, ff := statusHandler(t, func(c *config.Receive) {
		c.FeedNameGenerationEnabled = true
		c.FeedNameGenerationAutoCreate = true
		c.FeedNameTemplate = "${accountid}-EVENTS"
		c.FeedNameGenerationMandatoryHeaders = []string{"AccountId"}
	})
	a := &attr.Map{}
	a.Put("AccountId", "123")
	for _, name := range []string{"", "  "} {
		got, err := h.FeedStatus(context.Background(), name, a)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != feed.Reject || got.Code != FeedMustBeSpecified || got.Known || got.Message != "Feed must be specified - send the name of the feed" {
			t.Errorf("feed %q: %+v", name, got)
		}
	}
	if len(ff.lookups) != 0 || len(ff.created) != 0 {
		t.Errorf("a blank feed looked up %q and created %q", ff.lookups, ff.created)
	}
}

func TestFeedStatusAttributes(t *testing.T) {
	t.Parallel()
	h, ff := statusHandler(t, nil)
	a := &attr.Map{}
	a.Put("Feed", "OTHER")
	a.Put("Type", "raw events")
	got, err := h.FeedStatus(context.Background(), " IN ", a)
	if err != nil || got.Status != feed.Receive || got.Code != OK {
		t.Fatalf("IN with a Type: %+v %v", got, err)
	}
	// The name asked about wins over a Feed attribute, trimmed as a header
	// would be, and the caller's map is left as it was.
	if len(ff.lookups) != 1 || ff.lookups[0] != "IN" {
		t.Errorf("looked up %q, want [IN]", ff.lookups)
	}
	if a.Value("Feed") != "OTHER" || a.Len() != 2 {
		t.Errorf("attributes changed: %v", a.Sorted())
	}
	// The attributes take part in the checks: a Type the post could not
	// have is refused as it would be.
	a.Put("Type", "Nonsense")
	got, err = h.FeedStatus(context.Background(), "IN", a)
	if err != nil || got.Status != feed.Reject || got.Code != InvalidType || !strings.Contains(got.Message, `"Nonsense"`) {
		t.Errorf("IN with a bad Type: %+v %v", got, err)
	}
}

func TestFeedStatusInternalError(t *testing.T) {
	t.Parallel()
	h, ff := statusHandler(t, nil)
	down := errors.New("database is down")
	ff.err = down
	got, err := h.FeedStatus(context.Background(), "IN", nil)
	if !errors.Is(err, down) {
		t.Fatalf("got %+v, %v; want the lookup's error, not an answer", got, err)
	}
}

func TestStroomStatusNames(t *testing.T) {
	t.Parallel()
	for c, name := range map[Code]string{
		OK: "OK", FeedMustBeSpecified: "FEED_MUST_BE_SPECIFIED", FeedNotDefined: "FEED_IS_NOT_DEFINED",
		FeedNotReceiving: "FEED_IS_NOT_SET_TO_RECEIVE_DATA", RejectedByPolicy: "REJECTED_BY_POLICY_RULES",
		InvalidType: "INVALID_TYPE", 313: "DATA_FEED_KEY_NOT_AUTHENTICATED", UnknownError: "UNKNOWN_ERROR",
		// weir's own codes have no reference name
		UndeclaredCompression: "UNKNOWN_ERROR", Unavailable: "UNKNOWN_ERROR",
	} {
		if got := c.StroomStatusName(); got != name {
			t.Errorf("%d: %q, want %q", c, got, name)
		}
	}
	for _, c := range Codes() {
		name := c.StroomStatusName()
		back, ok := CodeForStroomStatusName(strings.ToLower(name))
		if name != "UNKNOWN_ERROR" && (!ok || back != c) {
			t.Errorf("%d -> %s -> %d %v", c, name, back, ok)
		}
	}
	if c, ok := CodeForStroomStatusName("FEED_IS_NOT_SET_TO_RECEIVED_DATA"); !ok || c != FeedNotReceiving {
		t.Errorf("older spelling: %d %v", c, ok)
	}
	if _, ok := CodeForStroomStatusName("NO_SUCH_CODE"); ok {
		t.Error("an unknown name has a code")
	}
}
