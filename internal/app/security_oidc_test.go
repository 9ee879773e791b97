package app_test

// Sender authentication by OIDC bearer token through the whole server,
// against an issuer served by the test on 127.0.0.1 (discovery and JWKS).

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/weirhq/weir/internal/config"
)

// jwtKey is an issuer's signing key.
type jwtKey struct {
	kid  string
	priv crypto.Signer
}

func newJWTKey(t testing.TB, kid string) jwtKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return jwtKey{kid: kid, priv: k}
}

// sign makes a compact RS256 JWS of claims with the key's kid.
func (k jwtKey) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
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

// oidcIssuer is an OpenID Connect issuer on 127.0.0.1 publishing a key set
// the test can change (rotation).
type oidcIssuer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys []jose.JSONWebKey
}

func newOIDCIssuer(t testing.TB, keys ...jwtKey) *oidcIssuer {
	t.Helper()
	is := &oidcIssuer{}
	is.publish(keys...)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                is.srv.URL,
			"jwks_uri":                              is.srv.URL + "/jwks",
			"authorization_endpoint":                is.srv.URL + "/auth",
			"token_endpoint":                        is.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		is.mu.Lock()
		set := jose.JSONWebKeySet{Keys: is.keys}
		is.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	})
	is.srv = httptest.NewServer(mux) // listens on 127.0.0.1
	t.Cleanup(is.srv.Close)
	return is
}

// publish replaces the published key set.
func (is *oidcIssuer) publish(keys ...jwtKey) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = nil
	for _, k := range keys {
		is.keys = append(is.keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(jose.RS256), Use: "sig"})
	}
}

// claims is a valid token's claims, changed by kv (a nil value deletes).
func (is *oidcIssuer) claims(kv ...any) map[string]any {
	now := time.Now()
	m := map[string]any{
		"iss": is.srv.URL, "sub": "user-1", "aud": "weir", "preferred_username": "alice",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(m, kv[i].(string))
		} else {
			m[kv[i].(string)] = kv[i+1]
		}
	}
	return m
}

// TestSecurityOIDC: with security.oidc.issuer set and TOKEN enabled, a
// signed token is the sender (sub, preferred_username); an expired, forged,
// foreign or mis-addressed token is 311; a rotated signing key is picked up
// from the JWKS without a restart.
func TestSecurityOIDC(t *testing.T) {
	t.Parallel()
	k1 := newJWTKey(t, "key-1")
	is := newOIDCIssuer(t, k1)
	s := authStart(t, []string{"TOKEN"}, func(c *config.Config) {
		c.Security.OIDC.Issuer = is.srv.URL
		c.Security.OIDC.Audiences = []string{"weir"}
	})
	var secrets []string
	token := func(k jwtKey, kv ...any) string {
		tok := k.sign(t, is.claims(kv...))
		// The signature part alone is as good as a leaked token for a
		// grep: it must not appear anywhere either.
		secrets = append(secrets, tok, tok[strings.LastIndex(tok, ".")+1:])
		return tok
	}

	t.Run("valid", func(t *testing.T) {
		body := "sent with an OIDC token"
		r := post(t, s, []byte(body), "Feed", testFeed, "Authorization", "Bearer "+token(k1))
		authenticated(t, s, r, body, "user-1", "alice", "Feed", testFeed)
		// Without a username claim the subject names the sender.
		body = "service account"
		r = post(t, s, []byte(body), "Feed", testFeed, "Authorization", "Bearer "+token(k1, "sub", "svc-7", "preferred_username", nil))
		authenticated(t, s, r, body, "svc-7", "svc-7", "Feed", testFeed)
	})

	for _, tc := range []struct {
		name, guid, detail string
		tok                func() string
	}{
		{"expired", "oidc-expired", "token has expired", func() string {
			now := time.Now()
			return token(k1, "iat", now.Add(-3*time.Hour).Unix(), "exp", now.Add(-2*time.Hour).Unix())
		}},
		{"wrong audience", "oidc-aud", "token audience is not accepted", func() string { return token(k1, "aud", "someone-else") }},
		{"other issuer", "oidc-iss", "token issuer is not accepted", func() string { return token(k1, "iss", "http://127.0.0.1:1/other") }},
		{"forged signature", "oidc-forged", "token signature is not valid", func() string {
			// The published kid, but another key.
			return token(newJWTKey(t, "key-1"))
		}},
		{"not a JWT", "oidc-garbage", "token is not a valid JWT", func() string {
			g := "garbage." + strings.Repeat("x", 20) + ".zzz"
			secrets = append(secrets, g)
			return g
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			post(t, s, []byte("x"), "Feed", testFeed, "GUID", tc.guid, "Authorization", "Bearer "+tc.tok()).
				fails(t, http.StatusUnauthorized, 311, "Client Token failed authentication", tc.detail)
			rejectedLog(t, s, tc.guid, 311)
		})
	}

	t.Run("key rotation", func(t *testing.T) {
		k2 := newJWTKey(t, "key-2")
		is.publish(k2)
		tok := token(k2, "sub", "user-2", "preferred_username", "bob")
		// weir refetches the key set for an unknown kid, at most once per
		// few seconds: retry until the new key is seen (a generous deadline).
		deadline := time.Now().Add(time.Minute)
		var r *resp
		for {
			r = post(t, s, []byte("rotated"), "Feed", testFeed, "Authorization", "Bearer "+tok)
			if r.code == http.StatusOK || time.Now().After(deadline) {
				break
			}
			r.fails(t, http.StatusUnauthorized, 311)
			time.Sleep(250 * time.Millisecond)
		}
		authenticated(t, s, r, "rotated", "user-2", "bob", "Feed", testFeed)
		// The retired key no longer verifies.
		post(t, s, []byte("x"), "Feed", testFeed, "Authorization", "Bearer "+token(k1)).
			fails(t, http.StatusUnauthorized, 311, "token signature is not valid")
	})

	if n := len(s.Streams()); n != 3 {
		t.Errorf("%d streams, want 3", n)
	}
	neverStored(t, s, secrets...)
}

// TestSecurityOIDCOnAPI: an OIDC token of a weir user authenticates REST
// calls as that user (by the sub claim), as API keys do; a token of a user
// weir does not know, of a disabled user or of a group, and an expired or
// forged token, is 401 with a problem that says which.
func TestSecurityOIDCOnAPI(t *testing.T) {
	t.Parallel()
	k := newJWTKey(t, "api-key-1")
	is := newOIDCIssuer(t, k)
	s := authStart(t, []string{"TOKEN"}, func(c *config.Config) {
		c.Security.OIDC.Issuer = is.srv.URL
		c.Security.OIDC.Audiences = []string{"weir"}
	})
	weirAdmin(t, s, "user", "create", "user-1", "--display-name", "User One")
	weirAdmin(t, s, "user", "create", "user-2")
	weirAdmin(t, s, "user", "disable", "user-2")
	weirAdmin(t, s, "user", "create", "team", "--group")
	as := func(tok string) apiClient { return apiClient{t: t, url: s.URL + "/api", key: tok} }

	var me struct {
		Name        string `json:"name"`
		DisplayName string `json:"displayName"`
	}
	as(k.sign(t, is.claims())).do("GET", "/whoami", "").want(t, "token of user-1", 200, &me)
	if me.Name != "user-1" || me.DisplayName != "User One" {
		t.Errorf("whoami = %+v, want user-1 (User One)", me)
	}
	now := time.Now()
	for _, tc := range []struct {
		what, tok, says string
	}{
		{"unknown user", k.sign(t, is.claims("sub", "nobody")), "not known"},
		{"disabled user", k.sign(t, is.claims("sub", "user-2")), "disabled"},
		{"group", k.sign(t, is.claims("sub", "team")), "not known"},
		{"expired", k.sign(t, is.claims("iat", now.Add(-3*time.Hour).Unix(), "exp", now.Add(-2*time.Hour).Unix())), "expired"},
		{"forged", newJWTKey(t, "api-key-1").sign(t, is.claims()), "signature"},
		{"wrong audience", k.sign(t, is.claims("aud", "someone-else")), "audience"},
	} {
		r := as(tc.tok).do("GET", "/whoami", "")
		r.admWantProblem(t, tc.what, http.StatusUnauthorized, tc.says)
		if strings.Contains(string(r.body), tc.tok) {
			t.Errorf("%s: the answer echoes the token", tc.what)
		}
	}
}
