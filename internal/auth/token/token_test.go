package token

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
)

func TestValidToken(t *testing.T) {
	for _, mk := range []func(*testing.T, string) signingKey{rsaKey, ecKey} {
		k := mk(t, "k1")
		t.Run(string(k.alg), func(t *testing.T) {
			ti := newTestIssuer(t, k)
			a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
			tok := k.sign(t, claims(ti.url(), time.Now()))

			id, err := a.Verify(context.Background(), tok)
			if err != nil {
				t.Fatal(err)
			}
			if id.Type != auth.Token || id.SubjectID != "user-1" || id.DisplayName != "alice" {
				t.Errorf("identity %+v, want TOKEN user-1 alice", id)
			}
		})
	}
}

func TestAudienceIsOneOfTheList(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	cfg := oidcConfig(ti.url())
	cfg.Audiences = []string{"other", "weir-datafeed"}
	a := newTest(t, Options{OIDC: cfg}, nil)
	now := time.Now()
	for _, aud := range []any{"weir-datafeed", []string{"x", "other"}} {
		if _, err := a.Verify(context.Background(), k.sign(t, with(claims(ti.url(), now), "aud", aud))); err != nil {
			t.Errorf("aud %v: %v", aud, err)
		}
	}
	_, err := a.Verify(context.Background(), k.sign(t, with(claims(ti.url(), now), "aud", []string{"x", "y"})))
	failure(t, err, "token audience is not accepted")
}

func TestCustomClaimNames(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	cfg := oidcConfig(ti.url())
	cfg.UniqueIdentityClaim, cfg.UsernameClaim = "oid", "email"
	a := newTest(t, Options{OIDC: cfg}, nil)
	now := time.Now()

	id, err := a.Verify(context.Background(), k.sign(t, with(claims(ti.url(), now), "oid", "0f1e-77", "email", "alice@example.org")))
	if err != nil {
		t.Fatal(err)
	}
	if id.SubjectID != "0f1e-77" || id.DisplayName != "alice@example.org" {
		t.Errorf("identity %+v, want 0f1e-77 alice@example.org", id)
	}

	// Numeric ids keep their exact text.
	id, err = a.Verify(context.Background(), k.sign(t, with(claims(ti.url(), now), "oid", json.Number("12345678901234567890"))))
	if err != nil {
		t.Fatal(err)
	}
	if id.SubjectID != "12345678901234567890" {
		t.Errorf("numeric subject %q", id.SubjectID)
	}

	// The configured claim, not sub, is the identity: without it the token fails.
	_, err = a.Verify(context.Background(), k.sign(t, claims(ti.url(), now)))
	failure(t, err, `token has no "oid" claim`)
}

func TestDisplayNameFallsBackToSubject(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	id, err := a.Verify(context.Background(), k.sign(t, with(claims(ti.url(), time.Now()), "preferred_username", nil)))
	if err != nil {
		t.Fatal(err)
	}
	if id.SubjectID != "user-1" || id.DisplayName != "user-1" {
		t.Errorf("identity %+v, want user-1 user-1", id)
	}
}

func TestRejected(t *testing.T) {
	k := rsaKey(t, "k1")
	ti := newTestIssuer(t, k)
	log, logs := testLogger()
	a := newTest(t, Options{OIDC: oidcConfig(ti.url()), Logger: log}, nil)
	now := time.Now()
	valid := claims(ti.url(), now)
	stranger := rsaKey(t, "k1")  // same kid, different key
	unknownKid := ecKey(t, "k9") // a kid the issuer never published
	hs, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hsObj, err := hs.Sign(mustJSON(t, valid))
	if err != nil {
		t.Fatal(err)
	}
	hsTok, _ := hsObj.CompactSerialize()

	cases := []struct {
		name, token, detail string
	}{
		{"expired", k.sign(t, with(valid, "exp", now.Add(-2*time.Hour).Unix(), "iat", now.Add(-3*time.Hour).Unix())), "token has expired"},
		{"expired beyond skew", k.sign(t, with(valid, "exp", now.Add(-2*time.Minute).Unix())), "token has expired"},
		{"not yet valid", k.sign(t, with(valid, "nbf", now.Add(10*time.Minute).Unix())), "token is not yet valid"},
		{"no expiry", k.sign(t, with(valid, "exp", nil)), "token has no expiry"},
		{"wrong issuer", k.sign(t, with(valid, "iss", "https://other.example.org")), "token issuer is not accepted"},
		{"issuer with trailing slash", k.sign(t, with(valid, "iss", ti.url()+"/")), "token issuer is not accepted"},
		{"wrong audience", k.sign(t, with(valid, "aud", "someone-else")), "token audience is not accepted"},
		{"no audience", k.sign(t, with(valid, "aud", nil)), "token audience is not accepted"},
		{"no subject", k.sign(t, with(valid, "sub", nil)), `token has no "sub" claim`},
		{"signed by a stranger", stranger.sign(t, valid), "token signature is not valid"},
		{"unknown kid", unknownKid.sign(t, valid), "token signature is not valid"},
		{"alg none", b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(string(mustJSON(t, valid))) + ".", "token signing algorithm is not accepted"},
		{"HS256", hsTok, "token signing algorithm is not accepted"},
		{"payload swapped after signing", swapPayload(t, k.sign(t, valid), with(valid, "sub", "admin")), "token signature is not valid"},
		{"garbage", "not-a-token", "token is not a valid JWT"},
		{"three garbage parts", "a.b.c", "token is not a valid JWT"},
		{"JSON serialisation", `{"payload":"x","signatures":[]}`, "token is not a valid JWT"},
		{"too long", strings.Repeat("a", maxTokenLen+1), "token is too long"},
		{"empty", "", "no token was sent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := a.Verify(context.Background(), c.token)
			if id != nil {
				t.Fatalf("got identity %+v", id)
			}
			f := failure(t, err, c.detail)
			if c.token != "" && f.Err != nil && strings.Contains(f.Err.Error(), c.token) {
				t.Errorf("cause quotes the token: %v", f.Err)
			}
			// The request path (Authenticate) behaves the same.
			_, err = a.Authenticate(context.Background(), request("Bearer "+c.token))
			if c.token != "" {
				failure(t, err, c.detail)
			}
		})
	}
	for _, c := range cases {
		if len(c.token) > 20 && strings.Contains(logs.String(), c.token) {
			t.Errorf("log contains the %s token", c.name)
		}
	}
}

func TestClockSkewTolerated(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	now := time.Now()
	for _, c := range []map[string]any{
		with(claims(ti.url(), now), "exp", now.Add(-30*time.Second).Unix()), // our clock a little ahead
		with(claims(ti.url(), now), "nbf", now.Add(30*time.Second).Unix()),  // or a little behind
	} {
		if _, err := a.Verify(context.Background(), k.sign(t, c)); err != nil {
			t.Errorf("%v: %v", c, err)
		}
	}
}

func TestNoAudiencesAcceptsAnyAndWarns(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	log, logs := testLogger()
	cfg := oidcConfig(ti.url())
	cfg.Audiences = nil
	a := newTest(t, Options{OIDC: cfg, Logger: log}, nil)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "no OIDC audiences configured") {
		t.Errorf("no warning about audiences at New; log:\n%s", logs)
	}
	now := time.Now()
	for _, c := range []map[string]any{claims(ti.url(), now), with(claims(ti.url(), now), "aud", nil), with(claims(ti.url(), now), "aud", "anything")} {
		if _, err := a.Verify(context.Background(), k.sign(t, c)); err != nil {
			t.Errorf("aud %v: %v", c["aud"], err)
		}
	}
}

func TestAuthenticateNotMine(t *testing.T) {
	ti := newTestIssuer(t, ecKey(t, "k1"))
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	dfk := "sdk_" + strings.Repeat("A", 128)
	for _, h := range []string{"", dfk, "Bearer " + dfk, "bearer " + dfk, "sdk_short", "Bearer   "} {
		id, err := a.Authenticate(context.Background(), request(h))
		if id != nil || err != nil {
			t.Errorf("Authorization %q: got (%v, %v), want (nil, nil)", h, id, err)
		}
	}
	if n := ti.discoveryHits.Load(); n != 0 {
		t.Errorf("%d discoveries for requests without a token", n)
	}
}

func TestAuthenticateBearerOptional(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	tok := k.sign(t, claims(ti.url(), time.Now()))
	for _, h := range []string{tok, "Bearer " + tok, "bearer " + tok, "BEARER  " + tok} {
		id, err := a.Authenticate(context.Background(), request(h))
		if err != nil || id == nil || id.SubjectID != "user-1" {
			t.Errorf("Authorization %.20q...: got (%v, %v)", h, id, err)
		}
	}
	// Verify tolerates the prefix too.
	if _, err := a.Verify(context.Background(), "Bearer "+tok); err != nil {
		t.Error(err)
	}
}

// The reference's authenticator matrix (case 45), TOKEN-only rows, through
// the real chain.
func TestChainTokenOnly(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	chain, err := auth.NewChain(true, []auth.Type{auth.Token}, map[auth.Type]auth.Authenticator{auth.Token: a})
	if err != nil {
		t.Fatal(err)
	}
	id, err := chain.Authenticate(context.Background(), request("Bearer "+k.sign(t, claims(ti.url(), time.Now()))))
	if err != nil || id.Type != auth.Token || id.SubjectID != "user-1" {
		t.Errorf("valid token: (%+v, %v)", id, err)
	}
	_, err = chain.Authenticate(context.Background(), request(""))
	if f, ok := err.(*auth.Failure); !ok || f.Code != auth.TokenRequired {
		t.Errorf("no token: %v, want 301", err)
	}
	_, err = chain.Authenticate(context.Background(), request("Bearer invalid"))
	if f, ok := err.(*auth.Failure); !ok || f.Code != auth.TokenFailed {
		t.Errorf("invalid token: %v, want 311", err)
	}
}

func TestKeyRotation(t *testing.T) {
	k1, k2, k3 := rsaKey(t, "k1"), ecKey(t, "k2"), ecKey(t, "k3")
	ti := newTestIssuer(t, k1)
	clock := newFakeClock()
	tu := defaultTuning()
	tu.now = clock.Now
	log, logs := testLogger()
	a := newTest(t, Options{OIDC: oidcConfig(ti.url()), Logger: log}, &tu)
	ctx := context.Background()
	now := time.Now()
	old, rotated, retired := k1.sign(t, claims(ti.url(), now)), k2.sign(t, claims(ti.url(), now)), k3.sign(t, claims(ti.url(), now))
	verify := func(tok string) error { _, err := a.Verify(ctx, tok); return err }
	reject := func(tok string) error {
		if _, err := a.Verify(ctx, tok); err == nil {
			return errors.New("verified")
		}
		return nil
	}
	jwksHits := func(want int32, why string) {
		t.Helper()
		if n := ti.jwksHits.Load(); n != want {
			t.Errorf("%d JWKS fetches, want %d: %s", n, want, why)
		}
	}

	eventually(t, "k1 token", func() error { return verify(old) })
	eventually(t, "k1 token again", func() error { return verify(old) })
	jwksHits(1, "a known kid must not refetch")

	// The issuer starts signing with k2 while still publishing k1: the
	// unknown kid makes weir refetch the JWKS, without a restart.
	ti.publish(k1, k2)
	clock.Advance(tu.jwksMinInterval)
	eventually(t, "k2 token after rotation", func() error { return verify(rotated) })
	jwksHits(2, "the new kid must cause exactly one refetch")
	eventually(t, "k1 token while k1 is still published", func() error { return verify(old) })
	eventually(t, "k2 token again", func() error { return verify(rotated) })
	jwksHits(2, "known kids must not refetch")

	// k1 is retired and k3 introduced: the next unknown kid refreshes the
	// set, after which k1 tokens no longer verify.
	ti.publish(k2, k3)
	clock.Advance(tu.jwksMinInterval)
	eventually(t, "k3 token", func() error { return verify(retired) })
	eventually(t, "k1 token rejected once k1 is retired", func() error { return reject(old) })
	_, err := a.Verify(ctx, old)
	failure(t, err, "token signature is not valid")
	eventually(t, "k2 token after k1 retired", func() error { return verify(rotated) })
	jwksHits(3, "one refetch for k3; the retired kid's refetch is throttled")

	if n := ti.discoveryHits.Load(); n != 1 {
		t.Errorf("%d discoveries, want 1", n)
	}
	for _, tok := range []string{old, rotated, retired} {
		if strings.Contains(logs.String(), tok) {
			t.Error("log contains a token")
		}
	}
}

// eventually retries f for a short while. go-oidc's remote key set wakes
// the callers waiting on a JWKS fetch just before its goroutine stores the
// keys it fetched; a call in that window (microseconds, longer under -race)
// still sees the previous set. Retrying without advancing the fake clock
// cannot cause extra fetches, so the JWKS counts stay exact.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// A flood of forged tokens naming the issuer's kid must not become a flood
// of JWKS fetches.
func TestForgedTokensDoNotFloodJWKS(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	clock := newFakeClock()
	tu := defaultTuning()
	tu.now = clock.Now
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, &tu)
	forger := ecKey(t, "k1")
	forged := forger.sign(t, claims(ti.url(), time.Now()))

	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			_, err := a.Verify(context.Background(), forged)
			if f, ok := err.(*auth.Failure); !ok || f.Code != auth.TokenFailed {
				t.Errorf("forged token: %v", err)
			}
		})
	}
	wg.Wait()
	if n := ti.jwksHits.Load(); n > 1 {
		t.Errorf("%d JWKS fetches within one interval, want at most 1", n)
	}
	// After the interval, a new key can still be picked up.
	clock.Advance(tu.jwksMinInterval)
	k2 := ecKey(t, "k2")
	ti.publish(k, k2)
	tok2 := k2.sign(t, claims(ti.url(), time.Now()))
	eventually(t, "new key after the interval", func() error { _, err := a.Verify(context.Background(), tok2); return err })
}

func TestJWKSUnavailable(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	ti.jwksDown.Store(true)
	clock := newFakeClock()
	tu := defaultTuning()
	tu.now = clock.Now
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, &tu)
	tok := k.sign(t, claims(ti.url(), time.Now()))

	_, err := a.Verify(context.Background(), tok)
	f := failure(t, err, "token cannot be verified now, try again later")
	if !strings.Contains(f.Err.Error(), "503") {
		t.Errorf("cause %v should name the JWKS answer", f.Err)
	}
	// Within the interval the failure is remembered, not refetched.
	_, err = a.Verify(context.Background(), tok)
	failure(t, err, "token cannot be verified now, try again later")
	if n := ti.jwksHits.Load(); n != 1 {
		t.Errorf("%d JWKS fetches, want 1", n)
	}
	ti.jwksDown.Store(false)
	clock.Advance(tu.jwksMinInterval)
	eventually(t, "token once the JWKS is back", func() error { _, err := a.Verify(context.Background(), tok); return err })
	// A bad signature is the sender's fault again.
	_, err = a.Verify(context.Background(), ecKey(t, "k1").sign(t, claims(ti.url(), time.Now())))
	failure(t, err, "token signature is not valid")
}

func TestIssuerDownAtStart(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	ti.down.Store(true)
	clock := newFakeClock()
	tu := defaultTuning()
	tu.now = clock.Now
	log, logs := testLogger()
	a := newTest(t, Options{OIDC: oidcConfig(ti.url()), Logger: log}, &tu)
	ctx := context.Background()
	tok := k.sign(t, claims(ti.url(), time.Now()))

	if n := ti.discoveryHits.Load(); n != 0 {
		t.Fatalf("New contacted the issuer (%d requests)", n)
	}
	_, err := a.Verify(ctx, tok)
	f := failure(t, err, "token cannot be verified now, try again later")
	if f.Err == nil || !strings.Contains(f.Err.Error(), "503") {
		t.Errorf("cause %v should name the issuer's answer", f.Err)
	}
	// Within the backoff, tokens fail without contacting the issuer.
	for range 5 {
		_, err = a.Verify(ctx, tok)
		failure(t, err, "token cannot be verified now, try again later")
	}
	if n := ti.discoveryHits.Load(); n != 1 {
		t.Errorf("%d discovery attempts within the backoff, want 1", n)
	}
	// The issuer comes up, but we do not look before the backoff ends.
	ti.down.Store(false)
	_, err = a.Verify(ctx, tok)
	failure(t, err, "token cannot be verified now, try again later")
	clock.Advance(tu.retryMin)
	id, err := a.Verify(ctx, tok)
	if err != nil {
		t.Fatalf("after the issuer came up: %v", err)
	}
	if id.SubjectID != "user-1" {
		t.Errorf("identity %+v", id)
	}
	if n := ti.discoveryHits.Load(); n != 2 {
		t.Errorf("%d discovery attempts, want 2", n)
	}
	// Logged once per state change.
	out := logs.String()
	if c := strings.Count(out, "OIDC issuer not reachable"); c != 1 {
		t.Errorf("%d 'not reachable' warnings, want 1; log:\n%s", c, out)
	}
	if c := strings.Count(out, "OIDC issuer reachable again"); c != 1 {
		t.Errorf("%d 'reachable again' messages, want 1; log:\n%s", c, out)
	}
	if strings.Contains(out, tok) {
		t.Error("log contains the token")
	}
}

func TestDiscoveryBackoffGrows(t *testing.T) {
	ti := newTestIssuer(t, ecKey(t, "k1"))
	ti.down.Store(true)
	clock := newFakeClock()
	tu := defaultTuning()
	tu.now = clock.Now
	tu.retryMin, tu.retryMax = time.Second, 4*time.Second
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, &tu)
	tok := ecKey(t, "k1").sign(t, claims(ti.url(), time.Now()))
	// Attempts happen after 1s, then 2s, then 4s, then 4s (the cap).
	attemptsAfter := func(d time.Duration) int32 {
		clock.Advance(d)
		_, _ = a.Verify(context.Background(), tok)
		return ti.discoveryHits.Load()
	}
	steps := []struct {
		advance time.Duration
		want    int32
	}{{0, 1}, {999 * time.Millisecond, 1}, {time.Millisecond, 2}, {1900 * time.Millisecond, 2}, {100 * time.Millisecond, 3},
		{3 * time.Second, 3}, {time.Second, 4}, {4 * time.Second, 5}}
	for i, s := range steps {
		if got := attemptsAfter(s.advance); got != s.want {
			t.Fatalf("step %d: %d attempts, want %d", i, got, s.want)
		}
	}
}

func TestIssuerUnreachableAtStart(t *testing.T) {
	ti := newTestIssuer(t)
	url := ti.url()
	ti.srv.Close() // nothing listens there now
	a, err := New(context.Background(), Options{OIDC: oidcConfig(url)})
	if err != nil {
		t.Fatalf("New with an unreachable issuer: %v", err)
	}
	defer a.Close()
	_, err = a.Verify(context.Background(), ecKey(t, "k1").sign(t, claims(url, time.Now())))
	failure(t, err, "token cannot be verified now, try again later")
}

func TestConcurrentFirstUse(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	tok := k.sign(t, claims(ti.url(), time.Now()))
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if _, err := a.Verify(context.Background(), tok); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := ti.discoveryHits.Load(); n != 1 {
		t.Errorf("%d discoveries for concurrent first use, want 1", n)
	}
}

func TestWaiterGivesUpButDiscoveryCompletes(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	release := make(chan struct{})
	ti.setGate(release)
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	tok := k.sign(t, claims(ti.url(), time.Now()))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := a.Verify(ctx, tok)
	f := failure(t, err, "token cannot be verified now, try again later")
	if !errors.Is(f.Err, context.DeadlineExceeded) {
		t.Errorf("cause %v, want the caller's deadline", f.Err)
	}
	// The discovery the caller abandoned carries on; the next token uses it.
	close(release)
	if _, err := a.Verify(context.Background(), tok); err != nil {
		t.Fatalf("after the slow discovery finished: %v", err)
	}
	if n := ti.discoveryHits.Load(); n != 1 {
		t.Errorf("%d discoveries, want 1", n)
	}
}

func TestCloseStopsDiscovery(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	never := make(chan struct{})
	defer close(never)
	ti.setGate(never)
	a, err := New(context.Background(), Options{OIDC: oidcConfig(ti.url())})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	tok := k.sign(t, claims(ti.url(), time.Now()))
	go func() {
		_, err := a.Verify(context.Background(), tok)
		errc <- err
	}()
	for ti.discoveryHits.Load() == 0 { // let the discovery start
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { a.Close(); a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while a discovery was in progress")
	}
	select {
	case err := <-errc:
		failure(t, err, "token cannot be verified now, try again later")
	case <-time.After(5 * time.Second):
		t.Fatal("Verify did not return after Close")
	}
	_, err = a.Verify(context.Background(), tok)
	failure(t, err, "token cannot be verified now, try again later")
}

func TestAPIKeys(t *testing.T) {
	keys := fakeAPIKeys{
		"sak_good":   {SubjectID: "u-42", DisplayName: "bob"},
		"sak_noname": {SubjectID: "u-43"},
	}
	a := newTest(t, Options{APIKeys: keys}, nil)
	ctx := context.Background()

	id, err := a.Verify(ctx, "sak_good")
	if err != nil || id.SubjectID != "u-42" || id.DisplayName != "bob" || id.Type != auth.Token {
		t.Errorf("good key: (%+v, %v)", id, err)
	}
	id, err = a.Authenticate(ctx, request("Bearer sak_good"))
	if err != nil || id.SubjectID != "u-42" {
		t.Errorf("good key via Authenticate: (%+v, %v)", id, err)
	}
	if keys["sak_good"].Type != "" {
		t.Error("the verifier's identity was modified")
	}
	id, err = a.Verify(ctx, "sak_noname")
	if err != nil || id.DisplayName != "u-43" {
		t.Errorf("key without display name: (%+v, %v)", id, err)
	}

	// A plain error becomes 311 with a generic detail.
	_, err = a.Verify(ctx, "sak_unknown")
	f := failure(t, err, "API key is not valid")
	if !errors.Is(f, errNoSuchKey) {
		t.Errorf("cause %v does not wrap the verifier's error", f.Err)
	}
	// A verifier Failure keeps its (sender-safe) detail but becomes 311.
	_, err = a.Verify(ctx, "sak_expired")
	failure(t, err, "API key has expired")
	// A verifier that quotes the key has it cut from the cause.
	_, err = a.Verify(ctx, "sak_leaky")
	f = failure(t, err, "API key is not valid")
	if strings.Contains(f.Error(), "sak_leaky") {
		t.Errorf("failure quotes the key: %v", f)
	}

	// Without OIDC, a JWT is refused clearly.
	_, err = a.Verify(ctx, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln")
	failure(t, err, "OIDC tokens are not accepted")
}

func TestAPIKeysNotConfigured(t *testing.T) {
	ti := newTestIssuer(t, ecKey(t, "k1"))
	a := newTest(t, Options{OIDC: oidcConfig(ti.url())}, nil)
	for _, h := range []string{"sak_0123456789_abc", "Bearer sak_x"} {
		_, err := a.Authenticate(context.Background(), request(h))
		failure(t, err, "API keys are not accepted")
	}
	if n := ti.discoveryHits.Load(); n != 0 {
		t.Errorf("an API key caused %d discoveries", n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, o := range []Options{
		{},
		{OIDC: config.OIDC{Issuer: "not a url"}},
		{OIDC: config.OIDC{Issuer: "ftp://idp.example.org"}},
		{OIDC: config.OIDC{Issuer: "https://"}},
	} {
		if a, err := New(context.Background(), o); err == nil {
			a.Close()
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

func TestDefaultsForEmptyClaimNames(t *testing.T) {
	k := ecKey(t, "k1")
	ti := newTestIssuer(t, k)
	a := newTest(t, Options{OIDC: config.OIDC{Issuer: ti.url(), Audiences: []string{"weir"}}}, nil)
	id, err := a.Verify(context.Background(), k.sign(t, claims(ti.url(), time.Now())))
	if err != nil || id.SubjectID != "user-1" || id.DisplayName != "alice" {
		t.Errorf("(%+v, %v)", id, err)
	}
}

var errNoSuchKey = errors.New("no such key")

type fakeAPIKeys map[string]*auth.Identity

func (f fakeAPIKeys) VerifyAPIKey(_ context.Context, key string) (*auth.Identity, error) {
	switch key {
	case "sak_expired":
		return nil, auth.Failf(auth.DataFeedKeyExpired, "API key has expired")
	case "sak_leaky":
		return nil, errors.New("no key " + key)
	}
	if id, ok := f[key]; ok {
		return id, nil
	}
	return nil, errNoSuchKey
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// swapPayload replaces a signed token's payload, keeping header and signature.
func swapPayload(t *testing.T, tok string, claims map[string]any) string {
	parts := strings.Split(tok, ".")
	return parts[0] + "." + b64(string(mustJSON(t, claims))) + "." + parts[2]
}

// TestOtherScheme: an Authorization header of a scheme other than Bearer
// ("Basic ...") is refused (311, as before) with a message that names the
// scheme and says what is taken, never "OIDC tokens are not accepted"
// (which sent senders looking for an issuer), and without quoting the
// credential. The issuer is never asked.
func TestOtherScheme(t *testing.T) {
	ti := newTestIssuer(t, ecKey(t, "k1"))
	keys := fakeAPIKeys{"sak_good": {SubjectID: "u-42", DisplayName: "bob"}}
	const bearer = " in the Authorization header, as Bearer <credential>"
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"API keys only", Options{APIKeys: keys}, "an API key (sak_...)"},
		{"OIDC only", Options{OIDC: oidcConfig(ti.url())}, "an OIDC access token"},
		{"both", Options{APIKeys: keys, OIDC: oidcConfig(ti.url())}, "an API key (sak_...) or an OIDC access token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTest(t, tc.o, nil)
			ctx := context.Background()
			for _, h := range []string{"Basic dXNlcjpwYXNz", "basic  dXNlcjpwYXNz", "Basic sdk_notakey", "Negotiate"} {
				scheme, _, _ := strings.Cut(h, " ")
				want := scheme + " credentials are not supported: send " + tc.want + bearer
				_, err := a.Authenticate(ctx, request(h))
				f := failure(t, err, want)
				var se *auth.SchemeError
				if !errors.As(f, &se) || se.Scheme != scheme {
					t.Errorf("Authenticate %q: cause %v, want a SchemeError", h, f.Err)
				}
				if strings.Contains(f.Error(), "dXNlcjpwYXNz") {
					t.Errorf("Authenticate %q: the failure quotes the credential: %v", h, f)
				}
				_, err = a.Verify(ctx, h)
				failure(t, err, want)
			}
			// A bearer credential is judged as before.
			if _, err := a.Authenticate(ctx, request("Bearer Basic dXNlcjpwYXNz")); err == nil || strings.Contains(err.Error(), "not supported") {
				t.Errorf("Bearer Basic ...: %v", err)
			}
			if tc.o.APIKeys != nil {
				if id, err := a.Authenticate(ctx, request("Bearer sak_good")); err != nil || id.SubjectID != "u-42" {
					t.Errorf("good key: (%+v, %v)", id, err)
				}
			}
		})
	}
	if n := ti.discoveryHits.Load(); n != 0 {
		t.Errorf("another scheme caused %d discoveries", n)
	}
}
