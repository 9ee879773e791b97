package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

// Stream is a stored post as the API shows it.
type Stream struct {
	ID            int64             `json:"id"`
	Feed          string            `json:"feed"`
	Type          string            `json:"type"`
	Status        string            `json:"status" enum:"LOCKED,UNLOCKED,DELETED"`
	CreateTime    string            `json:"createTime" doc:"UTC, yyyy-MM-ddTHH:mm:ss.SSSZ"`
	EffectiveTime string            `json:"effectiveTime"`
	StatusTime    string            `json:"statusTime"`
	ReceiptID     string            `json:"receiptId"`
	Parts         int               `json:"parts"`
	RawSize       int64             `json:"rawSize" doc:"Uncompressed bytes of the data of all parts"`
	FileSize      int64             `json:"fileSize" doc:"Bytes on disk"`
	Attributes    map[string]string `json:"attributes"`
}

func ms(v int64) string {
	if v == 0 {
		return ""
	}
	return attr.FormatTime(time.UnixMilli(v))
}

func toStream(s meta.Stream) Stream {
	a := make(map[string]string, s.Attributes.Len())
	for k, v := range s.Attributes.All() {
		a[k] = v
	}
	return Stream{ID: s.ID, Feed: s.Feed, Type: s.Type, Status: string(s.Status), CreateTime: ms(s.CreateMs),
		EffectiveTime: ms(s.EffectiveMs), StatusTime: ms(s.StatusMs), ReceiptID: s.ReceiptID, Parts: s.Parts,
		RawSize: s.RawSize, FileSize: s.FileSize, Attributes: a}
}

type listStreamsInput struct {
	Feed    string `query:"feed" doc:"Only streams of this feed"`
	Status  string `query:"status" enum:"LOCKED,UNLOCKED,DELETED" default:"UNLOCKED"`
	AfterID int64  `query:"afterId" minimum:"0" doc:"Page: streams with a larger id than this"`
	Limit   int    `query:"limit" minimum:"1" maximum:"1000" default:"100"`
}

type listStreamsOutput struct {
	Body struct {
		Streams     []Stream `json:"streams" doc:"Narrowed to feeds the caller may view: an empty page does not prove there are none."`
		NextAfterID int64    `json:"nextAfterId" doc:"Pass as afterId for the next page; 0 when this is the last page."`
	}
}

type streamInput struct {
	ID int64 `path:"id" minimum:"1"`
}

type streamOutput struct{ Body Stream }

type dataInput struct {
	ID    int64  `path:"id" minimum:"1"`
	Part  int    `query:"part" minimum:"0" doc:"Part number from 1; 0 (default) for all parts in order"`
	Child string `query:"child" enum:"Context,Meta Data" doc:"A child stream instead of the data"`
}

func (s *server) registerStreams() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "list-streams", Method: http.MethodGet, Path: "/streams", Tags: []string{"Streams"},
		Summary: "List streams", Description: "Streams of the feeds on which the caller holds VIEW, by id.",
	}), func(ctx context.Context, in *listStreamsInput) (*listStreamsOutput, error) {
		f := meta.StreamFilter{Feed: in.Feed, Status: meta.Status(in.Status), AfterID: in.AfterID,
			Limit: in.Limit + 1, FeedIn: visibleFeeds(ctx)}
		rows, err := s.Repo.ListStreams(ctx, f)
		if err != nil {
			return nil, s.internal("list streams", err)
		}
		out := &listStreamsOutput{}
		out.Body.Streams = []Stream{}
		for i, r := range rows {
			if i == in.Limit {
				out.Body.NextAfterID = rows[i-1].ID
				break
			}
			out.Body.Streams = append(out.Body.Streams, toStream(r))
		}
		return out, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-stream", Method: http.MethodGet, Path: "/streams/{id}", Tags: []string{"Streams"},
		Summary: "Get a stream", Errors: []int{http.StatusNotFound},
	}), func(ctx context.Context, in *streamInput) (*streamOutput, error) {
		st, err := s.visibleStream(ctx, in.ID, access.View)
		if err != nil {
			return nil, err
		}
		return &streamOutput{Body: toStream(st)}, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-stream-data", Method: http.MethodGet, Path: "/streams/{id}/data", Tags: []string{"Streams"},
		Summary:     "Download stream data",
		Description: "The stored bytes, exactly: the data of every part in order, of one part, or a child stream. Needs Data - View and VIEW on the feed.",
		Errors:      []int{http.StatusNotFound},
		Responses: map[string]*huma.Response{"200": {Description: "The bytes",
			Content: map[string]*huma.MediaType{"application/octet-stream": {}}}},
	}), func(ctx context.Context, in *dataInput) (*huma.StreamResponse, error) {
		if err := require(ctx, access.DataView); err != nil {
			return nil, err
		}
		st, err := s.visibleStream(ctx, in.ID, access.View)
		if err != nil {
			return nil, err
		}
		ch := streamfile.Data
		switch in.Child {
		case "Context":
			ch = streamfile.Context
		case "Meta Data":
			ch = streamfile.Meta
		}
		r, err := s.Store.Open(ctx, st.ID)
		if err != nil {
			return nil, huma.Error404NotFound(fmt.Sprintf("stream %d cannot be read: %v", st.ID, err))
		}
		first, last := 0, r.Parts()-1
		if in.Part > 0 {
			if in.Part > r.Parts() {
				r.Close()
				return nil, huma.Error404NotFound(fmt.Sprintf("stream %d has %d part(s)", st.ID, r.Parts()))
			}
			first, last = in.Part-1, in.Part-1
		}
		var size int64
		var sections []io.Reader
		for p := first; p <= last; p++ {
			if !r.Has(ch, p) {
				continue
			}
			sec, err := r.Section(ch, p)
			if err != nil {
				r.Close()
				return nil, s.internal("read stream", err)
			}
			size += sec.Size()
			sections = append(sections, sec)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			defer r.Close()
			hc.SetHeader("Content-Type", "application/octet-stream")
			hc.SetHeader("Content-Length", strconv.FormatInt(size, 10))
			hc.SetStatus(http.StatusOK)
			if _, err := io.Copy(hc.BodyWriter(), io.MultiReader(sections...)); err != nil {
				s.Log.Warn("stream download ended early", "stream", st.ID, "err", err)
			}
		}}, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "delete-stream", Method: http.MethodDelete, Path: "/streams/{id}", Tags: []string{"Streams"},
		Summary:     "Delete a stream",
		Description: "Marks the stream DELETED. Needs Data - Delete and DELETE on the feed.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict},
	}), func(ctx context.Context, in *streamInput) (*streamOutput, error) {
		if err := require(ctx, access.DataDelete); err != nil {
			return nil, err
		}
		st, err := s.visibleStream(ctx, in.ID, access.Delete)
		if err != nil {
			return nil, err
		}
		if st.Status != meta.Unlocked {
			return nil, huma.Error409Conflict(fmt.Sprintf("stream %d is %s; only UNLOCKED streams can be deleted", st.ID, st.Status))
		}
		if err := s.Repo.SetStreamStatus(ctx, st.ID, meta.Deleted); err != nil {
			return nil, s.internal("delete stream", err)
		}
		st, err = s.Repo.GetStream(ctx, st.ID)
		if err != nil {
			return nil, s.internal("get stream", err)
		}
		return &streamOutput{Body: toStream(st)}, nil
	})
}

// visibleStream returns a stream the caller holds level on its feed for:
// 404 when it does not exist, 403 when the caller may not touch it.
func (s *server) visibleStream(ctx context.Context, id int64, level access.Level) (meta.Stream, error) {
	st, err := s.Repo.GetStream(ctx, id)
	if errors.Is(err, meta.ErrNotFound) {
		return st, huma.Error404NotFound(fmt.Sprintf("no stream %d", id))
	}
	if err != nil {
		return st, s.internal("get stream", err)
	}
	if err := requireFeed(ctx, st.Feed, level); err != nil {
		return st, err
	}
	return st, nil
}
