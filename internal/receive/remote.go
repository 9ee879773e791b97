package receive

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/feed"
)

// FeedAnswer is what a feed status check says about one feed.
type FeedAnswer struct {
	Status  feed.Status // RECEIVE, REJECT or DROP
	Known   bool        // the feed exists
	Code    Code        // with REJECT: the status code a post gets (101, 110, 113 ...); 0 when unknown
	Message string      // why, in words, for the sender
	// Fallback is set when the answer is the configured fallback because
	// nobody could be asked.
	Fallback bool
}

// FeedStatuses answers feed status checks from elsewhere: a proxy asks
// its downstream instead of its own feed table.
type FeedStatuses interface {
	// FeedStatus decides for one feed; attrs are the post's attributes
	// (the sender's identity is in UploadUserId and UploadUsername).
	// It returns an error only when no answer (not even a fallback) applies.
	FeedStatus(ctx context.Context, feedName string, attrs *attr.Map) (FeedAnswer, error)
}

// Relay passes a post on during its request instead of storing it (a
// proxy's instant forwarding). attrs are the post's attributes with this
// hop's receipt information; compression and contentEncoding are the
// body's declarations as sent; body is bounded and timed like any body.
// An error that wraps an *Error is sent to the sender as it is, so that
// a downstream's refusal reaches the sender with its own code.
type Relay interface {
	Relay(ctx context.Context, attrs *attr.Map, compression, contentEncoding string, body io.Reader) (downstreamReceipt string, err error)
}

// Refusal is an error with a datafeed status code and a message, for a
// Relay to pass a downstream's refusal on. A code weir does not send
// itself becomes 999 with the code in the message.
func Refusal(code int, msg string) error {
	c := Code(code)
	if _, ok := codes[c]; !ok && !isAuth(c) || c == OK {
		return &Error{Code: UnknownError, Detail: msg}
	}
	return &Error{Code: c, Detail: Detail(c, msg)}
}

// Detail is a downstream's Service-Error without the parts this hop's
// message repeats (the code's text and the bracketed context), so that a
// relayed refusal reads "<text> [Feed: X] - <the downstream's detail>".
func Detail(c Code, msg string) string {
	rest, ok := strings.CutPrefix(msg, c.Text())
	if !ok {
		return msg
	}
	if _, after, found := strings.Cut(rest, " - "); found {
		return after
	}
	return strings.TrimSpace(rest)
}

// Unreachable is the error for a downstream that did not answer: 503, so
// that the sender retries after Retry-After.
func Unreachable(err error, msg string) error {
	return &Error{Code: Unavailable, Detail: msg, Err: err}
}

// relay passes the body on through the Relay. The body is bounded and
// timed as when it is stored; a relayed post is "received" only when the
// downstream acknowledged it.
func (p *post) relay(compression, contentEncoding string) (outcome, error) {
	h := p.h
	raw := &bodyReader{r: p.r.Body, rc: http.NewResponseController(p.w), idle: h.cfg.BodyIdleTimeout.D(), limit: h.limit()}
	defer func() { p.rawBytes = raw.n }()
	if compression == "NONE" {
		compression = ""
	}
	receipt, err := h.opt.Relay.Relay(p.r.Context(), p.attrs, compression, contentEncoding, raw)
	if raw.err != nil {
		return "", raw.err // the sender's body failed first
	}
	if err != nil {
		return "", err
	}
	p.downstream = receipt
	p.storedBytes = raw.n
	return outcomeReceived, nil
}
