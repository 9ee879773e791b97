package token

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/weirhq/weir/internal/auth"
)

// acceptedAlgs are the asymmetric signature algorithms go-oidc supports. We
// name them rather than take the discovery document's list, which is about
// ID tokens: an issuer may sign access tokens differently. Symmetric
// algorithms (HS256: the classic "public key as HMAC secret" confusion) and
// "none" are never accepted; go-jose also refuses a key of the wrong type for
// an algorithm, so an RSA key cannot verify an EC signature or vice versa.
var acceptedAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.EdDSA,
}

var errClosed = errors.New("token authenticator is closed")

// issuer verifies JWTs from one OIDC issuer, discovering it lazily.
type issuer struct {
	url       string
	audiences []string // empty: any audience
	subClaim  string
	nameClaim string
	client    *http.Client
	log       *slog.Logger
	t         tuning
	ctx       context.Context // parent of discoveries; cancelled by close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // running discoveries

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier // set once discovery succeeds; never reset
	keys     *jwksThrottle         // the verifier's JWKS fetcher, set with it
	lastErr  error                 // why the last discovery failed
	next     time.Time             // no new discovery before this
	delay    time.Duration         // current backoff
	inflight chan struct{}         // closed when the running discovery ends; nil if none
	failing  bool                  // last discovery failed (for logging state changes only)
	closed   bool
}

// verify checks a JWT. Cheap checks on the unverified token come first so
// that garbage and other issuers' tokens never cause discovery or key fetches.
func (is *issuer) verify(ctx context.Context, raw string) (*auth.Identity, error) {
	alg, iss, err := peek(raw)
	if err != nil {
		return nil, fail("token is not a valid JWT", err, raw)
	}
	if !slices.Contains(acceptedAlgs, alg) {
		return nil, fail("token signing algorithm is not accepted", fmt.Errorf("token alg %q is not one of %v", alg, acceptedAlgs), raw)
	}
	if iss != is.url {
		return nil, fail("token issuer is not accepted", fmt.Errorf("token issuer %q is not %q", iss, is.url), raw)
	}
	v, keys, err := is.getVerifier(ctx)
	if err != nil {
		return nil, fail("token cannot be verified now, try again later", err, raw)
	}
	// The verifier checks the algorithm, the signature against the issuer's
	// key set and the issuer claim; expiry and audience are ours (see
	// discover) because go-oidc allows neither clock skew on expiry nor more
	// than one audience.
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		if keys.failing.Load() {
			// The token named a key we do not hold and the issuer's key set
			// could not be fetched: the sender is not at fault.
			return nil, fail("token cannot be verified now, try again later", fmt.Errorf("verify token: %w", err), raw)
		}
		return nil, fail("token signature is not valid", fmt.Errorf("verify token: %w", err), raw)
	}
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return nil, fail("token is not a valid JWT", fmt.Errorf("token claims: %w", err), raw)
	}

	now := is.t.now()
	skew := is.t.clockSkew
	if tok.Expiry.IsZero() {
		// A token without expiry would be good forever once leaked.
		return nil, fail("token has no expiry", errors.New("token has no exp claim"), raw)
	}
	if now.After(tok.Expiry.Add(skew)) {
		return nil, fail("token has expired", fmt.Errorf("token expired at %s, now %s", tok.Expiry.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)), raw)
	}
	if nbf, ok, err := numericDate(claims["nbf"]); err != nil {
		return nil, fail("token is not a valid JWT", fmt.Errorf("token nbf: %w", err), raw)
	} else if ok && now.Add(skew).Before(nbf) {
		return nil, fail("token is not yet valid", fmt.Errorf("token not valid before %s, now %s", nbf.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)), raw)
	}
	if len(is.audiences) > 0 && !slices.ContainsFunc(tok.Audience, func(a string) bool { return slices.Contains(is.audiences, a) }) {
		return nil, fail("token audience is not accepted", fmt.Errorf("token audience %q has none of %q", tok.Audience, is.audiences), raw)
	}

	sub, ok := claimString(claims[is.subClaim])
	if !ok {
		return nil, fail(fmt.Sprintf("token has no %q claim", is.subClaim), fmt.Errorf("claim %q is missing, empty or not a string", is.subClaim), raw)
	}
	name, ok := claimString(claims[is.nameClaim])
	if !ok {
		name = sub // service accounts often have no username
	}
	return &auth.Identity{Type: auth.Token, SubjectID: sub, DisplayName: name}, nil
}

// getVerifier returns the verifier, discovering the issuer if that has not
// yet succeeded. One discovery runs at a time and callers wait for it; after
// a failure, callers fail at once until the backoff has passed, so a dead
// issuer sees one request per interval, not one per token.
func (is *issuer) getVerifier(ctx context.Context) (*oidc.IDTokenVerifier, *jwksThrottle, error) {
	is.mu.Lock()
	switch {
	case is.closed:
		is.mu.Unlock()
		return nil, nil, errClosed
	case is.verifier != nil:
		v, k := is.verifier, is.keys
		is.mu.Unlock()
		return v, k, nil
	case is.inflight == nil:
		if now := is.t.now(); now.Before(is.next) {
			err := fmt.Errorf("%w (next attempt in %s)", is.lastErr, is.next.Sub(now).Round(time.Millisecond))
			is.mu.Unlock()
			return nil, nil, err
		}
		is.inflight = make(chan struct{})
		is.wg.Add(1)
		// A goroutine, so that a waiting request can give up (its context)
		// without abandoning a discovery the next request would redo.
		go is.discover(is.inflight)
	}
	done := is.inflight
	is.mu.Unlock()

	select {
	case <-done:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("waiting for OIDC discovery: %w", context.Cause(ctx))
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.verifier != nil {
		return is.verifier, is.keys, nil
	}
	if is.closed {
		return nil, nil, errClosed
	}
	return nil, nil, is.lastErr
}

// discover fetches the discovery document and builds the verifier.
func (is *issuer) discover(done chan struct{}) {
	defer is.wg.Done()
	v, keys, jwksURL, err := is.fetchProvider()

	is.mu.Lock()
	defer is.mu.Unlock()
	defer close(done)
	is.inflight = nil
	if err == nil {
		is.verifier, is.keys = v, keys
		if is.failing {
			is.log.Info("OIDC issuer reachable again; tokens can be verified", "jwks_uri", jwksURL)
		} else {
			is.log.Info("OIDC issuer discovered", "jwks_uri", jwksURL)
		}
		is.failing = false
		return
	}
	is.lastErr = err
	if is.delay == 0 {
		is.delay = is.t.retryMin
	} else {
		is.delay = min(2*is.delay, is.t.retryMax)
	}
	is.next = is.t.now().Add(is.delay)
	if is.closed {
		return
	}
	if !is.failing {
		// Once per state change: a dead issuer must not flood the log at
		// the rate tokens arrive.
		is.log.Warn("OIDC issuer not reachable; tokens fail with 311 until it is", "error", err, "retry_in", is.delay)
		is.failing = true
	} else {
		is.log.Debug("OIDC issuer still not reachable", "error", err, "retry_in", is.delay)
	}
}

func (is *issuer) fetchProvider() (*oidc.IDTokenVerifier, *jwksThrottle, string, error) {
	ctx, cancel := context.WithTimeout(is.ctx, is.t.discoveryTimeout)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, is.client), is.url)
	if err != nil {
		return nil, nil, "", fmt.Errorf("discover OIDC issuer %s: %w", is.url, err)
	}
	var doc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := p.Claims(&doc); err != nil {
		return nil, nil, "", fmt.Errorf("discover OIDC issuer %s: %w", is.url, err)
	}
	if doc.JWKSURI == "" {
		return nil, nil, "", fmt.Errorf("discover OIDC issuer %s: discovery document has no jwks_uri", is.url)
	}
	// The remote key set caches keys and refetches the JWKS when a token
	// names a kid it does not hold: that is how rotation reaches us without a
	// restart. Its context only configures the client (go-oidc ignores its
	// cancellation), so it is not tied to ctx above, which ends with this
	// discovery.
	keyClient, keys := throttledClient(is.client, doc.JWKSURI, is.t)
	keyCtx := oidc.ClientContext(context.WithoutCancel(is.ctx), keyClient)
	v := p.VerifierContext(keyCtx, &oidc.Config{
		SupportedSigningAlgs: acceptedAlgs,
		SkipClientIDCheck:    true, // checked in verify, against a list
		SkipExpiryCheck:      true, // checked in verify, with skew
	})
	return v, keys, doc.JWKSURI, nil
}

func (is *issuer) close() {
	is.mu.Lock()
	is.closed = true
	is.mu.Unlock()
	is.cancel()
	is.wg.Wait()
}

// peek reads the algorithm and issuer of a compact JWT without verifying it.
func peek(raw string) (alg, iss string, err error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", "", fmt.Errorf("a JWT has 3 dot-separated parts, this has %d", len(parts))
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(parts[0], &h); err != nil {
		return "", "", fmt.Errorf("JWT header: %w", err)
	}
	var p struct {
		Iss string `json:"iss"`
	}
	if err := decodeSegment(parts[1], &p); err != nil {
		return "", "", fmt.Errorf("JWT payload: %w", err)
	}
	return h.Alg, p.Iss, nil
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("base64url: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return nil
}

// claimString reads a claim as a string. Numbers are taken in their exact
// text, because some issuers use numeric subject ids.
func claimString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, s != ""
	}
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&n); err == nil {
		return n.String(), true
	}
	return "", false
}

// numericDate reads a JWT NumericDate (seconds since the epoch, possibly
// fractional); ok is false when the claim is absent.
func numericDate(raw json.RawMessage) (t time.Time, ok bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, false, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return time.Time{}, false, fmt.Errorf("not a number: %w", err)
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)), true, nil
}
