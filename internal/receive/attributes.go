package receive

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
)

// notAttributes are request headers that never become stream attributes:
// credentials, hop-by-hop and transport headers, and the compression
// declarations (the stored data is always decompressed).
var notAttributes = map[string]bool{
	"authorization":           true,
	"proxy-authorization":     true,
	"cookie":                  true,
	"x-amzn-oidc-accesstoken": true,
	"x-amzn-oidc-identity":    true,
	"x-amzn-oidc-data":        true,
	"connection":              true,
	"keep-alive":              true,
	"proxy-connection":        true,
	"te":                      true,
	"trailer":                 true,
	"transfer-encoding":       true,
	"upgrade":                 true,
	"accept":                  true,
	"accept-encoding":         true,
	"content-length":          true,
	"expect":                  true,
	"compression":             true,
	"content-encoding":        true,
	"weir-relay":              true, // this hop's business (RelayHeader), not the data's
}

// setByWeir are the attributes this service sets on what it stores, from
// what it established itself: this hop's receipt details
// (attr.AddReceiptInfo), the authenticated sender (auth.Apply), the
// part's size, the receipt rule that took it, and what only a verified
// certificate may set (certKeys). Lower case.
var setByWeir = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range append([]string{attr.KeyReceiptID, attr.KeyReceiptIDPath, attr.KeyReceivedTime,
		attr.KeyReceivedTimeHistory, attr.KeyReceivedPath, "UploadUserId", "UploadUsername", "StreamSize",
		keyDataReceiptRule}, certKeys...) {
		m[attr.FoldName(k)] = true
	}
	return m
}()

// ReservedAttribute says why an attribute of this name cannot be set by
// configuration, such as a data feed key's attributes (which are laid over
// a post's after weir has added its own): weir never stores it (a
// credential, or a transport or compression header), or sets it itself.
// It returns "" for any other name. Names match in any case.
func ReservedAttribute(name string) string {
	switch lower := attr.FoldName(strings.TrimSpace(name)); {
	case notAttributes[lower]:
		return "weir never stores " + name + " as an attribute (a credential, or a transport or compression header)"
	case setByWeir[lower]:
		return "weir sets " + name + " itself"
	}
	return ""
}

// applyIdentity is auth.Apply, leaving out the identity's attributes (a
// data feed key's, from the database or an identity file) that weir sets
// itself or never stores: a key stored before such names were refused, or
// written in a file, must not overwrite this hop's receipt id or store a
// credential.
func applyIdentity(attrs *attr.Map, id *auth.Identity) {
	if id.Attributes != nil {
		var clean *attr.Map
		for k := range id.Attributes.All() {
			if ReservedAttribute(k) == "" {
				continue
			}
			if clean == nil {
				clean = id.Attributes.Clone()
			}
			clean.Delete(k)
		}
		if clean != nil {
			c := *id
			c.Attributes = clean
			id = &c
		}
	}
	auth.Apply(attrs, id)
}

// knownNames restores the conventional spelling of attribute names that
// Go's HTTP server canonicalises (EffectiveTime arrives as Effectivetime).
// Other header names keep the canonical form; HTTP/2 senders send lower
// case anyway. Query parameters and zip meta entries keep the sender's case.
var knownNames = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Feed", "Type", "Compression", "System", "Environment", "EffectiveTime", "GUID",
		"AccountId", "AccountName", "Component", "Format", "ContextFormat", "Schema",
		"SchemaVersion", "Encoding", "ContextEncoding", "Classification", "Host",
		"X-Forwarded-For", "RemoteFile", "SqsMessageId", "ReceiptId", "ReceiptIdPath",
		"ReceivedTime", "ReceivedTimeHistory", "ReceivedPath", "RemoteAddress", "RemoteHost",
		"RemoteDN", "RemoteCertExpiry", "UploadUserId", "UploadUsername", "DataReceiptRule",
		"StreamSize", "periodStartTime", "periodEndTime", "User-Agent", "Content-Type",
		"X-SSL-Client-V-End", "X-SSL-Client-S-DN",
	} {
		m[attr.FoldName(k)] = k
	}
	return m
}()

func attributeName(header string) string {
	if k, ok := knownNames[attr.FoldName(header)]; ok {
		return k
	}
	return header
}

// readByWeir are the attributes weir reads from a post (lower case): the
// feed, type and compression, the sender's GUID and event time, the
// receipt details of earlier hops (attr.AddReceiptInfo) and the default
// data feed key owner header. A header of one of these names named in
// Connection is still stored and used (connectionKept).
var readByWeir = []string{"Feed", "Type", "Compression", "GUID", "EffectiveTime", "periodStartTime",
	"periodEndTime", attr.KeyReceiptID, attr.KeyReceiptIDPath, attr.KeyReceivedTime,
	attr.KeyReceivedTimeHistory, attr.KeyReceivedPath, "AccountId"}

// connectionKept is the set of lower-case header names that stay
// attributes even when a Connection header names them: readByWeir, and
// those cfg makes weir read (the data feed key owner header, and the
// headers feed name generation requires or its template uses). A sender
// must not be able to hide from weir, by naming it in Connection, a header
// that decides where and how its data is stored.
func connectionKept(cfg config.Receive) map[string]bool {
	m := map[string]bool{}
	add := func(name string) {
		if name = strings.TrimSpace(name); name != "" {
			m[attr.FoldName(name)] = true
		}
	}
	for _, k := range readByWeir {
		add(k)
	}
	add(cfg.DataFeedOwnerMetaKey)
	for _, k := range cfg.FeedNameGenerationMandatoryHeaders {
		add(k)
	}
	for t := cfg.FeedNameTemplate; ; {
		open := strings.Index(t, "${")
		if open < 0 {
			break
		}
		end := strings.IndexByte(t[open+2:], '}')
		if end < 0 {
			break
		}
		add(t[open+2 : open+2+end])
		t = t[open+2+end+1:]
	}
	return m
}

// namedInConnection reports whether name is one of the comma-separated
// field names in the Connection header values conn (RFC 9110 7.6.1), in
// any case. It allocates nothing.
func namedInConnection(conn []string, name string) bool {
	for _, v := range conn {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if tok = strings.Trim(tok, " \t"); tok != "" && attr.EqualName(tok, name) {
				return true
			}
		}
	}
	return false
}

// onlyKeepAliveOrClose reports whether the Connection header values conn
// name nothing but keep-alive and close (or nothing at all): the common
// case, in which no attribute can be dropped.
func onlyKeepAliveOrClose(conn []string) bool {
	for _, v := range conn {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if tok = strings.Trim(tok, " \t"); tok != "" && !attr.EqualName(tok, "keep-alive") && !attr.EqualName(tok, "close") {
				return false
			}
		}
	}
	return true
}

// repeated is an attribute weir reads that a post gives twice, in two
// header lines or two query parameters, with different values: weir cannot
// tell which the sender meant, and taking either silently could store the
// data on the wrong feed.
type repeated struct {
	name, first, second string
	query               bool
}

func (r *repeated) Error() string {
	where := "header"
	if r.query {
		where = "query parameter"
	}
	return fmt.Sprintf("the %s %s is given twice with different values (%q and %q): send it once", where, r.name, r.first, r.second)
}

// requestAttributes builds a post's attributes: headers (a header on
// several lines is one list, RFC 9110 5.3: its values joined with ", "),
// then query parameters (which win; one given twice is joined likewise),
// then GUID and the remote address when
// no GUID was sent, then this hop's receipt information. Compression is
// left in the map for the caller to read and remove. A header named in a
// Connection header is hop-by-hop (RFC 9110 7.6.1): it is this connection's
// business, not the data's, and is not stored (nor, so, forwarded by a
// proxy), unless its name is in kept (connectionKept), which weir reads.
// Connection names header fields only: a query parameter of such a name is
// stored. A name in kept (one weir reads) given twice with different
// values, in headers or in query parameters, is not joined: it is returned
// as repeated, for the post to be refused.
func requestAttributes(r *http.Request, hop attr.Hop, kept map[string]bool) (*attr.Map, *repeated) {
	m := &attr.Map{}
	var rep *repeated
	// add puts name's value, joining it to one the same source (headers,
	// or query parameters) gave already.
	add := func(name, value string, seen bool, query bool) {
		value = strings.TrimSpace(value)
		if seen {
			if old, ok := m.Get(name); ok && old != value {
				if kept[attr.FoldName(name)] {
					if rep == nil {
						rep = &repeated{name: name, first: old, second: value, query: query}
					}
					return
				}
				value = old + ", " + value
			}
		}
		m.Put(name, value)
	}
	conn := r.Header["Connection"]
	if onlyKeepAliveOrClose(conn) {
		conn = nil
	}
	// Sorted so that attribute order does not depend on map iteration.
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		lower := attr.FoldName(name)
		if notAttributes[lower] && lower != "compression" {
			continue
		}
		if conn != nil && !kept[lower] && namedInConnection(conn, name) {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		key := attributeName(name)
		// Two raw names can fold to one (Go canonicalises only names
		// that are tokens): seen when an earlier one has put it.
		_, seen := m.Get(key)
		for i, v := range r.Header[name] {
			add(key, v, seen || i > 0, false)
		}
	}
	// Go's server moves the Host header out of r.Header into r.Host; it is
	// a request header like the others (and one the spec lets senders set).
	if r.Host != "" {
		m.Put("Host", r.Host)
	}
	var fromQuery map[string]bool // folded names a query parameter put
	for _, pair := range strings.Split(r.URL.RawQuery, "&") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			continue
		}
		k, v = unescape(k), unescape(v)
		// A NUL (which no header can carry, but a decoded query parameter
		// can) is not text: PostgreSQL refuses it in the stored attributes.
		// A Feed keeps it, to be refused by the feed checks with the name
		// quoted as sent.
		k = strings.ReplaceAll(k, "\x00", "\uFFFD")
		if !attr.EqualName(k, "Feed") {
			v = strings.ReplaceAll(v, "\x00", "\uFFFD")
		}
		lower := attr.FoldName(k)
		if notAttributes[lower] && lower != "compression" {
			continue
		}
		if fromQuery == nil {
			fromQuery = map[string]bool{}
		}
		add(k, v, fromQuery[lower], true)
		fromQuery[lower] = true
	}
	m.Delete(keyDataReceiptRule) // this service's decision, not the sender's
	if strings.TrimSpace(m.Value("GUID")) == "" {
		m.Put("GUID", newUUID())
		host := r.RemoteAddr
		if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			host = h
		}
		if host != "" {
			m.Put("RemoteAddress", host)
			m.Put("RemoteHost", host) // no reverse DNS lookup on the receive path
		}
	}
	attr.AddReceiptInfo(m, hop)
	return m, rep
}

// unescape decodes a query component; a malformed escape keeps the raw text
// rather than losing the sender's value.
func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// newUUID returns a random (version 4) UUID in lower-case hex with dashes.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return string(out[:])
}
