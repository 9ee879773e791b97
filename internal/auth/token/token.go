// Package token verifies bearer tokens: OpenID Connect JWTs from a configured
// issuer, and weir's own API keys (sak_...). It serves both the /datafeed
// TOKEN authenticator and, through Verify, the REST API.
//
// Every rejection is an *auth.Failure with code 311 (TokenFailed). Its Detail
// says what the sender should fix and is safe to send; the precise cause is in
// Err, which is for the log. Neither ever contains the credential itself.
package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
)

// Credential prefixes. A data feed key belongs to the DATA_FEED_KEY
// authenticator even when it is malformed, so TOKEN must leave it alone;
// an API key is weir's own and never goes to the identity provider.
const (
	apiKeyPrefix      = "sak_"
	dataFeedKeyPrefix = "sdk_"
)

// maxTokenLen bounds the work an unauthenticated sender can make us do
// (base64 and JSON decoding) before any signature is checked. Real access
// tokens are a few KiB at most.
const maxTokenLen = 64 << 10

// APIKeyVerifier verifies weir's own API keys (sak_...). It returns the key
// owner's identity, or an error (a *auth.Failure or any error) when the key is
// not valid. Its errors must not contain the key.
type APIKeyVerifier interface {
	VerifyAPIKey(ctx context.Context, key string) (*auth.Identity, error)
}

// Options configures an Authenticator.
type Options struct {
	OIDC       config.OIDC    // Issuer "" = OIDC tokens not accepted
	APIKeys    APIKeyVerifier // nil = API keys not accepted
	HTTPClient *http.Client   // for discovery and JWKS; nil = a client with sane timeouts
	Logger     *slog.Logger
}

// Authenticator verifies bearer tokens. It is safe for concurrent use.
type Authenticator struct {
	issuer    *issuer // nil: OIDC tokens are not accepted
	apiKeys   APIKeyVerifier
	ownClient *http.Client // the client we made, whose idle connections Close releases
	closeOnce sync.Once
}

// tuning holds what tests need to control: time and the retry intervals
// that would otherwise make them slow or flaky.
type tuning struct {
	now              func() time.Time
	retryMin         time.Duration // first wait after a failed discovery
	retryMax         time.Duration // cap of the doubling wait
	discoveryTimeout time.Duration // bounds one discovery even with a caller's client that has no timeout
	jwksMinInterval  time.Duration // least time between two JWKS fetches
	clockSkew        time.Duration // tolerated difference between our clock and the issuer's
}

func defaultTuning() tuning {
	return tuning{
		now:      time.Now,
		retryMin: 2 * time.Second,
		// Short enough that tokens work again soon after the issuer
		// recovers, long enough that a dead issuer is not hammered.
		retryMax:         30 * time.Second,
		discoveryTimeout: 15 * time.Second,
		// A forged token with the issuer's kid (or any unknown kid) makes
		// the key set refetch; this bounds that to one fetch per interval
		// however many such tokens arrive. A genuinely new key is at most
		// this late.
		jwksMinInterval: 5 * time.Second,
		clockSkew:       time.Minute,
	}
}

// New makes an Authenticator. It does not contact the issuer: discovery
// happens on the first token, so that weir starts even when the identity
// provider is briefly unreachable. It fails only on configuration errors.
func New(ctx context.Context, o Options) (*Authenticator, error) {
	return newAuthenticator(ctx, o, defaultTuning())
}

func newAuthenticator(ctx context.Context, o Options, t tuning) (*Authenticator, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "token")
	issuerURL := strings.TrimSpace(o.OIDC.Issuer)
	if issuerURL == "" && o.APIKeys == nil {
		// A TOKEN authenticator that can accept nothing would reject every
		// token with a misleading message; better to refuse to start.
		return nil, errors.New("token authentication: neither an OIDC issuer nor API keys are configured")
	}
	a := &Authenticator{apiKeys: o.APIKeys}
	if issuerURL == "" {
		return a, nil
	}

	u, err := url.Parse(issuerURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("token authentication: OIDC issuer %q is not an http(s) URL", issuerURL)
	}
	if u.Scheme == "http" {
		log.Warn("OIDC issuer uses plain HTTP: its signing keys could be replaced in transit; use https outside tests and private networks",
			"issuer", issuerURL)
	}
	var audiences []string
	for _, s := range o.OIDC.Audiences {
		if s = strings.TrimSpace(s); s != "" {
			audiences = append(audiences, s)
		}
	}
	if len(audiences) == 0 {
		// Accepting any audience means a token the issuer minted for some
		// other application is good here too. Allowed, because some
		// deployments have one issuer per application, but it must be a
		// visible choice.
		log.Warn("no OIDC audiences configured: tokens from the issuer are accepted whatever their audience; set security.oidc.audiences",
			"issuer", issuerURL)
	}
	subClaim := strings.TrimSpace(o.OIDC.UniqueIdentityClaim)
	if subClaim == "" {
		subClaim = "sub"
	}
	nameClaim := strings.TrimSpace(o.OIDC.UsernameClaim)
	if nameClaim == "" {
		nameClaim = "preferred_username"
	}

	client := o.HTTPClient
	if client == nil {
		client = defaultClient()
		a.ownClient = client
	}
	// Discovery outlives the request that triggers it (other requests wait
	// for it), so it must not inherit that request's cancellation, nor the
	// caller's startup context's: only Close ends it.
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.issuer = &issuer{
		url:       issuerURL,
		audiences: audiences,
		subClaim:  subClaim,
		nameClaim: nameClaim,
		client:    client,
		log:       log.With("issuer", issuerURL),
		t:         t,
		ctx:       base,
		cancel:    cancel,
	}
	return a, nil
}

// defaultClient bounds every stage of a request so that a stuck identity
// provider cannot hold a discovery or key fetch open indefinitely.
func defaultClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 10 * time.Second
	tr.TLSHandshakeTimeout = 10 * time.Second
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// Verify checks a raw bearer credential (no "Bearer " prefix needed, though
// one is tolerated): sak_... is an API key, anything else must be a JWT from
// the OIDC issuer. A value of another scheme ("Basic ...") fails naming it.
// Errors are *auth.Failure with code 311.
func (a *Authenticator) Verify(ctx context.Context, raw string) (*auth.Identity, error) {
	if scheme := auth.ForeignScheme(raw); scheme != "" {
		return nil, a.schemeFailure(scheme)
	}
	return a.verify(ctx, bearerValue(raw))
}

// verify checks a bearer credential without its "Bearer " prefix.
func (a *Authenticator) verify(ctx context.Context, raw string) (*auth.Identity, error) {
	switch {
	case raw == "":
		return nil, fail("no token was sent", nil, "")
	case len(raw) > maxTokenLen:
		return nil, fail("token is too long", fmt.Errorf("token of %d bytes exceeds %d", len(raw), maxTokenLen), "")
	case strings.HasPrefix(raw, apiKeyPrefix):
		return a.verifyAPIKey(ctx, raw)
	case a.issuer == nil:
		return nil, fail("OIDC tokens are not accepted", errors.New("no OIDC issuer is configured"), raw)
	}
	id, err := a.issuer.verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	return id, nil
}

// Authenticate implements auth.Authenticator (type TOKEN) for /datafeed. No
// Authorization, or a data feed key, is not ours (nil, nil); anything else
// was sent as a token and must verify.
func (a *Authenticator) Authenticate(ctx context.Context, r *auth.Request) (*auth.Identity, error) {
	v := bearerValue(r.Authorization())
	if v == "" || strings.HasPrefix(v, dataFeedKeyPrefix) {
		return nil, nil
	}
	// Judged on the header as sent: "Bearer Basic x" is a bearer token.
	if scheme := auth.ForeignScheme(r.HTTP.Header.Get("Authorization")); scheme != "" {
		return nil, a.schemeFailure(scheme)
	}
	return a.verify(ctx, v)
}

// Accepts says which bearer credentials the authenticator takes (see
// auth.Describer).
func (a *Authenticator) Accepts() []string {
	var out []string
	if a.apiKeys != nil {
		out = append(out, "an API key (sak_...)")
	}
	if a.issuer != nil {
		out = append(out, "an OIDC access token")
	}
	return out
}

// schemeFailure is the failure for an Authorization header of a scheme
// other than Bearer ("Basic ..."): it names the scheme and says what the
// authenticator takes. A Chain says what all its authenticators take.
func (a *Authenticator) schemeFailure(scheme string) *auth.Failure {
	return fail(auth.UnsupportedScheme(scheme, a.Accepts(), ""), &auth.SchemeError{Scheme: scheme}, "")
}

// Close stops any discovery in progress and releases idle connections of the
// client New made. Tokens that still need discovery fail after Close.
func (a *Authenticator) Close() {
	a.closeOnce.Do(func() {
		if a.issuer != nil {
			a.issuer.close()
		}
		if a.ownClient != nil {
			a.ownClient.CloseIdleConnections()
		}
	})
}

func (a *Authenticator) verifyAPIKey(ctx context.Context, key string) (*auth.Identity, error) {
	if a.apiKeys == nil {
		return nil, fail("API keys are not accepted", errors.New("no API key verifier is configured"), key)
	}
	id, err := a.apiKeys.VerifyAPIKey(ctx, key)
	if err != nil {
		// The verifier's own Failure detail is meant for the sender
		// (e.g. "API key has expired"); its code is not, because on this
		// path every failure is a token failure.
		detail := "API key is not valid"
		var f *auth.Failure
		if errors.As(err, &f) && f.Detail != "" {
			detail = f.Detail
		}
		return nil, fail(detail, fmt.Errorf("verify API key: %w", err), key)
	}
	if id == nil || id.SubjectID == "" {
		return nil, fail("API key is not valid", errors.New("API key verifier returned no identity"), key)
	}
	// Copy: the verifier may hand out a shared (cached) identity.
	out := *id
	out.Type = auth.Token
	if out.DisplayName == "" {
		out.DisplayName = out.SubjectID
	}
	return &out, nil
}

// bearerValue strips an optional "Bearer " prefix. A bare "Bearer" is no
// credential at all: the sender is better told a token is required than that
// the word "Bearer" is not a valid one.
func bearerValue(v string) string {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "bearer") {
		return ""
	}
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		v = strings.TrimSpace(v[7:])
	}
	return v
}

// fail builds the 311 failure. secret is the credential: should a cause
// quote it, it is cut out, because Err goes to the log.
func fail(detail string, cause error, secret string) *auth.Failure {
	if cause != nil && secret != "" && strings.Contains(cause.Error(), secret) {
		cause = errors.New(strings.ReplaceAll(cause.Error(), secret, "[redacted]"))
	}
	return &auth.Failure{Code: auth.TokenFailed, Detail: detail, Err: cause}
}
