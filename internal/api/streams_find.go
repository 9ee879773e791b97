package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamquery"
)

// StreamSort is one key of a find's sort order.
type StreamSort struct {
	Field string `json:"field" enum:"Id,Create Time,Effective Time,Feed,Type"`
	Desc  bool   `json:"desc,omitempty" doc:"Descending (default ascending)"`
}

const expressionDoc = "A filter in the reference system's expression JSON: operators " +
	`{"type":"operator","op":"AND|OR|NOT","children":[...]} and terms {"type":"term","field":...,"condition":...,"value":...}. ` +
	"Fields: Id, Feed, Type, Status, Create Time, Effective Time, Status Time, Receipt Id, Parts, Raw Size, File Size, " +
	"and attribute:<name> (names match in any case). Text comparisons are exact and case-sensitive; Feed EQUALS takes * wildcards. " +
	"Attribute ordering conditions compare numbers when the value is a whole number, dates when it is a date, else text. " +
	"NOT_EQUALS, like every value condition, never matches an absent attribute or an empty Type, Receipt Id or Effective Time " +
	"(use IS_NULL, or NOT around EQUALS). " +
	"Receipt Id also matches the receipt ids earlier hops (proxies) gave the data in a stream, as its parts' ReceiptIdPath " +
	"records them (as the data claims them: a sender can put any id there), so it selects whole streams, with every other " +
	"post aggregated into them; IS_NULL and IS_NOT_NULL ask about the stream's own receipt id."

type findStreamsInput struct {
	Body struct {
		Expression *streamquery.ExpressionItem `json:"expression,omitempty" doc:"The filter; absent: every stream (of any status)"`
		Sort       []StreamSort                `json:"sort,omitempty" maxItems:"5" doc:"Sort keys, most significant first; ties are broken by id in the direction of the last key. Default: by id ascending."`
		Offset     int64                       `json:"offset,omitempty" minimum:"0" doc:"Matches to skip"`
		Limit      int                         `json:"limit,omitempty" minimum:"1" maximum:"1000" default:"100" doc:"Page size"`
		Count      bool                        `json:"count,omitempty" doc:"Count every match so that total is exact (costs a count over all matches)"`
	}
}

type findStreamsOutput struct {
	Body struct {
		Streams []Stream `json:"streams" doc:"Narrowed to the feeds on which the caller holds VIEW: an empty page does not prove that nothing matched."`
		Total   int64    `json:"total" doc:"Matches the caller may see: exact when exact is true, else a lower bound (more follow this page; ask with count=true for the exact number)"`
		Exact   bool     `json:"exact"`
		Offset  int64    `json:"offset"`
		Limit   int      `json:"limit"`
	}
}

type bulkStatusInput struct {
	Body struct {
		Expression streamquery.ExpressionItem `json:"expression" doc:"The streams to act on; it must have at least one enabled term"`
		DryRun     bool                       `json:"dryRun,omitempty" doc:"Count only: say what would match and change, change nothing"`
	}
}

type bulkStatusOutput struct {
	Body struct {
		Matched int64 `json:"matched" doc:"Complete (UNLOCKED or DELETED) streams the expression matches on feeds where the caller holds DELETE"`
		Changed int64 `json:"changed" doc:"Streams whose status changed; for a dry run, how many would change now"`
		DryRun  bool  `json:"dryRun"`
	}
}

// expressionError turns a validation error into 422 naming where in the
// body the expression is wrong.
func expressionError(err error, at string) error {
	var e *streamquery.Error
	if !errors.As(err, &e) {
		return huma.Error422UnprocessableEntity(err.Error())
	}
	loc := at
	if e.Path != "" {
		loc += "." + e.Path
	}
	return huma.Error422UnprocessableEntity("invalid "+at+": "+e.Error(),
		&huma.ErrorDetail{Location: loc, Message: e.Msg, Value: e.Value})
}

func (s *server) registerStreamQueries() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "find-streams", Method: http.MethodPost, Path: "/streams/find", Tags: []string{"Streams"},
		Summary: "Find streams",
		Description: "Streams matching a filter expression over stream fields and attributes, sorted and paged. " + expressionDoc +
			" Results are narrowed to the feeds on which the caller holds VIEW. Paging: total is exact when exact is true; " +
			"otherwise it is a lower bound, and count=true asks for the exact total.",
		Errors: []int{http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *findStreamsInput) (*findStreamsOutput, error) {
		b := in.Body
		e, err := streamquery.Parse(b.Expression)
		if err != nil {
			return nil, expressionError(err, "body.expression")
		}
		q := meta.StreamQuery{Expr: e, FeedIn: visibleFeeds(ctx), Offset: b.Offset, Limit: b.Limit, Count: b.Count}
		for i, k := range b.Sort {
			key, err := streamquery.ParseSort(k.Field, k.Desc)
			if err != nil {
				return nil, expressionError(err, fmt.Sprintf("body.sort[%d].field", i))
			}
			q.Sort = append(q.Sort, key)
		}
		page, err := s.Repo.FindStreams(ctx, q)
		if err != nil {
			return nil, s.internal("find streams", err)
		}
		out := &findStreamsOutput{}
		out.Body.Streams = make([]Stream, 0, len(page.Streams))
		for _, st := range page.Streams {
			out.Body.Streams = append(out.Body.Streams, toStream(st))
		}
		out.Body.Total, out.Body.Exact, out.Body.Offset, out.Body.Limit = page.Total, page.Exact, b.Offset, b.Limit
		return out, nil
	})

	for _, op := range []struct {
		id, path, summary, what string
		to                      meta.Status
	}{
		{"delete-streams", "/streams/delete", "Delete streams by filter", "Marks every UNLOCKED stream that matches DELETED (restorable until store.deletePurgeAge, 7 days by default, has passed, then removed for good)", meta.Deleted},
		{"restore-streams", "/streams/restore", "Restore streams by filter", "Makes every DELETED stream that matches UNLOCKED again (one deleted longer than store.deletePurgeAge is gone for good)", meta.Unlocked},
	} {
		huma.Register(s.api, secured(huma.Operation{
			OperationID: op.id, Method: http.MethodPost, Path: op.path, Tags: []string{"Streams"},
			Summary: op.summary,
			Description: op.what + ", immediately, and says how many matched and changed; dryRun counts without acting. " +
				"Needs Data - Delete, and acts only on feeds where the caller holds DELETE: a caller with DELETE on some feeds " +
				"changes only their streams. LOCKED streams (still being written) never change. " + expressionDoc,
			Errors: []int{http.StatusUnprocessableEntity},
		}), func(ctx context.Context, in *bulkStatusInput) (*bulkStatusOutput, error) {
			return s.bulkStatus(ctx, in, op.to)
		})
	}
}

func (s *server) bulkStatus(ctx context.Context, in *bulkStatusInput, to meta.Status) (*bulkStatusOutput, error) {
	if err := require(ctx, access.DataDelete); err != nil {
		return nil, err
	}
	e, err := streamquery.Parse(&in.Body.Expression)
	if err != nil {
		return nil, expressionError(err, "body.expression")
	}
	if e.Terms() == 0 {
		return nil, huma.Error422UnprocessableEntity("the expression has no enabled terms, so it would act on every stream: "+
			"to mean that, say so with a term such as Id GREATER_THAN 0",
			&huma.ErrorDetail{Location: "body.expression", Message: "no enabled terms"})
	}
	p := caller(ctx)
	all, feeds := p.Feeds(access.Delete)
	if all {
		feeds = nil
	}
	out := &bulkStatusOutput{}
	out.Body.DryRun = in.Body.DryRun
	var c meta.StatusChange
	if in.Body.DryRun {
		c, err = s.Repo.CountStatusChange(ctx, e, feeds, to)
	} else {
		// Finish what was started even if the client goes away: the change
		// runs in chunks, and stopping between them would leave it half done
		// with nobody told.
		c, err = s.Repo.UpdateStatusWhere(context.WithoutCancel(ctx), e, feeds, to)
		s.Log.Info("api: bulk status change", "user", p.User.Name, "to", string(to),
			"matched", c.Matched, "changed", c.Changed, "err", err)
	}
	if err != nil {
		return nil, s.internal("bulk status change", err)
	}
	out.Body.Matched, out.Body.Changed = c.Matched, c.Changed
	return out, nil
}
