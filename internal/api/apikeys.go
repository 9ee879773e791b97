package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/meta"
)

// APIKey is an API key as shown after creation: never the key or its hash.
type APIKey struct {
	ID         int64  `json:"id"`
	Prefix     string `json:"prefix" doc:"The visible start of the key (sak_<checksum>_), to tell keys apart"`
	Owner      string `json:"owner"`
	Name       string `json:"name"`
	Comments   string `json:"comments"`
	Enabled    bool   `json:"enabled"`
	ExpireTime string `json:"expireTime"`
	LastUsed   string `json:"lastUsedTime" doc:"Updated at most once a minute; empty if never used"`
	CreateTime string `json:"createTime"`
}

func toAPIKey(k meta.APIKey) APIKey {
	return APIKey{ID: k.ID, Prefix: k.Prefix, Owner: k.Owner, Name: k.Name, Comments: k.Comments, Enabled: k.Enabled,
		ExpireTime: ms(k.ExpiresMs), LastUsed: ms(k.LastUsedMs), CreateTime: ms(k.CreateMs)}
}

type listKeysInput struct {
	User string `query:"user" doc:"Whose keys; default the caller's own. Another user's keys need Manage Users."`
}

type listKeysOutput struct {
	Body struct {
		Keys []APIKey `json:"keys"`
	}
}

type createKeyInput struct {
	Body struct {
		User       string    `json:"user,omitempty" doc:"Owner of the new key; default the caller. Another user needs Manage Users."`
		Name       string    `json:"name,omitempty" doc:"Unique per owner; default the key's prefix"`
		Comments   string    `json:"comments,omitempty"`
		ExpireTime time.Time `json:"expireTime,omitzero" doc:"RFC 3339; default and maximum: now + security.apiKeys.maxExpiry"`
	}
}

type createKeyOutput struct {
	Body struct {
		APIKey string `json:"apiKey" doc:"The key itself. It is shown only in this response and cannot be recovered."`
		Key    APIKey `json:"key"`
	}
}

type keyIDInput struct {
	ID int64 `path:"id" minimum:"1"`
}

type enableKeyInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body struct {
		Enabled bool `json:"enabled"`
	}
}

type keyOutput struct{ Body APIKey }

func (s *server) registerAPIKeys() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "list-api-keys", Method: http.MethodGet, Path: "/apikeys", Tags: []string{"API keys"},
		Summary: "List API keys", Description: "The caller's own keys, or another user's with Manage Users.",
	}), func(ctx context.Context, in *listKeysInput) (*listKeysOutput, error) {
		owner, err := s.keyOwner(ctx, in.User, false)
		if err != nil {
			return nil, err
		}
		keys, err := s.Access.ListAPIKeys(ctx, owner)
		if err != nil {
			return nil, s.internal("list api keys", err)
		}
		out := &listKeysOutput{}
		out.Body.Keys = []APIKey{}
		for _, k := range keys {
			out.Body.Keys = append(out.Body.Keys, toAPIKey(k))
		}
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "create-api-key", Method: http.MethodPost, Path: "/apikeys", Tags: []string{"API keys"},
		Summary:       "Create an API key",
		Description:   "Needs Manage API Keys (and Manage Users for another user's key). The key is in the response, once.",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *createKeyInput) (*createKeyOutput, error) {
		owner, err := s.keyOwner(ctx, in.Body.User, true)
		if err != nil {
			return nil, err
		}
		plain, key, err := s.Access.CreateAPIKey(ctx, access.NewKey{
			Owner: owner, Name: in.Body.Name, Comments: in.Body.Comments, Expires: in.Body.ExpireTime})
		if err != nil {
			return nil, s.accessError("create api key", err)
		}
		out := &createKeyOutput{}
		out.Body.APIKey = plain
		out.Body.Key = toAPIKey(key)
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "set-api-key-enabled", Method: http.MethodPut, Path: "/apikeys/{id}/enabled", Tags: []string{"API keys"},
		Summary: "Enable or disable an API key", Description: "Takes effect on the key's next request.",
		Errors: []int{http.StatusNotFound},
	}), func(ctx context.Context, in *enableKeyInput) (*keyOutput, error) {
		k, err := s.ownedKey(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		if err := s.Access.SetAPIKeyEnabled(ctx, k.ID, in.Body.Enabled); err != nil {
			return nil, s.accessError("set api key enabled", err)
		}
		k.Enabled = in.Body.Enabled
		return &keyOutput{Body: toAPIKey(k)}, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "delete-api-key", Method: http.MethodDelete, Path: "/apikeys/{id}", Tags: []string{"API keys"},
		Summary: "Delete an API key", DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}), func(ctx context.Context, in *keyIDInput) (*struct{}, error) {
		k, err := s.ownedKey(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		if err := s.Access.DeleteAPIKey(ctx, k.ID); err != nil {
			return nil, s.accessError("delete api key", err)
		}
		return nil, nil
	})
}

// keyOwner decides whose keys a call is about: the caller's own by default;
// another user's needs Manage Users; creating needs Manage API Keys.
func (s *server) keyOwner(ctx context.Context, user string, create bool) (string, error) {
	p := caller(ctx)
	if create {
		if err := require(ctx, access.ManageAPIKeys); err != nil {
			return "", err
		}
	}
	if user == "" || user == p.User.Name {
		return p.User.Name, nil
	}
	if err := require(ctx, access.ManageUsers); err != nil {
		return "", err
	}
	if err := s.guardAdministrator(ctx, user); err != nil {
		return "", err
	}
	return user, nil
}

// guardAdministrator refuses to let a non-administrator act on an
// administrator's keys: with Manage Users alone that would be a way to
// become one.
func (s *server) guardAdministrator(ctx context.Context, user string) error {
	if caller(ctx).Has(access.Administrator) {
		return nil
	}
	p, err := s.Access.PrincipalFor(ctx, user)
	if err != nil {
		// Unknown or disabled users have no key worth guarding; the
		// operation itself reports them.
		return nil
	}
	if p.Has(access.Administrator) {
		return huma.Error403Forbidden("only an Administrator may manage an Administrator's API keys")
	}
	return nil
}

// ownedKey returns a key the caller may change: its own (with Manage API
// Keys) or anyone's (with Manage Users). A key the caller may not see is
// 404, so key ids of other users are not revealed.
func (s *server) ownedKey(ctx context.Context, id int64) (meta.APIKey, error) {
	k, err := s.Access.GetAPIKey(ctx, id)
	if errors.Is(err, meta.ErrNotFound) {
		return k, huma.Error404NotFound(fmt.Sprintf("no API key %d", id))
	}
	if err != nil {
		return k, s.internal("get api key", err)
	}
	p := caller(ctx)
	if k.OwnerID != p.User.ID && p.Has(access.ManageUsers) {
		return k, s.guardAdministrator(ctx, k.Owner)
	}
	if k.OwnerID != p.User.ID {
		return k, huma.Error404NotFound(fmt.Sprintf("no API key %d", id))
	}
	if err := require(ctx, access.ManageAPIKeys); err != nil {
		return k, err
	}
	return k, nil
}

// accessError maps the access service's errors to statuses.
func (s *server) accessError(op string, err error) error {
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, meta.ErrExists):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, access.ErrInvalid):
		return huma.Error422UnprocessableEntity(err.Error())
	}
	return s.internal(op, err)
}
