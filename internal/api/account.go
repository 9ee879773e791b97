package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
)

// Caller is who the API thinks the caller is, and what it may do.
type Caller struct {
	Name        string            `json:"name"`
	DisplayName string            `json:"displayName"`
	Permissions []string          `json:"permissions" doc:"Application permissions held, directly or through groups."`
	AllFeeds    bool              `json:"allFeeds" doc:"True for administrators, who hold OWNER on every feed."`
	Feeds       map[string]string `json:"feeds" doc:"Feed permission held on each feed the caller may use (USE, VIEW, EDIT, DELETE or OWNER)."`
}

type callerOutput struct{ Body Caller }

func (s *server) registerAccount() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-caller", Method: http.MethodGet, Path: "/whoami", Tags: []string{"Account"},
		Summary: "Who am I", Description: "The authenticated caller and its effective permissions.",
	}), func(ctx context.Context, _ *struct{}) (*callerOutput, error) {
		p := caller(ctx)
		out := Caller{Name: p.User.Name, DisplayName: p.User.DisplayName, Feeds: map[string]string{}}
		for _, perm := range access.Permissions() {
			if p.Has(perm) {
				out.Permissions = append(out.Permissions, perm)
			}
		}
		all, feeds := p.Feeds(access.Use)
		out.AllFeeds = all
		for _, f := range feeds {
			out.Feeds[f] = p.FeedLevel(f).String()
		}
		return &callerOutput{Body: out}, nil
	})
}
