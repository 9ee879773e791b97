package auth

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/attr"
)

// fake recognises a request header named after its type: value "ok"
// authenticates as "<type>-user", any other value fails with code.
type fake struct {
	t    Type
	code int
}

func (f fake) Authenticate(_ context.Context, r *Request) (*Identity, error) {
	v := r.HTTP.Header.Get("X-" + string(f.t))
	switch v {
	case "":
		return nil, nil
	case "ok":
		a := &attr.Map{}
		a.Put("From", string(f.t))
		return &Identity{SubjectID: string(f.t) + "-user", DisplayName: string(f.t), Attributes: a}, nil
	}
	return nil, Failf(f.code, "bad %s", f.t)
}

var fakes = map[Type]Authenticator{
	DataFeedKey: fake{DataFeedKey, DataFeedKeyFailed}, CertificateIdentity: fake{CertificateIdentity, CertificateIdentityFailed},
	Token: fake{Token, TokenFailed}, Certificate: fake{Certificate, CertificateFailed},
}

func request(headers ...string) *Request {
	r := httptest.NewRequest("POST", "/datafeed", nil)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, "=")
		r.Header.Set("X-"+k, v)
	}
	return &Request{HTTP: r, Attrs: &attr.Map{}}
}

// TestMatrix re-expresses the reference study's authenticator matrix (case 45).
func TestMatrix(t *testing.T) {
	tests := []struct {
		name     string
		required bool
		enabled  []Type
		headers  []string
		user     string // want this subject, or
		code     int    // want this failure code
		message  string
	}{
		{"token only, valid token", true, []Type{Token}, []string{"TOKEN=ok"}, "TOKEN-user", 0, ""},
		{"token only, none", true, []Type{Token}, nil, "", TokenRequired, "token"},
		{"token only, invalid", true, []Type{Token}, []string{"TOKEN=bad"}, "", TokenFailed, "bad TOKEN"},
		{"token only, cert only", true, []Type{Token}, []string{"CERTIFICATE=ok"}, "", TokenRequired, ""},
		{"cert only, cert", true, []Type{Certificate}, []string{"CERTIFICATE=ok"}, "CERTIFICATE-user", 0, ""},
		{"cert only, none", true, []Type{Certificate}, nil, "", CertificateRequired, "certificate"},
		{"cert identity only, none", true, []Type{CertificateIdentity}, nil, "", CertificateRequired, ""},
		{"dfk only, none", true, []Type{DataFeedKey}, nil, "", DataFeedKeyRequired, "data feed key"},
		{"token+cert, token", true, []Type{Token, Certificate}, []string{"TOKEN=ok"}, "TOKEN-user", 0, ""},
		{"token+cert, cert", true, []Type{Token, Certificate}, []string{"CERTIFICATE=ok"}, "CERTIFICATE-user", 0, ""},
		{"token+cert, both: token preferred", true, []Type{Certificate, Token}, []string{"TOKEN=ok", "CERTIFICATE=ok"}, "TOKEN-user", 0, ""},
		{"token+cert, neither", true, []Type{Token, Certificate}, nil, "", TokenOrCertificateRequired, ""},
		{"dfk+token, neither", true, []Type{DataFeedKey, Token}, nil, "", AuthenticationRequired, "[Data feed key, OAuth Token]"},
		{"all, neither", true, Order, nil, "", AuthenticationRequired, "[Data feed key, Certificate identity, OAuth Token, Certificate]"},
		{"not required, nothing", false, []Type{Token}, nil, Unauthenticated, 0, ""},
		{"not required, token", false, []Type{Token}, []string{"TOKEN=ok"}, "TOKEN-user", 0, ""},
		{"not required, invalid token still fails", false, []Type{Token}, []string{"TOKEN=bad"}, "", TokenFailed, ""},
		{"all present: data feed key preferred", true, Order, []string{"TOKEN=ok", "CERTIFICATE=ok", "DATA_FEED_KEY=ok", "CERTIFICATE_IDENTITY=ok"}, "DATA_FEED_KEY-user", 0, ""},
		{"cert identity before cert", true, Order, []string{"CERTIFICATE=ok", "CERTIFICATE_IDENTITY=ok"}, "CERTIFICATE_IDENTITY-user", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChain(tc.required, tc.enabled, fakes)
			if err != nil {
				t.Fatal(err)
			}
			r := request(tc.headers...)
			id, err := c.Authenticate(context.Background(), r)
			if tc.code != 0 {
				var f *Failure
				if !errors.As(err, &f) || f.Code != tc.code || !strings.Contains(f.Error(), tc.message) {
					t.Fatalf("got %v, %v; want failure %d containing %q", id, err, tc.code, tc.message)
				}
				return
			}
			if err != nil || id.SubjectID != tc.user {
				t.Fatalf("got %+v, %v; want %s", id, err, tc.user)
			}
			Apply(r.Attrs, id)
			if r.Attrs.Value("UploadUserId") != tc.user || r.Attrs.Value("UploadUsername") == "" {
				t.Fatalf("attributes %v", r.Attrs.Sorted())
			}
		})
	}
}

func TestNewChainRejectsMissingAuthenticator(t *testing.T) {
	if _, err := NewChain(true, []Type{Token}, map[Type]Authenticator{}); err == nil {
		t.Fatal("chain built without a token authenticator")
	}
	if _, err := NewChain(true, nil, fakes); err == nil {
		t.Fatal("required chain built with nothing enabled")
	}
}

func TestApplyOverridesHeaders(t *testing.T) {
	a := &attr.Map{}
	a.Put("From", "sender")
	a.Put("UploadUserId", "forged")
	ia := &attr.Map{}
	ia.Put("from", "key")
	Apply(a, &Identity{SubjectID: "u1", DisplayName: "User One", Attributes: ia})
	if a.Value("From") != "key" || a.Value("UploadUserId") != "u1" || a.Value("UploadUsername") != "User One" {
		t.Fatalf("%v", a.Sorted())
	}
}

func TestAuthorizationHeader(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "abc": "abc", "": "", "Bearer": "Bearer"} {
		r := request()
		r.HTTP.Header.Set("Authorization", in)
		if got := r.Authorization(); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

func TestCheckSecretFile(t *testing.T) {
	p := t.TempDir() + "/key.pem"
	if err := os.WriteFile(p, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := CheckSecretFile(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "chmod o-rwx") {
		t.Fatalf("world-readable accepted: %v", err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := CheckSecretFile(p); err != nil {
		t.Fatal(err)
	}
}

func TestForeignScheme(t *testing.T) {
	for in, want := range map[string]string{
		"Basic dXNlcjpwYXNz":      "Basic",
		"  basic   dXNlcjpwYXNz ": "basic",
		"Basic\tdXNlcjpwYXNz":     "Basic",
		"Digest username=\"a\"":   "Digest",
		"AWS4-HMAC-SHA256 Cred=x": "AWS4-HMAC-SHA256",
		"Token abc":               "Token",
		"Negotiate":               "Negotiate",
		"NTLM":                    "NTLM",
		"basic":                   "basic",
		// Bearer, or no scheme at all: weir's own.
		"Bearer sak_x":                  "",
		"bearer x":                      "",
		"BEARER":                        "",
		"Bearer Basic x":                "",
		"sak_0123_abc":                  "",
		"sdk_abc":                       "",
		"eyJhbGciOiJSUzI1NiJ9.e30.c2ln": "",
		"":                              "",
		"   ":                           "",
		"Token":                         "", // one word that is no registered scheme: a credential
		// A first word that cannot be a scheme's name is not quoted.
		"sdk_abc def":                        "",
		"eyJhbGciOiJSUzI1NiJ9.e30.c2ln more": "",
		"0Basic x":                           "",
		"Basic!x y":                          "",
		strings.Repeat("A", 33) + " x":       "",
	} {
		if got := ForeignScheme(in); got != want {
			t.Errorf("ForeignScheme(%q) = %q, want %q", in, got, want)
		}
	}
}

// schemeToken is a token authenticator as token.Authenticator is one for
// a header of another scheme: it fails it with a SchemeError.
type schemeToken struct{ accepts []string }

func (s schemeToken) Authenticate(_ context.Context, r *Request) (*Identity, error) {
	if scheme := ForeignScheme(r.HTTP.Header.Get("Authorization")); scheme != "" {
		return nil, &Failure{Code: TokenFailed, Detail: "only the token's", Err: &SchemeError{Scheme: scheme}}
	}
	return nil, nil
}

func (s schemeToken) Accepts() []string { return s.accepts }

// TestChainUnsupportedScheme: an Authorization header of a scheme that is
// not Bearer fails with the code it always did, and a message that names
// the scheme and says what the enabled types take instead.
func TestChainUnsupportedScheme(t *testing.T) {
	auths := map[Type]Authenticator{
		DataFeedKey: fakes[DataFeedKey], CertificateIdentity: fakes[CertificateIdentity],
		Token: schemeToken{accepts: []string{"an API key (sak_...)", "an OIDC access token"}}, Certificate: fakes[Certificate],
	}
	const (
		dfk   = "a data feed key (sdk_...)"
		token = "an API key (sak_...) or an OIDC access token"
		bear  = " in the Authorization header, as Bearer <credential>"
	)
	tests := []struct {
		name     string
		required bool
		enabled  []Type
		header   string
		code     int
		message  string
	}{
		{"default types", true, []Type{DataFeedKey, Token, Certificate}, "Basic dXNlcjpwYXNz", TokenFailed,
			"Basic credentials are not supported: send " + dfk + ", an API key (sak_...) or an OIDC access token" + bear + ", or connect with a client certificate"},
		{"token only", true, []Type{Token}, "Digest username=\"x\"", TokenFailed,
			"Digest credentials are not supported: send " + token + bear},
		{"token, not required", false, []Type{Token}, "Basic x", TokenFailed,
			"Basic credentials are not supported: send " + token + bear},
		{"data feed key only", true, []Type{DataFeedKey}, "Basic x", DataFeedKeyRequired,
			"Basic credentials are not supported: send " + dfk + bear},
		{"certificate only", true, []Type{Certificate}, "Negotiate", CertificateRequired,
			"Negotiate credentials are not supported: connect with a client certificate"},
		{"certificate identity only", true, []Type{CertificateIdentity}, "Basic x", CertificateRequired,
			"Basic credentials are not supported: connect with a client certificate that is a certificate identity, and name its account in the AccountId header"},
		{"data feed key and certificate", true, []Type{DataFeedKey, Certificate}, "Basic x", AuthenticationRequired,
			"Basic credentials are not supported: send " + dfk + bear + ", or connect with a client certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChain(tc.required, tc.enabled, auths)
			if err != nil {
				t.Fatal(err)
			}
			r := request()
			r.HTTP.Header.Set("Authorization", tc.header)
			id, err := c.Authenticate(context.Background(), r)
			var f *Failure
			var se *SchemeError
			if !errors.As(err, &f) || f.Code != tc.code || f.Detail != tc.message || !errors.As(err, &se) {
				t.Fatalf("got %v, %v; want failure %d: %q", id, err, tc.code, tc.message)
			}
		})
	}

	// A credential of another kind that authenticates is not refused for
	// the header: a certificate identity is tried before the token.
	c, err := NewChain(true, Order, auths)
	if err != nil {
		t.Fatal(err)
	}
	r := request("CERTIFICATE_IDENTITY=ok")
	r.HTTP.Header.Set("Authorization", "Basic x")
	if id, err := c.Authenticate(context.Background(), r); err != nil || id.SubjectID != "CERTIFICATE_IDENTITY-user" {
		t.Fatalf("certificate identity with a Basic header: %v, %v", id, err)
	}
	// Nor is a post without credentials when none are required and no
	// enabled type takes the header.
	c, err = NewChain(false, []Type{DataFeedKey}, auths)
	if err != nil {
		t.Fatal(err)
	}
	r = request()
	r.HTTP.Header.Set("Authorization", "Basic x")
	if id, err := c.Authenticate(context.Background(), r); err != nil || id.SubjectID != Unauthenticated {
		t.Fatalf("not required, Basic header: %v, %v", id, err)
	}
}
