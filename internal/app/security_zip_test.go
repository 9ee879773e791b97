package app_test

// Sender identity and zip .meta entries.

import (
	"net/http"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/streamfile"
)

// partMeta parses the Meta Data child of one part (0-based) of a stream.
func partMeta(t testing.TB, s *apptest.Server, id int64, part int) *attr.Map {
	t.Helper()
	m, err := attr.ParseMeta(s.Read(id, streamfile.Meta, part))
	if err != nil {
		t.Fatalf("stream %d part %d meta: %v", id, part, err)
	}
	return m
}

// TestSecurityZipMetaCannotOverrideIdentity: what authentication decided
// about a post must hold in every part it stores. A zip's .meta entries are
// the sender's own words, like its headers, so they must not replace the
// authenticated identity (UploadUserId, UploadUsername), the attributes of
// the data feed key it used (which "override sender headers", the owner
// AccountId included), or claim a client certificate nothing verified
// (RemoteDN, RemoteCertExpiry: weir deletes them from a sender's headers).
//
// Regression: before commit 80231b3 this failed. attr.MergeEntry (called from
// receive's zip handling) overlays each group's .meta on top of the
// authenticated attributes and nothing re-applied them, so the stored Meta
// Data child of the part said whatever the sender wrote (UploadUserId admin,
// AccountId 9999, a RemoteDN), while the stream row and the receive log
// kept the real identity.
func TestSecurityZipMetaCannotOverrideIdentity(t *testing.T) {
	t.Parallel()
	s := authStart(t, nil, nil)
	key, _ := dbDataFeedKey(t, s, "1000", time.Now().Add(time.Hour), "System", "FROM-KEY")
	forged := "UploadUserId:admin\nUploadUsername:Administrator\nAccountId:9999\nSystem:PAYROLL\n" +
		"RemoteDN:CN=Someone Else\nRemoteCertExpiry:2099-01-01T00:00:00.000Z\n"
	body := zipOf(t, "001.meta", forged, "001.dat", "forged part", "002.dat", "plain part")
	r := post(t, s, body, "Feed", testFeed, "Compression", "ZIP", "Authorization", "Bearer "+key, "AccountId", "1000")
	id := r.ok(t)
	st := streamByReceipt(t, s, id)
	if st.Parts != 2 {
		t.Fatalf("stream has %d parts, want 2", st.Parts)
	}
	user := identityPrefix + "1000"
	if st.Attributes.Value("UploadUserId") != user {
		t.Errorf("stream row UploadUserId %q, want %q", st.Attributes.Value("UploadUserId"), user)
	}
	if l := receiveLog(t, s, "receiptId", id); l.str("user") != user {
		t.Errorf("receive log user %q, want %q", l.str("user"), user)
	}
	for part := range 2 {
		m := partMeta(t, s, st.ID, part)
		for k, want := range map[string]string{
			"UploadUserId": user, "UploadUsername": user, "AccountId": "1000", "System": "FROM-KEY",
		} {
			if got := m.Value(k); got != want {
				t.Errorf("part %d meta %s=%q, want %q (the authenticated value)", part, k, got, want)
			}
		}
		for _, k := range []string{"RemoteDN", "RemoteCertExpiry"} {
			if v, ok := m.Get(k); ok {
				t.Errorf("part %d meta claims %s=%q without a verified certificate", part, k, v)
			}
		}
	}
	if r := post(t, s, body, "Feed", testFeed, "Compression", "ZIP"); r.code != http.StatusUnauthorized {
		t.Errorf("the same zip without a key: %d, want 401", r.code)
	}
	neverStored(t, s, key)
}
