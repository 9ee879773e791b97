package api

import (
	"slices"
	"testing"

	"github.com/weirhq/weir/internal/meta"
)

// TestExportedFeeds: the feeds a download is checked against are those the
// result lists (none is not unknown); an export recorded before results
// listed them falls back to the feeds its owner could view when submitting.
func TestExportedFeeds(t *testing.T) {
	for _, c := range []struct {
		name, request, result string
		anyFeed               bool
		feeds                 []string
	}{
		{"listed", `{"allFeeds":false,"feeds":["A","B","C"]}`, `{"streams":1,"feeds":["B"]}`, false, []string{"B"}},
		{"listed none", `{"allFeeds":true}`, `{"streams":0,"feeds":[]}`, false, []string{}},
		{"older, narrowed", `{"allFeeds":false,"feeds":["A","B"]}`, `{"streams":3}`, false, []string{"A", "B"}},
		{"older, every feed", `{"allFeeds":true,"feeds":null}`, `{"streams":3}`, true, nil},
	} {
		anyFeed, feeds, err := exportedFeeds(meta.Operation{ID: "x", Request: c.request, Result: c.result})
		if err != nil || anyFeed != c.anyFeed || !slices.Equal(feeds, c.feeds) || (feeds == nil) != (c.feeds == nil) {
			t.Errorf("%s: %v %q %v, want %v %q", c.name, anyFeed, feeds, err, c.anyFeed, c.feeds)
		}
	}
	if _, _, err := exportedFeeds(meta.Operation{ID: "x", Request: `{}`, Result: `{"feeds":`}); err == nil {
		t.Error("a damaged result is not an error")
	}
}
