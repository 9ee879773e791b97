package token

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
)

// signingKey is an issuer's private key with its kid and algorithm.
type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

func rsaKey(t *testing.T, kid string) signingKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{kid: kid, alg: jose.RS256, priv: k}
}

func ecKey(t *testing.T, kid string) signingKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{kid: kid, alg: jose.ES256, priv: k}
}

func (k signingKey) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
}

// sign makes a compact JWS of claims, with the kid in its header.
func (k signingKey) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testIssuer is an OIDC issuer on 127.0.0.1: a discovery document and a
// JWKS of whatever keys it currently publishes. While down it answers 503.
type testIssuer struct {
	srv           *httptest.Server
	mu            sync.Mutex
	published     []jose.JSONWebKey
	down          atomic.Bool     // everything answers 503
	jwksDown      atomic.Bool     // the JWKS answers 503
	gate          <-chan struct{} // if set, discovery answers only once it is closed
	discoveryHits atomic.Int32
	jwksHits      atomic.Int32
}

// setGate makes discovery wait until gate is closed or the client gives up.
func (ti *testIssuer) setGate(gate <-chan struct{}) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.gate = gate
}

func newTestIssuer(t *testing.T, keys ...signingKey) *testIssuer {
	t.Helper()
	ti := &testIssuer{}
	ti.publish(keys...)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		ti.mu.Lock()
		gate := ti.gate
		ti.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                ti.srv.URL,
			"jwks_uri":                              ti.srv.URL + "/jwks",
			"authorization_endpoint":                ti.srv.URL + "/auth",
			"token_endpoint":                        ti.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		ti.mu.Lock()
		set := jose.JSONWebKeySet{Keys: ti.published}
		ti.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	})
	ti.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			ti.discoveryHits.Add(1)
		case "/jwks":
			ti.jwksHits.Add(1)
		}
		if ti.down.Load() || (r.URL.Path == "/jwks" && ti.jwksDown.Load()) {
			http.Error(w, "starting up", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(ti.srv.Close)
	return ti
}

// publish replaces the published key set.
func (ti *testIssuer) publish(keys ...signingKey) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.published = nil
	for _, k := range keys {
		ti.published = append(ti.published, k.public())
	}
}

func (ti *testIssuer) url() string { return ti.srv.URL }

// claims is a valid token's claim set for iss at now.
func claims(iss string, now time.Time) map[string]any {
	return map[string]any{
		"iss":                iss,
		"sub":                "user-1",
		"aud":                "weir",
		"exp":                now.Add(time.Hour).Unix(),
		"iat":                now.Unix(),
		"preferred_username": "alice",
	}
}

// with returns a copy of m with the given changes; a nil value deletes.
func with(m map[string]any, kv ...any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		if kv[i+1] == nil {
			delete(out, k)
		} else {
			out[k] = kv[i+1]
		}
	}
	return out
}

// fakeClock is a settable clock for backoff and throttle intervals.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// oidcConfig is the default OIDC config for an issuer, accepting audience "weir".
func oidcConfig(iss string) config.OIDC {
	return config.OIDC{Issuer: iss, Audiences: []string{"weir"}, UniqueIdentityClaim: "sub", UsernameClaim: "preferred_username"}
}

// newTest makes an Authenticator with tuning t (nil: defaults) and closes it
// at the end of the test.
func newTest(t *testing.T, o Options, tu *tuning) *Authenticator {
	t.Helper()
	tn := defaultTuning()
	if tu != nil {
		tn = *tu
	}
	a, err := newAuthenticator(context.Background(), o, tn)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(a.Close)
	return a
}

// request is a /datafeed post carrying an Authorization header (if not "").
func request(authorization string) *auth.Request {
	r := httptest.NewRequest(http.MethodPost, "/datafeed", nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	return &auth.Request{HTTP: r}
}

// failure asserts err is a 311 Failure whose detail is want.
func failure(t *testing.T, err error, want string) *auth.Failure {
	t.Helper()
	f, ok := err.(*auth.Failure)
	if !ok {
		t.Fatalf("error %v (%T) is not an *auth.Failure", err, err)
	}
	if f.Code != auth.TokenFailed {
		t.Errorf("code %d, want %d", f.Code, auth.TokenFailed)
	}
	if f.Detail != want {
		t.Errorf("detail %q, want %q (cause: %v)", f.Detail, want, f.Err)
	}
	return f
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
