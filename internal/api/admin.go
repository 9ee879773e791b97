package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/auth/datafeedkey"
	"github.com/weirhq/weir/internal/meta"
)

// User is a user or group as listed, and the object PUT replaces.
type User struct {
	Name        string   `json:"name"`
	DisplayName string   `json:"displayName"`
	Group       bool     `json:"group" doc:"True for a group. Fixed when created."`
	Enabled     bool     `json:"enabled" doc:"A disabled user cannot authenticate; a disabled group grants nothing."`
	Version     int64    `json:"version" doc:"Changes with every update of the user itself (not of its grants or memberships)."`
	Groups      []string `json:"groups" doc:"The groups it is directly a member of."`
	CreateTime  string   `json:"createTime"`
	UpdateTime  string   `json:"updateTime"`
}

// Grants are application permissions and feed permission levels.
type Grants struct {
	Permissions []string          `json:"permissions"`
	Feeds       map[string]string `json:"feeds" doc:"Level (USE, VIEW, EDIT, DELETE, OWNER) by feed name."`
}

// UserDetail is one user or group with what it holds. Its user member is the
// object PUT takes back.
type UserDetail struct {
	User            User     `json:"user"`
	Grants          Grants   `json:"grants" doc:"Held directly, not through groups."`
	Effective       Grants   `json:"effective" doc:"Held directly or through enabled groups. An Administrator holds every permission and OWNER on every feed (allFeeds)."`
	AllFeeds        bool     `json:"allFeeds" doc:"True when it holds Administrator, and so OWNER on every feed."`
	EffectiveGroups []string `json:"effectiveGroups" doc:"Every enabled group whose permissions it holds, directly or through other groups."`
	Members         []string `json:"members,omitempty" doc:"Direct members of a group; absent for users and for groups without members."`
}

type listUsersOutput struct {
	Body struct {
		Users []User `json:"users" doc:"Every user and group, ordered by name."`
	}
}

type userInput struct {
	Name string `path:"name" doc:"User or group name"`
}

type userOutput struct{ Body UserDetail }

type createUserInput struct {
	Body struct {
		Name        string `json:"name" doc:"Unique; for OIDC users the token's subject name."`
		DisplayName string `json:"displayName,omitempty" doc:"Default the name"`
		Group       bool   `json:"group,omitempty" doc:"Create a group instead of a user"`
	}
}

// UserReplacement is the complete user that PUT stores: the writable fields
// and the version, all required. The read-only fields of User are accepted so
// that a user read with GET can be sent back, and refused if they differ.
type UserReplacement struct {
	Name        string   `json:"name" required:"true" doc:"Must equal the name in the path: users cannot be renamed."`
	DisplayName string   `json:"displayName" required:"true" minLength:"1"`
	Enabled     bool     `json:"enabled" required:"true"`
	Version     int64    `json:"version" required:"true" minimum:"1" doc:"The version this replaces, as read; if the user changed since, 409 with the current version."`
	Group       *bool    `json:"group,omitempty" readOnly:"true" doc:"Read-only; if sent, must equal the stored value."`
	Groups      []string `json:"groups,omitempty" readOnly:"true" nullable:"false" doc:"Read-only (change membership under /groups); if sent, must equal the stored value."`
	CreateTime  *string  `json:"createTime,omitempty" readOnly:"true" doc:"Read-only; if sent, must equal the stored value."`
	UpdateTime  *string  `json:"updateTime,omitempty" readOnly:"true" doc:"Read-only; if sent, must equal the stored value."`
}

type putUserInput struct {
	Name string `path:"name" doc:"User or group name"`
	Body UserReplacement
}

// UserPatch is a JSON merge patch (RFC 7396) of a user or group.
type UserPatch struct {
	Name        patchField[string] `json:"name" required:"false" doc:"If sent, must equal the name in the path."`
	DisplayName patchField[string] `json:"displayName" required:"false" nullable:"true" minLength:"1" doc:"null: the name"`
	Enabled     patchField[bool]   `json:"enabled" required:"false"`
	Version     patchField[int64]  `json:"version" required:"false" minimum:"1" doc:"If sent, the patch applies only to this version (409 otherwise); if not, to the current one."`
}

type patchUserInput struct {
	Name string    `path:"name" doc:"User or group name"`
	Body UserPatch `contentType:"application/merge-patch+json"`
}

type memberInput struct {
	Group  string `path:"group" doc:"Group name"`
	Member string `path:"member" doc:"User or group to add or remove"`
}

type permissionInput struct {
	Name       string `path:"name" doc:"User or group name"`
	Permission string `path:"permission" doc:"Exact application permission name, URL-encoded (Manage%20Users)"`
}

type feedLevelInput struct {
	Name string `path:"name" doc:"User or group name"`
	Feed string `path:"feed" doc:"Feed name; the feed need not exist yet"`
	Body struct {
		Level access.Level `json:"level" enum:"USE,VIEW,EDIT,DELETE,OWNER,NONE" doc:"NONE removes the permission"`
	}
}

type feedLevelOutput struct {
	Body struct {
		Name       string       `json:"name"`
		Feed       string       `json:"feed"`
		Level      access.Level `json:"level" doc:"The level now held directly (NONE: none)."`
		FeedExists bool         `json:"feedExists" doc:"False when no such feed exists (yet): a permission can be granted before the first post creates it, or the name may be mistyped."`
	}
}

// DataFeedKey is a stored data feed key: never the key or its hash.
type DataFeedKey struct {
	ID          int64             `json:"id"`
	Account     string            `json:"account" doc:"Senders name it in the owner header (receive.dataFeedOwnerMetaKey)."`
	Hint        string            `json:"hint" doc:"The first characters after sdk_, to tell keys apart; cannot authenticate."`
	Algorithm   string            `json:"algorithm"`
	Status      string            `json:"status" enum:"active,expired,revoked"`
	CreateTime  string            `json:"createTime"`
	ExpireTime  string            `json:"expireTime"`
	RevokedTime string            `json:"revokedTime" doc:"Empty unless revoked."`
	Attributes  map[string]string `json:"attributes" doc:"Applied to every stream sent with the key, overriding the sender's headers."`
}

type listDataFeedKeysInput struct {
	Account string `query:"account" doc:"Only keys of this account"`
}

type listDataFeedKeysOutput struct {
	Body struct {
		Keys []DataFeedKey `json:"keys" doc:"Keys created in the database, revoked ones included, by id. Keys in identity files are not listed."`
	}
}

type createDataFeedKeyInput struct {
	Body struct {
		Account    string            `json:"account" minLength:"1"`
		ExpireTime time.Time         `json:"expireTime,omitzero" doc:"RFC 3339, in the future; default one year from now."`
		Attributes map[string]string `json:"attributes,omitempty" doc:"Applied to every stream sent with the key. Not the owner header, which is the account, nor an attribute weir sets itself (ReceiptId, ReceiptIdPath, ReceivedTime, UploadUserId, StreamSize, ...) or never stores (Authorization and other credential and transport headers): 422 naming it."`
	}
}

type createDataFeedKeyOutput struct {
	Body struct {
		DataFeedKey string      `json:"dataFeedKey" doc:"The key itself. It is shown only in this response and cannot be recovered."`
		OwnerHeader string      `json:"ownerHeader" doc:"Senders send the key as Authorization: Bearer <key> and the account in this header."`
		Key         DataFeedKey `json:"key"`
	}
}

type dataFeedKeyIDInput struct {
	ID int64 `path:"id" minimum:"1"`
}

type dataFeedKeyOutput struct{ Body DataFeedKey }

const usersTag = "Users and groups"

// registerAdmin registers users, groups, permissions and data feed keys.
//
// Everything here needs Manage Users, except reading one's own user. On top
// of that, only an administrator may change what makes an administrator:
// granting or revoking Administrator, changing, deleting or granting to a
// user or group that holds it, and changing the membership of a group that
// confers it. Otherwise Manage Users would be Administrator in all but name.
func (s *server) registerAdmin() {
	s.registerUsers()
	s.registerGrants()
	s.registerDataFeedKeys()
}

func (s *server) registerUsers() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "list-users", Method: http.MethodGet, Path: "/users", Tags: []string{usersTag},
		Summary: "List users and groups", Description: "Needs Manage Users.",
	}), func(ctx context.Context, _ *struct{}) (*listUsersOutput, error) {
		if err := require(ctx, access.ManageUsers); err != nil {
			return nil, err
		}
		us, err := s.Repo.ListVersionedUsers(ctx)
		if err != nil {
			return nil, s.internal("list users", err)
		}
		groups, err := s.Repo.DirectGroups(ctx, "")
		if err != nil {
			return nil, s.internal("list users", err)
		}
		out := &listUsersOutput{}
		out.Body.Users = []User{}
		for _, u := range us {
			out.Body.Users = append(out.Body.Users, toUser(u, groups[u.Name]))
		}
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-user", Method: http.MethodGet, Path: "/users/{name}", Tags: []string{usersTag},
		Summary:     "Get a user or group",
		Description: "Needs Manage Users, except for the caller's own user. With its direct and effective permissions and groups.",
		Errors:      []int{http.StatusNotFound},
	}), func(ctx context.Context, in *userInput) (*userOutput, error) {
		if caller(ctx).User.Name != in.Name {
			if err := require(ctx, access.ManageUsers); err != nil {
				return nil, err
			}
		}
		return s.userDetail(ctx, in.Name)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "create-user", Method: http.MethodPost, Path: "/users", Tags: []string{usersTag},
		Summary: "Create a user or group", Description: "Needs Manage Users. The new user is enabled, at version 1, and holds nothing.",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *createUserInput) (*userOutput, error) {
		if err := require(ctx, access.ManageUsers); err != nil {
			return nil, err
		}
		if _, err := s.Access.CreateUser(ctx, in.Body.Name, in.Body.DisplayName, in.Body.Group); err != nil {
			return nil, s.accessError("create user", err)
		}
		return s.userDetail(ctx, in.Body.Name)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "replace-user", Method: http.MethodPut, Path: "/users/{name}", Tags: []string{usersTag},
		Summary: "Replace a user or group",
		Description: "Needs Manage Users (and Administrator if it holds Administrator). Takes the complete user (as in " +
			"the user member of GET) with the version it replaces: missing fields are 422 naming them, a stale " +
			"version is 409 with the current version. Callers cannot disable themselves.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *putUserInput) (*userOutput, error) {
		if err := s.canChangeUser(ctx, in.Name); err != nil {
			return nil, err
		}
		b := in.Body
		if b.Name != in.Name {
			return nil, renameError("user", in.Name, b.Name)
		}
		cur, err := s.getUser(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		if b.Version != cur.Version {
			return nil, staleError(&meta.StaleError{What: fmt.Sprintf("user %q", in.Name), Want: b.Version, Current: cur.Version})
		}
		groups, err := s.Repo.DirectGroups(ctx, in.Name)
		if err != nil {
			return nil, s.internal("get user", err)
		}
		was := toUser(cur, groups[in.Name])
		var details []error
		if b.Group != nil && *b.Group != was.Group {
			details = append(details, readOnlyDetail("group", *b.Group))
		}
		if b.Groups != nil && !slices.Equal(sorted(b.Groups), was.Groups) {
			details = append(details, readOnlyDetail("groups", b.Groups))
		}
		if b.CreateTime != nil && *b.CreateTime != was.CreateTime {
			details = append(details, readOnlyDetail("createTime", *b.CreateTime))
		}
		if b.UpdateTime != nil && *b.UpdateTime != was.UpdateTime {
			details = append(details, readOnlyDetail("updateTime", *b.UpdateTime))
		}
		if details != nil {
			return nil, huma.Error422UnprocessableEntity("read-only fields cannot change", details...)
		}
		return s.storeUser(ctx, in.Name, b.DisplayName, b.Enabled, b.Version)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "patch-user", Method: http.MethodPatch, Path: "/users/{name}", Tags: []string{usersTag},
		Summary: "Change some fields of a user or group",
		Description: "Needs Manage Users (and Administrator if it holds Administrator). A JSON merge patch (RFC 7396, " +
			"application/merge-patch+json): only the fields sent change; displayName null resets it to the name. " +
			"With a version, the patch applies only to that version (409 otherwise).",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *patchUserInput) (*userOutput, error) {
		if err := s.canChangeUser(ctx, in.Name); err != nil {
			return nil, err
		}
		p := in.Body
		if p.Name.Set && (p.Name.Null || p.Name.Value != in.Name) {
			return nil, renameError("user", in.Name, p.Name.Value)
		}
		if err := errors.Join(notNull(p.Enabled.Set, p.Enabled.Null, "enabled"), notNull(p.Version.Set, p.Version.Null, "version")); err != nil {
			return nil, huma.Error422UnprocessableEntity("invalid merge patch", unjoin(err)...)
		}
		version := p.Version.value(0, 0)
		for attempt := 1; ; attempt++ {
			cur, err := s.getUser(ctx, in.Name)
			if err != nil {
				return nil, err
			}
			if version != 0 && version != cur.Version {
				return nil, staleError(&meta.StaleError{What: fmt.Sprintf("user %q", in.Name), Want: version, Current: cur.Version})
			}
			out, err := s.storeUser(ctx, in.Name, p.DisplayName.value(cur.DisplayName, cur.Name),
				p.Enabled.value(cur.Enabled, cur.Enabled), cur.Version)
			// Without a version, a change made between reading and writing
			// is not overwritten: read again and re-apply the patch.
			if version == 0 && attempt < patchAttempts && isStatus(err, http.StatusConflict) && !isSelfDisable(ctx, in.Name, p) {
				continue
			}
			return out, err
		}
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "delete-user", Method: http.MethodDelete, Path: "/users/{name}", Tags: []string{usersTag},
		Summary: "Delete a user or group",
		Description: "Needs Manage Users (and Administrator if it holds Administrator). Its memberships, grants and " +
			"API keys go with it; its keys stop working at once. Callers cannot delete themselves.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}), func(ctx context.Context, in *userInput) (*struct{}, error) {
		if err := s.canChangeUser(ctx, in.Name); err != nil {
			return nil, err
		}
		if caller(ctx).User.Name == in.Name {
			return nil, huma.Error409Conflict("you cannot delete yourself; another user with Manage Users can")
		}
		if err := s.Repo.DeleteUser(ctx, in.Name); err != nil {
			return nil, s.accessError("delete user", err)
		}
		return nil, nil
	})
}

func (s *server) registerGrants() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "add-group-member", Method: http.MethodPut, Path: "/groups/{group}/members/{member}", Tags: []string{usersTag},
		Summary: "Add a member to a group",
		Description: "Needs Manage Users (and Administrator if the group confers Administrator or the member holds it). " +
			"The member (a user or group) then holds everything the group holds. Adding a member twice changes " +
			"nothing; a membership that would make a group a member of itself is 422.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *memberInput) (*struct{}, error) {
		if err := s.canChangeGrants(ctx, in.Group, in.Member); err != nil {
			return nil, err
		}
		if err := s.Access.AddMember(ctx, in.Group, in.Member); err != nil {
			return nil, s.accessError("add member", err)
		}
		return nil, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "remove-group-member", Method: http.MethodDelete, Path: "/groups/{group}/members/{member}", Tags: []string{usersTag},
		Summary:       "Remove a member from a group",
		Description:   "Needs Manage Users (and Administrator if the group confers Administrator or the member holds it). Removing a non-member changes nothing.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}), func(ctx context.Context, in *memberInput) (*struct{}, error) {
		if err := s.canChangeGrants(ctx, in.Group, in.Member); err != nil {
			return nil, err
		}
		if err := s.Access.RemoveMember(ctx, in.Group, in.Member); err != nil {
			return nil, s.accessError("remove member", err)
		}
		return nil, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "grant-permission", Method: http.MethodPut, Path: "/users/{name}/permissions/{permission}", Tags: []string{usersTag},
		Summary: "Grant an application permission",
		Description: "Needs Manage Users; Administrator to grant Administrator or to grant to a user or group that " +
			"holds it. The permission name is exact and URL-encoded in the path (Data%20-%20View). Granting one " +
			"already held changes nothing.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *permissionInput) (*struct{}, error) {
		if err := s.canChangePermission(ctx, in.Name, in.Permission); err != nil {
			return nil, err
		}
		if err := s.Access.GrantApp(ctx, in.Name, in.Permission); err != nil {
			return nil, s.accessError("grant permission", err)
		}
		return nil, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "revoke-permission", Method: http.MethodDelete, Path: "/users/{name}/permissions/{permission}", Tags: []string{usersTag},
		Summary: "Revoke an application permission",
		Description: "Needs Manage Users; Administrator to revoke Administrator or from a user or group that holds " +
			"it. Only a permission held directly is revoked; one held through a group stays.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *permissionInput) (*struct{}, error) {
		if err := s.canChangePermission(ctx, in.Name, in.Permission); err != nil {
			return nil, err
		}
		if err := s.Access.RevokeApp(ctx, in.Name, in.Permission); err != nil {
			return nil, s.accessError("revoke permission", err)
		}
		return nil, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "set-feed-permission", Method: http.MethodPut, Path: "/users/{name}/feeds/{feed}", Tags: []string{usersTag},
		Summary: "Set a feed permission",
		Description: "Needs Manage Users (and Administrator for a user or group that holds it). Sets the level held " +
			"directly on the feed, replacing any earlier one; NONE removes it.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *feedLevelInput) (*feedLevelOutput, error) {
		if err := s.canChangeGrants(ctx, in.Name); err != nil {
			return nil, err
		}
		if err := s.Access.SetFeedLevel(ctx, in.Name, in.Feed, in.Body.Level); err != nil {
			return nil, s.accessError("set feed permission", err)
		}
		_, err := s.Repo.GetFeed(ctx, in.Feed)
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			return nil, s.internal("get feed", err)
		}
		out := &feedLevelOutput{}
		out.Body.Name, out.Body.Feed, out.Body.Level, out.Body.FeedExists = in.Name, in.Feed, in.Body.Level, err == nil
		return out, nil
	})
}

func (s *server) registerDataFeedKeys() {
	const tag = "Data feed keys"
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "list-datafeed-keys", Method: http.MethodGet, Path: "/datafeedkeys", Tags: []string{tag},
		Summary:     "List data feed keys",
		Description: "Needs Administrator: data feed keys let senders post to any feed. Never shows a key or its hash.",
	}), func(ctx context.Context, in *listDataFeedKeysInput) (*listDataFeedKeysOutput, error) {
		if err := require(ctx, access.Administrator); err != nil {
			return nil, err
		}
		keys, err := s.Repo.ListDataFeedKeys(ctx, in.Account)
		if err != nil {
			return nil, s.internal("list data feed keys", err)
		}
		out := &listDataFeedKeysOutput{}
		out.Body.Keys = []DataFeedKey{}
		now := time.Now()
		for _, k := range keys {
			out.Body.Keys = append(out.Body.Keys, toDataFeedKey(k, now))
		}
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "create-datafeed-key", Method: http.MethodPost, Path: "/datafeedkeys", Tags: []string{tag},
		Summary: "Create a data feed key",
		Description: "Needs Administrator: a data feed key authenticates posts to any feed for its account, and its " +
			"attributes override what the sender claims. The key is in the response, once; only its hash is stored. " +
			"It works at once on every node (with DATA_FEED_KEY in receive.enabledAuthenticationTypes).",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *createDataFeedKeyInput) (*createDataFeedKeyOutput, error) {
		if err := require(ctx, access.Administrator); err != nil {
			return nil, err
		}
		now := time.Now()
		key, k, err := datafeedkey.Create(ctx, s.Repo, datafeedkey.NewKey{Account: in.Body.Account, Expires: in.Body.ExpireTime,
			Attributes: in.Body.Attributes, OwnerHeader: s.Config.Receive.DataFeedOwnerMetaKey, Now: now})
		if errors.Is(err, datafeedkey.ErrInvalid) {
			return nil, huma.Error422UnprocessableEntity(err.Error())
		}
		if err != nil {
			return nil, s.internal("create data feed key", err)
		}
		s.Log.Info("data feed key created", "id", k.ID, "account", k.Account, "hint", k.Hint, "user", caller(ctx).User.Name)
		out := &createDataFeedKeyOutput{}
		out.Body.DataFeedKey, out.Body.OwnerHeader, out.Body.Key = key, s.Config.Receive.DataFeedOwnerMetaKey, toDataFeedKey(k, now)
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "revoke-datafeed-key", Method: http.MethodDelete, Path: "/datafeedkeys/{id}", Tags: []string{tag},
		Summary: "Revoke a data feed key",
		Description: "Needs Administrator. The key stops authenticating at once, on every node. It stays listed, as " +
			"revoked; revoking it again changes nothing. The response is the revoked key.",
		Errors: []int{http.StatusNotFound},
	}), func(ctx context.Context, in *dataFeedKeyIDInput) (*dataFeedKeyOutput, error) {
		if err := require(ctx, access.Administrator); err != nil {
			return nil, err
		}
		if err := s.Repo.RevokeDataFeedKey(ctx, in.ID); err != nil {
			if errors.Is(err, meta.ErrNotFound) {
				return nil, huma.Error404NotFound(fmt.Sprintf("no data feed key %d", in.ID))
			}
			return nil, s.internal("revoke data feed key", err)
		}
		k, err := s.Repo.GetDataFeedKey(ctx, in.ID)
		if err != nil {
			return nil, s.internal("get data feed key", err)
		}
		s.Log.Info("data feed key revoked", "id", k.ID, "account", k.Account, "hint", k.Hint, "user", caller(ctx).User.Name)
		return &dataFeedKeyOutput{Body: toDataFeedKey(k, time.Now())}, nil
	})
}

func toUser(u meta.VersionedUser, groups []string) User {
	if groups == nil {
		groups = []string{}
	}
	return User{Name: u.Name, DisplayName: u.DisplayName, Group: u.Group, Enabled: u.Enabled, Version: u.Version,
		Groups: groups, CreateTime: ms(u.CreateMs), UpdateTime: ms(u.UpdateMs)}
}

func toDataFeedKey(k meta.DataFeedKey, now time.Time) DataFeedKey {
	status := "active"
	switch {
	case k.RevokedMs != 0:
		status = "revoked"
	case now.UnixMilli() >= k.ExpiresMs:
		status = "expired"
	}
	attrs := map[string]string{}
	for key, v := range k.Attributes.All() {
		attrs[key] = v
	}
	return DataFeedKey{ID: k.ID, Account: k.Account, Hint: k.Hint, Algorithm: k.Algorithm, Status: status,
		CreateTime: ms(k.CreateMs), ExpireTime: ms(k.ExpiresMs), RevokedTime: ms(k.RevokedMs), Attributes: attrs}
}

// getUser reads a user with its version: 404 if missing.
func (s *server) getUser(ctx context.Context, name string) (meta.VersionedUser, error) {
	u, err := s.Repo.GetVersionedUser(ctx, name)
	if errors.Is(err, meta.ErrNotFound) {
		return u, huma.Error404NotFound(fmt.Sprintf("no user or group named %q", name))
	}
	if err != nil {
		return u, s.internal("get user", err)
	}
	return u, nil
}

func (s *server) userDetail(ctx context.Context, name string) (*userOutput, error) {
	u, err := s.getUser(ctx, name)
	if err != nil {
		return nil, err
	}
	groups, err := s.Repo.DirectGroups(ctx, name)
	if err != nil {
		return nil, s.internal("get user", err)
	}
	direct, err := s.Access.DirectGrants(ctx, name)
	if err != nil {
		return nil, s.accessError("get user", err)
	}
	app, feeds, err := s.Repo.EffectivePermissions(ctx, u.ID)
	if err != nil {
		return nil, s.internal("get user", err)
	}
	ancestors, err := s.Access.Groups(ctx, name)
	if err != nil {
		return nil, s.accessError("get user", err)
	}
	d := UserDetail{User: toUser(u, groups[name]), Grants: grants(direct.Permissions, direct.Feeds),
		EffectiveGroups: []string{}}
	d.AllFeeds = slices.Contains(app, access.Administrator)
	if d.AllFeeds {
		app = access.Permissions()
		slices.Sort(app)
	}
	levels := make(map[string]access.Level, len(feeds))
	for f, l := range feeds {
		levels[f] = access.Level(l)
	}
	d.Effective = grants(app, levels)
	for _, g := range ancestors {
		d.EffectiveGroups = append(d.EffectiveGroups, g.Name)
	}
	if u.Group {
		members, err := s.Access.Members(ctx, name)
		if err != nil {
			return nil, s.accessError("get user", err)
		}
		d.Members = []string{}
		for _, m := range members {
			d.Members = append(d.Members, m.Name)
		}
	}
	return &userOutput{Body: d}, nil
}

func grants(perms []string, feeds map[string]access.Level) Grants {
	g := Grants{Permissions: []string{}, Feeds: map[string]string{}}
	g.Permissions = append(g.Permissions, perms...)
	for _, f := range slices.Sorted(maps.Keys(feeds)) {
		g.Feeds[f] = feeds[f].String()
	}
	return g
}

// storeUser writes a user if it is still at version and returns its detail.
func (s *server) storeUser(ctx context.Context, name, displayName string, enabled bool, version int64) (*userOutput, error) {
	if err := checkDisplayName(displayName); err != nil {
		return nil, err
	}
	if !enabled && caller(ctx).User.Name == name {
		return nil, huma.Error409Conflict("you cannot disable yourself; another user with Manage Users can")
	}
	_, err := s.Repo.UpdateUserVersion(ctx, name, displayName, enabled, version)
	var stale *meta.StaleError
	switch {
	case errors.As(err, &stale):
		return nil, staleError(stale)
	case errors.Is(err, meta.ErrNotFound):
		return nil, huma.Error404NotFound(fmt.Sprintf("no user or group named %q", name))
	case err != nil:
		return nil, s.internal("update user", err)
	}
	return s.userDetail(ctx, name)
}

// isSelfDisable reports whether a patch is the caller disabling itself,
// which is refused (409) for a reason a retry cannot change.
func isSelfDisable(ctx context.Context, name string, p UserPatch) bool {
	return caller(ctx).User.Name == name && p.Enabled.Set && !p.Enabled.Value
}

// checkDisplayName refuses display names that would be confusing to show,
// as creating a user does.
func checkDisplayName(s string) error {
	if s == "" || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return huma.Error422UnprocessableEntity("invalid display name", &huma.ErrorDetail{Location: "body.displayName",
			Message: "must be non-empty UTF-8 text without control characters", Value: s})
	}
	return nil
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// holdsAdmin reports whether the named user or group holds Administrator,
// directly or through enabled groups (for a group: whether membership in it
// confers Administrator). A missing name holds nothing; the operation that
// follows reports it.
func (s *server) holdsAdmin(ctx context.Context, name string) (bool, error) {
	u, err := s.Repo.GetUser(ctx, name)
	if errors.Is(err, meta.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, s.internal("check administrator", err)
	}
	app, _, err := s.Repo.EffectivePermissions(ctx, u.ID)
	if err != nil {
		return false, s.internal("check administrator", err)
	}
	return slices.Contains(app, access.Administrator), nil
}

// canChangeGrants fails with 403 unless the caller holds Manage Users and,
// when any of names holds Administrator, Administrator too.
func (s *server) canChangeGrants(ctx context.Context, names ...string) error {
	if err := require(ctx, access.ManageUsers); err != nil {
		return err
	}
	if caller(ctx).IsAdmin() {
		return nil
	}
	for _, n := range names {
		admin, err := s.holdsAdmin(ctx, n)
		if err != nil {
			return err
		}
		if admin {
			return huma.Error403Forbidden(fmt.Sprintf("%q holds Administrator: changing it needs the application permission Administrator", n))
		}
	}
	return nil
}

// canChangeUser is canChangeGrants for changing or deleting the user itself.
func (s *server) canChangeUser(ctx context.Context, name string) error {
	return s.canChangeGrants(ctx, name)
}

// canChangePermission is canChangeGrants, and Administrator for granting or
// revoking Administrator itself.
func (s *server) canChangePermission(ctx context.Context, name, permission string) error {
	if err := s.canChangeGrants(ctx, name); err != nil {
		return err
	}
	if permission == access.Administrator {
		return require(ctx, access.Administrator)
	}
	return nil
}
