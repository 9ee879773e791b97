package app_test

// Sender authentication by client certificate: weir serving HTTPS itself
// with verified client certificates (mutual TLS), DN headers from
// TLS-terminating load balancers, and certificate identities. Every
// certificate is made inside the test.

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
	pool *x509.CertPool
}

// issued is a certificate and its key.
type issued struct {
	leaf            *x509.Certificate
	certPEM, keyPEM []byte
	tls             tls.Certificate
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newTestCA(t testing.TB, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn, Organization: []string{"Weir Test"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool,
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a new key's certificate from tmpl (serial and validity are
// filled in when unset).
func (ca *testCA) issue(t testing.TB, tmpl *x509.Certificate) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial(t)
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := issued{leaf: leaf,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	if out.tls, err = tls.X509KeyPair(out.certPEM, out.keyPEM); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeFileMode writes a file with exactly mode (whatever the umask).
func writeFileMode(t testing.TB, dir, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate for "Log Sender", with the server's files on disk.
type testPKI struct {
	ca                        *testCA
	server, client            issued
	certFile, keyFile, caFile string
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	ca := newTestCA(t, "Weir Test CA")
	p := &testPKI{ca: ca}
	p.server = ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.client = ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "Log Sender", Organization: []string{"Example"}, Country: []string{"GB"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	dir := t.TempDir()
	p.certFile = writeFileMode(t, dir, "server.crt", p.server.certPEM, 0o644)
	p.keyFile = writeFileMode(t, dir, "server.key", p.server.keyPEM, 0o600)
	p.caFile = writeFileMode(t, dir, "clients-ca.crt", ca.pem, 0o644)
	return p
}

// clientDN is the client certificate's subject as Go (and so weir) writes it.
func (p *testPKI) clientDN() string { return p.client.leaf.Subject.String() }

// startTLS starts an HTTPS server requiring authentication with types,
// verifying client certificates against the test CA; prepare runs on the
// data directory before the start. It returns the server and its https URL.
func startTLS(t testing.TB, p *testPKI, clientAuth string, types []string, prepare func(dataDir string)) (*apptest.Server, string) {
	t.Helper()
	cfg := apptest.Config(t)
	authConfig(&cfg, types)
	cfg.TLS = config.TLS{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientAuth: clientAuth}
	if prepare != nil {
		prepare(cfg.Data)
	}
	s := apptest.StartConfig(t, cfg)
	s.CreateFeed(testFeed, "", "")
	return s, "https://" + s.App.Addr()
}

// httpsClient trusts the test CA and offers certs when the server asks.
func httpsClient(t testing.TB, p *testPKI, certs ...tls.Certificate) *http.Client {
	return httpsClientConfig(t, &tls.Config{RootCAs: p.ca.pool, Certificates: certs})
}

func httpsClientConfig(t testing.TB, tc *tls.Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: tc, DisableCompression: true, ForceAttemptHTTP2: false}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 2 * time.Minute, Transport: tr}
}

// TestSecurityTLSKeyFileWorldReadable: weir refuses to serve with a TLS key
// every user can read, and says which file and how to fix it.
func TestSecurityTLSKeyFileWorldReadable(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	open := writeFileMode(t, t.TempDir(), "open.key", p.server.keyPEM, 0o644)
	cfg := apptest.Config(t)
	cfg.TLS = config.TLS{CertFile: p.certFile, KeyFile: open, ClientAuth: "request"}
	a, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = a.Shutdown(time.Minute)
		t.Fatalf("weir started with the world-readable key file %s", open)
	}
	for _, want := range []string{"tls.keyFile", open, "readable by every user", "chmod o-rwx " + open} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	// A refused start changes nothing: no administrator, no key file.
	if _, err := os.Stat(filepath.Join(cfg.Data, "bootstrap-admin-api-key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused start wrote the bootstrap key file: %v", err)
	}
	// Fixed as the message says, it starts.
	if err := os.Chmod(open, 0o640); err != nil {
		t.Fatal(err)
	}
	s := apptest.StartConfig(t, cfg)
	c := httpsClient(t, p)
	if r, err := sendTo(t, c, "https://"+s.App.Addr(), http.MethodGet, "/healthz", nil); err != nil || r.code != http.StatusOK {
		t.Fatalf("GET /healthz over TLS: %v %+v", err, r)
	}
}

// TestSecurityClientCertificate: with CERTIFICATE enabled, a client
// certificate that weir's TLS server verified is the sender (its CN), with
// RemoteDN and RemoteCertExpiry recorded; without one the post is 300; a
// DN header from a sender that is not a provider proves nothing.
func TestSecurityClientCertificate(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	s, base := startTLS(t, p, "request", []string{"CERTIFICATE"}, nil)
	withCert := httpsClient(t, p, p.client.tls)
	noCert := httpsClient(t, p)
	dn := "CN=Log Sender,O=Example,C=GB"
	if p.clientDN() != dn {
		t.Fatalf("Go writes the client subject as %q, want %q", p.clientDN(), dn)
	}
	expiry := attr.FormatTime(p.client.leaf.NotAfter)

	t.Run("verified certificate", func(t *testing.T) {
		body := "sent with a client certificate"
		r := mustSendTo(t, withCert, base, []byte(body), "Feed", testFeed)
		authenticated(t, s, r, body, "Log Sender", "Log Sender",
			"Feed", testFeed, "RemoteDN", dn, "RemoteCertExpiry", expiry)
	})
	t.Run("certificate wins over forged headers", func(t *testing.T) {
		body := "with forged headers"
		r := mustSendTo(t, withCert, base, []byte(body), "Feed", testFeed,
			"X-SSL-CLIENT-S-DN", "CN=Someone Else", "RemoteDN", "CN=Someone Else", "RemoteCertExpiry", "2099-01-01T00:00:00.000Z")
		// The header itself is kept as sent, as the reference keeps X-SSL-*;
		// nothing weir derives from it.
		authenticated(t, s, r, body, "Log Sender", "Log Sender",
			"Feed", testFeed, "RemoteDN", dn, "RemoteCertExpiry", expiry, "X-SSL-Client-S-DN", "CN=Someone Else")
	})
	t.Run("no certificate", func(t *testing.T) {
		mustSendTo(t, noCert, base, []byte("x"), "Feed", testFeed, "GUID", "cert-none").
			fails(t, http.StatusUnauthorized, 300, "Client Certificate Required")
		rejectedLog(t, s, "cert-none", 300)
	})
	t.Run("forged DN header without certificate", func(t *testing.T) {
		// allowedCertificateProviders is empty: nobody may pass a DN.
		mustSendTo(t, noCert, base, []byte("x"), "Feed", testFeed, "GUID", "cert-forged",
			"X-SSL-CLIENT-S-DN", dn, "RemoteDN", dn).
			fails(t, http.StatusUnauthorized, 300, "Client Certificate Required")
		rejectedLog(t, s, "cert-forged", 300)
		waitLog(t, s, "warning about the ignored DN header", func(l logLine) bool {
			return strings.HasPrefix(l.str("msg"), "ignoring certificate DN header") && l.str("header") == "X-SSL-CLIENT-S-DN"
		})
	})
	t.Run("certificate from another CA", func(t *testing.T) {
		rogue := newTestCA(t, "Rogue CA").issue(t, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "Log Sender", Organization: []string{"Example"}, Country: []string{"GB"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		// Offered whatever CAs the server names, so the server must judge it.
		c := httpsClientConfig(t, &tls.Config{RootCAs: p.ca.pool,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogue.tls, nil }})
		if r, err := sendTo(t, c, base, http.MethodPost, "/datafeed", []byte("x"), "Feed", testFeed); err == nil {
			t.Fatalf("a certificate from an untrusted CA got an answer: %d %q", r.code, r.body)
		}
	})
	t.Run("subjects", func(t *testing.T) {
		// Go escapes a ',' in a value, and weir reads the escape: the CN
		// is the whole value, not the part before the comma.
		comma := p.ca.issue(t, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "Smith, John", Organization: []string{"Example"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		body := "comma in the CN"
		r := mustSendTo(t, httpsClient(t, p, comma.tls), base, []byte(body), "Feed", testFeed)
		authenticated(t, s, r, body, "Smith, John", "Smith, John", "Feed", testFeed,
			"RemoteDN", `CN=Smith\, John,O=Example`, "RemoteCertExpiry", attr.FormatTime(comma.leaf.NotAfter))

		// A trusted certificate without a CN names nobody: 310.
		noCN := p.ca.issue(t, &x509.Certificate{
			Subject:     pkix.Name{Organization: []string{"Example"}, OrganizationalUnit: []string{"Senders"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		mustSendTo(t, httpsClient(t, p, noCN.tls), base, []byte("x"), "Feed", testFeed).
			fails(t, http.StatusUnauthorized, 310, "Client Certificate failed authentication", "no common name")
	})
	if n := len(s.Streams()); n != 3 {
		t.Errorf("%d streams, want 3", n)
	}

	t.Run("clientAuth require", func(t *testing.T) {
		s, base := startTLS(t, p, "require", []string{"CERTIFICATE"}, nil)
		if r, err := sendTo(t, httpsClient(t, p), base, http.MethodPost, "/datafeed", []byte("x"), "Feed", testFeed); err == nil {
			t.Fatalf("a client without a certificate got an answer: %d %q", r.code, r.body)
		}
		body := "required certificate"
		r := mustSendTo(t, httpsClient(t, p, p.client.tls), base, []byte(body), "Feed", testFeed)
		authenticated(t, s, r, body, "Log Sender", "Log Sender",
			"Feed", testFeed, "RemoteDN", dn, "RemoteCertExpiry", expiry)
	})
}

// TestSecurityCertificateDNHeader: a DN passed in X-SSL-CLIENT-S-DN by a
// TLS-terminating load balancer is honoured only from the addresses in
// allowedCertificateProviders (empty: from nobody); its CN is the sender.
func TestSecurityCertificateDNHeader(t *testing.T) {
	t.Parallel()
	const dn = "CN=Log Sender,OU=Senders,O=Example,C=GB"
	for _, tc := range []struct {
		name      string
		providers []string
	}{
		{"no providers", nil},
		{"another network", []string{"10.0.0.0/8", "::1"}},
	} {
		t.Run("ignored/"+tc.name, func(t *testing.T) {
			t.Parallel()
			s := authStart(t, []string{"CERTIFICATE"}, func(c *config.Config) { c.Receive.AllowedCertificateProviders = tc.providers })
			post(t, s, []byte("x"), "Feed", testFeed, "X-SSL-CLIENT-S-DN", dn, "X-SSL-Client-V-End", "Sep  9 16:16:45 2292 GMT").
				fails(t, http.StatusUnauthorized, 300, "Client Certificate Required")
			nothingStored(t, s)
		})
	}

	t.Run("honoured", func(t *testing.T) {
		t.Parallel()
		s := authStart(t, []string{"CERTIFICATE"}, func(c *config.Config) {
			c.Receive.AllowedCertificateProviders = []string{"127.0.0.1"}
		})
		body := "via a load balancer"
		r := post(t, s, []byte(body), "Feed", testFeed, "X-SSL-CLIENT-S-DN", dn, "X-SSL-Client-V-End", "Sep  9 16:16:45 2292 GMT")
		authenticated(t, s, r, body, "Log Sender", "Log Sender", "Feed", testFeed,
			"RemoteDN", dn, "RemoteCertExpiry", "2292-09-09T16:16:45.000Z",
			"X-SSL-Client-S-DN", dn, "X-SSL-Client-V-End", "Sep  9 16:16:45 2292 GMT")

		// CN extraction as in the reference (section 6.5).
		for dn, cn := range map[string]string{
			"CN=John Smith (johnsmith), OU=Users, DC=example": "John Smith (johnsmith)",
			" cn = Jane Smith , ou = Users":                   "Jane Smith",
		} {
			body := "cn " + cn
			r := post(t, s, []byte(body), "Feed", testFeed, "X-SSL-CLIENT-S-DN", dn)
			authenticated(t, s, r, body, cn, cn, "Feed", testFeed, "RemoteDN", strings.TrimSpace(dn), "X-SSL-Client-S-DN", strings.TrimSpace(dn))
		}
		for _, dn := range []string{"OU=Senders,O=Example", "CNJohn Doe,OU=Users"} {
			post(t, s, []byte("x"), "Feed", testFeed, "X-SSL-CLIENT-S-DN", dn).
				fails(t, http.StatusUnauthorized, 310, "Client Certificate failed authentication", "no common name")
		}
	})

	t.Run("host names refused", func(t *testing.T) {
		// Trusting a name would make the header only as safe as DNS.
		t.Parallel()
		cfg := apptest.Config(t)
		authConfig(&cfg, []string{"CERTIFICATE"})
		cfg.Receive.AllowedCertificateProviders = []string{"localhost"}
		a, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = a.Shutdown(time.Minute)
			t.Fatal("weir started with a host name among allowedCertificateProviders")
		}
		for _, want := range []string{"receive.allowedCertificateProviders", `"localhost"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
		// The option is named once, not "receive.allowedCertificateProviders: allowedCertificateProviders: ...".
		if n := strings.Count(err.Error(), "allowedCertificateProviders"); n != 1 {
			t.Errorf("error %q names the option %d times, want once", err, n)
		}
	})

	t.Run("OPEN_SSL format", func(t *testing.T) {
		t.Parallel()
		s := authStart(t, []string{"CERTIFICATE"}, func(c *config.Config) {
			c.Receive.AllowedCertificateProviders = []string{"127.0.0.0/8"}
			c.Receive.X509CertificateDnFormat = "OPEN_SSL"
		})
		body := "openssl dn"
		legacy := "/C=UK/O=Example/OU=Senders/CN=Log Sender"
		r := post(t, s, []byte(body), "Feed", testFeed, "X-SSL-CLIENT-S-DN", legacy)
		authenticated(t, s, r, body, "Log Sender", "Log Sender", "Feed", testFeed, "RemoteDN", legacy, "X-SSL-Client-S-DN", legacy)
	})
}

// TestSecurityCertificateIdentity: an identity file maps (owner, DN) to an
// identity with attributes (CERTIFICATE_IDENTITY). It is tried before the
// plain certificate; without the owner header, or for another owner, the
// certificate's CN still authenticates if CERTIFICATE is enabled.
func TestSecurityCertificateIdentity(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	dn := p.clientDN()
	expiry := attr.FormatTime(p.client.leaf.NotAfter)
	prepare := func(dataDir string) {
		now := time.Now()
		writeIdentities(t, identitiesDir(dataDir), "certificates.json",
			certIdentity(dn, now.Add(time.Hour), map[string]string{"AccountId": "1000", "System": "CERT-ID-SYS", "Component": "cid"}),
			certIdentity("CN=Someone Else,O=Example,C=GB", now.Add(time.Hour), map[string]string{"AccountId": "2000"}),
			certIdentity(dn, now.Add(-time.Hour), map[string]string{"AccountId": "3000"}), // expired
			// The same DN as the reference's TLS (Java) writes it.
			certIdentity(strings.ReplaceAll(dn, ",", ", "), now.Add(time.Hour), map[string]string{"AccountId": "4000", "System": "JAVA-DN"}),
		)
	}
	withCert := httpsClient(t, p, p.client.tls)
	want := func(kv ...string) []string {
		return append([]string{"Feed", testFeed, "RemoteDN", dn, "RemoteCertExpiry", expiry}, kv...)
	}

	t.Run("before the certificate", func(t *testing.T) {
		t.Parallel()
		s, base := startTLS(t, p, "request", []string{"CERTIFICATE_IDENTITY", "CERTIFICATE"}, prepare)
		body := "certificate identity"
		r := mustSendTo(t, withCert, base, []byte(body), "Feed", testFeed, "AccountId", "1000", "System", "FROM-HEADER")
		authenticated(t, s, r, body, identityPrefix+"1000", identityPrefix+"1000",
			want("AccountId", "1000", "System", "CERT-ID-SYS", "Component", "cid")...)
		for _, owner := range []string{"", "2000", "3000"} {
			body := "plain certificate, owner " + owner
			hdr := []string{"Feed", testFeed}
			if owner != "" {
				hdr = append(hdr, "AccountId", owner)
			}
			r := mustSendTo(t, withCert, base, []byte(body), hdr...)
			kv := want()
			if owner != "" {
				kv = want("AccountId", owner)
			}
			authenticated(t, s, r, body, "Log Sender", "Log Sender", kv...)
		}
	})

	t.Run("alone", func(t *testing.T) {
		t.Parallel()
		s, base := startTLS(t, p, "request", []string{"CERTIFICATE_IDENTITY"}, prepare)
		body := "certificate identity only"
		r := mustSendTo(t, withCert, base, []byte(body), "Feed", testFeed, "AccountId", "1000")
		authenticated(t, s, r, body, identityPrefix+"1000", identityPrefix+"1000",
			want("AccountId", "1000", "System", "CERT-ID-SYS", "Component", "cid")...)
		// No match is no identity, not an error: the post lacks a credential.
		// The answer says what is missing: a sender that did connect with
		// a certificate must not be told only to connect with one.
		hint := "connect with a client certificate that is a certificate identity, and name its account in the AccountId header"
		mustSendTo(t, withCert, base, []byte("x"), "Feed", testFeed).
			fails(t, http.StatusUnauthorized, 300, hint)
		mustSendTo(t, withCert, base, []byte("x"), "Feed", testFeed, "AccountId", "2000").
			fails(t, http.StatusUnauthorized, 300, hint)
		mustSendTo(t, httpsClient(t, p), base, []byte("x"), "Feed", testFeed, "AccountId", "1000").
			fails(t, http.StatusUnauthorized, 300, hint)
		// An identity file written for the reference names the DN with
		// spaces after the commas: it is the same DN.
		body = "identity from a reference-format DN"
		r = mustSendTo(t, withCert, base, []byte(body), "Feed", testFeed, "AccountId", "4000")
		authenticated(t, s, r, body, identityPrefix+"4000", identityPrefix+"4000",
			want("AccountId", "4000", "System", "JAVA-DN")...)
		if n := len(s.Streams()); n != 2 {
			t.Errorf("%d streams, want 2", n)
		}
	})

	t.Run("DN from a provider", func(t *testing.T) {
		t.Parallel()
		cfg := apptest.Config(t)
		authConfig(&cfg, []string{"CERTIFICATE_IDENTITY"})
		cfg.Receive.AllowedCertificateProviders = []string{"127.0.0.1"}
		prepare(cfg.Data)
		s := apptest.StartConfig(t, cfg)
		s.CreateFeed(testFeed, "", "")
		body := "identity via a load balancer"
		r := post(t, s, []byte(body), "Feed", testFeed, "AccountId", "1000", "X-SSL-CLIENT-S-DN", dn)
		authenticated(t, s, r, body, identityPrefix+"1000", identityPrefix+"1000",
			"Feed", testFeed, "AccountId", "1000", "System", "CERT-ID-SYS", "Component", "cid",
			"RemoteDN", dn, "X-SSL-Client-S-DN", dn)
	})
}

// TestSecurityChainOrder: with every type enabled on an HTTPS server, the
// authenticators run in the reference order and the first identity wins: a
// data feed key before a certificate identity, before a token, before the
// certificate. A credential that is present but wrong fails at once, even
// when a later one would have succeeded.
func TestSecurityChainOrder(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	dn := p.clientDN()
	expiry := attr.FormatTime(p.client.leaf.NotAfter)
	s, base := startTLS(t, p, "request", []string{"CERTIFICATE", "TOKEN", "CERTIFICATE_IDENTITY", "DATA_FEED_KEY"}, func(dataDir string) {
		writeIdentities(t, identitiesDir(dataDir), "certificates.json",
			certIdentity(dn, time.Now().Add(time.Hour), map[string]string{"AccountId": "1000", "System": "CERT-ID-SYS"}))
	})
	dfk, _ := dbDataFeedKey(t, s, "1000", time.Now().Add(time.Hour), "System", "DFK-SYS")
	weirAdmin(t, s, "user", "create", "chain-user")
	apiKey := firstLine(t, func() string { out, _ := weirAdmin(t, s, "api-key", "create", "--user", "chain-user"); return out }())
	withCert := httpsClient(t, p, p.client.tls)
	noCert := httpsClient(t, p)
	cert := []string{"RemoteDN", dn, "RemoteCertExpiry", expiry}

	for _, tc := range []struct {
		name       string
		c          *http.Client
		hdr        []string
		user       string
		kv         []string
		failStatus int
	}{
		{"key beats everything", withCert, []string{"Authorization", "Bearer " + dfk, "AccountId", "1000"},
			identityPrefix + "1000", append([]string{"AccountId", "1000", "System", "DFK-SYS"}, cert...), 0},
		{"certificate identity beats the certificate", withCert, []string{"AccountId", "1000"},
			identityPrefix + "1000", append([]string{"AccountId", "1000", "System", "CERT-ID-SYS"}, cert...), 0},
		{"token beats the certificate", withCert, []string{"Authorization", "Bearer " + apiKey},
			"chain-user", cert, 0},
		{"certificate", withCert, nil, "Log Sender", cert, 0},
		{"key without certificate", noCert, []string{"Authorization", dfk, "AccountId", "1000"},
			identityPrefix + "1000", []string{"AccountId", "1000", "System", "DFK-SYS"}, 0},
		{"wrong key despite certificate", withCert, []string{"Authorization", "Bearer " + damaged(dfk), "AccountId", "1000"}, "", nil, 313},
		{"key of another owner despite certificate identity", withCert, []string{"Authorization", "Bearer " + dfk, "AccountId", "2000"}, "", nil, 313},
		{"wrong token despite certificate", withCert, []string{"Authorization", "Bearer " + damaged(apiKey)}, "", nil, 311},
		{"nothing", noCert, nil, "", nil, 304},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "chain: " + tc.name
			r := mustSendTo(t, tc.c, base, []byte(body), append([]string{"Feed", testFeed}, tc.hdr...)...)
			if tc.failStatus != 0 {
				r.fails(t, http.StatusUnauthorized, tc.failStatus)
				return
			}
			authenticated(t, s, r, body, tc.user, tc.user, append([]string{"Feed", testFeed}, tc.kv...)...)
		})
	}
	neverStored(t, s, dfk, apiKey)
}

// TestSecurityTLSSchemaLinkLocalhost: an API answer's $schema link names
// the scheme and the host the client used, over HTTP and HTTPS, also when
// that host is localhost (huma then fell back to weir's server URL, a path,
// and wrote "https:///api/api/schemas/...").
func TestSecurityTLSSchemaLinkLocalhost(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	_, base := startTLS(t, p, "request", nil, nil)
	plain := start(t, nil)
	for _, tc := range []struct {
		name, url string
		client    *http.Client
	}{
		{"https", base, httpsClient(t, p)},
		{"http", plain.URL, http.DefaultClient},
	} {
		_, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(tc.url, "https://"), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port} {
			req, err := http.NewRequest(http.MethodGet, tc.url+"/api/version", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host // the connection still goes to 127.0.0.1, as verified
			res, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Schema string `json:"$schema"`
			}
			err = json.NewDecoder(res.Body).Decode(&v)
			res.Body.Close()
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("%s %s: %d, %v", tc.name, host, res.StatusCode, err)
			}
			if want := tc.name + "://" + host + "/api/schemas/ServiceVersion.json"; v.Schema != want {
				t.Errorf("%s, Host %s: $schema %q, want %q", tc.name, host, v.Schema, want)
			}
		}
	}
}

// TestSecurityTLSClientCertificatesNeedHTTPS: client certificate settings
// without a server certificate would serve plain HTTP, where no client
// certificate can be asked for: weir refuses to start and says why, rather
// than accepting every connection that "require" was meant to refuse.
func TestSecurityTLSClientCertificatesNeedHTTPS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	for _, clientAuth := range []string{"require", "request"} {
		cfg := apptest.Config(t)
		authConfig(&cfg, []string{"CERTIFICATE"})
		cfg.TLS = config.TLS{ClientCAFile: p.caFile, ClientAuth: clientAuth}
		a, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = a.Shutdown(time.Minute)
			t.Fatalf("clientAuth %s: weir started on plain HTTP with tls.clientCAFile set", clientAuth)
		}
		if want := "need tls.certFile and tls.keyFile"; !strings.Contains(err.Error(), want) {
			t.Errorf("clientAuth %s: error %q does not say %q", clientAuth, err, want)
		}
	}
}
