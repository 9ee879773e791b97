package app_test

import (
	"fmt"
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
)

// TestAPIFeedRecreateKeepsEarlierStreams: streams and feed permissions are
// keyed by the feed's name, so a user who may only create feeds must not be
// able to re-create a deleted feed's name and, as its OWNER, list, restore
// and read the streams it left (deleted ones, and the unlocked ones a
// forced delete keeps). Only an Administrator may create such a name.
func TestAPIFeedRecreateKeepsEarlierStreams(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	admin := user(t, s, "rcadmin", []string{access.Administrator}, nil)
	mallory := user(t, s, "mallory", []string{access.ManageFeeds, access.DataView, access.DataDelete}, nil)

	for _, name := range []string{"SECRET-FEED", "KEPT-FEED"} {
		admin.do("POST", "/feeds", `{"name":"`+name+`"}`).want(t, "create "+name, 201, nil)
	}
	secret := sxPost(t, s, []byte("the secret"), "Feed", "SECRET-FEED")
	kept := sxPost(t, s, []byte("kept data"), "Feed", "KEPT-FEED")
	// SECRET-FEED: its stream deleted, then the feed; KEPT-FEED: deleted
	// with force, which keeps its unlocked stream.
	admin.do("DELETE", fmt.Sprintf("/streams/%d", secret), "").want(t, "delete stream", 200, nil)
	admin.do("DELETE", "/feeds/SECRET-FEED", "").want(t, "delete feed", 204, nil)
	admin.do("DELETE", "/feeds/KEPT-FEED?force=true", "").want(t, "force delete feed", 204, nil)

	for name, id := range map[string]int64{"SECRET-FEED": secret, "KEPT-FEED": kept} {
		mallory.do("POST", "/feeds", `{"name":"`+name+`"}`).admWantProblem(t, "re-create "+name, 409,
			"streams of an earlier feed named "+name, "an Administrator must create it")
		mallory.do("GET", "/feeds/"+name, "").want(t, "get "+name+" after refusal", 403, nil)
		var l streamList
		mallory.do("GET", "/streams?feed="+name+"&status=DELETED", "").want(t, "list deleted", 200, &l)
		if len(l.Streams) != 0 {
			t.Fatalf("%s: mallory lists %v", name, l.ids())
		}
		mallory.do("GET", "/streams?feed="+name, "").want(t, "list", 200, &l)
		if len(l.Streams) != 0 {
			t.Fatalf("%s: mallory lists %v", name, l.ids())
		}
		var r struct{ Matched, Changed int64 }
		mallory.do("POST", "/streams/restore", `{"expression":`+sxTerm("Feed", "EQUALS", name)+`}`).want(t, "restore", 200, &r)
		if r.Matched != 0 || r.Changed != 0 {
			t.Fatalf("%s: mallory restored %+v", name, r)
		}
		mallory.do("GET", fmt.Sprintf("/streams/%d/text", id), "").want(t, "read "+name+"'s stream", 403, nil)
	}

	// A name that never had streams is created as before, its creator the OWNER.
	mallory.do("POST", "/feeds", `{"name":"NEW-FEED"}`).want(t, "create a new name", 201, nil)
	mallory.do("GET", "/feeds/NEW-FEED", "").want(t, "get own feed", 200, nil)
	mallory.do("POST", "/feeds", `{"name":"NEW-FEED"}`).admWantProblem(t, "create twice", 409, "already exists")

	// An administrator may re-create the name, and then decides who sees
	// the earlier streams: mallory still sees none.
	admin.do("POST", "/feeds", `{"name":"SECRET-FEED"}`).want(t, "admin re-creates", 201, nil)
	mallory.do("GET", fmt.Sprintf("/streams/%d/text", secret), "").want(t, "read after admin re-created", 403, nil)
}

// TestAPIFeedEncodings: a feed's encoding and context encoding are checked
// on every write with the lookup the text view decodes with (422 naming
// each field at fault), so that a feed never holds a name its text view
// calls unknown; a patch is refused only for the names it sends.
func TestAPIFeedEncodings(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	admin := user(t, s, "encadmin", []string{access.Administrator}, nil)

	p := admin.do("POST", "/feeds", `{"name":"X-FEED","encoding":"NOPE-ENC","contextEncoding":"ALSO-NOPE"}`).admWantProblem(t,
		"create with unknown encodings", 422, `"NOPE-ENC" is not a character encoding weir knows`, `"ALSO-NOPE"`, "IANA")
	if len(p.Errors) != 2 || p.Errors[0].Location != "body.contextEncoding" || p.Errors[1].Location != "body.encoding" {
		t.Fatalf("details: %+v", p.Errors)
	}
	admin.do("GET", "/feeds/X-FEED", "").want(t, "refused feed", 404, nil)

	// Names the text view knows: IANA aliases, WHATWG labels, UTF-32.
	admin.do("POST", "/feeds", `{"name":"X-FEED","encoding":"cp1252","contextEncoding":"UTF-32LE"}`).want(t, "create", 201, nil)
	admin.admPatch("/feeds/X-FEED", `{"encoding":"NOT-REAL"}`).admWantProblem(t, "patch", 422, "body.encoding", "NOT-REAL")
	f := admin.admGetFeed("X-FEED")
	if f.Encoding != "cp1252" {
		t.Fatalf("refused patch changed the feed: %+v", f)
	}
	f.ContextEncoding = "NOT-REAL"
	admin.do("PUT", "/feeds/X-FEED", admJSON(t, f)).admWantProblem(t, "put", 422, "body.contextEncoding", "NOT-REAL")
	admin.admPatch("/feeds/X-FEED", `{"encoding":"ISO_8859-1:1987"}`).want(t, "patch an IANA alias", 200, nil)

	// What a feed accepts, its text view decodes with.
	id := sxPost(t, s, []byte("caf\xe9"), "Feed", "X-FEED")
	var tx sxText
	admin.do("GET", fmt.Sprintf("/streams/%d/text", id), "").want(t, "text", 200, &tx)
	if tx.Text != "café" || tx.NonText != nil {
		t.Fatalf("text in the feed's encoding: %+v", tx)
	}

	// A name stored before writes were checked does not block a patch of
	// another field.
	stored, err := s.App.Repo().GetFeed(t.Context(), "X-FEED")
	if err != nil {
		t.Fatal(err)
	}
	stored.Encoding = "LEGACY-NONSENSE"
	if err := s.App.Repo().UpdateFeed(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	admin.admPatch("/feeds/X-FEED", `{"description":"still editable"}`).want(t, "patch another field", 200, nil)
}
