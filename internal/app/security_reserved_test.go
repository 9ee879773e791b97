package app_test

import (
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app/apptest"
)

// TestKeyAttributesCannotOverrideWeirs: the attributes of a data feed key
// that come from an identity file, or from a key row stored before such
// names were refused, are applied without those weir sets itself
// (ReceiptId, ReceiptIdPath, UploadUserId, ...): the stored receipt id is
// the one the sender was answered with (found by a review).
func TestKeyAttributesCannotOverrideWeirs(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	authConfig(&cfg, []string{"DATA_FEED_KEY"})
	key := newDataFeedKey(t)
	writeIdentities(t, identitiesDir(cfg.Data), "senders.json",
		argon2Identity(t, key, time.Now().Add(time.Hour), map[string]string{"AccountId": "2000", "ReceiptId": "forged-receipt", "UploadUserId": "someone-else", "System": "from-file"}))
	s := apptest.StartConfig(t, cfg)
	s.CreateFeed(testFeed, "", "")
	id := post(t, s, []byte("x\n"), "Feed", testFeed, "Authorization", "Bearer "+key, "AccountId", "2000").ok(t)
	a := streamByReceipt(t, s, id).Attributes
	if a.Value("ReceiptId") != id || a.Value("UploadUserId") != "data-feed-identity-2000" || a.Value("System") != "from-file" {
		t.Errorf("identity file key: ReceiptId %q (answered %s), UploadUserId %q, System %q",
			a.Value("ReceiptId"), id, a.Value("UploadUserId"), a.Value("System"))
	}

	// A key row as one stored before the names were refused.
	dbKey, _ := dbDataFeedKey(t, s, "2003", time.Now().Add(time.Hour), "ReceiptIdPath", "x,y")
	id2 := post(t, s, []byte("y\n"), "Feed", testFeed, "Authorization", "Bearer "+dbKey, "AccountId", "2003").ok(t)
	if got := streamByReceipt(t, s, id2).Attributes.Value("ReceiptIdPath"); got != id2 {
		t.Errorf("database key: ReceiptIdPath %q, want %s", got, id2)
	}
}
