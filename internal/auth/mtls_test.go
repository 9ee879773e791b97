package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
)

// The mTLS tests run real TLS servers configured as internal/app/tls.go
// configures weir's, with certificates made here, and real clients; every
// connection is to 127.0.0.1.

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Weir Test"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue signs a certificate for tmpl, filling in what every one needs.
func (ca *testCA) issue(t *testing.T, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(12 * time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// result is what the test server reports about a post.
type result struct {
	Subject, Display string
	Code             int
	Error            string
	RemoteDN         *string
	RemoteCertExpiry *string
}

type pki struct {
	ca, other              *testCA
	server                 tls.Certificate
	client, otherClient    tls.Certificate
	noCN                   tls.Certificate
	clientDN, clientExpiry string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{ca: newTestCA(t, "Weir Test CA"), other: newTestCA(t, "Other CA")}
	p.server = p.ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	sender := pkix.Name{
		CommonName: "Log Sender", OrganizationalUnit: []string{"Senders"}, Organization: []string{"Example"},
		Locality: []string{"London"}, Country: []string{"GB"},
	}
	clientAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	// Whole seconds in the future, so the expected expiry is exact.
	expiry := time.Now().Add(6 * time.Hour).UTC().Truncate(time.Second)
	p.client = p.ca.issue(t, &x509.Certificate{Subject: sender, ExtKeyUsage: clientAuth, NotAfter: expiry})
	// Same subject, wrong issuer: a stranger claiming to be the sender.
	p.otherClient = p.other.issue(t, &x509.Certificate{Subject: sender, ExtKeyUsage: clientAuth})
	p.noCN = p.ca.issue(t, &x509.Certificate{Subject: pkix.Name{Organization: []string{"Example"}}, ExtKeyUsage: clientAuth})
	p.clientDN = "CN=Log Sender,OU=Senders,O=Example,L=London,C=GB"
	p.clientExpiry = attr.FormatTime(expiry)
	return p
}

// startServer runs a TLS server on 127.0.0.1 whose handler authenticates
// each post with c and reports what it found. calls counts posts that
// reached the handler, i.e. got through the handshake.
func (p *pki) startServer(t *testing.T, mode tls.ClientAuthType, c *Certificates) (*httptest.Server, *atomic.Int32, *syncBuffer) {
	t.Helper()
	calls, errLog := &atomic.Int32{}, &syncBuffer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		req := &Request{HTTP: r, Attrs: headerAttrs(r)}
		var res result
		id, err := c.Authenticate(r.Context(), req)
		var f *Failure
		switch {
		case errors.As(err, &f):
			res.Code, res.Error = f.Code, f.Error()
		case err != nil:
			res.Error = err.Error()
		case id != nil:
			res.Subject, res.Display = id.SubjectID, id.DisplayName
		}
		c.Attributes(r, req.Attrs)
		if v, ok := req.Attrs.Get("RemoteDN"); ok {
			res.RemoteDN = &v
		}
		if v, ok := req.Attrs.Get("RemoteCertExpiry"); ok {
			res.RemoteCertExpiry = &v
		}
		_ = json.NewEncoder(w).Encode(res)
	}))
	// httptest may fall back to [::1]; the server certificate is for 127.0.0.1.
	if err := srv.Listener.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	// Handshake failures are logged here, for the tests to check the reason.
	srv.Config.ErrorLog = log.New(errLog, "", 0)
	// As internal/app/tls.go builds it.
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{p.server},
		MinVersion:   tls.VersionTLS12,
		ClientCAs:    p.ca.pool,
		ClientAuth:   mode,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, calls, errLog
}

// expectHandshakeFailure checks that a post failed in the TLS handshake for
// the given reason: the client got a TLS alert, the handler never ran, and
// the server logged why.
func expectHandshakeFailure(t *testing.T, res result, err error, calls *atomic.Int32, before int32, errLog *syncBuffer, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("handshake succeeded: %+v", res)
	}
	if !strings.Contains(err.Error(), "tls: ") {
		t.Errorf("client error %q is not a TLS alert", err)
	}
	if calls.Load() != before {
		t.Error("the handler ran")
	}
	// The server logs after sending its alert, so the client may be first.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(errLog.String(), reason) {
		if time.Now().After(deadline) {
			t.Fatalf("server log %q does not say %q", errLog.String(), reason)
		}
		time.Sleep(5 * time.Millisecond)
	}
	errLog.Reset()
}

// send posts over a new TLS connection, presenting cert if not nil. The
// client presents it whatever CAs the server names, as curl and OpenSSL
// clients do, so that a wrong certificate really reaches the server.
func (p *pki) send(t *testing.T, srv *httptest.Server, maxVersion uint16, cert *tls.Certificate, headers ...string) (result, error) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:    p.ca.pool,
		MinVersion: tls.VersionTLS12,
		MaxVersion: maxVersion,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
	}} // Proxy is nil: never leave 127.0.0.1 whatever the environment says
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/datafeed", strings.NewReader("data"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	var res result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatalf("decode response (status %s): %v", resp.Status, err)
	}
	return res, nil
}

func str(p *string) string {
	if p == nil {
		return "<absent>"
	}
	return *p
}

var tlsVersions = []struct {
	name string
	max  uint16
}{{"TLS1.2", tls.VersionTLS12}, {"TLS1.3", tls.VersionTLS13}}

// forgeries are headers a sender might add to pass as someone else.
var forgeries = []string{
	"X-SSL-CLIENT-S-DN: CN=Mallory,O=Example",
	"X-SSL-Client-V-End: Sep  9 16:16:45 2999 GMT",
	"RemoteDN: CN=Mallory,O=Example",
	"RemoteCertExpiry: 2999-01-01T00:00:00.000Z",
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	c := newCerts(t, CertOptions{}) // no providers: the DN header is nobody's to send
	optional, optionalCalls, optionalLog := p.startServer(t, tls.VerifyClientCertIfGiven, c)
	required, requiredCalls, requiredLog := p.startServer(t, tls.RequireAndVerifyClientCert, c)

	for _, v := range tlsVersions {
		t.Run(v.name, func(t *testing.T) {
			t.Run("good certificate", func(t *testing.T) {
				for name, srv := range map[string]*httptest.Server{"optional": optional, "required": required} {
					// The DN and expiry headers are forged; the certificate wins.
					res, err := p.send(t, srv, v.max, &p.client, forgeries...)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if res.Subject != "Log Sender" || res.Display != "Log Sender" || res.Code != 0 {
						t.Errorf("%s: %+v; want identity Log Sender", name, res)
					}
					if str(res.RemoteDN) != p.clientDN || str(res.RemoteCertExpiry) != p.clientExpiry {
						t.Errorf("%s: RemoteDN %q, RemoteCertExpiry %q; want %q, %q", name,
							str(res.RemoteDN), str(res.RemoteCertExpiry), p.clientDN, p.clientExpiry)
					}
				}
			})
			t.Run("no certificate, optional", func(t *testing.T) {
				res, err := p.send(t, optional, v.max, nil, forgeries...)
				if err != nil {
					t.Fatal(err)
				}
				if res.Subject != "" || res.Code != 0 || res.Error != "" {
					t.Errorf("%+v; want no identity and no failure", res)
				}
				if res.RemoteDN != nil || res.RemoteCertExpiry != nil {
					t.Errorf("forged RemoteDN %q, RemoteCertExpiry %q kept", str(res.RemoteDN), str(res.RemoteCertExpiry))
				}
			})
			t.Run("no certificate, required", func(t *testing.T) {
				before := requiredCalls.Load()
				res, err := p.send(t, required, v.max, nil, forgeries...)
				expectHandshakeFailure(t, res, err, requiredCalls, before, requiredLog, "client didn't provide a certificate")
			})
			t.Run("certificate from another CA", func(t *testing.T) {
				for _, s := range []struct {
					srv    *httptest.Server
					calls  *atomic.Int32
					errLog *syncBuffer
				}{{optional, optionalCalls, optionalLog}, {required, requiredCalls, requiredLog}} {
					before := s.calls.Load()
					res, err := p.send(t, s.srv, v.max, &p.otherClient, forgeries...)
					expectHandshakeFailure(t, res, err, s.calls, before, s.errLog, "certificate signed by unknown authority")
				}
			})
			t.Run("certificate without a CN", func(t *testing.T) {
				res, err := p.send(t, optional, v.max, &p.noCN)
				if err != nil {
					t.Fatal(err)
				}
				if res.Code != CertificateFailed || res.Subject != "" {
					t.Errorf("%+v; want failure 310", res)
				}
				if str(res.RemoteDN) != "O=Example" {
					t.Errorf("RemoteDN %q; want O=Example", str(res.RemoteDN))
				}
			})
		})
	}
}

// TestUnverifiedCertificateIgnored shows that a certificate the TLS server
// asked for but did not verify (tls.RequestClientCert, which weir never
// configures) proves nothing, even one a trusted CA signed.
func TestUnverifiedCertificateIgnored(t *testing.T) {
	p := newPKI(t)
	srv, _, _ := p.startServer(t, tls.RequestClientCert, newCerts(t, CertOptions{}))
	for _, cert := range []*tls.Certificate{&p.client, &p.otherClient} {
		res, err := p.send(t, srv, tls.VersionTLS13, cert, "RemoteDN: CN=Mallory")
		if err != nil {
			t.Fatal(err)
		}
		if res.Subject != "" || res.Code != 0 || res.RemoteDN != nil || res.RemoteCertExpiry != nil {
			t.Errorf("unverified certificate %q used: %+v", cert.Leaf.Issuer, res)
		}
	}
}

// TestProviderOverTLS shows a load balancer at an allowed address passing a
// DN over TLS, and that a verified certificate still beats its header.
func TestProviderOverTLS(t *testing.T) {
	p := newPKI(t)
	c := newCerts(t, CertOptions{AllowedProviders: []string{"127.0.0.0/8"}})
	srv, _, _ := p.startServer(t, tls.VerifyClientCertIfGiven, c)
	lb := []string{"X-SSL-CLIENT-S-DN: CN=Proxied Sender,O=Example", "X-SSL-Client-V-End: Sep 10 06:39:20 2292 GMT"}

	res, err := p.send(t, srv, tls.VersionTLS13, nil, lb...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Subject != "Proxied Sender" || str(res.RemoteDN) != "CN=Proxied Sender,O=Example" ||
		str(res.RemoteCertExpiry) != "2292-09-10T06:39:20.000Z" {
		t.Errorf("from a provider: %+v, RemoteDN %q, RemoteCertExpiry %q", res, str(res.RemoteDN), str(res.RemoteCertExpiry))
	}

	res, err = p.send(t, srv, tls.VersionTLS13, &p.client, lb...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Subject != "Log Sender" || str(res.RemoteDN) != p.clientDN || str(res.RemoteCertExpiry) != p.clientExpiry {
		t.Errorf("certificate and provider header: %+v, RemoteDN %q; want the certificate's", res, str(res.RemoteDN))
	}
}
