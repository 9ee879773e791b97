package auth

import (
	"bytes"
	"context"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/attr"
)

// TestCommonName re-expresses the reference's CN extraction cases (6.5,
// case 47) and pins weir's deliberate differences.
func TestCommonName(t *testing.T) {
	tests := []struct {
		name   string
		dn     string
		format DNFormat
		want   string // "" means no CN
	}{
		// The reference's cases.
		{"ldap", "CN=John Smith (johnsmith), OU=Users, O=Example, C=GB", LDAP, "John Smith (johnsmith)"},
		{"openssl", "/C=UK/ST=Some State/L=Some City/O=Some Org/OU=Some Unit/CN=Log Sender", OpenSSL, "Log Sender"},
		{"case and spaces", " cn = Jane Smith , ou = Users", LDAP, "Jane Smith"},
		{"no equals", "CNJohn Doe, OU=Users", LDAP, ""},
		{"two equals ignored", "CN=a=b, OU=Users", LDAP, ""},
		{"two equals skipped, next CN used", "OU=Users, CN=a=b, CN=Real", LDAP, "Real"},
		{"empty value", "CN=, OU=Users", LDAP, ""},
		{"blank value", "CN=  , OU=Users", LDAP, ""},
		{"empty dn", "", LDAP, ""},
		{"no cn", "OU=Users,O=Example", LDAP, ""},
		{"format in lower case", "/O=Example/CN=Log Sender", "open_ssl", "Log Sender"},
		{"empty format is LDAP", "CN=Log Sender,O=Example", "", "Log Sender"},
		{"unknown format", "CN=Log Sender", "X500", ""},
		{"ldap dn read as openssl", "CN=Log Sender,O=Example", OpenSSL, ""},
		{"openssl comma in a value", "/O=Example, Inc./CN=Log Sender", OpenSSL, "Log Sender"},
		// Most specific CN wins: first in LDAP order, last in OpenSSL order.
		{"ldap several CNs", "CN=Log Sender,CN=Users,DC=example,DC=com", LDAP, "Log Sender"},
		{"openssl several CNs", "/DC=com/DC=example/CN=Users/CN=Log Sender", OpenSSL, "Log Sender"},
		// RFC 4514 escapes, as Go and nginx write them.
		{"escaped comma", `CN=Smith\, John,OU=Users`, LDAP, "Smith, John"},
		{"escaped comma cannot smuggle a CN", `CN=x\,CN=admin,O=Example`, LDAP, ""},
		{"escaped specials", `CN=\#1 \"a\" \+ \<b\> \; \\,O=x`, LDAP, `#1 "a" + <b> ; \`},
		{"hex escapes", `CN=Ren\C3\A9 L\c3\a9vy,O=x`, LDAP, "René Lévy"},
		{"hex escape to broken utf-8", `CN=\FF,O=x`, LDAP, ""},
		{"escaped equals is not a separator", `CN=a\=b,O=x`, LDAP, "a=b"},
		{"trailing backslash kept", `O=x,CN=a\`, LDAP, `a\`},
		{"multi-valued rdn ignored", "CN=a+UID=b,O=x", LDAP, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := CommonName(tc.dn, tc.format)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("CommonName(%q, %q) = %q, %v; want %q, %v", tc.dn, tc.format, got, ok, tc.want, tc.want != "")
			}
		})
	}
}

// TestCommonNameOfGoSubjects shows that the CN read back from the DN weir
// writes for a verified certificate (pkix.Name.String) is the certificate's
// own CN, whatever characters it holds.
func TestCommonNameOfGoSubjects(t *testing.T) {
	for _, cn := range []string{
		"Log Sender", "Smith, John", " leading and trailing ", "#hash", `back\slash`,
		`"quoted"`, "a+b;c<d>e", "Lévy", "日本語", `\41`, "slash/es",
	} {
		dn := pkix.Name{CommonName: cn, Organization: []string{"Example, Inc."}, Country: []string{"GB"}}.String()
		got, ok := CommonName(dn, LDAP)
		if want := strings.TrimSpace(cn); !ok || got != want {
			t.Errorf("CN %q: DN %q gave %q, %v; want %q", cn, dn, got, ok, want)
		}
	}
	// A CN holding '=' is no CN at all (the reference's exactly-one-'='
	// rule), so a crafted CN cannot name another sender either.
	dn := pkix.Name{CommonName: "x,CN=admin", Organization: []string{"Example"}}.String()
	if got, ok := CommonName(dn, LDAP); ok {
		t.Errorf("DN %q gave CN %q", dn, got)
	}
}

func FuzzCommonName(f *testing.F) {
	for _, s := range []string{"Log Sender", `a\,b`, "x,CN=y", `\C3\A9`, " ", "#", "a=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Arbitrary input must not panic in either format.
		CommonName(s, LDAP)
		CommonName(s, OpenSSL)
		// A CN Go writes must come back unchanged, unless it cannot: a value
		// with '=' is ignored by design, and a blank one is not a name.
		if strings.Contains(s, "=") || !utf8.ValidString(s) || strings.TrimSpace(s) == "" {
			return
		}
		dn := pkix.Name{CommonName: s, OrganizationalUnit: []string{"Senders"}}.String()
		if got, ok := CommonName(dn, LDAP); !ok || got != strings.TrimSpace(s) {
			t.Errorf("CN %q: DN %q gave %q, %v", s, dn, got, ok)
		}
	})
}

// TestParseSSLClientVEnd re-expresses case 37.
func TestParseSSLClientVEnd(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
	}{
		{"Sep  9 16:16:45 2018 GMT", time.Date(2018, 9, 9, 16, 16, 45, 0, time.UTC)},
		{"Sep 10 06:39:20 2292 GMT", time.Date(2292, 9, 10, 6, 39, 20, 0, time.UTC)},
		{"Sep 9 16:16:45 2018 GMT", time.Date(2018, 9, 9, 16, 16, 45, 0, time.UTC)},
		{" Feb 29 00:00:00 2024 GMT ", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"Sep  9 16:16:45.5 2018 GMT", time.Date(2018, 9, 9, 16, 16, 45, 5e8, time.UTC)},
	}
	for _, tc := range tests {
		got, err := ParseSSLClientVEnd(tc.in)
		if err != nil {
			t.Errorf("ParseSSLClientVEnd(%q): %v", tc.in, err)
			continue
		}
		if !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("ParseSSLClientVEnd(%q) = %v; want %v in UTC", tc.in, got, tc.want)
		}
	}
	if got := attr.FormatTime(mustParseVEnd(t, "Sep 10 06:39:20 2292 GMT")); got != "2292-09-10T06:39:20.000Z" {
		t.Errorf("formatted: %s", got)
	}
	for _, bad := range []string{"", "2018-09-09T16:16:45Z", "Sep  9 16:16:45 2018 EST", "Sep 31 16:16:45 2018 GMT", "Sept 9 16:16:45 2018 GMT"} {
		if _, err := ParseSSLClientVEnd(bad); err == nil || !strings.Contains(err.Error(), "X-SSL-Client-V-End") {
			t.Errorf("ParseSSLClientVEnd(%q): err %v; want an error naming the header", bad, err)
		}
	}
}

func mustParseVEnd(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := ParseSSLClientVEnd(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNewCertificatesValidates(t *testing.T) {
	for _, good := range [][]string{nil, {"127.0.0.1"}, {" 10.0.0.0/8 "}, {"::1", "2001:db8::/32"}, {"::ffff:10.0.0.0/104"}} {
		if _, err := NewCertificates(CertOptions{AllowedProviders: good}); err != nil {
			t.Errorf("providers %q: %v", good, err)
		}
	}
	for _, bad := range []string{"lb.example.com", "10.0.0.0/33", "", "300.1.1.1", "fe80::1%eth0", "10.0.0.1-10.0.0.9"} {
		_, err := NewCertificates(CertOptions{AllowedProviders: []string{"127.0.0.1", bad}})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("provider %q: err %v; want an error naming it", bad, err)
		}
	}
	if _, err := NewCertificates(CertOptions{DNFormat: "X500"}); err == nil || !strings.Contains(err.Error(), "X500") {
		t.Errorf("format X500: err %v", err)
	}
}

// post is a request as the receive path sees it: headers already in attrs.
func post(remote string, headers ...string) *Request {
	r := httptest.NewRequest(http.MethodPost, "/datafeed", nil)
	r.RemoteAddr = remote
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		r.Header.Set(k, v)
	}
	return &Request{HTTP: r, Attrs: headerAttrs(r)}
}

func headerAttrs(r *http.Request) *attr.Map {
	m := &attr.Map{}
	for k, v := range r.Header {
		m.Put(k, v[0])
	}
	return m
}

func newCerts(t *testing.T, o CertOptions) *Certificates {
	t.Helper()
	if o.DNHeader == "" {
		o.DNHeader = "X-SSL-CLIENT-S-DN"
	}
	c, err := NewCertificates(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProviders shows a DN header is honoured only from an allowed
// provider, and that an empty list trusts nobody (case 47, with weir's
// safer empty list).
func TestProviders(t *testing.T) {
	tests := []struct {
		name      string
		providers []string
		remote    string
		honoured  bool
	}{
		{"empty list trusts nobody", nil, "127.0.0.1:4000", false},
		{"exact address", []string{"127.0.0.1"}, "127.0.0.1:4000", true},
		{"prefix", []string{"127.0.0.0/8"}, "127.0.0.1:4000", true},
		{"another address", []string{"127.0.0.2"}, "127.0.0.1:4000", false},
		{"another prefix", []string{"10.0.0.0/8", "::1"}, "127.0.0.1:4000", false},
		{"v4-mapped peer", []string{"127.0.0.1"}, "[::ffff:127.0.0.1]:4000", true},
		{"v4-mapped entry", []string{"::ffff:127.0.0.1"}, "127.0.0.1:4000", true},
		{"v4-mapped prefix", []string{"::ffff:127.0.0.0/104"}, "127.0.0.1:4000", true},
		{"ipv6", []string{"::1"}, "[::1]:4000", true},
		{"no port", []string{"127.0.0.1"}, "127.0.0.1", true},
		{"unparseable peer", []string{"127.0.0.1"}, "@unix", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCerts(t, CertOptions{AllowedProviders: tc.providers})
			req := post(tc.remote, "X-Ssl-Client-S-Dn: CN=Log Sender, OU=Senders, O=Example")
			id, err := c.Authenticate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			c.Attributes(req.HTTP, req.Attrs)
			dn, hasDN := req.Attrs.Get("RemoteDN")
			if !tc.honoured {
				if id != nil || c.ClientDN(req.HTTP) != "" || hasDN {
					t.Errorf("DN header honoured: identity %+v, RemoteDN %q", id, dn)
				}
				return
			}
			if id == nil || id.SubjectID != "Log Sender" || id.DisplayName != "Log Sender" {
				t.Fatalf("identity %+v; want Log Sender", id)
			}
			if want := "CN=Log Sender, OU=Senders, O=Example"; dn != want || c.ClientDN(req.HTTP) != want {
				t.Errorf("RemoteDN %q, ClientDN %q; want %q", dn, c.ClientDN(req.HTTP), want)
			}
		})
	}
}

func TestProviderOpenSSLFormatAndNoCN(t *testing.T) {
	c := newCerts(t, CertOptions{DNHeader: "X-Client-DN", DNFormat: OpenSSL, AllowedProviders: []string{"127.0.0.1"}})
	id, err := c.Authenticate(context.Background(), post("127.0.0.1:1", "X-Client-DN: /C=GB/O=Example/CN=Log Sender"))
	if err != nil || id == nil || id.SubjectID != "Log Sender" {
		t.Fatalf("got %+v, %v; want Log Sender", id, err)
	}
	// The configured header is the only one read.
	if id, err := c.Authenticate(context.Background(), post("127.0.0.1:1", "X-SSL-CLIENT-S-DN: /CN=Other")); id != nil || err != nil {
		t.Errorf("other header: %+v, %v", id, err)
	}
	_, err = c.Authenticate(context.Background(), post("127.0.0.1:1", "X-Client-DN: /C=GB/O=Secret Org"))
	var f *Failure
	if !errors.As(err, &f) || f.Code != CertificateFailed {
		t.Fatalf("err %v; want a 310 failure", err)
	}
	if strings.Contains(f.Detail, "Secret Org") || !strings.Contains(f.Err.Error(), "Secret Org") {
		t.Errorf("the DN belongs in the logged cause, not the detail sent: %+v", f)
	}
}

// TestAttributesCannotBeForged shows a sender cannot set RemoteDN or
// RemoteCertExpiry itself, while a provider's headers set them.
func TestAttributesCannotBeForged(t *testing.T) {
	forged := []string{"RemoteDN: CN=admin", "RemoteCertExpiry: 2999-01-01T00:00:00.000Z",
		"X-SSL-CLIENT-S-DN: CN=admin", "X-SSL-Client-V-End: Sep  9 16:16:45 2999 GMT"}

	for _, providers := range [][]string{nil, {"10.0.0.1"}} {
		c := newCerts(t, CertOptions{AllowedProviders: providers})
		req := post("127.0.0.1:1", forged...)
		if id, err := c.Authenticate(context.Background(), req); id != nil || err != nil {
			t.Errorf("providers %q: identity %+v, %v", providers, id, err)
		}
		c.Attributes(req.HTTP, req.Attrs)
		for _, k := range []string{"RemoteDN", "RemoteCertExpiry"} {
			if v, ok := req.Attrs.Get(k); ok {
				t.Errorf("providers %q: forged %s = %q kept", providers, k, v)
			}
		}
	}

	c := newCerts(t, CertOptions{AllowedProviders: []string{"127.0.0.1"}})
	t.Run("provider headers overwrite", func(t *testing.T) {
		req := post("127.0.0.1:1", "RemoteDN: CN=admin", "RemoteCertExpiry: 2999-01-01T00:00:00.000Z",
			"X-SSL-CLIENT-S-DN: CN=Log Sender,O=Example", "X-SSL-Client-V-End: Sep 10 06:39:20 2292 GMT")
		c.Attributes(req.HTTP, req.Attrs)
		if dn, exp := req.Attrs.Value("RemoteDN"), req.Attrs.Value("RemoteCertExpiry"); dn != "CN=Log Sender,O=Example" || exp != "2292-09-10T06:39:20.000Z" {
			t.Errorf("RemoteDN %q, RemoteCertExpiry %q", dn, exp)
		}
	})
	t.Run("provider DN without a usable expiry drops a forwarded one", func(t *testing.T) {
		req := post("127.0.0.1:1", "RemoteCertExpiry: 2999-01-01T00:00:00.000Z",
			"X-SSL-CLIENT-S-DN: CN=Log Sender", "X-SSL-Client-V-End: not a date")
		c.Attributes(req.HTTP, req.Attrs)
		if v, ok := req.Attrs.Get("RemoteCertExpiry"); ok || req.Attrs.Value("RemoteDN") != "CN=Log Sender" {
			t.Errorf("RemoteCertExpiry %q kept, RemoteDN %q", v, req.Attrs.Value("RemoteDN"))
		}
	})
	t.Run("provider forwarding without a DN header is trusted", func(t *testing.T) {
		req := post("127.0.0.1:1", "RemoteDN: CN=Upstream Sender", "RemoteCertExpiry: 2030-01-01T00:00:00.000Z")
		c.Attributes(req.HTTP, req.Attrs)
		if dn, exp := req.Attrs.Value("RemoteDN"), req.Attrs.Value("RemoteCertExpiry"); dn != "CN=Upstream Sender" || exp != "2030-01-01T00:00:00.000Z" {
			t.Errorf("RemoteDN %q, RemoteCertExpiry %q", dn, exp)
		}
	})
	t.Run("provider expiry alone is converted", func(t *testing.T) {
		req := post("127.0.0.1:1", "X-SSL-Client-V-End: Sep  9 16:16:45 2018 GMT")
		c.Attributes(req.HTTP, req.Attrs)
		if exp := req.Attrs.Value("RemoteCertExpiry"); exp != "2018-09-09T16:16:45.000Z" {
			t.Errorf("RemoteCertExpiry %q", exp)
		}
	})
}

// TestIgnoredHeaderWarningIsRateLimited shows a sender that keeps sending a
// DN header it may not send costs one log line per minute, not one per post.
func TestIgnoredHeaderWarningIsRateLimited(t *testing.T) {
	var buf syncBuffer
	c := newCerts(t, CertOptions{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	send := func(remote string) {
		t.Helper()
		req := post(remote, "X-SSL-CLIENT-S-DN: CN=admin")
		if id, err := c.Authenticate(context.Background(), req); id != nil || err != nil {
			t.Errorf("identity %+v, %v", id, err) // not Fatal: also called from goroutines
		}
		c.Attributes(req.HTTP, req.Attrs)
	}
	warnings := func() int { return strings.Count(buf.String(), "level=WARN") }

	for range 5 {
		send("127.0.0.1:1000")
	}
	send("127.0.0.1:2000") // another port, same address
	if n := warnings(); n != 1 {
		t.Fatalf("%d warnings for one address; want 1:\n%s", n, buf.String())
	}
	send("127.0.0.2:1000")
	if n := warnings(); n != 2 {
		t.Fatalf("%d warnings after a second address; want 2", n)
	}
	now = now.Add(59 * time.Second)
	send("127.0.0.1:1000")
	if n := warnings(); n != 2 {
		t.Fatalf("%d warnings within the minute; want 2", n)
	}
	now = now.Add(time.Second)
	send("127.0.0.1:1000")
	if n := warnings(); n != 3 {
		t.Fatalf("%d warnings after the minute; want 3", n)
	}
	if strings.Contains(buf.String(), "CN=admin") {
		t.Errorf("the ignored DN was logged:\n%s", buf.String())
	}

	// Many addresses: memory stays bounded and the log gets a summary.
	buf.Reset()
	for i := range maxWarnTracked + 100 {
		send(fmt.Sprintf("[2001:db8::%x]:1", i))
	}
	if n := len(c.warned); n > maxWarnTracked {
		t.Errorf("%d addresses tracked; want at most %d", n, maxWarnTracked)
	}
	all := warnings()
	if summaries := strings.Count(buf.String(), "many addresses"); summaries != 1 || all > maxWarnTracked+1 {
		t.Errorf("%d warnings, %d summaries; want at most %d and 1", all, summaries, maxWarnTracked+1)
	}
	// A minute later the old entries make room again.
	now = now.Add(time.Minute)
	buf.Reset()
	send("[2001:db8::ffff:1]:1")
	if n := warnings(); n != 1 || strings.Contains(buf.String(), "many addresses") {
		t.Errorf("after a minute: %d warnings:\n%s", n, buf.String())
	}

	// Concurrent posts share the limiter safely (run with -race).
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				send(fmt.Sprintf("10.0.%d.%d:1", i, j))
			}
		})
	}
	wg.Wait()
}

// syncBuffer is a bytes.Buffer safe for a logger used from several goroutines.
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

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}
