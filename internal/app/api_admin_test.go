package app_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/auth/datafeedkey"
	"github.com/weirhq/weir/internal/config"
)

// admProblem is an application/problem+json error body.
type admProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Message  string `json:"message"`
		Location string `json:"location"`
	} `json:"errors"`
}

// text is everything the problem says, for substring checks.
func (p admProblem) text() string {
	var b strings.Builder
	b.WriteString(p.Detail)
	for _, e := range p.Errors {
		fmt.Fprintf(&b, "\n%s: %s", e.Location, e.Message)
	}
	return b.String()
}

// admFeed is a feed as the API shows it.
type admFeed struct {
	Name            string `json:"name"`
	Status          string `json:"status"`
	StreamType      string `json:"streamType"`
	Encoding        string `json:"encoding"`
	ContextEncoding string `json:"contextEncoding"`
	Classification  string `json:"classification"`
	Description     string `json:"description"`
	CreateMs        int64  `json:"createMs"`
	UpdateMs        int64  `json:"updateMs"`
	Version         int64  `json:"version"`
}

// withoutChange is f with the fields every update changes set to those of
// g, so that comparing the two shows whether anything else changed.
func (f admFeed) withoutChange(g admFeed) admFeed {
	f.UpdateMs, f.Version = g.UpdateMs, g.Version
	return f
}

// send makes a request with any content type.
func (c apiClient) admSend(method, path, contentType, body string) apiResp {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResp{resp.StatusCode, resp.Header, b}
}

// patch sends a JSON merge patch.
func (c apiClient) admPatch(path, body string) apiResp {
	c.t.Helper()
	return c.admSend(http.MethodPatch, path, "application/merge-patch+json", body)
}

// admWantProblem asserts an error status whose problem mentions every one
// of contains, and returns the problem.
func (r apiResp) admWantProblem(t *testing.T, what string, status int, contains ...string) admProblem {
	t.Helper()
	var p admProblem
	r.want(t, what, status, &p)
	for _, c := range contains {
		if !strings.Contains(p.text(), c) {
			t.Errorf("%s: admProblem %q does not mention %q", what, p.text(), c)
		}
	}
	return p
}

func (c apiClient) admGetFeed(name string) admFeed {
	c.t.Helper()
	var f admFeed
	c.do("GET", "/feeds/"+name, "").want(c.t, "get feed "+name, 200, &f)
	return f
}

func admJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAPIFeedUpdates: PUT replaces a feed only at the version read (409 with
// the current version otherwise) and only when complete (422 naming every
// missing field); PATCH changes exactly the fields sent; the status shortcut
// changes only the status and takes effect on the next post; DELETE refuses a
// feed with data unless an administrator forces it. Every change needs EDIT
// (DELETE to delete) on the feed.
func TestAPIFeedUpdates(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	root := user(t, s, "root", []string{access.Administrator}, nil)
	maker := user(t, s, "maker", []string{access.ManageFeeds}, nil)
	editor := user(t, s, "editor", nil, map[string]access.Level{"FEED-A": access.Edit, "FEED-D": access.Edit})
	viewer := user(t, s, "viewer", nil, map[string]access.Level{"FEED-A": access.View})
	deleter := user(t, s, "deleter", nil, map[string]access.Level{"FEED-D": access.Delete, "FEED-E": access.Delete})

	var created admFeed
	maker.do("POST", "/feeds", `{"name":"FEED-A","classification":"OFFICIAL","description":"first"}`).want(t, "create", 201, &created)
	if created.Version != 1 || created.Status != "RECEIVE" || created.StreamType != "Raw Events" || created.Encoding != "UTF-8" {
		t.Fatalf("created %+v", created)
	}
	maker.do("POST", "/feeds", `{"name":"FEED-X","streamType":"Not A Type"}`).admWantProblem(t, "create with unknown type", 422, "streamType")
	if got := viewer.admGetFeed("FEED-A"); got != created {
		t.Fatalf("viewer reads %+v, want %+v", got, created)
	}

	full := map[string]any{"name": "FEED-A", "status": "RECEIVE", "streamType": "Events", "encoding": "UTF-8",
		"contextEncoding": "UTF-16LE", "classification": "SECRET", "description": "replaced", "version": 1}

	t.Run("permissions", func(t *testing.T) {
		viewer.do("PUT", "/feeds/FEED-A", admJSON(t, full)).admWantProblem(t, "viewer PUT", 403, "EDIT")
		viewer.admPatch("/feeds/FEED-A", `{"description":"x"}`).admWantProblem(t, "viewer PATCH", 403)
		viewer.do("PUT", "/feeds/FEED-A/status", `{"status":"DROP"}`).admWantProblem(t, "viewer status", 403)
		viewer.do("DELETE", "/feeds/FEED-A", "").admWantProblem(t, "viewer DELETE", 403)
		// The creator holds OWNER, which includes EDIT: replace and put back.
		var mod admFeed
		maker.do("PUT", "/feeds/FEED-A", admJSON(t, full)).want(t, "creator PUTs", 200, &mod)
		if mod.Version != 2 || mod.Description != "replaced" {
			t.Fatalf("after the creator's PUT: %+v", mod)
		}
		restore := map[string]any{"name": "FEED-A", "status": "RECEIVE", "streamType": "Raw Events", "encoding": "UTF-8",
			"contextEncoding": "UTF-8", "classification": "OFFICIAL", "description": "first", "version": 2}
		var back admFeed
		maker.do("PUT", "/feeds/FEED-A", admJSON(t, restore)).want(t, "restore", 200, &back)
		if back.Version != 3 || back.withoutChange(created) != created {
			t.Fatalf("restored %+v, want %+v at version 3", back, created)
		}
		created = back
		// Missing feeds: permission first, so 403 says nothing about existence;
		// an administrator learns it is missing.
		editor.do("PUT", "/feeds/NO-SUCH", admJSON(t, full)).admWantProblem(t, "editor PUT unknown feed", 403)
		root.admPatch("/feeds/NO-SUCH", `{"description":"x"}`).admWantProblem(t, "admin PATCH unknown feed", 404)
		nf := map[string]any{}
		for k, v := range full {
			nf[k] = v
		}
		nf["name"] = "NO-SUCH"
		root.do("PUT", "/feeds/NO-SUCH", admJSON(t, nf)).admWantProblem(t, "admin PUT unknown feed", 404)
	})

	t.Run("PUT", func(t *testing.T) {
		before := editor.admGetFeed("FEED-A")
		put := map[string]any{}
		for k, v := range full {
			put[k] = v
		}
		put["version"] = before.Version
		put["streamType"] = "events" // canonicalised as the admin command does
		var after admFeed
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).want(t, "PUT", 200, &after)
		want := admFeed{Name: "FEED-A", Status: "RECEIVE", StreamType: "Events", Encoding: "UTF-8", ContextEncoding: "UTF-16LE",
			Classification: "SECRET", Description: "replaced", CreateMs: before.CreateMs, UpdateMs: after.UpdateMs, Version: before.Version + 1}
		if after != want || after.UpdateMs < before.UpdateMs {
			t.Fatalf("after PUT %+v, want %+v", after, want)
		}
		if got := viewer.admGetFeed("FEED-A"); got != after {
			t.Fatalf("read back %+v, want %+v", got, after)
		}

		// The version read before that PUT is stale: 409 naming the current one, nothing changes.
		put["description"] = "lost update"
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).admWantProblem(t, "stale PUT", 409,
			fmt.Sprintf("version %d", after.Version), fmt.Sprintf("not %d", before.Version))
		put["version"] = after.Version + 5
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).admWantProblem(t, "future version", 409, fmt.Sprintf("version %d", after.Version))
		if got := viewer.admGetFeed("FEED-A"); got != after {
			t.Fatalf("stale PUT changed the feed: %+v", got)
		}

		// Missing fields: 422 naming every one of them, nothing changes.
		p := editor.do("PUT", "/feeds/FEED-A", fmt.Sprintf(`{"name":"FEED-A","version":%d}`, after.Version)).
			admWantProblem(t, "PUT missing fields", 422)
		for _, f := range []string{"status", "streamType", "encoding", "contextEncoding", "classification", "description"} {
			if !strings.Contains(p.text(), "property "+f+" ") {
				t.Errorf("422 does not name missing field %s: %s", f, p.text())
			}
		}
		if len(p.Errors) != 6 {
			t.Errorf("422 has %d errors, want one per missing field: %s", len(p.Errors), p.text())
		}
		p = editor.do("PUT", "/feeds/FEED-A", `{}`).admWantProblem(t, "PUT empty object", 422)
		if len(p.Errors) != 8 || !strings.Contains(p.text(), "property name ") || !strings.Contains(p.text(), "property version ") {
			t.Errorf("PUT {}: want 8 missing fields: %s", p.text())
		}
		// An empty string is a value, not a missing field, for the fields that may be empty.
		put = map[string]any{}
		for k, v := range full {
			put[k] = v
		}
		put["version"], put["classification"], put["description"] = after.Version, "", ""
		var cleared admFeed
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).want(t, "PUT empty optional text", 200, &cleared)
		if cleared.Classification != "" || cleared.Description != "" || cleared.Version != after.Version+1 {
			t.Fatalf("after PUT with empty text: %+v", cleared)
		}
		put["version"] = cleared.Version
		put["encoding"] = ""
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).admWantProblem(t, "PUT empty encoding", 422, "encoding")
		put["encoding"] = "UTF-8"

		// Nothing is dropped silently: an unknown field, a rename, a changed
		// read-only field are refused, not ignored.
		put["colour"] = "blue"
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).admWantProblem(t, "PUT unknown field", 422, "colour")
		delete(put, "colour")
		put["name"] = "FEED-B"
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).admWantProblem(t, "PUT rename", 422, "renamed")
		put["name"] = "FEED-A"
		put["status"] = "PAUSED"
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).admWantProblem(t, "PUT bad status", 422, "status")
		put["status"] = "RECEIVE"
		put["createMs"] = 1
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, put)).admWantProblem(t, "PUT changed createMs", 422, "createMs")

		// What GET returned can be sent back as it is, with a change.
		r := editor.do("GET", "/feeds/FEED-A", "")
		var asRead map[string]any
		r.want(t, "GET for round trip", 200, &asRead)
		asRead["description"] = "round trip"
		var rt admFeed
		editor.do("PUT", "/feeds/FEED-A", admJSON(t, asRead)).want(t, "PUT what GET returned", 200, &rt)
		if rt.Description != "round trip" || rt.Version != cleared.Version+1 {
			t.Fatalf("round trip: %+v", rt)
		}
	})

	t.Run("concurrent PUTs", func(t *testing.T) {
		cur := editor.admGetFeed("FEED-A")
		const writers = 8
		codes := make([]int, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			b := map[string]any{}
			for k, v := range full {
				b[k] = v
			}
			b["version"], b["description"] = cur.Version, fmt.Sprintf("writer %d", i)
			body := admJSON(t, b)
			wg.Go(func() {
				// Not editor.do: it fails the test, which only the test's own goroutine may do.
				req, err := http.NewRequest(http.MethodPut, editor.url+"/feeds/FEED-A", strings.NewReader(body))
				if err != nil {
					errs[i] = err
					return
				}
				req.Header.Set("Authorization", "Bearer "+editor.key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs[i] = err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes[i] = resp.StatusCode
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		slices.Sort(codes)
		if want := append([]int{200}, slices.Repeat([]int{409}, writers-1)...); !slices.Equal(codes, want) {
			t.Fatalf("concurrent PUTs at one version: %v, want one 200 and the rest 409", codes)
		}
		if got := editor.admGetFeed("FEED-A"); got.Version != cur.Version+1 {
			t.Fatalf("version %d after one successful PUT from %d", got.Version, cur.Version)
		}
	})

	t.Run("PATCH", func(t *testing.T) {
		before := editor.admGetFeed("FEED-A")
		var after admFeed
		editor.admPatch("/feeds/FEED-A", `{"description":"patched"}`).want(t, "PATCH description", 200, &after)
		want := before
		want.Description = "patched"
		if after.Description != "patched" || after.Version != before.Version+1 || after.withoutChange(want) != want {
			t.Fatalf("PATCH changed more than the description:\n got %+v\nwant %+v", after, want)
		}
		if got := viewer.admGetFeed("FEED-A"); got != after {
			t.Fatalf("read back %+v, want %+v", got, after)
		}

		// Several fields at once; null resets to what a new feed has.
		before = after
		editor.admPatch("/feeds/FEED-A", `{"classification":"OFFICIAL-SENSITIVE","encoding":null,"contextEncoding":"ISO-8859-1","streamType":"raw reference"}`).
			want(t, "PATCH several", 200, &after)
		want = before
		want.Classification, want.Encoding, want.ContextEncoding, want.StreamType = "OFFICIAL-SENSITIVE", "UTF-8", "ISO-8859-1", "Raw Reference"
		if after.withoutChange(want) != want || after.Version != before.Version+1 {
			t.Fatalf("PATCH several:\n got %+v\nwant %+v", after, want)
		}
		before = after
		editor.admPatch("/feeds/FEED-A", `{"classification":null}`).want(t, "PATCH null", 200, &after)
		want = before
		want.Classification = ""
		if after.withoutChange(want) != want {
			t.Fatalf("PATCH null:\n got %+v\nwant %+v", after, want)
		}

		// An empty patch changes nothing but still counts as an update.
		before = after
		editor.admPatch("/feeds/FEED-A", `{}`).want(t, "empty PATCH", 200, &after)
		// Not even the version moves: a change of nothing must not make
		// other writers' reads stale.
		if after != before {
			t.Fatalf("empty PATCH changed %+v to %+v", before, after)
		}
		editor.admPatch("/feeds/FEED-A", fmt.Sprintf(`{"status":%q}`, after.Status)).want(t, "PATCH to the same status", 200, &after)
		if after != before {
			t.Fatalf("PATCH to the same status changed %+v to %+v", before, after)
		}

		// With a version: only at that version.
		editor.admPatch("/feeds/FEED-A", fmt.Sprintf(`{"status":"DROP","version":%d}`, after.Version-1)).
			admWantProblem(t, "stale PATCH", 409, fmt.Sprintf("version %d", after.Version))
		before = after
		editor.admPatch("/feeds/FEED-A", fmt.Sprintf(`{"status":"DROP","version":%d}`, after.Version)).want(t, "versioned PATCH", 200, &after)
		if after.Status != "DROP" || after.Version != before.Version+1 {
			t.Fatalf("versioned PATCH: %+v", after)
		}

		// Refused, and nothing changes: null status, a rename, an unknown
		// member, a bad value, a JSON body that is not an object.
		editor.admPatch("/feeds/FEED-A", `{"status":null}`).admWantProblem(t, "null status", 422, "status cannot be null")
		editor.admPatch("/feeds/FEED-A", `{"name":"OTHER"}`).admWantProblem(t, "rename", 422, "renamed")
		editor.admPatch("/feeds/FEED-A", `{"descripton":"typo"}`).admWantProblem(t, "unknown member", 422, "descripton")
		editor.admPatch("/feeds/FEED-A", `{"status":"PAUSED"}`).admWantProblem(t, "bad status", 422, "status")
		editor.admPatch("/feeds/FEED-A", `{"streamType":""}`).admWantProblem(t, "empty stream type", 422, "streamType")
		editor.admPatch("/feeds/FEED-A", `{"version":null}`).admWantProblem(t, "null version", 422, "version")
		editor.admPatch("/feeds/FEED-A", `["not","an","object"]`).admWantProblem(t, "array", 422)
		if got := viewer.admGetFeed("FEED-A"); got != after {
			t.Fatalf("refused patches changed the feed: %+v, want %+v", got, after)
		}
		// The name may be sent if it is unchanged; plain JSON is accepted too.
		editor.admSend("PATCH", "/feeds/FEED-A", "application/json", `{"name":"FEED-A","description":"plain json"}`).
			want(t, "PATCH as application/json", 200, &after)
		if after.Description != "plain json" {
			t.Fatalf("PATCH as application/json: %+v", after)
		}
	})

	t.Run("status", func(t *testing.T) {
		var f admFeed
		editor.do("PUT", "/feeds/FEED-A/status", `{"status":"RECEIVE"}`).want(t, "status RECEIVE", 200, &f)
		post(t, s, []byte("while receiving"), "Feed", "FEED-A").ok(t)
		before := f
		editor.do("PUT", "/feeds/FEED-A/status", `{"status":"REJECT"}`).want(t, "status REJECT", 200, &f)
		want := before
		want.Status = "REJECT"
		if f.withoutChange(want) != want || f.Version != before.Version+1 {
			t.Fatalf("status change:\n got %+v\nwant %+v", f, want)
		}
		post(t, s, []byte("while rejecting"), "Feed", "FEED-A").fails(t, 406, 110, "REJECT")
		editor.do("PUT", "/feeds/FEED-A/status", fmt.Sprintf(`{"status":"RECEIVE","version":%d}`, before.Version)).
			admWantProblem(t, "stale status", 409, fmt.Sprintf("version %d", f.Version))
		editor.do("PUT", "/feeds/FEED-A/status", `{"status":"receive"}`).admWantProblem(t, "lower-case status", 422)
		editor.do("PUT", "/feeds/FEED-A/status", `{}`).admWantProblem(t, "no status", 422, "status")
		editor.do("PUT", "/feeds/FEED-A/status", fmt.Sprintf(`{"status":"RECEIVE","version":%d}`, f.Version)).want(t, "status back", 200, &f)
		post(t, s, []byte("receiving again"), "Feed", "FEED-A").ok(t)
	})

	t.Run("DELETE", func(t *testing.T) {
		for _, n := range []string{"FEED-D", "FEED-E"} {
			root.do("POST", "/feeds", fmt.Sprintf(`{"name":%q}`, n)).want(t, "create "+n, 201, nil)
		}
		post(t, s, []byte("data to keep"), "Feed", "FEED-D").ok(t)
		streamsOf := func(feedName string) int {
			n := 0
			for _, st := range s.Streams() {
				if st.Feed == feedName {
					n++
				}
			}
			return n
		}
		editor.do("DELETE", "/feeds/FEED-D", "").admWantProblem(t, "EDIT is not DELETE", 403, "DELETE")
		deleter.do("DELETE", "/feeds/FEED-D", "").admWantProblem(t, "feed with a stream", 409, "1 streams", "force=true")
		deleter.do("DELETE", "/feeds/FEED-D?force=true", "").admWantProblem(t, "force without Administrator", 403, "Administrator")
		deleter.admFeedOK(t, "FEED-D")
		root.do("DELETE", "/feeds/FEED-D?force=true", "").want(t, "forced delete", 204, nil)
		root.do("GET", "/feeds/FEED-D", "").admWantProblem(t, "deleted feed", 404)
		if streamsOf("FEED-D") != 1 {
			t.Fatalf("forced delete removed the feed's streams")
		}
		// Posts to the deleted feed are refused as to any unknown feed.
		post(t, s, []byte("after delete"), "Feed", "FEED-D").fails(t, 406, 110, "does not exist")

		deleter.do("DELETE", "/feeds/FEED-E", "").want(t, "delete empty feed", 204, nil)
		// The deleter's permission went with the feed; an administrator learns it is gone.
		deleter.do("DELETE", "/feeds/FEED-E", "").admWantProblem(t, "delete twice", 403)
		root.do("DELETE", "/feeds/FEED-E", "").admWantProblem(t, "delete twice", 404)
		// Permissions on a deleted feed go with it: re-created, it is not
		// visible to who could see the old one.
		root.do("POST", "/feeds", `{"name":"FEED-E"}`).want(t, "re-create", 201, nil)
		deleter.do("GET", "/feeds/FEED-E", "").admWantProblem(t, "old permission on re-created feed", 403)
	})
}

// admFeedOK asserts the feed still exists (an administrator is not needed:
// the caller must hold VIEW).
func (c apiClient) admFeedOK(t *testing.T, name string) {
	t.Helper()
	c.do("GET", "/feeds/"+name, "").want(t, "feed "+name+" still there", 200, nil)
}

// admUser is a user as listed.
type admUser struct {
	Name        string   `json:"name"`
	DisplayName string   `json:"displayName"`
	Group       bool     `json:"group"`
	Enabled     bool     `json:"enabled"`
	Version     int64    `json:"version"`
	Groups      []string `json:"groups"`
	CreateTime  string   `json:"createTime"`
	UpdateTime  string   `json:"updateTime"`
}

type admGrants struct {
	Permissions []string          `json:"permissions"`
	Feeds       map[string]string `json:"feeds"`
}

type admUserDetail struct {
	User            admUser   `json:"user"`
	Grants          admGrants `json:"grants"`
	Effective       admGrants `json:"effective"`
	AllFeeds        bool      `json:"allFeeds"`
	EffectiveGroups []string  `json:"effectiveGroups"`
	Members         []string  `json:"members"`
}

func (c apiClient) admGetUser(name string) admUserDetail {
	c.t.Helper()
	var d admUserDetail
	c.do("GET", "/users/"+name, "").want(c.t, "get user "+name, 200, &d)
	return d
}

// TestAPIUsers: users and groups created, changed and granted over the API,
// with PUT/PATCH behaving as for feeds; a user created and granted this way
// can then do exactly what the grants allow, and no more once they go; and
// Manage Users cannot make or unmake an administrator.
func TestAPIUsers(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-R", "", "")
	s.CreateFeed("FEED-S", "", "")
	post(t, s, []byte("readable"), "Feed", "FEED-R").ok(t)
	post(t, s, []byte("secret"), "Feed", "FEED-S").ok(t)
	ids := map[string]int64{}
	for _, st := range s.Streams() {
		ids[st.Feed] = st.ID
	}
	root := user(t, s, "root", []string{access.Administrator}, nil)
	mgr := user(t, s, "mgr", []string{access.ManageUsers, access.ManageAPIKeys}, nil)
	alice := user(t, s, "alice", nil, nil)

	// Reading: the list and other users need Manage Users; one's own user does not.
	alice.do("GET", "/users", "").admWantProblem(t, "alice lists users", 403, "Manage Users")
	alice.do("GET", "/users/mgr", "").admWantProblem(t, "alice reads mgr", 403)
	if me := alice.admGetUser("alice"); me.User.Name != "alice" || me.User.Version != 1 || !me.User.Enabled || me.User.Group {
		t.Fatalf("alice reads herself: %+v", me)
	}
	alice.do("POST", "/users", `{"name":"eve"}`).admWantProblem(t, "alice creates a user", 403)
	mgr.do("GET", "/users/nobody", "").admWantProblem(t, "missing user", 404)

	// Create a user and a group.
	var carol admUserDetail
	mgr.do("POST", "/users", `{"name":"carol","displayName":"Carol C"}`).want(t, "create carol", 201, &carol)
	if u := carol.User; u.Name != "carol" || u.DisplayName != "Carol C" || !u.Enabled || u.Group || u.Version != 1 ||
		len(u.Groups) != 0 || len(carol.Grants.Permissions) != 0 || len(carol.Effective.Feeds) != 0 {
		t.Fatalf("created %+v", carol)
	}
	mgr.do("POST", "/users", `{"name":"carol"}`).admWantProblem(t, "create twice", 409)
	mgr.do("POST", "/users", `{"name":" carol"}`).admWantProblem(t, "create with space", 422)
	var readers admUserDetail
	mgr.do("POST", "/users", `{"name":"readers","group":true}`).want(t, "create group", 201, &readers)
	if !readers.User.Group || readers.User.DisplayName != "readers" || len(readers.Members) != 0 {
		t.Fatalf("created group %+v", readers)
	}

	// A key for carol, made over the API too.
	var key struct {
		APIKey string `json:"apiKey"`
	}
	mgr.do("POST", "/apikeys", `{"user":"carol","name":"carol's"}`).want(t, "key for carol", 201, &key)
	carolC := apiClient{t: t, url: s.URL + "/api", key: key.APIKey}
	r, sID := fmt.Sprint(ids["FEED-R"]), fmt.Sprint(ids["FEED-S"])

	// Before any grant: nothing.
	var fl feedList
	carolC.do("GET", "/feeds", "").want(t, "carol feeds before", 200, &fl)
	if len(fl.Feeds) != 0 {
		t.Fatalf("carol sees %v before any grant", fl.names())
	}
	carolC.do("GET", "/streams/"+r+"/data", "").admWantProblem(t, "carol data before", 403)

	// Grant through the group: membership, an application permission (with
	// spaces, URL-encoded) and a feed level.
	mgr.do("PUT", "/groups/readers/members/carol", "").want(t, "add carol to readers", 204, nil)
	mgr.do("PUT", "/groups/readers/members/carol", "").want(t, "add again", 204, nil)
	mgr.do("PUT", "/users/readers/permissions/Data%20-%20View", "").want(t, "grant Data - View", 204, nil)
	var lvl struct {
		Name       string `json:"name"`
		Feed       string `json:"feed"`
		Level      string `json:"level"`
		FeedExists bool   `json:"feedExists"`
	}
	mgr.do("PUT", "/users/readers/feeds/FEED-R", `{"level":"VIEW"}`).want(t, "VIEW on FEED-R", 200, &lvl)
	if lvl.Level != "VIEW" || !lvl.FeedExists || lvl.Feed != "FEED-R" {
		t.Fatalf("feed level answer %+v", lvl)
	}
	mgr.do("PUT", "/users/readers/feeds/FEED-LATER", `{"level":"USE"}`).want(t, "USE on a feed not created yet", 200, &lvl)
	if lvl.FeedExists {
		t.Fatalf("feedExists for a missing feed: %+v", lvl)
	}

	// Now carol can read FEED-R's data, and nothing of FEED-S.
	carolC.do("GET", "/feeds", "").want(t, "carol feeds", 200, &fl)
	if !slices.Equal(fl.names(), []string{"FEED-R"}) {
		t.Fatalf("carol sees %v", fl.names())
	}
	if resp := carolC.do("GET", "/streams/"+r+"/data", ""); resp.status != 200 || string(resp.body) != "readable" {
		t.Fatalf("carol reads FEED-R: %d %s", resp.status, resp.body)
	}
	carolC.do("GET", "/streams/"+sID+"/data", "").admWantProblem(t, "carol reads FEED-S", 403)
	carolC.do("POST", "/feeds", `{"name":"CAROL-FEED"}`).admWantProblem(t, "carol creates a feed", 403, "Manage Feeds")

	// A direct permission works too.
	mgr.do("PUT", "/users/carol/permissions/Manage%20Feeds", "").want(t, "grant Manage Feeds", 204, nil)
	carolC.do("POST", "/feeds", `{"name":"CAROL-FEED"}`).want(t, "carol creates a feed", 201, nil)

	// What the detail shows.
	d := mgr.admGetUser("carol")
	if !slices.Equal(d.User.Groups, []string{"readers"}) || !slices.Equal(d.Grants.Permissions, []string{access.ManageFeeds}) ||
		d.Grants.Feeds["CAROL-FEED"] != "OWNER" || len(d.Grants.Feeds) != 1 ||
		!slices.Equal(d.Effective.Permissions, []string{access.DataView, access.ManageFeeds}) ||
		d.Effective.Feeds["FEED-R"] != "VIEW" || d.Effective.Feeds["FEED-LATER"] != "USE" || d.AllFeeds ||
		!slices.Equal(d.EffectiveGroups, []string{"readers"}) {
		t.Fatalf("carol's detail %+v", d)
	}
	if g := mgr.admGetUser("readers"); !slices.Equal(g.Members, []string{"carol"}) || !slices.Equal(g.Grants.Permissions, []string{access.DataView}) {
		t.Fatalf("readers' detail %+v", g)
	}
	var list struct {
		Users []admUser `json:"users"`
	}
	mgr.do("GET", "/users", "").want(t, "list users", 200, &list)
	var listed []string
	for _, u := range list.Users {
		listed = append(listed, u.Name)
		if u.Name == "carol" && !slices.Equal(u.Groups, []string{"readers"}) {
			t.Errorf("listed carol's groups %v", u.Groups)
		}
	}
	// "admin" is the administrator the first start creates.
	if !slices.Equal(listed, []string{"admin", "alice", "carol", "mgr", "readers", "root"}) {
		t.Fatalf("listed %v", listed)
	}

	// Refused grants.
	mgr.do("PUT", "/users/carol/permissions/Not%20A%20Permission", "").admWantProblem(t, "unknown permission", 422, "not an application permission")
	mgr.do("PUT", "/users/carol/permissions/manage%20feeds", "").admWantProblem(t, "permission in the wrong case", 422)
	mgr.do("PUT", "/users/nobody/permissions/Manage%20Feeds", "").admWantProblem(t, "grant to nobody", 404)
	mgr.do("PUT", "/users/carol/feeds/FEED-R", `{"level":"SUPER"}`).admWantProblem(t, "bad level", 422)
	mgr.do("PUT", "/groups/readers/members/readers", "").admWantProblem(t, "group in itself", 422, "itself")
	mgr.do("PUT", "/groups/carol/members/alice", "").admWantProblem(t, "member of a user", 422, "not a group")
	mgr.do("PUT", "/groups/readers/members/nobody", "").admWantProblem(t, "missing member", 404)
	alice.do("PUT", "/groups/readers/members/alice", "").admWantProblem(t, "alice joins readers", 403)

	t.Run("PUT and PATCH", func(t *testing.T) {
		cur := mgr.admGetUser("carol").User
		mgr.do("PUT", "/users/carol", `{"name":"carol"}`).admWantProblem(t, "PUT missing fields", 422,
			"property displayName ", "property enabled ", "property version ")
		put := map[string]any{"name": "carol", "displayName": "Carol D", "enabled": true, "version": cur.Version}
		var after admUserDetail
		mgr.do("PUT", "/users/carol", admJSON(t, put)).want(t, "PUT carol", 200, &after)
		if after.User.DisplayName != "Carol D" || after.User.Version != cur.Version+1 || !after.User.Enabled ||
			!slices.Equal(after.User.Groups, []string{"readers"}) || !slices.Equal(after.Grants.Permissions, []string{access.ManageFeeds}) {
			t.Fatalf("after PUT %+v", after)
		}
		mgr.do("PUT", "/users/carol", admJSON(t, put)).admWantProblem(t, "stale PUT", 409, fmt.Sprintf("version %d", cur.Version+1))
		// Round trip of the user member of GET, read-only fields and all.
		u := after.User
		u.DisplayName = "Carol E"
		mgr.do("PUT", "/users/carol", admJSON(t, u)).want(t, "PUT what GET returned", 200, &after)
		if after.User.DisplayName != "Carol E" {
			t.Fatalf("round trip %+v", after.User)
		}
		// Read-only fields that differ are refused, not ignored.
		u = after.User
		u.Groups = []string{"readers", "admins"}
		mgr.do("PUT", "/users/carol", admJSON(t, u)).admWantProblem(t, "PUT changed groups", 422, "groups", "read-only")
		u = after.User
		u.Group = true
		mgr.do("PUT", "/users/carol", admJSON(t, u)).admWantProblem(t, "PUT changed group flag", 422, "group")
		mgr.do("PUT", "/users/carol", strings.Replace(admJSON(t, after.User), `"name":"carol"`, `"name":"caroline"`, 1)).
			admWantProblem(t, "PUT rename", 422, "renamed")
		mgr.do("PUT", "/users/carol", strings.Replace(admJSON(t, after.User), `"displayName":"Carol E"`, `"displayName":""`, 1)).
			admWantProblem(t, "PUT empty display name", 422, "displayName")

		// PATCH: disabling keeps the display name; the disabled user's key stops.
		before := after.User
		mgr.admPatch("/users/carol", `{"enabled":false}`).want(t, "disable carol", 200, &after)
		want := before
		want.Enabled, want.Version, want.UpdateTime = false, before.Version+1, after.User.UpdateTime
		if !slices.Equal(after.User.Groups, want.Groups) || after.User.Name != want.Name || after.User.DisplayName != want.DisplayName ||
			after.User.Enabled || after.User.Version != want.Version || after.User.CreateTime != want.CreateTime {
			t.Fatalf("PATCH enabled:\n got %+v\nwant %+v", after.User, want)
		}
		carolC.do("GET", "/whoami", "").admWantProblem(t, "disabled carol", 401)
		mgr.admPatch("/users/carol", `{"enabled":true,"displayName":null}`).want(t, "enable carol, reset name", 200, &after)
		if !after.User.Enabled || after.User.DisplayName != "carol" {
			t.Fatalf("PATCH enable + null display name: %+v", after.User)
		}
		carolC.do("GET", "/whoami", "").want(t, "enabled carol", 200, nil)
		mgr.admPatch("/users/carol", fmt.Sprintf(`{"displayName":"x","version":%d}`, after.User.Version-1)).
			admWantProblem(t, "stale PATCH", 409, fmt.Sprintf("version %d", after.User.Version))
		mgr.admPatch("/users/carol", `{"enabled":null}`).admWantProblem(t, "null enabled", 422, "enabled cannot be null")
		mgr.admPatch("/users/carol", `{"group":true}`).admWantProblem(t, "PATCH group flag", 422, "group")
		if got := mgr.admGetUser("carol").User; !reflect.DeepEqual(got, after.User) {
			t.Fatalf("refused patches changed carol: %+v, want %+v", got, after.User)
		}
	})

	t.Run("revoking", func(t *testing.T) {
		mgr.do("DELETE", "/users/readers/permissions/Data%20-%20View", "").want(t, "revoke Data - View", 204, nil)
		carolC.do("GET", "/streams/"+r+"/data", "").admWantProblem(t, "carol data after revoke", 403)
		carolC.do("GET", "/streams/"+r, "").want(t, "carol still views the stream", 200, nil)
		mgr.do("DELETE", "/groups/readers/members/carol", "").want(t, "remove carol from readers", 204, nil)
		carolC.do("GET", "/streams/"+r, "").admWantProblem(t, "carol after leaving readers", 403)
		mgr.do("PUT", "/users/carol/feeds/CAROL-FEED", `{"level":"NONE"}`).want(t, "NONE removes", 200, nil)
		if d := mgr.admGetUser("carol"); len(d.Grants.Feeds) != 0 || len(d.User.Groups) != 0 {
			t.Fatalf("after revoking: %+v", d)
		}
	})

	t.Run("administrators", func(t *testing.T) {
		var admins admUserDetail
		root.do("POST", "/users", `{"name":"admins","group":true}`).want(t, "create admins", 201, &admins)
		root.do("PUT", "/users/admins/permissions/Administrator", "").want(t, "root grants Administrator", 204, nil)
		mgr.do("PUT", "/users/mgr/permissions/Administrator", "").admWantProblem(t, "mgr grants itself Administrator", 403, "Administrator")
		mgr.do("PUT", "/groups/admins/members/mgr", "").admWantProblem(t, "mgr joins admins", 403, "Administrator")
		mgr.admPatch("/users/root", `{"displayName":"pwned"}`).admWantProblem(t, "mgr changes root", 403)
		mgr.do("DELETE", "/users/root", "").admWantProblem(t, "mgr deletes root", 403)
		mgr.do("DELETE", "/users/root/permissions/Administrator", "").admWantProblem(t, "mgr revokes root", 403)
		mgr.do("PUT", "/users/admins/permissions/Manage%20Nodes", "").admWantProblem(t, "mgr grants to admins", 403)
		root.do("PUT", "/groups/admins/members/alice", "").want(t, "root makes alice an administrator", 204, nil)
		if d := root.admGetUser("alice"); !d.AllFeeds || !slices.Contains(d.Effective.Permissions, access.ManageNodes) {
			t.Fatalf("alice as administrator: %+v", d)
		}
		mgr.do("DELETE", "/groups/admins/members/alice", "").admWantProblem(t, "mgr removes alice from admins", 403)
		root.do("DELETE", "/groups/admins/members/alice", "").want(t, "root removes alice", 204, nil)
		alice.do("GET", "/users", "").admWantProblem(t, "alice no longer administrator", 403)

		// Nobody locks themselves out.
		mgr.admPatch("/users/mgr", `{"enabled":false}`).admWantProblem(t, "mgr disables itself", 409, "yourself")
		mgr.do("DELETE", "/users/mgr", "").admWantProblem(t, "mgr deletes itself", 409, "yourself")
	})

	t.Run("DELETE", func(t *testing.T) {
		alice.do("DELETE", "/users/carol", "").admWantProblem(t, "alice deletes carol", 403)
		mgr.do("DELETE", "/users/carol", "").want(t, "delete carol", 204, nil)
		mgr.do("GET", "/users/carol", "").admWantProblem(t, "deleted carol", 404)
		mgr.do("DELETE", "/users/carol", "").admWantProblem(t, "delete twice", 404)
		carolC.do("GET", "/whoami", "").admWantProblem(t, "deleted carol's key", 401)
		if g := mgr.admGetUser("readers"); len(g.Members) != 0 {
			t.Fatalf("readers after deleting carol: %+v", g)
		}
	})
}

// TestAPIDataFeedKeys: a data feed key created over the API authenticates a
// post at once, with its attributes on the stream, is listed without any
// secret, and stops working when revoked. Only administrators manage keys.
func TestAPIDataFeedKeys(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.EnabledAuthenticationTypes = []string{"DATA_FEED_KEY"}
	})
	root := user(t, s, "root", []string{access.Administrator}, nil)
	feeds := user(t, s, "feeds", []string{access.ManageFeeds, access.ManageUsers}, nil)

	feeds.do("POST", "/datafeedkeys", `{"account":"1000"}`).admWantProblem(t, "create without Administrator", 403, "Administrator")
	feeds.do("GET", "/datafeedkeys", "").admWantProblem(t, "list without Administrator", 403)
	post(t, s, []byte("x"), "Feed", testFeed, "AccountId", "1000").fails(t, 401, 303)

	type dfk struct {
		ID          int64             `json:"id"`
		Account     string            `json:"account"`
		Hint        string            `json:"hint"`
		Algorithm   string            `json:"algorithm"`
		Status      string            `json:"status"`
		CreateTime  string            `json:"createTime"`
		ExpireTime  string            `json:"expireTime"`
		RevokedTime string            `json:"revokedTime"`
		Attributes  map[string]string `json:"attributes"`
	}
	var created struct {
		DataFeedKey string `json:"dataFeedKey"`
		OwnerHeader string `json:"ownerHeader"`
		Key         dfk    `json:"key"`
	}
	expiry := time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(time.Second)
	root.do("POST", "/datafeedkeys", fmt.Sprintf(`{"account":"1000","expireTime":%q,"attributes":{"System":"FROM-KEY","Environment":"KEY-ENV"}}`,
		expiry.Format(time.RFC3339))).want(t, "create", 201, &created)
	key, k := created.DataFeedKey, created.Key
	if !datafeedkey.Valid(key) || created.OwnerHeader != "AccountId" || k.Account != "1000" || k.Status != "active" ||
		k.Algorithm != "ARGON2" || !strings.HasPrefix(key, "sdk_"+k.Hint) || len(k.Hint) != datafeedkey.HintLen ||
		k.ExpireTime != expiry.Format("2006-01-02T15:04:05.000Z") || k.Attributes["System"] != "FROM-KEY" || k.RevokedTime != "" {
		t.Fatalf("created %+v", created)
	}

	// The key authenticates at once; its attributes are on the stream.
	id := post(t, s, []byte("sent with an API-made key"), "Feed", testFeed, "Authorization", "Bearer "+key, "AccountId", "1000",
		"System", "FROM-HEADER").ok(t)
	sts := s.Streams()
	last := sts[len(sts)-1]
	if last.ReceiptID != id || last.Attributes.Value("System") != "FROM-KEY" || last.Attributes.Value("Environment") != "KEY-ENV" {
		t.Fatalf("stream %+v attributes %v", last, last.Attributes.Sorted())
	}
	post(t, s, []byte("x"), "Feed", testFeed, "Authorization", "Bearer "+key, "AccountId", "2000").fails(t, 401, 313)

	// Listed, never with the key, its hash or salt.
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	resp := root.do("GET", "/datafeedkeys", "")
	resp.want(t, "list", 200, &list)
	if len(list.Keys) != 1 || list.Keys[0]["id"] != float64(k.ID) {
		t.Fatalf("list %s", resp.body)
	}
	for _, secret := range []string{key, key[4:], "hash", "salt"} {
		if strings.Contains(string(resp.body), secret) {
			t.Fatalf("list shows %q: %s", secret, resp.body)
		}
	}
	root.do("GET", "/datafeedkeys?account=2000", "").want(t, "list other account", 200, &list)
	if len(list.Keys) != 0 {
		t.Fatalf("account filter: %v", list.Keys)
	}

	// Refused requests.
	for what, body := range map[string]string{
		"no account":          `{}`,
		"empty account":       `{"account":""}`,
		"spaced account":      `{"account":" 1000"}`,
		"past expiry":         `{"account":"1000","expireTime":"2001-01-01T00:00:00Z"}`,
		"owner as attribute":  `{"account":"1000","attributes":{"accountid":"2000"}}`,
		"newline in value":    `{"account":"1000","attributes":{"System":"a\nFeed:OTHER"}}`,
		"colon in name":       `{"account":"1000","attributes":{"A:B":"x"}}`,
		"same name twice":     `{"account":"1000","attributes":{"System":"a","system":"b"}}`,
		"unknown field":       `{"account":"1000","expires":"90d"}`,
		"attribute not text":  `{"account":"1000","attributes":{"N":1}}`,
		"spaced value":        `{"account":"1000","attributes":{"System":" a"}}`,
		"expiry not RFC 3339": `{"account":"1000","expireTime":"tomorrow"}`,
	} {
		root.do("POST", "/datafeedkeys", body).admWantProblem(t, what, 422)
	}

	// Attributes weir sets itself, or never stores, cannot be a key's: laid
	// over a post's, they would overwrite its receipt id or identity, or
	// store a credential.
	for _, name := range []string{"Authorization", "ReceiptId", "receiptidpath", "StreamSize", "UploadUserId",
		"UploadUsername", "ReceivedTime", "DataReceiptRule", "RemoteDN", "Cookie", "Compression", "Content-Encoding"} {
		root.do("POST", "/datafeedkeys", `{"account":"3000","attributes":{"`+name+`":"x","System":"S"}}`).admWantProblem(t,
			"reserved attribute "+name, 422, "attribute "+name+" cannot be set on a key")
	}
	root.do("GET", "/datafeedkeys?account=3000", "").want(t, "list after refusals", 200, &list)
	if len(list.Keys) != 0 {
		t.Fatalf("a refused key was stored: %v", list.Keys)
	}

	// Revoked: it stops at once, stays listed as revoked, and revoking again changes nothing.
	var revoked dfk
	feeds.do("DELETE", fmt.Sprintf("/datafeedkeys/%d", k.ID), "").admWantProblem(t, "revoke without Administrator", 403)
	root.do("DELETE", fmt.Sprintf("/datafeedkeys/%d", k.ID), "").want(t, "revoke", 200, &revoked)
	if revoked.Status != "revoked" || revoked.RevokedTime == "" || revoked.ID != k.ID {
		t.Fatalf("revoked %+v", revoked)
	}
	post(t, s, []byte("x"), "Feed", testFeed, "Authorization", "Bearer "+key, "AccountId", "1000").fails(t, 401, 313)
	var again dfk
	root.do("DELETE", fmt.Sprintf("/datafeedkeys/%d", k.ID), "").want(t, "revoke again", 200, &again)
	if again.RevokedTime != revoked.RevokedTime {
		t.Fatalf("revoking again changed the time: %s, was %s", again.RevokedTime, revoked.RevokedTime)
	}
	root.do("DELETE", "/datafeedkeys/999999", "").admWantProblem(t, "revoke unknown", 404)
	root.do("GET", "/datafeedkeys", "").want(t, "list after revoke", 200, &list)
	if len(list.Keys) != 1 || list.Keys[0]["status"] != "revoked" {
		t.Fatalf("list after revoke: %v", list.Keys)
	}
	if strings.Contains(s.Logs.String(), key) {
		t.Fatal("the key is in the server log")
	}
}

// TestAPIAdminDocumented: every operation of feeds, users and data feed keys
// says what it needs, is tagged, and declares its errors; full-object bodies
// mark every writable field required; patches are merge patches.
func TestAPIAdminDocumented(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	doc := s.App.API().OpenAPI()
	mine := map[string]bool{
		"list-feeds": true, "get-feed": true, "create-feed": true, "replace-feed": true, "patch-feed": true,
		"set-feed-status": true, "delete-feed": true, "list-users": true, "get-user": true, "create-user": true,
		"replace-user": true, "patch-user": true, "delete-user": true, "add-group-member": true,
		"remove-group-member": true, "grant-permission": true, "revoke-permission": true, "set-feed-permission": true,
		"list-datafeed-keys": true, "create-datafeed-key": true, "revoke-datafeed-key": true,
	}
	seen := map[string]bool{}
	for path, item := range doc.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Post, item.Put, item.Patch, item.Delete} {
			if op == nil || !mine[op.OperationID] {
				continue
			}
			seen[op.OperationID] = true
			if op.Summary == "" || op.Description == "" || len(op.Tags) == 0 {
				t.Errorf("%s %s: summary %q description %q tags %v", path, op.OperationID, op.Summary, op.Description, op.Tags)
			}
			for _, code := range []string{"401", "403"} {
				if op.Responses[code] == nil {
					t.Errorf("%s: no %s response", op.OperationID, code)
				}
			}
		}
	}
	for id := range mine {
		if !seen[id] {
			t.Errorf("operation %s is not documented", id)
		}
	}

	put := doc.Paths["/feeds/{name}"].Put
	schema := doc.Components.Schemas.SchemaFromRef(put.RequestBody.Content["application/json"].Schema.Ref)
	if want := []string{"classification", "contextEncoding", "description", "encoding", "name", "status", "streamType", "version"}; !slices.Equal(admSorted(schema.Required), want) {
		t.Errorf("PUT /feeds/{name} required %v, want %v", schema.Required, want)
	}
	for _, code := range []string{"404", "409", "422"} {
		if put.Responses[code] == nil {
			t.Errorf("PUT /feeds/{name}: no %s response", code)
		}
	}
	userPut := doc.Components.Schemas.SchemaFromRef(doc.Paths["/users/{name}"].Put.RequestBody.Content["application/json"].Schema.Ref)
	if want := []string{"displayName", "enabled", "name", "version"}; !slices.Equal(admSorted(userPut.Required), want) {
		t.Errorf("PUT /users/{name} required %v, want %v", userPut.Required, want)
	}
	for _, p := range []string{"/feeds/{name}", "/users/{name}"} {
		patch := doc.Paths[p].Patch
		mt := patch.RequestBody.Content["application/merge-patch+json"]
		if mt == nil || len(patch.RequestBody.Content) != 1 {
			t.Errorf("PATCH %s body types %v, want application/merge-patch+json", p, patch.RequestBody.Content)
			continue
		}
		ps := doc.Components.Schemas.SchemaFromRef(mt.Schema.Ref)
		if len(ps.Required) != 0 {
			t.Errorf("PATCH %s requires %v", p, ps.Required)
		}
	}
}

func admSorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
