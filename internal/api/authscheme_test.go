package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/config"
)

// TestOtherAuthorizationScheme: a credential of another scheme than Bearer
// (Basic) is refused as before, 401 from the API and 401 with
// Service-Status 311 from the datafeed (where TOKEN is enabled), with a
// message that names the scheme and what is taken instead, rather than
// "OIDC tokens are not accepted" or "not a well-formed API key".
func TestOtherAuthorizationScheme(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, func(c *config.Config) { c.Receive.AuthenticationRequired = true })
	const basic = "Basic dXNlcjpwYXNz"

	resp, body := a.do(http.MethodGet, "/api/whoami", "", "Authorization", basic)
	var p struct{ Detail string }
	_ = json.Unmarshal([]byte(body), &p)
	want := "Basic credentials are not supported: send an API key (sak_...) in the Authorization header, as Bearer <credential>"
	if resp.StatusCode != http.StatusUnauthorized || p.Detail != want {
		t.Errorf("API with %q: %d %s; want 401 %q", basic, resp.StatusCode, body, want)
	}
	if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("API with %q: WWW-Authenticate %q", basic, resp.Header.Get("WWW-Authenticate"))
	}
	// Other schemes alike, named as sent.
	resp, body = a.do(http.MethodGet, "/api/whoami", "", "Authorization", `Digest username="x", realm="weir"`)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Digest credentials are not supported") {
		t.Errorf("API with Digest: %d %s", resp.StatusCode, body)
	}
	// The key, with or without its scheme, works.
	for _, h := range []string{"Bearer " + a.Key, "bearer " + a.Key, a.Key} {
		if resp, body := a.do(http.MethodGet, "/api/whoami", "", "Authorization", h); resp.StatusCode != http.StatusOK {
			t.Errorf("API with the key: %d %s", resp.StatusCode, body)
		}
	}

	if resp, body := a.call(http.MethodPost, "/api/feeds", `{"name": "AUTH-FEED"}`, "Content-Type", "application/json"); resp.StatusCode >= 300 {
		t.Fatalf("create feed: %d %s", resp.StatusCode, body)
	}
	resp, body = a.do(http.MethodPost, "/datafeed", "an event\n", "Feed", "AUTH-FEED", "Authorization", basic)
	want = "Basic credentials are not supported: send a data feed key (sdk_...) or an API key (sak_...) in the Authorization header, " +
		"as Bearer <credential>, or connect with a client certificate"
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Service-Status") != "311" ||
		!strings.HasSuffix(resp.Header.Get("Service-Error"), " - "+want) || !strings.Contains(body, want) {
		t.Errorf("datafeed with %q: %d, Service-Status %s, Service-Error %q, body %q; want 401 / 311 ending %q",
			basic, resp.StatusCode, resp.Header.Get("Service-Status"), resp.Header.Get("Service-Error"), body, want)
	}
	if strings.Contains(body, "dXNlcjpwYXNz") || strings.Contains(resp.Header.Get("Service-Error"), "dXNlcjpwYXNz") {
		t.Errorf("datafeed: the answer quotes the credential")
	}
	// The API key as a bearer token still posts.
	if resp, body := a.do(http.MethodPost, "/datafeed", "an event\n", "Feed", "AUTH-FEED", "Authorization", "Bearer "+a.Key); resp.StatusCode != http.StatusOK {
		t.Errorf("datafeed with the API key: %d %s", resp.StatusCode, body)
	}
}

// TestOtherAuthorizationSchemeDataFeedKeysOnly: where only data feed keys
// are taken, a Basic credential is what it always was, a missing data feed
// key (303), and the message says so.
func TestOtherAuthorizationSchemeDataFeedKeysOnly(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.EnabledAuthenticationTypes = []string{"DATA_FEED_KEY"}
	})
	resp, body := a.do(http.MethodPost, "/datafeed", "an event\n", "Feed", "ANY", "Authorization", "Basic dXNlcjpwYXNz")
	want := "Basic credentials are not supported: send a data feed key (sdk_...) in the Authorization header, as Bearer <credential>"
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Service-Status") != "303" ||
		!strings.HasSuffix(resp.Header.Get("Service-Error"), " - "+want) {
		t.Errorf("datafeed with Basic: %d, Service-Status %s, Service-Error %q, body %q; want 401 / 303 ending %q",
			resp.StatusCode, resp.Header.Get("Service-Status"), resp.Header.Get("Service-Error"), body, want)
	}
}
