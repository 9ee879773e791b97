package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

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
		StreamType      string      `json:"streamType,omitempty" doc:"Default stream type, one of receive.metaTypes; default Raw Events"`
		Encoding        string      `json:"encoding,omitempty" doc:"Default UTF-8"`
		ContextEncoding string      `json:"contextEncoding,omitempty" doc:"Default UTF-8"`
		Classification  string      `json:"classification,omitempty"`
		Description     string      `json:"description,omitempty"`
	}
}

// FeedReplacement is the complete feed that PUT stores. Every writable field
// is required, so that a client that forgot one is told (422) instead of
// having it reset to empty. The read-only fields are accepted so that a feed
// read with GET can be sent back as it is, but they cannot change: a value
// that differs from the stored one is refused rather than ignored.
type FeedReplacement struct {
	Name            string      `json:"name" required:"true" doc:"Must equal the name in the path: a feed cannot be renamed."`
	Status          feed.Status `json:"status" required:"true" enum:"RECEIVE,REJECT,DROP"`
	StreamType      string      `json:"streamType" required:"true" minLength:"1" doc:"Default stream type, one of receive.metaTypes."`
	Encoding        string      `json:"encoding" required:"true" minLength:"1" doc:"Character encoding of the data."`
	ContextEncoding string      `json:"contextEncoding" required:"true" minLength:"1" doc:"Character encoding of Context child streams."`
	Classification  string      `json:"classification" required:"true" doc:"May be empty."`
	Description     string      `json:"description" required:"true" doc:"May be empty."`
	Version         int64       `json:"version" required:"true" minimum:"1" doc:"The version this replaces, as read; if the feed changed since, 409 with the current version."`
	CreateMs        *int64      `json:"createMs,omitempty" readOnly:"true" doc:"Read-only; if sent, must equal the stored value."`
	UpdateMs        *int64      `json:"updateMs,omitempty" readOnly:"true" doc:"Read-only; if sent, must equal the stored value."`
}

type putFeedInput struct {
	Name string `path:"name" doc:"Feed name"`
	Body FeedReplacement
}

// FeedPatch is a JSON merge patch (RFC 7396) of a feed: only the members sent
// change. null resets a field to what a new feed gets (empty for
// classification and description). name cannot change and status cannot be
// null.
type FeedPatch struct {
	Name            patchField[string]      `json:"name" required:"false" doc:"If sent, must equal the name in the path."`
	Status          patchField[feed.Status] `json:"status" required:"false" enum:"RECEIVE,REJECT,DROP" doc:"Cannot be null."`
	StreamType      patchField[string]      `json:"streamType" required:"false" nullable:"true" minLength:"1" doc:"null: Raw Events"`
	Encoding        patchField[string]      `json:"encoding" required:"false" nullable:"true" minLength:"1" doc:"null: UTF-8"`
	ContextEncoding patchField[string]      `json:"contextEncoding" required:"false" nullable:"true" minLength:"1" doc:"null: UTF-8"`
	Classification  patchField[string]      `json:"classification" required:"false" nullable:"true" doc:"null: empty"`
	Description     patchField[string]      `json:"description" required:"false" nullable:"true" doc:"null: empty"`
	Version         patchField[int64]       `json:"version" required:"false" minimum:"1" doc:"If sent, the patch applies only to this version (409 otherwise); if not, to the current one."`
}

type patchFeedInput struct {
	Name string    `path:"name" doc:"Feed name"`
	Body FeedPatch `contentType:"application/merge-patch+json"`
}

type feedStatusInput struct {
	Name string `path:"name" doc:"Feed name"`
	Body struct {
		Status  feed.Status `json:"status" enum:"RECEIVE,REJECT,DROP"`
		Version int64       `json:"version,omitempty" minimum:"1" doc:"If sent, the change applies only to this version (409 otherwise)."`
	}
}

type deleteFeedInput struct {
	Name  string `path:"name" doc:"Feed name"`
	Force bool   `query:"force" doc:"Delete even if the feed still has streams that are not deleted (they are kept). Needs Administrator."`
}

// patchField is one member of a JSON merge patch: absent (Set false), null
// (Null), or a value. A pointer cannot tell absent from null, and merge
// patch gives them different meanings (keep versus reset).
type patchField[T any] struct {
	Set, Null bool
	Value     T
}

// UnmarshalJSON is called only for members present in the patch, null
// included.
func (p *patchField[T]) UnmarshalJSON(b []byte) error {
	p.Set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		p.Null = true
		return nil
	}
	return json.Unmarshal(b, &p.Value)
}

// Schema documents the member as its value type; nullable comes from the
// field's tag.
func (p *patchField[T]) Schema(r huma.Registry) *huma.Schema {
	return r.Schema(reflect.TypeFor[T](), true, "")
}

// value returns the patched value: cur when absent, reset when null.
func (p patchField[T]) value(cur, reset T) T {
	switch {
	case !p.Set:
		return cur
	case p.Null:
		return reset
	}
	return p.Value
}

// notNull is a 422 detail for a member that may be absent but not null.
func notNull(set, null bool, field string) error {
	if set && null {
		return &huma.ErrorDetail{Location: "body." + field, Message: field + " cannot be null; leave it out to keep it"}
	}
	return nil
}

// patchAttempts bounds how often a patch without a version is re-applied
// when the feed (or user) changes between reading and writing it: each
// retry applies the patch to the newer state, which is what the client
// asked for, but a hot object must not keep a request busy forever.
const patchAttempts = 5

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
		Summary:     "Get a feed",
		Description: "Needs VIEW on the feed. The version is what PUT and PATCH name to detect concurrent changes.",
		Errors:      []int{http.StatusNotFound},
	}), func(ctx context.Context, in *feedInput) (*feedOutput, error) {
		// Permission first: a caller without it learns nothing, not even whether the feed exists.
		if err := requireFeed(ctx, in.Name, access.View); err != nil {
			return nil, err
		}
		f, err := s.getFeed(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		return &feedOutput{Body: f}, nil
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "create-feed", Method: http.MethodPost, Path: "/feeds", Tags: []string{"Feeds"},
		Summary: "Create a feed",
		Description: "Needs Manage Feeds. The creator becomes the feed's OWNER. The new feed is at version 1. " +
			"Streams and feed permissions are keyed by the feed's name, so a name that streams of any status still " +
			"carry (those of an earlier feed of that name, deleted or kept by a forced delete, or received while " +
			"there was no feed) can be created only by an Administrator: anyone else gets 409, since the new feed " +
			"would hand them those streams.",
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
		var err error
		if f.StreamType, err = s.streamType(f.StreamType); err != nil {
			return nil, err
		}
		if err := checkEncodings(map[string]string{"encoding": f.Encoding, "contextEncoding": f.ContextEncoding}); err != nil {
			return nil, err
		}
		p := caller(ctx)
		create := s.Repo.CreateFreshFeed
		if p.Has(access.Administrator) {
			// An administrator sees every stream anyway, and is the one who
			// decides who may see an earlier feed's streams again.
			create = s.Repo.CreateFeed
		}
		if err := create(ctx, f); err != nil {
			switch {
			case errors.Is(err, meta.ErrExists):
				return nil, huma.Error409Conflict("a feed named " + b.Name + " already exists")
			case errors.Is(err, meta.ErrEarlierStreams):
				return nil, huma.Error409Conflict("streams of an earlier feed named " + b.Name + " exist (deleted or not); " +
					"a new feed of that name would give its owner those streams, so an Administrator must create it")
			}
			return nil, s.internal("create feed", err)
		}
		if !p.Has(access.Administrator) {
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

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "replace-feed", Method: http.MethodPut, Path: "/feeds/{name}", Tags: []string{"Feeds"},
		Summary: "Replace a feed",
		Description: "Needs EDIT on the feed. Takes the complete feed with the version it replaces: a missing field is " +
			"422 naming every missing field, a version that is not the current one is 409 with the current version, " +
			"and the response is the feed at its new version. The name cannot change.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *putFeedInput) (*feedOutput, error) {
		if err := requireFeed(ctx, in.Name, access.Edit); err != nil {
			return nil, err
		}
		b := in.Body
		if b.Name != in.Name {
			return nil, renameError("feed", in.Name, b.Name)
		}
		cur, err := s.getFeed(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		if b.Version != cur.Version {
			return nil, staleError(&meta.StaleError{What: fmt.Sprintf("feed %q", in.Name), Want: b.Version, Current: cur.Version})
		}
		var details []error
		if b.CreateMs != nil && *b.CreateMs != cur.CreateMs {
			details = append(details, readOnlyDetail("createMs", *b.CreateMs))
		}
		if b.UpdateMs != nil && *b.UpdateMs != cur.UpdateMs {
			details = append(details, readOnlyDetail("updateMs", *b.UpdateMs))
		}
		if details != nil {
			return nil, huma.Error422UnprocessableEntity("read-only fields cannot change", details...)
		}
		f := feed.Feed{Name: in.Name, Status: b.Status, StreamType: b.StreamType, Encoding: b.Encoding,
			ContextEncoding: b.ContextEncoding, Classification: b.Classification, Description: b.Description}
		if f.StreamType, err = s.streamType(f.StreamType); err != nil {
			return nil, err
		}
		if err := checkEncodings(map[string]string{"encoding": f.Encoding, "contextEncoding": f.ContextEncoding}); err != nil {
			return nil, err
		}
		return s.storeFeed(ctx, f, b.Version)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "patch-feed", Method: http.MethodPatch, Path: "/feeds/{name}", Tags: []string{"Feeds"},
		Summary: "Change some fields of a feed",
		Description: "Needs EDIT on the feed. A JSON merge patch (RFC 7396, application/merge-patch+json): only the " +
			"fields sent change, null resets a field to what a new feed gets. With a version, the patch applies only " +
			"to that version (409 otherwise); without one, to the current feed. The response is the feed at its new version.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *patchFeedInput) (*feedOutput, error) {
		if err := requireFeed(ctx, in.Name, access.Edit); err != nil {
			return nil, err
		}
		p := in.Body
		if p.Name.Set && (p.Name.Null || p.Name.Value != in.Name) {
			return nil, renameError("feed", in.Name, p.Name.Value)
		}
		if err := errors.Join(notNull(p.Status.Set, p.Status.Null, "status"), notNull(p.Version.Set, p.Version.Null, "version")); err != nil {
			return nil, huma.Error422UnprocessableEntity("invalid merge patch", unjoin(err)...)
		}
		if p.StreamType.Set && !p.StreamType.Null {
			var err error
			if p.StreamType.Value, err = s.streamType(p.StreamType.Value); err != nil {
				return nil, err
			}
		}
		// Only the encodings sent are checked: a patch that leaves a stored
		// name alone is not refused for it.
		sent := map[string]string{}
		if p.Encoding.Set && !p.Encoding.Null {
			sent["encoding"] = p.Encoding.Value
		}
		if p.ContextEncoding.Set && !p.ContextEncoding.Null {
			sent["contextEncoding"] = p.ContextEncoding.Value
		}
		if err := checkEncodings(sent); err != nil {
			return nil, err
		}
		defaults := feed.Feed{}.WithDefaults()
		return s.patchFeed(ctx, in.Name, p.Version.value(0, 0), func(f feed.Feed) feed.Feed {
			f.Status = p.Status.value(f.Status, f.Status)
			f.StreamType = p.StreamType.value(f.StreamType, defaults.StreamType)
			f.Encoding = p.Encoding.value(f.Encoding, defaults.Encoding)
			f.ContextEncoding = p.ContextEncoding.value(f.ContextEncoding, defaults.ContextEncoding)
			f.Classification = p.Classification.value(f.Classification, "")
			f.Description = p.Description.value(f.Description, "")
			return f
		})
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "set-feed-status", Method: http.MethodPut, Path: "/feeds/{name}/status", Tags: []string{"Feeds"},
		Summary: "Change a feed's status",
		Description: "Needs EDIT on the feed. Changes only the status (RECEIVE, REJECT or DROP), which applies to the " +
			"next post. With a version, only if the feed is at that version (409 otherwise).",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *feedStatusInput) (*feedOutput, error) {
		if err := requireFeed(ctx, in.Name, access.Edit); err != nil {
			return nil, err
		}
		return s.patchFeed(ctx, in.Name, in.Body.Version, func(f feed.Feed) feed.Feed {
			f.Status = in.Body.Status
			return f
		})
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "delete-feed", Method: http.MethodDelete, Path: "/feeds/{name}", Tags: []string{"Feeds"},
		Summary: "Delete a feed",
		Description: "Needs DELETE on the feed. Removes the feed and every permission held on it; its streams are " +
			"never deleted by this. A feed that still has streams that are not DELETED (complete or being written) " +
			"is refused with 409, unless force=true, which needs Administrator and keeps those streams (delete " +
			"them with the stream operations first to remove the data too). Posts to a deleted feed are then " +
			"treated as to any unknown feed.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}), func(ctx context.Context, in *deleteFeedInput) (*struct{}, error) {
		if err := requireFeed(ctx, in.Name, access.Delete); err != nil {
			return nil, err
		}
		if in.Force {
			if err := require(ctx, access.Administrator); err != nil {
				return nil, err
			}
		}
		live, err := s.Repo.DeleteFeed(ctx, in.Name, in.Force)
		switch {
		case errors.Is(err, meta.ErrNotFound):
			return nil, huma.Error404NotFound("no feed named " + in.Name)
		case errors.Is(err, meta.ErrInUse):
			return nil, huma.Error409Conflict(fmt.Sprintf("feed %s still has %d streams that are not deleted; "+
				"delete them first, or delete the feed with force=true (Administrator) to keep them", in.Name, live))
		case err != nil:
			return nil, s.internal("delete feed", err)
		}
		if live > 0 {
			s.Log.Info("feed deleted with force; its streams are kept", "feed", in.Name, "streams", live,
				"user", caller(ctx).User.Name)
		}
		return nil, nil
	})
}

// getFeed reads a feed: 404 if missing.
func (s *server) getFeed(ctx context.Context, name string) (feed.Feed, error) {
	f, err := s.Repo.GetFeed(ctx, name)
	if errors.Is(err, meta.ErrNotFound) {
		return f, huma.Error404NotFound("no feed named " + name)
	}
	if err != nil {
		return f, s.internal("get feed", err)
	}
	return f, nil
}

// storeFeed writes f if the feed is still at version.
func (s *server) storeFeed(ctx context.Context, f feed.Feed, version int64) (*feedOutput, error) {
	got, err := s.Repo.UpdateFeedVersion(ctx, f, version)
	var stale *meta.StaleError
	switch {
	case errors.As(err, &stale):
		return nil, staleError(stale)
	case errors.Is(err, meta.ErrNotFound):
		return nil, huma.Error404NotFound("no feed named " + f.Name)
	case err != nil:
		return nil, s.internal("update feed", err)
	}
	return &feedOutput{Body: got}, nil
}

// patchFeed applies change to the feed at version (0: whatever version it
// is at) and stores the result, unless it changes nothing. Without a version, a concurrent change
// between reading and writing makes it read again and re-apply change, so
// that nothing the other writer did is overwritten.
func (s *server) patchFeed(ctx context.Context, name string, version int64, change func(feed.Feed) feed.Feed) (*feedOutput, error) {
	for attempt := 1; ; attempt++ {
		cur, err := s.getFeed(ctx, name)
		if err != nil {
			return nil, err
		}
		want := cur.Version
		if version != 0 {
			if version != cur.Version {
				return nil, staleError(&meta.StaleError{What: fmt.Sprintf("feed %q", name), Want: version, Current: cur.Version})
			}
			want = version
		}
		next := change(cur)
		if next == cur {
			// Nothing changes: no write, and no new version that would
			// make other writers' reads stale (409) for nothing.
			return &feedOutput{Body: cur}, nil
		}
		out, err := s.storeFeed(ctx, next, want)
		if version == 0 && attempt < patchAttempts && isStatus(err, http.StatusConflict) {
			continue
		}
		return out, err
	}
}

// streamType checks a feed's default stream type against receive.metaTypes
// and returns it as configured (the comparison ignores case, as the admin
// command's does).
func (s *server) streamType(t string) (string, error) {
	types := s.Config.Receive.MetaTypes
	if len(types) == 0 {
		return t, nil
	}
	for _, mt := range types {
		if strings.EqualFold(mt, t) {
			return mt, nil
		}
	}
	return "", huma.Error422UnprocessableEntity("invalid stream type", &huma.ErrorDetail{Location: "body.streamType",
		Message: "not one of receive.metaTypes: " + strings.Join(types, ", "), Value: t})
}

// checkEncodings refuses (422, naming every field at fault) encoding names,
// by body field, that the data viewer could not decode with: it resolves
// them with the same lookup, so a feed cannot hold a name that its text
// view would call unknown.
func checkEncodings(byField map[string]string) error {
	var details []error
	for _, field := range slices.Sorted(maps.Keys(byField)) {
		v := byField[field]
		if _, _, err := feed.LookupEncoding(v); err != nil {
			details = append(details, &huma.ErrorDetail{Location: "body." + field,
				Message: err.Error() + "; use one of the " + feed.EncodingNames, Value: v})
		}
	}
	if details != nil {
		return huma.Error422UnprocessableEntity("unknown character encoding", details...)
	}
	return nil
}

// staleError is the 409 for a version-checked update of something changed
// since the caller read it.
func staleError(e *meta.StaleError) error {
	return huma.Error409Conflict(fmt.Sprintf("%s is at version %d, not %d: it changed since you read it; "+
		"read it again, reapply your change and send version %d", e.What, e.Current, e.Want, e.Current))
}

// renameError is the 422 for a body naming another object than the path.
func renameError(what, path, body string) error {
	return huma.Error422UnprocessableEntity(what+" cannot be renamed", &huma.ErrorDetail{Location: "body.name",
		Message: fmt.Sprintf("must equal the %s name in the path, %q", what, path), Value: body})
}

func readOnlyDetail(field string, v any) error {
	return &huma.ErrorDetail{Location: "body." + field, Message: field + " is read-only and differs from the stored value; leave it out or send it as read", Value: v}
}

// unjoin splits an errors.Join result into its errors, for huma's details.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// isStatus reports whether err is a huma error with this status.
func isStatus(err error, status int) bool {
	var se huma.StatusError
	return errors.As(err, &se) && se.GetStatus() == status
}
