// Package feed holds what weir knows about a feed (its name, status and
// defaults), the receipt check modes that decide whether a post to a feed is
// received, dropped or rejected, and feed name generation from headers.
package feed

import (
	"fmt"
	"regexp"
	"strings"
)

// Status decides what happens to data posted to a feed in FEED_STATUS mode.
type Status string

const (
	Receive Status = "RECEIVE"
	Reject  Status = "REJECT"
	Drop    Status = "DROP"
)

// ParseStatus accepts a status in any case.
func ParseStatus(s string) (Status, error) {
	switch st := Status(strings.ToUpper(strings.TrimSpace(s))); st {
	case Receive, Reject, Drop:
		return st, nil
	}
	return "", fmt.Errorf("feed status %q is not one of RECEIVE, REJECT, DROP", s)
}

// Feed is a named destination for posted data.
type Feed struct {
	Name            string `json:"name"`
	Status          Status `json:"status"`
	StreamType      string `json:"streamType"`      // default stream type when a post names none
	Encoding        string `json:"encoding"`        // charset of the data
	ContextEncoding string `json:"contextEncoding"` // charset of Context child streams
	Classification  string `json:"classification"`
	Description     string `json:"description"`
	CreateMs        int64  `json:"createMs"`
	UpdateMs        int64  `json:"updateMs"`
	// Version counts changes: 1 when created, one more on every update. A
	// full-object update names the version it read, so that a change made
	// meanwhile by someone else is refused rather than silently overwritten.
	Version int64 `json:"version"`
}

// DefaultNamePattern is the reference system's default feed name rule.
const DefaultNamePattern = `^[A-Z0-9_-]{3,}$`

// ValidateName reports whether name matches the configured feed name pattern.
func ValidateName(pattern *regexp.Regexp, name string) error {
	if !pattern.MatchString(name) {
		return fmt.Errorf("feed name %q does not match the feed name pattern %s", name, pattern)
	}
	return nil
}

// WithDefaults fills the fields a new feed may leave empty.
func (f Feed) WithDefaults() Feed {
	if f.Status == "" {
		f.Status = Receive
	}
	if f.StreamType == "" {
		f.StreamType = "Raw Events"
	}
	if f.Encoding == "" {
		f.Encoding = "UTF-8"
	}
	if f.ContextEncoding == "" {
		f.ContextEncoding = "UTF-8"
	}
	return f
}
