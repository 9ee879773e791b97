package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/attr"
)

// DNFormat is how a distinguished name passed in a header is written.
type DNFormat string

const (
	// LDAP is RFC 2253/4514: comma separated, most specific RDN first,
	// e.g. "CN=Log Sender,OU=Senders,O=Example,C=GB" (nginx $ssl_client_s_dn).
	LDAP DNFormat = "LDAP"
	// OpenSSL is OpenSSL's one-line form: slash separated, most specific
	// RDN last, e.g. "/C=GB/O=Example/CN=Log Sender" (nginx $ssl_client_s_dn_legacy).
	OpenSSL DNFormat = "OPEN_SSL"
)

// Attribute keys written from a client certificate.
const (
	keyRemoteDN         = "RemoteDN"
	keyRemoteCertExpiry = "RemoteCertExpiry"
)

// sslClientVEndHeader carries a certificate's expiry from nginx ($ssl_client_v_end).
const sslClientVEndHeader = "X-SSL-Client-V-End"

// parseDNFormat accepts a format name in any case, as the configuration does;
// empty means LDAP, the configuration's default.
func parseDNFormat(s string) (DNFormat, bool) {
	switch f := DNFormat(strings.ToUpper(strings.TrimSpace(s))); f {
	case "", LDAP:
		return LDAP, true
	case OpenSSL:
		return OpenSSL, true
	}
	return "", false
}

// CommonName extracts the CN from a DN as the reference system does: split
// on ',' (LDAP) or '/' (OPEN_SSL), keep tokens with exactly one '=', match
// the trimmed attribute name case-insensitively and trim the value. A CN
// with an empty value does not count.
//
// Two deliberate differences, both only for DNs the reference mis-reads:
//   - LDAP DNs honour RFC 4514 backslash escapes. Go and nginx escape a ',' in
//     a value, so a certificate whose CN is `x,CN=admin` appears as
//     `CN=x\,CN=admin`; a plain split would read a second CN, "admin", from
//     inside the first one's value. Honouring the escape keeps it one token,
//     which then has two '=' and is ignored like any such token.
//   - With several CNs the most specific one wins (the first in LDAP order,
//     the last in OPEN_SSL order), so `CN=Log Sender,CN=Users,DC=example`
//     names the sender, not its container. The reference keeps the last in
//     both formats.
func CommonName(dn string, format DNFormat) (string, bool) {
	f, ok := parseDNFormat(string(format))
	if !ok {
		return "", false
	}
	var tokens []string
	if f == OpenSSL {
		// OpenSSL's one-line form has no escaping to honour.
		tokens = strings.Split(dn, "/")
	} else {
		tokens = splitEscaped(dn)
	}
	cn, found := "", false
	for _, tok := range tokens {
		name, value, ok := attributeValue(tok, f == LDAP)
		if !ok || !strings.EqualFold(name, "CN") || value == "" {
			continue
		}
		if f == LDAP {
			return value, true
		}
		cn, found = value, true
	}
	return cn, found
}

// splitEscaped splits an LDAP DN on commas that are not escaped with a
// backslash, keeping the escapes for attributeValue to decode.
func splitEscaped(dn string) []string {
	var out []string
	start := 0
	for i := 0; i < len(dn); i++ {
		switch dn[i] {
		case '\\':
			i++ // the escaped byte never separates
		case ',':
			out = append(out, dn[start:i])
			start = i + 1
		}
	}
	return append(out, dn[start:])
}

// attributeValue splits one "name=value" token. A token without exactly one
// (unescaped) '=' is not an attribute, as in the reference, so a
// multi-valued RDN such as "CN=a+UID=b" is ignored rather than guessed at.
func attributeValue(tok string, escaped bool) (name, value string, ok bool) {
	eq, count := -1, 0
	for i := 0; i < len(tok); i++ {
		switch {
		case escaped && tok[i] == '\\':
			i++
		case tok[i] == '=':
			if count == 0 {
				eq = i
			}
			count++
		}
	}
	if count != 1 {
		return "", "", false
	}
	name, value = strings.TrimSpace(tok[:eq]), tok[eq+1:]
	if escaped {
		// Decode before trimming, or an escaped trailing space ("John\ ")
		// would lose its space and leave a stray backslash.
		value = unescapeDN(value)
		if !utf8.ValidString(value) {
			// A hex escape that decodes to broken UTF-8 cannot be a name
			// weir may store and show.
			return "", "", false
		}
	}
	return name, strings.TrimSpace(value), true
}

// unescapeDN decodes RFC 4514 escapes: "\," and the like stand for the
// character, "\C3\A9" for bytes (OpenSSL escapes non-ASCII this way). A
// trailing lone backslash is kept as it is.
func unescapeDN(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i+1])
		i++
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// sslClientVEndLayout is OpenSSL's ASN1_TIME_print form that nginx puts in
// $ssl_client_v_end: English month, space-padded day, always GMT. "GMT" is
// matched literally so the result is UTC rather than a fabricated zone.
const sslClientVEndLayout = "Jan _2 15:04:05 2006 GMT"

// ParseSSLClientVEnd parses nginx's $ssl_client_v_end, e.g.
// "Sep  9 16:16:45 2292 GMT", as UTC.
func ParseSSLClientVEnd(s string) (time.Time, error) {
	t, err := time.Parse(sslClientVEndLayout, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("parse %s %q: %w (want e.g. \"Sep  9 16:16:45 2292 GMT\")", sslClientVEndHeader, s, err)
	}
	return t.UTC(), nil
}

// CertOptions configures client-certificate authentication.
type CertOptions struct {
	DNHeader         string   // header carrying a DN from a TLS-terminating load balancer
	DNFormat         DNFormat // format of that header's DN
	AllowedProviders []string // IP addresses or CIDR prefixes allowed to send DN headers; empty = nobody
	Logger           *slog.Logger
}

// warnEvery is how often one remote address may cause a warning about a DN
// header weir ignored: often enough to notice, rarely enough that a sender
// retrying in a loop cannot flood the log.
const warnEvery = time.Minute

// maxWarnTracked bounds the addresses remembered for rate limiting, so that
// a sender spraying source addresses (an IPv6 /64 is plenty) cannot grow
// memory without limit. Beyond it, warnings are summarised.
const maxWarnTracked = 1024

// Certificates authenticates senders by client certificate: one that weir's
// TLS server verified itself, or a DN passed in a header by a trusted
// TLS-terminating load balancer.
type Certificates struct {
	dnHeader  string
	dnFormat  DNFormat
	providers []netip.Prefix
	log       *slog.Logger
	now       func() time.Time // replaced in tests

	mu         sync.Mutex
	warned     map[netip.Addr]time.Time // last warning per remote address
	overflowAt time.Time                // last summary warning once warned is full
}

// NewCertificates validates the options. Providers must be IP addresses or
// CIDR prefixes: unlike the reference, host names are refused, because
// trusting a name would make the DN header only as safe as DNS.
func NewCertificates(o CertOptions) (*Certificates, error) {
	format, ok := parseDNFormat(string(o.DNFormat))
	if !ok {
		return nil, fmt.Errorf("certificate DN format %q is not one of LDAP, OPEN_SSL", o.DNFormat)
	}
	c := &Certificates{
		dnHeader: strings.TrimSpace(o.DNHeader),
		dnFormat: format,
		log:      o.Logger,
		now:      time.Now,
		warned:   make(map[netip.Addr]time.Time),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	for _, p := range o.AllowedProviders {
		prefix, err := parseProvider(p)
		if err != nil {
			return nil, err // the caller names the option
		}
		c.providers = append(c.providers, prefix)
	}
	return c, nil
}

func parseProvider(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix: %w", s, err)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// A remote address is unmapped before matching (remoteIP), so a
			// mapped prefix must be too or it would never match.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix: %w", s, err)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q: an address with a zone cannot be matched; give the address without %%%s", s, a.Zone())
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// remoteIP is the connection's peer address. Only the TCP peer counts:
// X-Forwarded-For and the like are sender-controlled and never consulted.
func remoteIP(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	// Zones never match a prefix and a v4 peer may appear v4-in-v6 on a
	// dual-stack listener; neither changes who the peer is.
	return a.WithZone("").Unmap(), true
}

// fromProvider reports whether the request came straight from an allowed
// certificate provider.
func (c *Certificates) fromProvider(r *http.Request) bool {
	if len(c.providers) == 0 {
		return false
	}
	a, ok := remoteIP(r)
	if !ok {
		return false
	}
	for _, p := range c.providers {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// verifiedLeaf is the client certificate weir's TLS server verified against
// tls.clientCAFile. A certificate that was presented but not verified (a
// server asking with tls.RequestClientCert) proves nothing and is ignored.
func verifiedLeaf(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	return r.TLS.VerifiedChains[0][0]
}

// clientDN finds the DN and the format to read it in.
func (c *Certificates) clientDN(r *http.Request) (string, DNFormat) {
	if leaf := verifiedLeaf(r); leaf != nil {
		return SubjectDN(leaf), LDAP
	}
	if c.dnHeader == "" {
		return "", ""
	}
	dn := strings.TrimSpace(r.Header.Get(c.dnHeader))
	if dn == "" {
		return "", ""
	}
	if !c.fromProvider(r) {
		c.warnIgnored(r, c.dnHeader)
		return "", ""
	}
	return dn, c.dnFormat
}

// ClientDN returns the client's DN: the subject of a verified TLS client
// certificate (RFC 4514, as SubjectDN writes it), else the DN header
// when the request comes from an allowed provider, else "". A verified
// certificate wins over any header, since weir checked it itself.
func (c *Certificates) ClientDN(r *http.Request) string {
	dn, _ := c.clientDN(r)
	return dn
}

// Authenticate identifies the sender by the CN of its certificate's subject.
func (c *Certificates) Authenticate(_ context.Context, r *Request) (*Identity, error) {
	dn, format := c.clientDN(r.HTTP)
	if dn == "" {
		return nil, nil
	}
	cn, ok := CommonName(dn, format)
	if !ok {
		// The DN stays out of Detail: it may come from a load balancer, and
		// the sender only needs to know what to fix.
		return nil, &Failure{
			Code:   CertificateFailed,
			Detail: "the client certificate's subject has no common name (CN)",
			Err:    fmt.Errorf("no CN in %s DN %q", format, dn),
		}
	}
	return &Identity{SubjectID: cn, DisplayName: cn}, nil
}

// Attributes records the client certificate on a post: RemoteDN and
// RemoteCertExpiry. It runs after the sender's headers are in attrs.
//
// The reference lets headers override these, so any sender can claim any
// certificate in the stored meta. Weir only believes what it can check:
//   - a verified certificate overwrites both keys;
//   - an allowed provider is trusted as it is for the DN itself: its DN
//     header sets RemoteDN and X-SSL-Client-V-End sets RemoteCertExpiry
//     (an expiry without a parseable X-SSL-Client-V-End is removed when the
//     DN header is present); without a DN header, values it forwards (e.g.
//     an upstream proxy's) are kept;
//   - from anyone else both keys are deleted, since nothing vouches for them.
func (c *Certificates) Attributes(r *http.Request, attrs *attr.Map) {
	if leaf := verifiedLeaf(r); leaf != nil {
		attrs.Put(keyRemoteDN, SubjectDN(leaf))
		attrs.Put(keyRemoteCertExpiry, attr.FormatTime(leaf.NotAfter))
		return
	}
	if !c.fromProvider(r) {
		attrs.Delete(keyRemoteDN)
		attrs.Delete(keyRemoteCertExpiry)
		return
	}
	if dn, _ := c.clientDN(r); dn != "" {
		attrs.Put(keyRemoteDN, dn)
		// The provider describes a certificate: an expiry forwarded with
		// the post may belong to another one, so only its own counts.
		attrs.Delete(keyRemoteCertExpiry)
	}
	if v := r.Header.Get(sslClientVEndHeader); strings.TrimSpace(v) != "" {
		t, err := ParseSSLClientVEnd(v)
		if err != nil {
			// As in the reference: a bad date loses only the expiry, not the post.
			c.log.Debug("ignoring certificate expiry from provider", "remote", r.RemoteAddr, "err", err)
			return
		}
		attrs.Put(keyRemoteCertExpiry, attr.FormatTime(t))
	}
}

// warnIgnored logs that a DN header from a non-provider was ignored, at most
// once per remote address per warnEvery: the header may come with every
// post of a misconfigured sender, and one line a minute says as much.
func (c *Certificates) warnIgnored(r *http.Request, header string) {
	a, ok := remoteIP(r)
	if !ok {
		a = netip.Addr{} // unparseable peers share one slot
	}
	now := c.now()
	c.mu.Lock()
	if last, seen := c.warned[a]; seen && now.Sub(last) < warnEvery {
		c.mu.Unlock()
		return
	}
	if len(c.warned) >= maxWarnTracked {
		for k, t := range c.warned {
			if now.Sub(t) >= warnEvery {
				delete(c.warned, k)
			}
		}
	}
	if len(c.warned) >= maxWarnTracked {
		// Too many addresses at once: one summary line a minute instead.
		summarise := now.Sub(c.overflowAt) >= warnEvery
		if summarise {
			c.overflowAt = now
		}
		c.mu.Unlock()
		if summarise {
			c.log.Warn("ignoring certificate DN headers from many addresses that are not allowed certificate providers",
				"header", header, "latest", r.RemoteAddr)
		}
		return
	}
	c.warned[a] = now
	c.mu.Unlock()
	c.log.Warn("ignoring certificate DN header: the sender is not an allowed certificate provider (receive.allowedCertificateProviders)",
		"header", header, "remote", r.RemoteAddr)
}
