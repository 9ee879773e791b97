package receive

import (
	"context"
	"strings"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
)

// FeedStatus answers a feed status question (a proxy asking before it
// accepts data) as the datafeed would decide a post to feedName with
// these attributes, under this handler's receive.receiptCheckMode: the
// same checks in the same order (type, feed name, mode), so a proxy and
// this service never disagree. A REJECT carries the status code the post
// would get. attrs is not changed and may be nil.
//
// A blank feed name is REJECT with 100 and no check runs: feed name
// generation (and auto-creation) belongs to posts, never to a question.
// The error is for failures that leave no answer (the feed table cannot
// be read, the downstream of a proxy cannot be asked): the caller must not
// take them for a REJECT.
func (h *Handler) FeedStatus(ctx context.Context, feedName string, attrs *attr.Map) (FeedAnswer, error) {
	feedName = strings.TrimSpace(feedName) // as it would arrive in a header
	if feedName == "" {
		e := errorf(FeedMustBeSpecified, "send the name of the feed")
		return FeedAnswer{Status: feed.Reject, Code: e.Code, Message: message(e, "", "", "")}, nil
	}
	a := attrs.Clone()
	a.Put("Feed", feedName)
	d, err := h.check(ctx, a)
	if err != nil {
		e := asError(err)
		switch e.Code {
		case UnknownError, Unavailable:
			// Internal failures: the question is not answered.
			return FeedAnswer{}, err
		case RejectedByPolicy:
			if h.cfg.ReceiptCheckMode == config.ReceiptPolicy {
				// Any API key may ask, about any sender: the answer does not
				// name the rule, so that the rules cannot be read this way.
				e = &Error{Code: e.Code, Detail: "the data receipt rules refuse it"}
			}
		}
		// d.feed and d.typ, not feedName: the message is the one a post gets, word
		// for word (a bad Type is refused before the feed is looked at).
		return FeedAnswer{Status: feed.Reject, Known: d.known, Code: e.Code, Message: message(e, d.feed, "", d.typ)}, nil
	}
	if d.drop {
		return FeedAnswer{Status: feed.Drop, Known: d.known, Code: OK,
			Message: OK.Text() + " [Feed: " + feedName + "] - data posted to this feed is accepted and discarded"}, nil
	}
	return FeedAnswer{Status: feed.Receive, Known: d.known, Code: OK, Message: OK.Text()}, nil
}

// stroomNames are the reference system's StroomStatusCode enum constants,
// by code (stroom.proxy.StroomStatusCode). Codes weir adds have none.
var stroomNames = map[Code]string{
	OK:                     "OK",
	FeedMustBeSpecified:    "FEED_MUST_BE_SPECIFIED",
	FeedNotDefined:         "FEED_IS_NOT_DEFINED",
	InvalidType:            "INVALID_TYPE",
	MandatoryHeaderMissing: "MISSING_MANDATORY_HEADER",
	InvalidDataFormat:      "INVALID_FORMAT",
	FeedNotReceiving:       "FEED_IS_NOT_SET_TO_RECEIVE_DATA",
	111:                    "INVALID_FEED_NAME",
	112:                    "INVALID_DATA_FEED_KEY",
	RejectedByPolicy:       "REJECTED_BY_POLICY_RULES",
	UnexpectedType:         "UNEXPECTED_DATA_TYPE",
	UnknownCompression:     "UNKNOWN_COMPRESSION",
	300:                    "CLIENT_CERTIFICATE_REQUIRED",
	301:                    "CLIENT_TOKEN_REQUIRED",
	302:                    "CLIENT_TOKEN_OR_CERT_REQUIRED",
	303:                    "CLIENT_DATA_FEED_KEY_REQUIRED",
	304:                    "AUTHENTICATION_REQUIRED",
	310:                    "CLIENT_CERTIFICATE_NOT_AUTHENTICATED",
	311:                    "CLIENT_TOKEN_NOT_AUTHENTICATED",
	312:                    "CLIENT_TOKEN_OR_CERT_NOT_AUTHENTICATED",
	313:                    "DATA_FEED_KEY_NOT_AUTHENTICATED",
	314:                    "DATA_FEED_KEY_EXPIRED",
	CompressedInvalid:      "COMPRESSED_STREAM_INVALID",
	TooLarge:               "CONTENT_TOO_LARGE",
	UnknownError:           "UNKNOWN_ERROR",
}

// StroomStatusName is the reference system's StroomStatusCode enum
// constant for c, as its feed status answers carry it (stroomStatusCode).
// A code the reference system does not have (weir's additions) is
// UNKNOWN_ERROR: a reference client cannot read a name it does not know.
func (c Code) StroomStatusName() string {
	if n, ok := stroomNames[c]; ok {
		return n
	}
	return stroomNames[UnknownError]
}

// CodeForStroomStatusName is the code of a reference StroomStatusCode
// enum constant (any case); ok is false for a name it does not know.
func CodeForStroomStatusName(name string) (c Code, ok bool) {
	name = strings.ToUpper(strings.TrimSpace(name))
	// Older releases of the reference system spell two of them differently.
	switch name {
	case "FEED_IS_NOT_SET_TO_RECEIVED_DATA":
		return FeedNotReceiving, true
	case "CLIENT_CERTIFICATE_NOT_AUTHORISED":
		return 310, true
	}
	for c, n := range stroomNames {
		if n == name {
			return c, true
		}
	}
	return 0, false
}
