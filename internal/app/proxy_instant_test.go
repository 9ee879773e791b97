package app_test

import (
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/config"
)

// TestProxyInstantRelaysNoProviderClaims: a sender that is not one of the
// proxy's certificate providers sends the DN header (and a certificate
// expiry); the proxy ignores them, and an instant relay, which sends the
// post's attributes as headers, must not pass them on to a downstream
// that trusts the proxy as a provider (found by a review: the downstream
// stored the forged DN and took it as the sender's identity).
func TestProxyInstantRelaysNoProviderClaims(t *testing.T) {
	t.Parallel()
	main := start(t, func(c *config.Config) {
		c.Receive.AllowedCertificateProviders = []string{"127.0.0.1"}
	})
	px := pxProxy(t, "proxy-instant-dn", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Instant = true
		c.Receive.AllowedCertificateProviders = nil // the proxy trusts nobody's DN header
	}, main.URL+"/datafeed")
	pxPost(t, px, testFeed, "forged\n", "X-SSL-CLIENT-S-DN", "CN=forged-sender,O=Victim", "X-SSL-Client-V-End", "Dec 31 23:59:59 2099 GMT")
	st := main.Streams()
	if len(st) != 1 {
		t.Fatalf("%d streams", len(st))
	}
	a := st[0].Attributes
	for _, k := range []string{"RemoteDN", "UploadUserId", "UploadUsername", "X-SSL-CLIENT-S-DN", "RemoteCertExpiry", "X-SSL-Client-V-End"} {
		if v := a.Value(k); strings.Contains(v, "forged") || strings.Contains(v, "2099") {
			t.Errorf("stored %s %q: a claim the proxy did not accept was relayed", k, v)
		}
	}
}
