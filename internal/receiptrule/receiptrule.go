// Package receiptrule is data receipt rules: an ordered list of rules, each
// an expression over a post's attributes and an action (RECEIVE, REJECT or
// DROP), that decides which posts weir takes when
// receive.receiptCheckMode is RECEIPT_POLICY. It follows the reference
// system's rules (datafeed-and-proxy.md 7.1): enabled rules in order, the
// first that matches decides, a rule without an expression matches every
// post, and a post no rule matches is rejected, so an empty rule set
// rejects everything.
//
// Unlike the reference system, a rule set needs no field definitions: a
// term names an attribute and its values are typed by their shape, as
// attribute terms of stream queries are (package streamquery).
package receiptrule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/repeatlog"
	"github.com/weirhq/weir/internal/streamquery"
)

// Action is what a matching rule does with a post.
type Action string

const (
	Receive Action = "RECEIVE" // take the post (its feed must exist)
	Reject  Action = "REJECT"  // refuse it: 406 with status 113
	Drop    Action = "DROP"    // answer 200 with a receipt id and store nothing
)

// Limits on a rule set, which every post is matched against.
const (
	MaxRules      = 1000
	MaxNameLength = 256     // characters
	MaxJSONBytes  = 8 << 20 // a rule set as JSON (the API's and the admin command's limit)
)

// Rule is one data receipt rule as JSON.
type Rule struct {
	Name       string                      `json:"name,omitempty" maxLength:"256" doc:"What the rule is for; shown in the answer to a post it rejects."`
	Enabled    *bool                       `json:"enabled,omitempty" doc:"false: the rule is kept but skipped (default true)."`
	Action     Action                      `json:"action" enum:"RECEIVE,REJECT,DROP" doc:"What happens to a post the rule matches: RECEIVE takes it (its feed must exist, else 406 with status 101), REJECT refuses it (406 with status 113), DROP answers 200 with a receipt id and stores nothing."`
	Expression *streamquery.ExpressionItem `json:"expression,omitempty" doc:"Which posts the rule matches. None: every post. An expression that is switched off or has no enabled term: no post (the rule is skipped). Each term's field names an attribute of the post, matched in any case. UploadUserId and UploadUsername (the authenticated sender) and the attributes of the sender's data feed key or certificate identity are set by weir and cannot be claimed by a sender; Type is the stream type the post would be stored as (the feed's default when the sender sent none); every other attribute (Feed, System, AccountId without a key that sets it, RemoteHost, RemoteAddress, ...) is what the sender sent. A missing attribute matches only IS_NULL (NOT_EQUALS too is false for it). EQUALS and NOT_EQUALS take * as any characters; comparisons are case-sensitive; ordering conditions compare whole numbers as numbers and dates in weir's layout (2024-03-01T12:34:56.789Z) as dates."`
}

// enabled reports whether the rule takes part.
func (r Rule) enabled() bool { return r.Enabled == nil || *r.Enabled }

// Error is a rule set that is not valid. Path locates the problem in the
// JSON, as "rules[2].expression.children[0].value".
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string { return e.Path + ": " + e.Msg }

// Set is a validated rule set, ready to decide posts. A nil Set rejects
// every post, as an empty one does.
type Set struct {
	rules []compiled
}

type compiled struct {
	number int // 1-based position in the list, disabled rules included
	name   string
	action Action
	expr   *streamquery.Expr // nil: matches every post
}

// Compile validates a rule set. Disabled rules are validated too, so that
// a mistake is found before the rule is enabled.
func Compile(rules []Rule) (*Set, error) {
	if len(rules) > MaxRules {
		return nil, &Error{Path: "rules", Msg: fmt.Sprintf("there are %d rules; at most %d are allowed", len(rules), MaxRules)}
	}
	s := &Set{}
	for i, r := range rules {
		path := "rules[" + strconv.Itoa(i) + "]"
		switch {
		case utf8.RuneCountInString(r.Name) > MaxNameLength:
			return nil, &Error{Path: path + ".name", Msg: fmt.Sprintf("longer than %d characters", MaxNameLength)}
		case !utf8.ValidString(r.Name) || strings.ContainsFunc(r.Name, unicode.IsControl):
			return nil, &Error{Path: path + ".name", Msg: "must be UTF-8 text without control characters"}
		}
		switch r.Action {
		case Receive, Reject, Drop:
		case "":
			return nil, &Error{Path: path + ".action", Msg: "missing: say RECEIVE, REJECT or DROP"}
		default:
			return nil, &Error{Path: path + ".action", Msg: fmt.Sprintf("%q is not RECEIVE, REJECT or DROP", r.Action)}
		}
		var expr *streamquery.Expr
		off := false
		if r.Expression != nil {
			e, err := streamquery.ParseAttributes(r.Expression)
			if err != nil {
				var qe *streamquery.Error
				if errors.As(err, &qe) {
					p := path + ".expression"
					if qe.Path != "" {
						p += "." + qe.Path
					}
					return nil, &Error{Path: p, Msg: qe.Msg}
				}
				return nil, &Error{Path: path + ".expression", Msg: err.Error()}
			}
			// An expression switched off, or without an enabled term,
			// matches no post: switching conditions off never widens a
			// rule to every post (the reference system skips such rules).
			expr, off = e, e.Terms() == 0
		}
		if r.enabled() && !off {
			s.rules = append(s.rules, compiled{number: i + 1, name: r.Name, action: r.Action, expr: expr})
		}
	}
	return s, nil
}

// Parse decodes and validates a rule set as JSON (an array of rules).
func Parse(b []byte) ([]Rule, *Set, error) {
	var rules []Rule
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rules); err != nil {
		return nil, nil, &Error{Path: "rules", Msg: "not a JSON array of rules: " + err.Error()}
	}
	if dec.More() {
		return nil, nil, &Error{Path: "rules", Msg: "more than one JSON value"}
	}
	s, err := Compile(rules)
	if err != nil {
		return nil, nil, err
	}
	if rules == nil {
		rules = []Rule{}
	}
	return rules, s, nil
}

// Decision is what a rule set decides for one post.
type Decision struct {
	Rule   int    // the number of the rule that matched (1-based); 0: none did
	Name   string // its name
	Action Action // Reject when none matched
}

// Decide matches a post's attributes (get looks one up by name in any
// case) against the enabled rules in order; the first match decides.
func (s *Set) Decide(get func(name string) (string, bool)) Decision {
	if s != nil {
		for _, r := range s.rules {
			if r.expr == nil || r.expr.Match(get) {
				return Decision{Rule: r.number, Name: r.name, Action: r.action}
			}
		}
	}
	return Decision{Action: Reject}
}

// Len is the number of enabled rules.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// Store is where the rules are kept (the metadata repository).
type Store interface {
	GetReceiptRules(ctx context.Context) (meta.ReceiptRules, error)
	ReceiptRulesVersion(ctx context.Context) (int64, error)
}

// DefaultRefresh is how often a Source asks its Store whether the rules
// changed: a change made on another node (or by the admin command) takes
// effect within this time. A change made through this node's API takes
// effect at once (Source.Invalidate).
const DefaultRefresh = 5 * time.Second

// loadTimeout bounds one read of the rules from the store.
const loadTimeout = 10 * time.Second

var errLoading = errors.New("the receipt rules are being read for the first time")

// Source keeps the current rule set of a Store in memory for the posts to
// be decided against, and notices changes: every refresh period one
// caller asks the Store for the version (a one-row read) and loads the
// rules again only when it changed; the others carry on with the set they
// have.
type Source struct {
	store   Store
	log     *slog.Logger
	refresh time.Duration
	now     func() time.Time

	cur atomic.Pointer[loaded]
	// loading holds a token while the Store is read: a channel, not a
	// mutex, so that a post waiting for a read may give up when it goes.
	loading chan struct{}
	// gen counts Invalidate calls: a set loaded at an older generation
	// may predate a change the API has committed.
	gen atomic.Uint64
	// failures keeps a refresh that fails on every period (the database
	// down for an hour: one a refresh period, 5 s by default, while posts
	// arrive) from filling the log.
	failures *repeatlog.Failures
}

// failureLogInterval is the least time between two logged failures to
// refresh the rules while they keep failing.
const failureLogInterval = time.Minute

type loaded struct {
	set     *Set
	version int64
	checked time.Time
	gen     uint64 // Source.gen when its read began
}

// NewSource returns a Source over store; refresh 0 means DefaultRefresh.
// log (may be nil) hears of refreshes that fail.
func NewSource(store Store, refresh time.Duration, log *slog.Logger) *Source {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{store: store, log: log, refresh: refresh, now: time.Now, loading: make(chan struct{}, 1),
		failures: repeatlog.New(failureLogInterval)}
}

// Invalidate makes the next Current read the rules again. A post that
// starts after it returns is decided by rules read after it, even if a
// read that began before it is still under way; unless that read, or the
// post's own, fails (the store down): then the rules read before decide
// until a read succeeds, a refresh period later.
func (s *Source) Invalidate() { s.gen.Add(1) }

// Current returns the rule set to decide a post with. Only when no set was
// ever loaded does it wait for the Store and return its error; later
// failures to refresh keep the last set that loaded.
func (s *Source) Current(ctx context.Context) (*Set, error) {
	l := s.cur.Load()
	if s.fresh(l) {
		return l.set, nil
	}
	select {
	case s.loading <- struct{}{}:
	default:
		// Another caller is reading the store. Carry on with the set we
		// have when only its age calls for a read; before the first has
		// loaded, fail at once rather than queue every post behind the
		// store. After an Invalidate, wait: the read under way may have
		// begun before the change. The wait lasts as long as that read (at
		// most loadTimeout) and, if it began before the change, one more
		// (this caller's), or until the post goes, which is then answered
		// by the set it has (a sender that has gone hears nothing).
		switch {
		case l == nil:
			return nil, errLoading
		case l.gen == s.gen.Load():
			return l.set, nil
		}
		select {
		case s.loading <- struct{}{}:
		case <-ctx.Done():
			return l.set, nil
		}
	}
	defer func() { <-s.loading }()
	if l = s.cur.Load(); s.fresh(l) {
		return l.set, nil
	}
	// The read is shared by every post that waits for it: it must not end
	// because the post that happened to start it went away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
	defer cancel()
	gen := s.gen.Load()
	next, err := s.load(ctx, l)
	if err != nil {
		if l == nil {
			return nil, err
		}
		// Keep deciding by the last good set, and try again after a
		// period rather than on every post while the store is down: an
		// Invalidate made during the failed read included (the store it
		// would be read from is down), or every post after it would queue
		// for a read of its own.
		if log, n := s.failures.Failed(s.now()); log {
			s.log.Error("receipt rules: refresh failed; the rules read before stay in effect, refresh tried again every period, logged at most once a minute",
				"version", l.version, "err", err, "notLogged", n)
		}
		s.cur.Store(&loaded{set: l.set, version: l.version, checked: s.now(), gen: s.gen.Load()})
		return l.set, nil
	}
	if log, n := s.failures.Succeeded(); log {
		s.log.Info("receipt rules: refresh works again", "version", next.version, "notLogged", n)
	}
	next.gen = gen
	s.cur.Store(next)
	return next.set, nil
}

// fresh reports whether l may decide a post without reading the store.
func (s *Source) fresh(l *loaded) bool {
	return l != nil && l.gen == s.gen.Load() && s.now().Sub(l.checked) < s.refresh
}

// load reads the rules if their version is not prev's.
func (s *Source) load(ctx context.Context, prev *loaded) (*loaded, error) {
	now := s.now()
	if prev != nil {
		v, err := s.store.ReceiptRulesVersion(ctx)
		if err != nil {
			return nil, err
		}
		if v == prev.version {
			return &loaded{set: prev.set, version: v, checked: now}, nil
		}
	}
	rr, err := s.store.GetReceiptRules(ctx)
	if err != nil {
		return nil, err
	}
	_, set, err := Parse([]byte(rr.Rules))
	if err != nil {
		return nil, fmt.Errorf("the stored receipt rules (version %d) are not valid: %w", rr.Version, err)
	}
	return &loaded{set: set, version: rr.Version, checked: now}, nil
}
