package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/feed"
)

// The feed status resource is the reference system's
// (/api/feedStatus/v2/getFeedStatus, legacy v1): proxies, weir's and the
// reference system's, ask it before they accept a post for a feed. Its
// field names and status spellings are the reference's, so that either
// kind of proxy can ask either kind of service.

// UserDesc is the sender a proxy asks for, as the reference system
// describes a user.
type UserDesc struct {
	_           struct{} `additionalProperties:"true"`
	SubjectID   string   `json:"subjectId,omitempty" doc:"The sender's identity; becomes the UploadUserId attribute."`
	DisplayName string   `json:"displayName,omitempty" doc:"The sender's name; becomes the UploadUsername attribute."`
	FullName    string   `json:"fullName,omitempty" doc:"Not used."`
}

// FeedStatusQuery asks whether a feed receives data (the reference
// system's GetFeedStatusRequestV2).
type FeedStatusQuery struct {
	_            struct{}          `additionalProperties:"true"`
	FeedName     string            `json:"feedName,omitempty" doc:"The feed. Missing or blank: the answer is Reject with 100 (FEED_MUST_BE_SPECIFIED), not a 422, as the reference system answers; no feed name is generated."`
	UserDesc     *UserDesc         `json:"userDesc,omitempty" doc:"The sender, as the proxy authenticated it."`
	AttributeMap map[string]string `json:"attributeMap,omitempty" doc:"The post's attributes (headers), as the checks see them; Type, for instance, is checked against receive.metaTypes. Feed is replaced by feedName, UploadUserId and UploadUsername by userDesc."`
}

// FeedStatusQueryV1 is the legacy question (the reference system's
// GetFeedStatusRequest).
type FeedStatusQueryV1 struct {
	_        struct{} `additionalProperties:"true"`
	FeedName string   `json:"feedName,omitempty" doc:"The feed. Missing or blank: the answer is Reject with 100 (FEED_MUST_BE_SPECIFIED)."`
	SenderDn string   `json:"senderDn,omitempty" doc:"The sender's certificate DN; becomes the RemoteDN attribute."`
}

// FeedStatusAnswer is what a post to the feed would meet (the reference
// system's GetFeedStatusResponse, plus the code as a number).
type FeedStatusAnswer struct {
	Status           string `json:"status" enum:"Receive,Reject,Drop" doc:"Receive: a post is stored. Reject: a post is refused with statusCode. Drop: a post is answered 200 and discarded. Spelled as the reference system spells them."`
	Message          string `json:"message" doc:"Why, in words, as a refused post's Service-Error says it."`
	StroomStatusCode string `json:"stroomStatusCode" doc:"The code as the reference system's StroomStatusCode enum constant: OK, FEED_MUST_BE_SPECIFIED (100), FEED_IS_NOT_DEFINED (101), INVALID_TYPE (102), MISSING_MANDATORY_HEADER (103), FEED_IS_NOT_SET_TO_RECEIVE_DATA (110), REJECTED_BY_POLICY_RULES (113), UNEXPECTED_DATA_TYPE (120), ...; a code the reference system does not have is UNKNOWN_ERROR."`
	StatusCode       int    `json:"statusCode" doc:"The datafeed status code a post would get: 0 with Receive and Drop, otherwise the Service-Status of the refusal (100, 101, 102, 103, 110, 113, 120)."`
}

type feedStatusQueryInput struct{ Body FeedStatusQuery }

type feedStatusQueryV1Input struct{ Body FeedStatusQueryV1 }

type feedStatusAnswerOutput struct{ Body FeedStatusAnswer }

// wireStatus spells a feed status as the reference system's feed status
// answers do.
var wireStatus = map[feed.Status]string{feed.Receive: "Receive", feed.Reject: "Reject", feed.Drop: "Drop"}

const feedStatusDescription = "Answers as the datafeed would for a post to that feed with these attributes, " +
	"under this service's `receive.receiptCheckMode` and with the same checks in the same order " +
	"(type, feed name, then the mode): FEED_STATUS (the default) answers with the feed's status, an unknown feed " +
	"being Reject with 110; FEED_EXISTENCE answers Receive for any existing feed and Reject with 101 otherwise; " +
	"RECEIPT_POLICY answers by the data receipt rules for that sender (userDesc) and attributes (Reject with 113 when " +
	"they refuse, without naming the rule), then Reject with 101 for an unknown feed; " +
	"RECEIVE_ALL, DROP_ALL and REJECT_ALL (113) answer the same for every feed. " +
	"Proxies ask it before they accept data, so that a sender is refused at the proxy as it would be here. " +
	"A refusal is an answer (200 with status Reject), not an HTTP error; a missing or blank feedName is Reject with 100, " +
	"and no feed is ever generated or created by a question.\n\n" +
	"Any authenticated caller may ask; no application permission is needed (a proxy authenticates with an API key " +
	"of its own user, not with a sender's data feed key or certificate). " +
	"503 with Retry-After when the answer cannot be worked out now (the feed table cannot be read, " +
	"or this service does not receive data); a proxy then uses its fallback."

func (s *server) registerFeedStatus() {
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-feed-status", Method: http.MethodPost, Path: "/feedStatus/v2/getFeedStatus", Tags: []string{"Feed status"},
		Summary:     "Ask whether a feed receives data",
		Description: feedStatusDescription,
		Errors:      []int{http.StatusServiceUnavailable},
	}), func(ctx context.Context, in *feedStatusQueryInput) (*feedStatusAnswerOutput, error) {
		a := &attr.Map{}
		for k, v := range in.Body.AttributeMap {
			a.Put(k, v)
		}
		if u := in.Body.UserDesc; u != nil {
			if u.SubjectID != "" {
				a.Put("UploadUserId", u.SubjectID)
			}
			if u.DisplayName != "" {
				a.Put("UploadUsername", u.DisplayName)
			}
		}
		return s.feedStatus(ctx, in.Body.FeedName, a)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-feed-status-v1", Method: http.MethodPost, Path: "/feedStatus/v1/getFeedStatus", Tags: []string{"Feed status"},
		Summary: "Ask whether a feed receives data (legacy)",
		Description: "The legacy form of `POST /feedStatus/v2/getFeedStatus`, for older proxies: the feed and the sender's " +
			"certificate DN instead of a user and attributes. The answer is the same.\n\n" + feedStatusDescription,
		Errors: []int{http.StatusServiceUnavailable},
	}), func(ctx context.Context, in *feedStatusQueryV1Input) (*feedStatusAnswerOutput, error) {
		a := &attr.Map{}
		if dn := strings.TrimSpace(in.Body.SenderDn); dn != "" {
			a.Put("RemoteDN", dn)
		}
		return s.feedStatus(ctx, in.Body.FeedName, a)
	})
}

// feedStatus asks the receive handler and puts its answer on the wire.
func (s *server) feedStatus(ctx context.Context, name string, attrs *attr.Map) (*feedStatusAnswerOutput, error) {
	if s.Receiver == nil {
		return nil, s.unanswered("this service does not receive data")
	}
	ans, err := s.Receiver.FeedStatus(ctx, name, attrs)
	if err != nil {
		s.Log.Error("api", "op", "feed status", "feed", name, "err", err)
		return nil, s.unanswered("the status of the feed cannot be checked now; the server log has the details")
	}
	st, ok := wireStatus[ans.Status]
	if !ok {
		s.Log.Error("api", "op", "feed status", "feed", name, "err", "unknown status "+string(ans.Status))
		return nil, s.unanswered("the status of the feed cannot be checked now; the server log has the details")
	}
	return &feedStatusAnswerOutput{Body: FeedStatusAnswer{
		Status: st, Message: ans.Message, StroomStatusCode: ans.Code.StroomStatusName(), StatusCode: int(ans.Code),
	}}, nil
}

// unanswered is a 503 with Retry-After: the question may be answered later.
func (s *server) unanswered(msg string) error {
	retry := max(int(s.Config.API.RetryAfter.D().Seconds()), 1)
	return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(msg), http.Header{"Retry-After": {strconv.Itoa(retry)}})
}
