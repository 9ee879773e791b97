package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
)

// apiClient calls the REST API as one user.
type apiClient struct {
	t   *testing.T
	url string
	key string
}

type apiResp struct {
	status int
	header http.Header
	body   []byte
}

func (c apiClient) do(method, path, body string) apiResp {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResp{resp.StatusCode, resp.Header, b}
}

// want asserts the status and decodes a JSON body into v (if not nil).
func (r apiResp) want(t *testing.T, what string, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
	if status >= 400 {
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
			t.Fatalf("%s: error Content-Type %q", what, ct)
		}
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("%s: %v: %s", what, err, r.body)
		}
	}
}

type streamList struct {
	Streams []struct {
		ID   int64  `json:"id"`
		Feed string `json:"feed"`
	} `json:"streams"`
}

func (l streamList) ids() []int64 {
	var out []int64
	for _, s := range l.Streams {
		out = append(out, s.ID)
	}
	return out
}

type feedList struct {
	Feeds []struct {
		Name string `json:"name"`
	} `json:"feeds"`
}

func (l feedList) names() []string {
	out := []string{}
	for _, f := range l.Feeds {
		out = append(out, f.Name)
	}
	return out
}

// user creates a user with the given application permissions and feed
// levels, and returns an API client holding a new key of theirs.
func user(t *testing.T, s *apptest.Server, name string, perms []string, feeds map[string]access.Level) apiClient {
	t.Helper()
	ctx := context.Background()
	ac := s.App.Access()
	if _, err := ac.CreateUser(ctx, name, strings.ToUpper(name[:1])+name[1:], false); err != nil {
		t.Fatal(err)
	}
	for _, p := range perms {
		if err := ac.GrantApp(ctx, name, p); err != nil {
			t.Fatal(err)
		}
	}
	for f, l := range feeds {
		if err := ac.SetFeedLevel(ctx, name, f, l); err != nil {
			t.Fatal(err)
		}
	}
	key, _, err := ac.CreateAPIKey(ctx, access.NewKey{Owner: name})
	if err != nil {
		t.Fatal(err)
	}
	return apiClient{t: t, url: s.URL + "/api", key: key}
}

// TestAPIPermissions shows two users with different feeds each seeing only
// their own streams through every read path, and 403 on writes they may
// not do; and 401 for every kind of bad credential.
func TestAPIPermissions(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	for _, f := range []string{"FEED-A", "FEED-B"} {
		s.CreateFeed(f, "", "")
	}
	ids := map[string]int64{}
	for _, f := range []string{"FEED-A", "FEED-B"} {
		post(t, s, []byte("data of "+f), "Feed", f).ok(t)
	}
	for _, st := range s.Streams() {
		ids[st.Feed] = st.ID
	}
	alice := user(t, s, "alice", []string{access.DataView}, map[string]access.Level{"FEED-A": access.View})
	bob := user(t, s, "bob", []string{access.DataView, access.DataDelete}, map[string]access.Level{"FEED-B": access.Delete})
	carol := user(t, s, "carol", nil, map[string]access.Level{"FEED-A": access.View}) // VIEW but not Data - View
	dave := user(t, s, "dave", []string{access.ManageFeeds}, nil)

	// whoami
	var me struct {
		Name        string            `json:"name"`
		Permissions []string          `json:"permissions"`
		Feeds       map[string]string `json:"feeds"`
	}
	alice.do("GET", "/whoami", "").want(t, "alice whoami", 200, &me)
	if me.Name != "alice" || !slices.Equal(me.Permissions, []string{access.DataView}) || me.Feeds["FEED-A"] != "VIEW" || len(me.Feeds) != 1 {
		t.Fatalf("alice whoami %+v", me)
	}

	// Feeds: narrowed lists, 403 for single feeds the caller may not see.
	for _, tc := range []struct {
		c    apiClient
		want []string
	}{{alice, []string{"FEED-A"}}, {bob, []string{"FEED-B"}}, {carol, []string{"FEED-A"}}, {dave, []string{}}} {
		var fl feedList
		tc.c.do("GET", "/feeds", "").want(t, "list feeds", 200, &fl)
		if !slices.Equal(fl.names(), tc.want) {
			t.Errorf("feeds %v, want %v", fl.names(), tc.want)
		}
	}
	alice.do("GET", "/feeds/FEED-A", "").want(t, "alice get FEED-A", 200, nil)
	alice.do("GET", "/feeds/FEED-B", "").want(t, "alice get FEED-B", 403, nil)
	alice.do("GET", "/feeds/NO-SUCH-FEED", "").want(t, "alice get unknown feed", 403, nil)

	// Streams: lists narrowed (a filter on another's feed is empty, not an error).
	for _, tc := range []struct {
		c     apiClient
		query string
		want  []int64
	}{
		{alice, "", []int64{ids["FEED-A"]}},
		{alice, "?feed=FEED-B", nil},
		{bob, "", []int64{ids["FEED-B"]}},
		{dave, "", nil},
	} {
		var sl streamList
		tc.c.do("GET", "/streams"+tc.query, "").want(t, "list streams", 200, &sl)
		if !slices.Equal(sl.ids(), tc.want) {
			t.Errorf("streams%s: %v, want %v", tc.query, sl.ids(), tc.want)
		}
	}
	a, b := fmt.Sprint(ids["FEED-A"]), fmt.Sprint(ids["FEED-B"])
	alice.do("GET", "/streams/"+a, "").want(t, "alice get own stream", 200, nil)
	// Refused without naming the feed: walking ids must not list them.
	r := alice.do("GET", "/streams/"+b, "")
	r.want(t, "alice get bob's stream", 403, nil)
	if strings.Contains(string(r.body), "FEED-B") {
		t.Errorf("the refusal names the feed alice may not see: %s", r.body)
	}
	alice.do("GET", "/streams/999999", "").want(t, "missing stream", 404, nil)

	// Data: needs Data - View and VIEW on the feed; the bytes are exact.
	if r := alice.do("GET", "/streams/"+a+"/data", ""); r.status != 200 || string(r.body) != "data of FEED-A" {
		t.Fatalf("alice data: %d %q", r.status, r.body)
	}
	alice.do("GET", "/streams/"+b+"/data", "").want(t, "alice data of bob's stream", 403, nil)
	carol.do("GET", "/streams/"+a+"/data", "").want(t, "carol data without Data - View", 403, nil)
	if r := alice.do("GET", "/streams/"+a+"/data?child=Meta%20Data", ""); r.status != 200 || !strings.Contains(string(r.body), "Feed:FEED-A\n") {
		t.Fatalf("alice meta data: %d %q", r.status, r.body)
	}

	// Writes: delete needs Data - Delete and DELETE on the feed; creating feeds Manage Feeds.
	alice.do("DELETE", "/streams/"+a, "").want(t, "alice delete without Data - Delete", 403, nil)
	bob.do("DELETE", "/streams/"+a, "").want(t, "bob delete on another feed", 403, nil)
	var deleted struct {
		Status string `json:"status"`
	}
	bob.do("DELETE", "/streams/"+b, "").want(t, "bob delete own", 200, &deleted)
	if deleted.Status != "DELETED" {
		t.Fatalf("deleted status %q", deleted.Status)
	}
	bob.do("DELETE", "/streams/"+b, "").want(t, "delete twice", 409, nil)
	var sl streamList
	bob.do("GET", "/streams", "").want(t, "bob list after delete", 200, &sl)
	if len(sl.Streams) != 0 {
		t.Fatalf("deleted stream still listed: %v", sl.ids())
	}
	bob.do("GET", "/streams?status=DELETED", "").want(t, "bob list deleted", 200, &sl)
	if !slices.Equal(sl.ids(), []int64{ids["FEED-B"]}) {
		t.Fatalf("deleted list %v", sl.ids())
	}

	alice.do("POST", "/feeds", `{"name":"FEED-NEW"}`).want(t, "alice create feed", 403, nil)
	dave.do("POST", "/feeds", `{"name":"FEED-NEW"}`).want(t, "dave create feed", 201, nil)
	dave.do("POST", "/feeds", `{"name":"FEED-NEW"}`).want(t, "dave create feed again", 409, nil)
	dave.do("POST", "/feeds", `{"name":"bad name"}`).want(t, "dave create bad name", 422, nil)
	var fl feedList
	dave.do("GET", "/feeds", "").want(t, "dave feeds after create", 200, &fl)
	if !slices.Equal(fl.names(), []string{"FEED-NEW"}) {
		t.Fatalf("creator does not own the new feed: %v", fl.names())
	}
	alice.do("GET", "/feeds", "").want(t, "alice feeds after dave's create", 200, &fl)
	if !slices.Equal(fl.names(), []string{"FEED-A"}) {
		t.Fatalf("alice sees %v", fl.names())
	}

	// 401 for every bad credential, with a WWW-Authenticate challenge.
	keys, err := s.App.Access().ListAPIKeys(context.Background(), "carol")
	if err != nil || len(keys) != 1 {
		t.Fatalf("carol's keys %v %v", keys, err)
	}
	if err := s.App.Access().SetAPIKeyEnabled(context.Background(), keys[0].ID, false); err != nil {
		t.Fatal(err)
	}
	// A well-formed key that no longer exists.
	unknown, gone, err := s.App.Access().CreateAPIKey(context.Background(), access.NewKey{Owner: "alice", Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.App.Access().DeleteAPIKey(context.Background(), gone.ID); err != nil {
		t.Fatal(err)
	}
	for what, key := range map[string]string{
		"missing": "", "malformed": "sak_not_a_key", "unknown": unknown, "disabled": carol.key, "garbage": "Basic abc",
	} {
		r := apiClient{t: t, url: s.URL + "/api", key: key}.do("GET", "/whoami", "")
		r.want(t, what+" key", 401, nil)
		if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s key: no WWW-Authenticate challenge", what)
		}
		if key != "" && strings.Contains(string(r.body), key) {
			t.Errorf("%s key: the credential is echoed in the error", what)
		}
	}
}
