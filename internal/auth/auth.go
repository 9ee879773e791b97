// Package auth decides who sent a post. Each authenticator recognises one
// kind of credential; a Chain tries the enabled ones in a fixed order and
// the first identity wins. A credential that is absent or not of an
// authenticator's kind is "not mine" (nil, nil); one that is of its kind but
// wrong is a Failure with the status code that says which credential failed.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/weirhq/weir/internal/attr"
)

// Type is a kind of sender credential, named as in the reference system.
type Type string

const (
	DataFeedKey         Type = "DATA_FEED_KEY"
	CertificateIdentity Type = "CERTIFICATE_IDENTITY"
	Token               Type = "TOKEN"
	Certificate         Type = "CERTIFICATE"
)

// Order is the order in which authenticators are tried. It is the
// reference system's: the most specific credential first, so that a
// certificate identity (owner + DN, with attributes) is found before the
// plain certificate CN would match the same certificate.
var Order = []Type{DataFeedKey, CertificateIdentity, Token, Certificate}

// ParseType accepts a type name in any case.
func ParseType(s string) (Type, error) {
	t := Type(strings.ToUpper(strings.TrimSpace(s)))
	if slices.Contains(Order, t) {
		return t, nil
	}
	return "", fmt.Errorf("authentication type %q is not one of DATA_FEED_KEY, CERTIFICATE_IDENTITY, TOKEN, CERTIFICATE", s)
}

// DisplayName is how a type is named in messages to senders.
func (t Type) DisplayName() string {
	switch t {
	case DataFeedKey:
		return "Data feed key"
	case CertificateIdentity:
		return "Certificate identity"
	case Token:
		return "OAuth Token"
	case Certificate:
		return "Certificate"
	}
	return string(t)
}

// Identity is an authenticated sender.
type Identity struct {
	Type        Type
	SubjectID   string    // stored as UploadUserId
	DisplayName string    // stored as UploadUsername
	Attributes  *attr.Map // applied to the post's attributes, overriding the sender's headers; may be nil
}

// Unauthenticated is the identity of a post when authentication is not required.
const Unauthenticated = "UNAUTHENTICATED_USER"

// Request is what an authenticator sees of a post.
type Request struct {
	HTTP  *http.Request
	Attrs *attr.Map // the post's attributes (headers and query parameters)
}

// Authorization is the raw Authorization header, minus an optional
// "Bearer " prefix (any case): the form every bearer credential arrives in.
func (r *Request) Authorization() string {
	v := strings.TrimSpace(r.HTTP.Header.Get("Authorization"))
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		v = strings.TrimSpace(v[7:])
	}
	return v
}

// ForeignScheme is the authentication scheme an Authorization header value
// names when it is not Bearer, as sent ("Basic" for "Basic dXNlcjpwYXNz"),
// else "". weir takes bearer credentials only (a data feed key, an API key,
// an OIDC token), with or without the "Bearer " prefix, so a value without
// a scheme is "" too. A scheme is the first word of a value that has more
// (RFC 9110 §11.4), or a registered scheme name sent alone ("Negotiate").
// A first word that cannot be a scheme name (it is long, or has characters
// other than letters, digits and '-': a key or a token) is not taken for
// one, so that a message naming the scheme never quotes a credential.
func ForeignScheme(header string) string {
	v := strings.TrimSpace(header)
	word, _, more := strings.Cut(v, " ")
	if w, _, tab := strings.Cut(word, "\t"); tab {
		word, more = w, true
	}
	if !more && !slices.ContainsFunc(registeredSchemes, func(s string) bool { return strings.EqualFold(s, word) }) {
		return ""
	}
	if !schemeName(word) || strings.EqualFold(word, "bearer") {
		return ""
	}
	return word
}

// registeredSchemes are the names in IANA's HTTP Authentication Scheme
// Registry, and NTLM: a value that is only one of them is a scheme without
// credentials, not a bearer credential.
var registeredSchemes = []string{"Basic", "Bearer", "Concealed", "Digest", "DPoP", "GNAP", "HOBA", "Mutual",
	"Negotiate", "NTLM", "OAuth", "PrivateToken", "SCRAM-SHA-1", "SCRAM-SHA-256", "vapid"}

// schemeName reports whether s looks like an authentication scheme's name:
// a letter, then at most 31 letters, digits or '-'.
func schemeName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// SchemeError is the cause of a Failure for an Authorization header of a
// scheme other than Bearer (see ForeignScheme). A Chain that gets such a
// failure says what it accepts instead.
type SchemeError struct{ Scheme string }

func (e *SchemeError) Error() string {
	return "the Authorization header's scheme is " + e.Scheme + ", not Bearer"
}

// Describer is an Authenticator that says which bearer credentials it
// takes, for the messages that tell a sender what to send instead of the
// scheme it used: "an API key (sak_...)", "an OIDC access token".
type Describer interface {
	Accepts() []string
}

// Authenticator recognises one kind of credential.
type Authenticator interface {
	// Authenticate returns the sender's identity; (nil, nil) when the
	// request carries no credential of this kind; a *Failure when it carries
	// one that is wrong.
	Authenticate(ctx context.Context, r *Request) (*Identity, error)
}

// Status codes, as in the reference system's table (all HTTP 401).
const (
	CertificateRequired           = 300
	TokenRequired                 = 301
	TokenOrCertificateRequired    = 302
	DataFeedKeyRequired           = 303
	AuthenticationRequired        = 304
	CertificateFailed             = 310
	TokenFailed                   = 311
	TokenOrCertificateFailed      = 312
	DataFeedKeyFailed             = 313
	DataFeedKeyExpired            = 314
	CertificateIdentityFailed     = 315
	firstCode, lastCode           = 300, 315
	codeTextUnknownAuthentication = "Authentication failed"
)

var codeText = map[int]string{
	CertificateRequired:        "Client Certificate Required",
	TokenRequired:              "Client Token Required",
	TokenOrCertificateRequired: "Client token or certificate required",
	DataFeedKeyRequired:        "Client data feed key required",
	AuthenticationRequired:     "Authentication of the client is required",
	CertificateFailed:          "Client Certificate failed authentication",
	TokenFailed:                "Client Token failed authentication",
	TokenOrCertificateFailed:   "Client Token or Certificate failed authentication",
	DataFeedKeyFailed:          "Data feed key failed authentication",
	DataFeedKeyExpired:         "Data feed key has expired",
	CertificateIdentityFailed:  "Client Certificate DN failed authentication",
}

// Codes lists the authentication status codes.
func Codes() []int {
	out := make([]int, 0, len(codeText))
	for c := firstCode; c <= lastCode; c++ {
		if _, ok := codeText[c]; ok {
			out = append(out, c)
		}
	}
	return out
}

// CodeText is the short text of an authentication status code.
func CodeText(code int) string {
	if t, ok := codeText[code]; ok {
		return t
	}
	return codeTextUnknownAuthentication
}

// Failure is an authentication that failed. Detail tells the sender what to
// fix without revealing anything about other keys, owners or identities.
type Failure struct {
	Code   int
	Detail string
	Err    error // internal cause, logged but never sent
}

func (f *Failure) Error() string {
	s := CodeText(f.Code)
	if f.Detail != "" {
		s += " - " + f.Detail
	}
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}

func (f *Failure) Unwrap() error { return f.Err }

// Failf makes a Failure.
func Failf(code int, format string, a ...any) *Failure {
	return &Failure{Code: code, Detail: fmt.Sprintf(format, a...)}
}

// Chain tries the enabled authenticators in Order.
type Chain struct {
	required    bool
	enabled     []Type // in Order
	auths       map[Type]Authenticator
	ownerHeader string // names a credential's account in messages; see SetOwnerHeader
}

// SetOwnerHeader names the header in which senders name their account
// (receive.dataFeedOwnerMetaKey) for the messages that ask for it; the
// default is AccountId.
func (c *Chain) SetOwnerHeader(h string) {
	if h = strings.TrimSpace(h); h != "" {
		c.ownerHeader = h
	}
}

// NewChain builds a chain. Every enabled type must have an authenticator.
func NewChain(required bool, enabled []Type, auths map[Type]Authenticator) (*Chain, error) {
	c := &Chain{required: required, auths: auths, ownerHeader: "AccountId"}
	for _, t := range Order {
		if !slices.Contains(enabled, t) {
			continue
		}
		if auths[t] == nil {
			return nil, fmt.Errorf("authentication type %s is enabled but not configured", t)
		}
		c.enabled = append(c.enabled, t)
	}
	if required && len(c.enabled) == 0 {
		return nil, fmt.Errorf("authentication is required but no authentication type is enabled")
	}
	return c, nil
}

// Required reports whether senders must authenticate.
func (c *Chain) Required() bool { return c.required }

// Authenticate returns the post's identity, or a *Failure.
//
// An Authorization header of another scheme than Bearer ("Basic ...") fails
// with the code it always did (the token authenticator's 311 when TOKEN is
// enabled, else the 30x of a missing credential), but the message names the
// scheme and says what this chain takes instead: the authenticator's own
// could only say that the value is no valid token or that none was sent.
func (c *Chain) Authenticate(ctx context.Context, r *Request) (*Identity, error) {
	for _, t := range c.enabled {
		id, err := c.auths[t].Authenticate(ctx, r)
		if err != nil {
			var f *Failure
			var se *SchemeError
			if errors.As(err, &f) && errors.As(err, &se) {
				return nil, &Failure{Code: f.Code, Detail: c.schemeDetail(se.Scheme), Err: f.Err}
			}
			return nil, err
		}
		if id != nil {
			id.Type = t
			return id, nil
		}
	}
	if !c.required {
		return &Identity{SubjectID: Unauthenticated, DisplayName: Unauthenticated}, nil
	}
	f := c.missing()
	if r != nil && r.HTTP != nil {
		if scheme := ForeignScheme(r.HTTP.Header.Get("Authorization")); scheme != "" {
			f.Detail, f.Err = c.schemeDetail(scheme), &SchemeError{Scheme: scheme}
		}
	}
	return nil, f
}

// schemeDetail is the message for an Authorization header of a scheme that
// is not Bearer: which credentials the enabled types take instead.
func (c *Chain) schemeDetail(scheme string) string {
	var bearer []string
	cert := ""
	for _, t := range c.enabled {
		switch t {
		case DataFeedKey:
			bearer = append(bearer, "a data feed key (sdk_...)")
		case Token:
			what := []string{"a token"}
			if d, ok := c.auths[t].(Describer); ok && len(d.Accepts()) > 0 {
				what = d.Accepts()
			}
			bearer = append(bearer, what...)
		case CertificateIdentity:
			cert = "connect with a client certificate that is a certificate identity, and name its account in the " + c.ownerHeader + " header"
		case Certificate:
			cert = "connect with a client certificate" // any verified one: it covers a certificate identity's
		}
	}
	return UnsupportedScheme(scheme, bearer, cert)
}

// UnsupportedScheme is the message for an Authorization header of a scheme
// weir does not take (see ForeignScheme), saying what to send instead: the
// bearer credentials taken ("a data feed key (sdk_...)", ...) and, if not
// "", another way ("connect with a client certificate").
func UnsupportedScheme(scheme string, bearer []string, otherwise string) string {
	msg := scheme + " credentials are not supported"
	sep := ": "
	if n := len(bearer); n > 0 {
		list := bearer[0]
		if n > 1 {
			list = strings.Join(bearer[:n-1], ", ") + " or " + bearer[n-1]
		}
		msg += sep + "send " + list + " in the Authorization header, as Bearer <credential>"
		sep = ", or "
	}
	if otherwise != "" {
		msg += sep + otherwise
	}
	return msg
}

// missing is the failure for a post that presented no usable credential:
// the code names what the configuration accepts, as the reference does.
func (c *Chain) missing() *Failure {
	has := func(ts ...Type) bool {
		if len(c.enabled) != len(ts) {
			return false
		}
		for _, t := range ts {
			if !slices.Contains(c.enabled, t) {
				return false
			}
		}
		return true
	}
	switch {
	case has(DataFeedKey):
		return Failf(DataFeedKeyRequired, "send a data feed key in the Authorization header")
	case has(Token):
		return Failf(TokenRequired, "send a token in the Authorization header")
	case has(Certificate):
		return Failf(CertificateRequired, "connect with a client certificate")
	case has(CertificateIdentity):
		// A sender with a certificate gets this too (its DN and the account
		// it names match no certificate identity): telling it only to
		// connect with a certificate would send it looking in the wrong place.
		return Failf(CertificateRequired, "connect with a client certificate that is a certificate identity, and name its account in the %s header", c.ownerHeader)
	case has(Token, Certificate):
		return Failf(TokenOrCertificateRequired, "send a token in the Authorization header or connect with a client certificate")
	}
	names := make([]string, len(c.enabled))
	for i, t := range c.enabled {
		names[i] = t.DisplayName()
	}
	return Failf(AuthenticationRequired, "You must use one of the following authentication mechanisms [%s]", strings.Join(names, ", "))
}

// Apply records an identity on a post's attributes: the identity's own
// attributes override the sender's, then UploadUserId and UploadUsername.
func Apply(attrs *attr.Map, id *Identity) {
	if id.Attributes != nil {
		attrs.Overlay(id.Attributes)
	}
	attrs.Put("UploadUserId", id.SubjectID)
	attrs.Put("UploadUsername", id.DisplayName)
}
