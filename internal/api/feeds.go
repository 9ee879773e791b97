package api

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
)

type feedsOutput struct {
	Body struct {
		Feeds []feed.Feed `json:"feeds" doc:"The feeds the caller may view; narrowed by permissions, so an empty list does not prove there are none."`
	}
}

type feedInput struct {
	Name string `path:"name" doc:"Feed name"`
}

type feedOutput struct{ Body feed.Feed }

type createFeedInput struct {
	Body struct {
		Name            string      `json:"name" doc:"Feed name; must match receive.feedNamePattern"`
		Status          feed.Status `json:"status,omitempty" enum:"RECEIVE,REJECT,DROP" doc:"Default RECEIVE"`
		StreamType      string      `json:"streamType,omitempty" doc:"Default stream type; default Raw Events"`
		Encoding        string      `json:"encoding,omitempty"`
		ContextEncoding string      `json:"contextEncoding,omitempty"`
		Classification  string      `json:"classification,omitempty"`
		Description     string      `json:"description,omitempty"`
	}
}

func (s *server) registerFeeds() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "list-feeds", Method: http.MethodGet, Path: "/feeds", Tags: []string{"Feeds"},
		Summary: "List feeds", Description: "Feeds on which the caller holds at least VIEW.",
	}), func(ctx context.Context, _ *struct{}) (*feedsOutput, error) {
		all, err := s.Repo.ListFeeds(ctx)
		if err != nil {
			return nil, s.internal("list feeds", err)
		}
		out := &feedsOutput{}
		out.Body.Feeds = []feed.Feed{}
		visible := visibleFeeds(ctx)
		for _, f := range all {
			if visible == nil || slices.Contains(visible, f.Name) {
				out.Body.Feeds = append(out.Body.Feeds, f)
			}
		}
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-feed", Method: http.MethodGet, Path: "/feeds/{name}", Tags: []string{"Feeds"},
		Summary: "Get a feed", Errors: []int{http.StatusNotFound},
	}), func(ctx context.Context, in *feedInput) (*feedOutput, error) {
		// Permission first: a caller without it learns nothing, not even whether the feed exists.
		if err := requireFeed(ctx, in.Name, access.View); err != nil {
			return nil, err
		}
		f, err := s.Repo.GetFeed(ctx, in.Name)
		if errors.Is(err, meta.ErrNotFound) {
			return nil, huma.Error404NotFound("no feed named " + in.Name)
		}
		if err != nil {
			return nil, s.internal("get feed", err)
		}
		return &feedOutput{Body: f}, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "create-feed", Method: http.MethodPost, Path: "/feeds", Tags: []string{"Feeds"},
		Summary: "Create a feed", Description: "Needs Manage Feeds. The creator becomes the feed's OWNER.",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *createFeedInput) (*feedOutput, error) {
		if err := require(ctx, access.ManageFeeds); err != nil {
			return nil, err
		}
		b := in.Body
		if s.FeedNames != nil {
			if err := feed.ValidateName(s.FeedNames, b.Name); err != nil {
				return nil, huma.Error422UnprocessableEntity(err.Error())
			}
		}
		f := feed.Feed{Name: b.Name, Status: b.Status, StreamType: b.StreamType, Encoding: b.Encoding,
			ContextEncoding: b.ContextEncoding, Classification: b.Classification, Description: b.Description}.WithDefaults()
		if err := s.Repo.CreateFeed(ctx, f); err != nil {
			if errors.Is(err, meta.ErrExists) {
				return nil, huma.Error409Conflict("a feed named " + b.Name + " already exists")
			}
			return nil, s.internal("create feed", err)
		}
		if p := caller(ctx); !p.Has(access.Administrator) {
			if err := s.Access.SetFeedLevel(ctx, p.User.Name, f.Name, access.Owner); err != nil {
				return nil, s.internal("grant feed owner", err)
			}
		}
		created, err := s.Repo.GetFeed(ctx, f.Name)
		if err != nil {
			return nil, s.internal("get feed", err)
		}
		return &feedOutput{Body: created}, nil
	})
}
