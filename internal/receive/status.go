package receive

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/auth"
)

// Code is a datafeed status code, sent as Service-Status (and Stroom-Status).
// The numbers and HTTP statuses are the reference system's; codes marked
// "weir" are additions, documented in the README.
type Code int

const (
	OK                     Code = 0
	FeedMustBeSpecified    Code = 100
	FeedNotDefined         Code = 101
	InvalidType            Code = 102
	MandatoryHeaderMissing Code = 103
	InvalidDataFormat      Code = 104 // weir raises it for zips that break the Stroom zip format
	FeedNotReceiving       Code = 110
	RejectedByPolicy       Code = 113
	UnexpectedType         Code = 120
	UnknownCompression     Code = 200
	UndeclaredCompression  Code = 201 // weir: body looks compressed but was declared uncompressed
	CompressedInvalid      Code = 400
	MethodNotAllowed       Code = 405 // weir: a method other than POST or PUT
	TooLarge               Code = 410
	LengthRequired         Code = 411 // weir: an HTTP/1.0 post without Content-Length
	HeadersTooLarge        Code = 431 // weir: request line and headers over receive.maxHeaderBytes
	Unavailable            Code = 503 // weir: too busy or out of disk; retry after Retry-After
	UnknownError           Code = 999
)

type codeInfo struct {
	http int
	text string
}

var codes = map[Code]codeInfo{
	OK:                     {http.StatusOK, "OK"},
	FeedMustBeSpecified:    {http.StatusNotAcceptable, "Feed must be specified"},
	FeedNotDefined:         {http.StatusNotAcceptable, "Feed is not defined"},
	InvalidType:            {http.StatusNotAcceptable, "Data type is invalid"},
	MandatoryHeaderMissing: {http.StatusNotAcceptable, "A mandatory header is missing"},
	InvalidDataFormat:      {http.StatusNotAcceptable, "Data format is invalid"},
	FeedNotReceiving:       {http.StatusNotAcceptable, "Feed is not set to receive data"},
	RejectedByPolicy:       {http.StatusNotAcceptable, "Data has been rejected"},
	UnexpectedType:         {http.StatusNotAcceptable, "Unexpected data type"},
	UnknownCompression:     {http.StatusNotAcceptable, "Unknown compression"},
	UndeclaredCompression:  {http.StatusNotAcceptable, "Compressed data sent without a Compression header"},
	CompressedInvalid:      {http.StatusInternalServerError, "Compressed stream invalid"},
	MethodNotAllowed:       {http.StatusMethodNotAllowed, "Method not allowed"},
	TooLarge:               {http.StatusRequestEntityTooLarge, "Content too large"},
	LengthRequired:         {http.StatusLengthRequired, "Length required"},
	HeadersTooLarge:        {http.StatusRequestHeaderFieldsTooLarge, "Request headers too large"},
	Unavailable:            {http.StatusServiceUnavailable, "Service unavailable, retry later"},
	UnknownError:           {http.StatusInternalServerError, "Unknown error"},
}

// HTTPStatus is the HTTP status sent with the code.
func (c Code) HTTPStatus() int {
	if isAuth(c) {
		return http.StatusUnauthorized
	}
	return codes[c].http
}

// Text is the code's short message.
func (c Code) Text() string {
	if isAuth(c) {
		return auth.CodeText(int(c))
	}
	return codes[c].text
}

// isAuth reports whether c is one of the authentication codes (300-315).
func isAuth(c Code) bool { return c >= 300 && c < 400 }

// Codes lists every code weir sends, for documentation and tests.
func Codes() []Code {
	out := []Code{OK, FeedMustBeSpecified, FeedNotDefined, InvalidType, MandatoryHeaderMissing,
		InvalidDataFormat, FeedNotReceiving, RejectedByPolicy, UnexpectedType, UnknownCompression,
		UndeclaredCompression}
	for _, c := range auth.Codes() {
		out = append(out, Code(c))
	}
	return append(out, CompressedInvalid, TooLarge, LengthRequired, HeadersTooLarge, Unavailable, UnknownError)
}

// Error is a post that failed with a status code. Detail says, for the
// sender, what exactly was wrong; Err is the underlying cause, if any.
// Internal is a cause that is logged but never sent (it could reveal
// something about other senders' credentials).
type Error struct {
	Code     Code
	Detail   string
	Err      error
	Internal error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Code.Text())
	if e.Detail != "" {
		b.WriteString(" - ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(code Code, format string, a ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, a...)}
}

func wrap(code Code, err error, format string, a ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, a...), Err: err}
}

// asError classifies any error as a status: errors that are already
// statuses keep theirs; anything else is 999 with its message.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var f *auth.Failure
	if errors.As(err, &f) {
		return &Error{Code: Code(f.Code), Detail: f.Detail, Internal: f.Err}
	}
	return &Error{Code: UnknownError, Err: err}
}

// message is the one-line text sent as Service-Error and as the body:
// "<code text> [Feed: X, Compression: Y, Type: Z] - <detail>: <cause>".
func message(e *Error, feed, compression, typ string) string {
	var b strings.Builder
	b.WriteString(e.Code.Text())
	var ctx []string
	for _, kv := range [][2]string{{"Feed", feed}, {"Compression", compression}, {"Type", typ}} {
		if kv[1] != "" {
			ctx = append(ctx, kv[0]+": "+kv[1])
		}
	}
	if len(ctx) > 0 {
		b.WriteString(" [")
		b.WriteString(strings.Join(ctx, ", "))
		b.WriteString("]")
	}
	if e.Detail != "" {
		b.WriteString(" - ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return oneLine(b.String())
}

// oneLine makes s safe as a header value: no control characters, bounded.
func oneLine(s string) string {
	const max = 1024
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	if len(b) > max {
		b = append(b[:max-3], "..."...)
	}
	return string(b)
}

// writeError sends a failure: the status headers under both names and the
// message as a one-line text body.
func writeError(w http.ResponseWriter, e *Error, msg string, retryAfter int) {
	h := w.Header()
	code := strconv.Itoa(int(e.Code))
	h.Set("Service-Status", code)
	h.Set("Service-Error", msg)
	h.Set("Stroom-Status", code)
	h.Set("Stroom-Error", msg)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if e.Code == Unavailable && retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(e.Code.HTTPStatus())
	_, _ = w.Write([]byte("Service Status " + code + " - " + msg + "\n"))
}
