package receive

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
)

// TestConnectionCommonCaseFree: dropping the headers named in Connection
// costs a post nothing when Connection names only keep-alive or close: it
// makes no more allocations than another header that is not stored (the
// same request with Upgrade in place of Connection), and the look-up
// itself none.
func TestConnectionCommonCaseFree(t *testing.T) {
	kept := connectionKept(config.Receive{})
	hop := attr.Hop{ReceiptID: "r", Time: time.Unix(0, 0), Host: "h"}
	r := httptest.NewRequest(http.MethodPost, "/datafeed", nil)
	r.Header.Set("Feed", "TEST-FEED")
	r.Header.Set("System", "sys")
	r.Header.Set("GUID", "g")
	r.Header.Set("Upgrade", "keep-alive")
	base := testing.AllocsPerRun(200, func() { requestAttributes(r, hop, kept) })
	r.Header.Del("Upgrade")
	for _, conn := range []string{"keep-alive", "Keep-Alive, close", "close"} {
		r.Header.Set("Connection", conn)
		if got := testing.AllocsPerRun(200, func() { requestAttributes(r, hop, kept) }); got > base {
			t.Errorf("Connection: %s: %.0f allocations, want %.0f as with a header that is not stored", conn, got, base)
		}
	}
	conn := []string{"keep-alive, X-One", "x-two"}
	if n := testing.AllocsPerRun(200, func() { namedInConnection(conn, "X-Two") }); n != 0 {
		t.Errorf("namedInConnection: %.0f allocations", n)
	}
}

func TestNamedInConnection(t *testing.T) {
	conn := []string{"keep-alive, X-One ,,\tx-TWO\t", "X-Three"}
	for name, want := range map[string]bool{"X-One": true, "x-two": true, "X-THREE": true, "keep-alive": true,
		"X-Four": false, "X": false, "": false} {
		if got := namedInConnection(conn, name); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
	for conn, want := range map[string]bool{"": true, "keep-alive": true, " Keep-Alive , CLOSE ": true, ",": true,
		"keep-alive, X-Hop": false, "Upgrade": false} {
		if got := onlyKeepAliveOrClose([]string{conn}); got != want {
			t.Errorf("onlyKeepAliveOrClose(%q): %v, want %v", conn, got, want)
		}
	}
}

func TestConnectionKept(t *testing.T) {
	kept := connectionKept(config.Receive{DataFeedOwnerMetaKey: "Owner", FeedNameTemplate: "${ AccountId }-${Component}-x${Broken",
		FeedNameGenerationMandatoryHeaders: []string{"Format", " "}})
	for _, name := range []string{"feed", "type", "compression", "guid", "effectivetime", "receiptid", "receiptidpath",
		"receivedtime", "receivedtimehistory", "receivedpath", "accountid", "owner", "component", "format"} {
		if !kept[name] {
			t.Errorf("%s not kept", name)
		}
	}
	for name := range kept {
		if name != strings.ToLower(name) || strings.TrimSpace(name) != name || name == "" || strings.Contains(name, "$") {
			t.Errorf("kept name %q", name)
		}
	}
	if kept["system"] {
		t.Error("System kept")
	}
}
