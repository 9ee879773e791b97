package access

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/meta"
)

// Principal is an authenticated API caller with its effective permissions,
// computed once per request and not changed afterwards, so it is safe to
// share between goroutines serving that request.
type Principal struct {
	User     meta.User
	APIKeyID int64 // the API key the caller used; 0 when authenticated otherwise (OIDC)

	admin bool
	perms map[string]bool
	feeds map[string]Level
}

// Has reports whether the caller holds the application permission, directly,
// through a group, or by being an administrator.
func (p *Principal) Has(permission string) bool {
	return p.admin || p.perms[permission]
}

// IsAdmin reports whether the caller holds Administrator.
func (p *Principal) IsAdmin() bool { return p.admin }

// Permissions returns the caller's effective application permissions,
// sorted; every permission for an administrator.
func (p *Principal) Permissions() []string {
	var out []string
	for _, perm := range Permissions() {
		if p.Has(perm) {
			out = append(out, perm)
		}
	}
	sort.Strings(out)
	return out
}

// FeedLevel is the caller's effective level on a feed: the highest held
// directly or through any group; Owner for an administrator.
func (p *Principal) FeedLevel(feed string) Level {
	if p.admin {
		return Owner
	}
	return p.feeds[feed]
}

// Feeds returns the feeds on which the caller holds at least min, sorted,
// for narrowing queries; all=true (feeds nil) for administrators. A min
// below Use is taken as Use: holding nothing on a feed never makes it
// visible, so a zero Level passed by mistake cannot widen a query.
func (p *Principal) Feeds(min Level) (all bool, feeds []string) {
	if p.admin {
		return true, nil
	}
	if min < Use {
		min = Use
	}
	feeds = []string{}
	for f, l := range p.feeds {
		if l >= min {
			feeds = append(feeds, f)
		}
	}
	sort.Strings(feeds)
	return false, feeds
}

// Reasons an API caller failed to authenticate (AuthError.Reason).
const (
	ReasonMissing       = "missing"
	ReasonMalformed     = "malformed"
	ReasonUnknown       = "unknown"
	ReasonDisabled      = "disabled"
	ReasonExpired       = "expired"
	ReasonOwnerDisabled = "owner disabled"
)

// AuthError is a credential that did not authenticate. Every one means HTTP
// 401. Its message is safe to send to the caller: it speaks only of the
// credential the caller sent, never of other keys or users.
type AuthError struct {
	Reason string // one of the Reason constants
	msg    string
}

func (e *AuthError) Error() string { return e.msg }

func authErr(reason, msg string) *AuthError { return &AuthError{Reason: reason, msg: msg} }

// bearer strips an optional "Bearer " (any case) and surrounding space, so
// that either the header value or the bare credential may be passed.
func bearer(raw string) string {
	v := strings.TrimSpace(raw)
	if strings.EqualFold(v, "bearer") {
		return "" // the scheme alone: no credential at all
	}
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		v = strings.TrimSpace(v[7:])
	}
	return v
}

// lastUsedInterval is how stale an API key's last-used time may get: it is
// written at most once per interval per key, so that a busy client does not
// turn every read into a database write.
const lastUsedInterval = time.Minute

// Authenticate resolves a raw bearer credential (the Authorization header's
// value, with or without "Bearer ") that is an API key to the caller. A bad
// credential gives an *AuthError; any other error is the database's.
func (s *Service) Authenticate(ctx context.Context, raw string) (*Principal, error) {
	k, owner, err := s.checkKey(ctx, bearer(raw))
	if err != nil {
		return nil, err
	}
	p, err := s.principal(ctx, owner)
	if err != nil {
		return nil, err
	}
	p.APIKeyID = k.ID
	s.touch(ctx, k)
	return p, nil
}

// checkKey verifies an API key: format and checksum first (no database
// access for garbage), then the stored key, its enabled flag and expiry,
// and its owner.
func (s *Service) checkKey(ctx context.Context, key string) (meta.APIKey, meta.User, error) {
	if key == "" {
		return meta.APIKey{}, meta.User{}, authErr(ReasonMissing, "no API key: send one in the Authorization header as Bearer sak_...")
	}
	if !wellFormed(key) {
		return meta.APIKey{}, meta.User{}, authErr(ReasonMalformed, "the credential is not a well-formed API key")
	}
	// The key is found by its own SHA-256, not by a name the caller sends,
	// and no slow hash is involved: an unknown key and a known one cost one
	// indexed lookup alike. That a lookup finds nothing tells the caller
	// nothing about any user or key (finding a row needs the key itself,
	// ~750 random bits), so there is no timing to equalise here.
	k, owner, err := s.repo.APIKeyByHash(ctx, hashKey(key))
	if errors.Is(err, meta.ErrNotFound) {
		return meta.APIKey{}, meta.User{}, authErr(ReasonUnknown, "the API key is not recognised")
	}
	if err != nil {
		return meta.APIKey{}, meta.User{}, fmt.Errorf("authenticate api key: %w", err)
	}
	switch {
	case !k.Enabled:
		return meta.APIKey{}, meta.User{}, authErr(ReasonDisabled, "the API key is disabled")
	case s.now().UnixMilli() >= k.ExpiresMs:
		return meta.APIKey{}, meta.User{}, authErr(ReasonExpired, "the API key has expired")
	case !owner.Enabled || owner.Group:
		// A group cannot own a key (CreateAPIKey refuses), so the second test
		// only guards against a hand-edited database.
		return meta.APIKey{}, meta.User{}, authErr(ReasonOwnerDisabled, "the API key's owner is disabled")
	}
	return k, owner, nil
}

// touch records the key's use at most once per lastUsedInterval. The stored
// time came with the key, so within the interval there is no write at all.
// It is best effort: last-used is for people deciding which keys to retire,
// and failing a request because the bookkeeping write failed (a busy or
// read-only database) would cost more than a stale time.
func (s *Service) touch(ctx context.Context, k meta.APIKey) {
	now := s.now().UnixMilli()
	if now-k.LastUsedMs < lastUsedInterval.Milliseconds() {
		return
	}
	_, _ = s.repo.TouchAPIKey(ctx, k.ID, now, lastUsedInterval.Milliseconds())
}

// PrincipalFor returns the principal of a user identified otherwise (by an
// OIDC token). The user must exist, be a user rather than a group, and be
// enabled; otherwise an *AuthError (unknown or disabled).
func (s *Service) PrincipalFor(ctx context.Context, userName string) (*Principal, error) {
	u, err := s.repo.GetUser(ctx, userName)
	if errors.Is(err, meta.ErrNotFound) || err == nil && u.Group {
		return nil, authErr(ReasonUnknown, fmt.Sprintf("user %q is not known to weir", userName))
	}
	if err != nil {
		return nil, fmt.Errorf("authenticate user: %w", err)
	}
	if !u.Enabled {
		return nil, authErr(ReasonDisabled, fmt.Sprintf("user %q is disabled", userName))
	}
	return s.principal(ctx, u)
}

// principal computes a user's effective permissions.
func (s *Service) principal(ctx context.Context, u meta.User) (*Principal, error) {
	app, feeds, err := s.repo.EffectivePermissions(ctx, u.ID)
	if err != nil {
		return nil, fmt.Errorf("authenticate %q: %w", u.Name, err)
	}
	p := &Principal{User: u, perms: make(map[string]bool, len(app)), feeds: toLevels(feeds)}
	for _, perm := range app {
		p.perms[perm] = true
	}
	p.admin = p.perms[Administrator]
	return p, nil
}

// VerifyAPIKey adapts API keys for /datafeed token authentication: a valid
// key's owner is the sender (SubjectID the user name, DisplayName its
// display name). A key that does not verify is an *auth.Failure with code
// 311 (token failed) whose detail says why; database errors are returned
// as they are.
func (s *Service) VerifyAPIKey(ctx context.Context, key string) (*auth.Identity, error) {
	k, owner, err := s.checkKey(ctx, bearer(key))
	var ae *AuthError
	if errors.As(err, &ae) {
		// Detail is sent to the sender; the message speaks only of its key.
		return nil, &auth.Failure{Code: auth.TokenFailed, Detail: ae.Error()}
	}
	if err != nil {
		return nil, err
	}
	// Posting data is use of the key as much as an API call is.
	s.touch(ctx, k)
	display := owner.DisplayName
	if display == "" {
		display = owner.Name
	}
	return &auth.Identity{SubjectID: owner.Name, DisplayName: display}, nil
}
