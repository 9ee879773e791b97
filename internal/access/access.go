// Package access decides who may read and change things through weir's API:
// users and (nested) groups, the application permissions and per-feed
// permission levels they hold, the API keys that identify them, and the
// Principal that a request runs as.
//
// It follows the reference system's model (store-pipeline-api.md 5.3, 5.4):
// effective permissions are the union over a user and every group above it;
// Administrator implies every permission and OWNER on every feed; API keys
// are sak_<10 hex checksum>_<128 Base58>, stored only as a SHA-256 hash.
package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/meta"
)

// Application permissions, spelled exactly as in the reference system.
const (
	Administrator      = "Administrator"
	DataView           = "Data - View"
	DataDelete         = "Data - Delete"
	DataImport         = "Data - Import"
	DataExport         = "Data - Export"
	ManageFeeds        = "Manage Feeds"
	ManageUsers        = "Manage Users"
	ManageAPIKeys      = "Manage API Keys"
	ManageReceiptRules = "Manage Data Receipt Rules"
	ManageProcessors   = "Manage Processors"
	ManageNodes        = "Manage Nodes"
)

// Permissions lists every application permission, Administrator first. The
// slice is new on every call, so callers may keep or change it.
func Permissions() []string {
	return []string{Administrator, DataView, DataDelete, DataImport, DataExport, ManageFeeds,
		ManageUsers, ManageAPIKeys, ManageReceiptRules, ManageProcessors, ManageNodes}
}

// IsPermission reports whether s is exactly an application permission name.
func IsPermission(s string) bool {
	for _, p := range Permissions() {
		if p == s {
			return true
		}
	}
	return false
}

// ParsePermission accepts a permission name in any case and with any
// surrounding space (for command lines) and returns its exact spelling.
func ParsePermission(s string) (string, error) {
	t := strings.TrimSpace(s)
	for _, p := range Permissions() {
		if strings.EqualFold(p, t) {
			return p, nil
		}
	}
	return "", invalidf("%q is not an application permission; use one of: %s", s, strings.Join(Permissions(), ", "))
}

// Level is a permission level on a feed. Each level implies the lower ones.
type Level int

const (
	None   Level = 0
	Use    Level = 10
	View   Level = 20
	Edit   Level = 30
	Delete Level = 40
	Owner  Level = 50
)

// levels lists the levels a grant may hold, lowest first.
func levels() []Level { return []Level{Use, View, Edit, Delete, Owner} }

// String is the level's name as in the reference system (USE ... OWNER), or
// NONE.
func (l Level) String() string {
	switch l {
	case None:
		return "NONE"
	case Use:
		return "USE"
	case View:
		return "VIEW"
	case Edit:
		return "EDIT"
	case Delete:
		return "DELETE"
	case Owner:
		return "OWNER"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ParseLevel accepts a level name (USE, VIEW, EDIT, DELETE, OWNER or NONE) in
// any case.
func ParseLevel(s string) (Level, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	for _, l := range append([]Level{None}, levels()...) {
		if l.String() == t {
			return l, nil
		}
	}
	return None, invalidf("feed permission level %q is not one of USE, VIEW, EDIT, DELETE, OWNER, NONE", s)
}

// MarshalText writes the level's name, so that JSON shows "VIEW" rather
// than 20.
func (l Level) MarshalText() ([]byte, error) {
	if !l.valid() {
		return nil, fmt.Errorf("marshal feed permission level: %d is not a level", int(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads a level name.
func (l *Level) UnmarshalText(b []byte) error {
	v, err := ParseLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

func (l Level) valid() bool {
	return l == None || l == Use || l == View || l == Edit || l == Delete || l == Owner
}

// ErrInvalid is wrapped by errors for a request that can never succeed as
// given: an unknown permission or level, a bad name, an expiry out of range,
// a membership cycle, a group where a user is needed. An API maps it to 400;
// meta.ErrNotFound to 404 and meta.ErrExists to 409.
var ErrInvalid = errors.New("invalid")

// invalidError carries its own message (so that it reads naturally, with no
// "invalid:" prefix) while matching ErrInvalid and wrapping any %w cause.
type invalidError struct{ err error }

func (e *invalidError) Error() string        { return e.err.Error() }
func (e *invalidError) Unwrap() error        { return e.err }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// invalidf makes an error that matches ErrInvalid; %w may wrap a cause.
func invalidf(format string, a ...any) error {
	return &invalidError{err: fmt.Errorf(format, a...)}
}

// Service manages users, groups, permissions and API keys, and
// authenticates API callers. It is safe for concurrent use and holds no
// state of its own beyond its configuration: every answer comes from the
// database, so changes made on any node apply at once.
type Service struct {
	repo         *meta.Repo
	maxKeyExpiry time.Duration
	now          func() time.Time
}

// DefaultMaxKeyExpiry is the longest API key lifetime when none is
// configured (the reference system's maxApiKeyExpiryAge).
const DefaultMaxKeyExpiry = 365 * 24 * time.Hour

// New returns a Service on repo. maxKeyExpiry is the longest lifetime an
// API key may be given and the lifetime of one created without an expiry
// (DefaultMaxKeyExpiry if not positive). now is the clock (time.Now if nil);
// tests inject one to move through expiry and last-used intervals.
func New(repo *meta.Repo, maxKeyExpiry time.Duration, now func() time.Time) *Service {
	if maxKeyExpiry <= 0 {
		maxKeyExpiry = DefaultMaxKeyExpiry
	}
	if now == nil {
		now = time.Now
	}
	return &Service{repo: repo, maxKeyExpiry: maxKeyExpiry, now: now}
}

// maxNameLen bounds user, group and key names: they appear in listings,
// logs and stream attributes (UploadUserId).
const maxNameLen = 255

// validateName rejects names that would be confusing or unsafe to show:
// empty, too long, not UTF-8, with control characters, or with surrounding
// space (which would make "bob" and "bob " two different users).
func validateName(what, s string) error {
	switch {
	case s == "":
		return invalidf("%s name is empty", what)
	case len(s) > maxNameLen:
		return invalidf("%s name is longer than %d bytes", what, maxNameLen)
	case !utf8.ValidString(s):
		return invalidf("%s name is not valid UTF-8", what)
	case strings.TrimSpace(s) != s:
		return invalidf("%s name %q starts or ends with space", what, s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return invalidf("%s name %q contains a control character", what, s)
	}
	return nil
}

// CreateUser creates an enabled user, or a group when group is true. An
// empty displayName defaults to the name. A taken name wraps meta.ErrExists.
func (s *Service) CreateUser(ctx context.Context, name, displayName string, group bool) (meta.User, error) {
	what := "user"
	if group {
		what = "group"
	}
	if err := validateName(what, name); err != nil {
		return meta.User{}, err
	}
	if displayName == "" {
		displayName = name
	}
	if strings.IndexFunc(displayName, unicode.IsControl) >= 0 || !utf8.ValidString(displayName) {
		return meta.User{}, invalidf("display name %q contains a control character or is not UTF-8", displayName)
	}
	now := s.now().UnixMilli()
	u, err := s.repo.CreateUser(ctx, meta.User{Name: name, DisplayName: displayName, Group: group,
		Enabled: true, CreateMs: now, UpdateMs: now})
	if err != nil {
		return meta.User{}, err
	}
	return u, nil
}

// GetUser returns a user or group; a missing name wraps meta.ErrNotFound.
func (s *Service) GetUser(ctx context.Context, name string) (meta.User, error) {
	return s.repo.GetUser(ctx, name)
}

// ListUsers returns every user and group, ordered by name.
func (s *Service) ListUsers(ctx context.Context) ([]meta.User, error) {
	return s.repo.ListUsers(ctx)
}

// SetEnabled enables or disables a user or group. A disabled user cannot
// authenticate (with any API key or token); a disabled group grants nothing
// to its members.
func (s *Service) SetEnabled(ctx context.Context, name string, enabled bool) error {
	return s.repo.SetUserEnabled(ctx, name, enabled)
}

// AddMember makes member (a user or a group) a member of group, so that it
// holds everything group holds. Adding an existing membership does nothing.
// group must be a group; a membership that would make a group a member of
// itself, directly or through others, is refused (ErrInvalid and
// meta.ErrCycle).
func (s *Service) AddMember(ctx context.Context, group, member string) error {
	g, err := s.repo.GetUser(ctx, group)
	if err != nil {
		return fmt.Errorf("add %q to group %q: %w", member, group, err)
	}
	if !g.Group {
		return invalidf("add %q to group %q: %q is a user, not a group", member, group, group)
	}
	if err := s.repo.AddMember(ctx, group, member); err != nil {
		if errors.Is(err, meta.ErrCycle) {
			return invalidf("%w", err)
		}
		return err
	}
	return nil
}

// RemoveMember removes member from group; removing a non-member does
// nothing.
func (s *Service) RemoveMember(ctx context.Context, group, member string) error {
	return s.repo.RemoveMember(ctx, group, member)
}

// Members returns the direct members of a group, ordered by name.
func (s *Service) Members(ctx context.Context, group string) ([]meta.User, error) {
	if _, err := s.repo.GetUser(ctx, group); err != nil {
		return nil, err
	}
	return s.repo.Members(ctx, group)
}

// GrantApp gives a user or group an application permission (exact name, see
// Permissions). Granting one already held does nothing.
func (s *Service) GrantApp(ctx context.Context, name, permission string) error {
	if !IsPermission(permission) {
		return invalidf("grant %q to %q: not an application permission; use one of: %s",
			permission, name, strings.Join(Permissions(), ", "))
	}
	return s.repo.GrantApp(ctx, name, permission)
}

// RevokeApp takes away an application permission held directly; one held
// through a group stays until the membership or the group's grant goes.
func (s *Service) RevokeApp(ctx context.Context, name, permission string) error {
	if !IsPermission(permission) {
		return invalidf("revoke %q from %q: not an application permission; use one of: %s",
			permission, name, strings.Join(Permissions(), ", "))
	}
	return s.repo.RevokeApp(ctx, name, permission)
}

// SetFeedLevel sets the level a user or group holds directly on a feed,
// replacing any earlier level; None removes it. The feed need not exist yet,
// so that access can be granted before the first post creates it.
func (s *Service) SetFeedLevel(ctx context.Context, name, feed string, level Level) error {
	if err := validateName("feed", feed); err != nil {
		return err
	}
	if !level.valid() {
		return invalidf("feed permission level %d is not one of USE, VIEW, EDIT, DELETE, OWNER, NONE", int(level))
	}
	return s.repo.SetFeedLevel(ctx, name, feed, int(level))
}

// Grants is what a user or group holds directly, not through groups.
type Grants struct {
	Permissions []string         // sorted
	Feeds       map[string]Level // by feed name
}

// DirectGrants returns what a user or group holds directly.
func (s *Service) DirectGrants(ctx context.Context, name string) (Grants, error) {
	app, feeds, err := s.repo.Grants(ctx, name)
	if err != nil {
		return Grants{}, err
	}
	return Grants{Permissions: app, Feeds: toLevels(feeds)}, nil
}

// Groups returns every enabled group whose permissions the user or group
// holds (directly or through other groups), ordered by name.
func (s *Service) Groups(ctx context.Context, name string) ([]meta.User, error) {
	u, err := s.repo.GetUser(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.repo.Ancestors(ctx, u.ID)
}

func toLevels(m map[string]int) map[string]Level {
	out := make(map[string]Level, len(m))
	for f, l := range m {
		out[f] = Level(l)
	}
	return out
}
