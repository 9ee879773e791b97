package app_test

import (
	"testing"
	"time"

	"github.com/weirhq/weir/internal/config"
)

// TestForwardedPostSentAgain: a post a trusted forwarder (a proxy) sends
// again with the same GUID, after losing the answer to the first send, is
// answered with the first copy's receipt id and not stored twice; the same
// GUID from another sender, or another GUID, is a post of its own.
func TestForwardedPostSentAgain(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.TrustedForwarders = []string{"DATA_FEED_KEY:data-feed-identity-2000"}
	})
	trusted, _ := dbDataFeedKey(t, s, "2000", time.Now().Add(time.Hour))
	other, _ := dbDataFeedKey(t, s, "3000", time.Now().Add(time.Hour))
	body := zipOf(t, "0000000001.meta", "Feed:"+testFeed+"\nAccountId:1000\n", "0000000001.dat", "an aggregated post\n")
	send := func(key, account, guid string) string {
		t.Helper()
		return post(t, s, body, "Compression", "ZIP", "Feed", testFeed, "GUID", guid,
			"Authorization", "Bearer "+key, "AccountId", account).ok(t)
	}

	first := send(trusted, "2000", "aggregate-1")
	if again := send(trusted, "2000", "aggregate-1"); again != first {
		t.Errorf("sent again: receipt %s, want the first copy's %s", again, first)
	}
	if n := len(s.Streams()); n != 1 {
		t.Fatalf("%d streams after sending one aggregate twice, want 1", n)
	}
	if l := receiveLog(t, s, "duplicateOf", first); l.str("outcome") != "duplicate" || l.str("receiptId") == first {
		t.Errorf("receive log of the second send: %v", l)
	}
	// Another GUID from the same forwarder, and the same GUID from a
	// sender that is not trusted: posts of their own.
	if id := send(trusted, "2000", "aggregate-2"); id == first {
		t.Errorf("another GUID got the first receipt id")
	}
	a, b := send(other, "3000", "aggregate-1"), send(other, "3000", "aggregate-1")
	if a == b || a == first {
		t.Errorf("an untrusted sender's posts with one GUID: %s and %s (first %s)", a, b, first)
	}
	if n := len(s.Streams()); n != 4 {
		t.Errorf("%d streams, want 4", n)
	}
}
