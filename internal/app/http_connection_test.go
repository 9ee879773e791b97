package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
)

// hasAttr reports whether m has an attribute of this name, in any case.
func hasAttr(m *attr.Map, name string) bool {
	for k := range m.All() {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// anyHasAttr reports whether the stream's attributes or any of its parts'
// meta entries have an attribute of this name.
func anyHasAttr(t *testing.T, s *apptest.Server, st meta.Stream, name string) bool {
	t.Helper()
	if hasAttr(st.Attributes, name) {
		return true
	}
	for _, p := range storedParts(t, s, st) {
		if hasAttr(p.meta, name) {
			return true
		}
	}
	return false
}

// TestConnectionNamedHeadersNotStored: a header named in Connection is
// hop-by-hop (RFC 9110 7.6.1), the business of the connection it came on,
// and was stored as a stream attribute (and so forwarded by a proxy). It
// is now left out, whatever the case, however the Connection values are
// listed and over as many Connection headers; the headers weir reads (Feed,
// Type, Compression, GUID, EffectiveTime, the owner header, ...) are read,
// used and stored as before even when named; a query parameter of a named
// header's name is stored (Connection names header fields only).
func TestConnectionNamedHeadersNotStored(t *testing.T) {
	t.Parallel()
	s := start(t, nil)

	r := rawAt(t, s, "POST", "/datafeed", "one\n", "Feed: "+testFeed, "Connection: keep-alive, X-Hop",
		"X-Hop: hop value", "System: sys")
	st := streamByReceipt(t, s, r.ok(t))
	if a := st.Attributes; anyHasAttr(t, s, st, "X-Hop") || a.Value("System") != "sys" {
		t.Errorf("Connection: keep-alive, X-Hop: X-Hop stored %v, System %q; want no X-Hop, System sys", anyHasAttr(t, s, st, "X-Hop"), a.Value("System"))
	}

	// Several Connection headers, odd spacing and case, an empty element.
	r = rawAt(t, s, "POST", "/datafeed?x-three=from+query", "two\n", "Feed: "+testFeed, "Connection: X-One",
		"Connection: x-two ,  ,\tX-THREE", "X-One: 1", "X-Two: 2", "x-three: 3", "X-Four: 4")
	st = streamByReceipt(t, s, r.ok(t))
	a := st.Attributes
	for _, k := range []string{"X-One", "X-Two"} {
		if anyHasAttr(t, s, st, k) {
			t.Errorf("%s named in Connection was stored as %q", k, a.Value(k))
		}
	}
	if a.Value("X-Four") != "4" {
		t.Errorf("X-Four (not named) %q, want 4", a.Value("X-Four"))
	}
	if a.Value("x-three") != "from query" {
		t.Errorf("x-three %q: want the query parameter's value", a.Value("x-three"))
	}

	// The headers weir reads cannot be hidden by naming them.
	const effective = "2026-01-02T03:04:05.000Z"
	r = rawAt(t, s, "POST", "/datafeed", string(gz(t, "three\n")), "Feed: "+testFeed, "Type: Raw Events",
		"Compression: GZIP", "GUID: guid-named-in-connection", "EffectiveTime: "+effective, "AccountId: 1000", "System: sys",
		"Connection: Feed, Type, Compression, GUID, EffectiveTime, AccountId, Content-Length, System")
	st = streamByReceipt(t, s, r.ok(t))
	if string(s.Read(st.ID, 0, 0)) != "three\n" {
		t.Errorf("Compression named in Connection: stored %q, want the body decompressed", s.Read(st.ID, 0, 0))
	}
	want, _ := time.Parse(time.RFC3339, effective)
	if st.Feed != testFeed || st.Type != "Raw Events" || st.EffectiveMs != want.UnixMilli() {
		t.Errorf("feed %q type %q effective %d, want %s, Raw Events, %d", st.Feed, st.Type, st.EffectiveMs, testFeed, want.UnixMilli())
	}
	a = st.Attributes
	for k, v := range map[string]string{"Feed": testFeed, "Type": "Raw Events", "GUID": "guid-named-in-connection",
		"EffectiveTime": effective, "AccountId": "1000"} {
		if a.Value(k) != v {
			t.Errorf("%s named in Connection: stored %q, want %q as before", k, a.Value(k), v)
		}
	}
	if anyHasAttr(t, s, st, "System") || anyHasAttr(t, s, st, "Compression") || anyHasAttr(t, s, st, "Content-Length") {
		t.Errorf("stored %v", a.Sorted())
	}
}

// TestProxyConnectionNamedHeadersNotForwarded: a proxy, queued (the
// aggregate's meta entries and headers) or instant (the relayed post's
// headers), does not pass a header named in Connection downstream.
func TestProxyConnectionNamedHeadersNotForwarded(t *testing.T) {
	t.Parallel()
	eachProxyMode(t, "proxy-connection", func(t *testing.T, main, px *apptest.Server) {
		if r := rawAt(t, px, "POST", "/datafeed", "via proxy\n", "Feed: "+testFeed, "Connection: keep-alive, X-Hop",
			"X-Hop: hop value", "System: sys"); r.code != 200 {
			t.Fatalf("proxy post: %d %q", r.code, r.header.Get("Service-Error"))
		}
		got := waitForBody(t, main, "via proxy\n")
		parts := storedParts(t, main, got)
		if len(parts) != 1 || parts[0].meta.Value("System") != "sys" {
			t.Fatalf("main service: %d parts, want 1 with System sys", len(parts))
		}
		if anyHasAttr(t, main, got, "X-Hop") {
			t.Errorf("main service stored X-Hop: stream %v, part meta %v", got.Attributes.Sorted(), parts[0].meta.Sorted())
		}
	})
}
