package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
)

// TestAPIKeysThroughAPI creates, lists, disables and deletes API keys over
// the API; the key is shown once and never again, and each caller manages
// only its own keys unless it holds Manage Users.
func TestAPIKeysThroughAPI(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	alice := user(t, s, "alice", nil, nil)
	erin := user(t, s, "erin", []string{access.ManageAPIKeys}, nil)
	boss := user(t, s, "boss", []string{access.ManageAPIKeys, access.ManageUsers}, nil)

	alice.do("POST", "/apikeys", `{"name":"mine"}`).want(t, "create without Manage API Keys", 403, nil)

	var created struct {
		APIKey string `json:"apiKey"`
		Key    struct {
			ID     int64  `json:"id"`
			Prefix string `json:"prefix"`
			Owner  string `json:"owner"`
			Name   string `json:"name"`
		} `json:"key"`
	}
	erin.do("POST", "/apikeys", `{"name":"ci","comments":"for the pipeline"}`).want(t, "erin create", 201, &created)
	if !strings.HasPrefix(created.APIKey, created.Key.Prefix) || created.Key.Owner != "erin" || created.Key.Name != "ci" {
		t.Fatalf("created %+v", created)
	}
	erin.do("POST", "/apikeys", `{"name":"ci"}`).want(t, "duplicate name", 409, nil)
	erin.do("POST", "/apikeys", `{"name":"x","expireTime":"2999-01-01T00:00:00Z"}`).want(t, "beyond max expiry", 422, nil)
	newKey := apiClient{t: t, url: s.URL + "/api", key: created.APIKey}
	var me struct {
		Name string `json:"name"`
	}
	newKey.do("GET", "/whoami", "").want(t, "new key works", 200, &me)
	if me.Name != "erin" {
		t.Fatalf("new key is %q", me.Name)
	}

	r := erin.do("GET", "/apikeys", "")
	r.want(t, "erin list", 200, nil)
	if strings.Contains(string(r.body), created.APIKey) || strings.Contains(string(r.body), created.APIKey[len(created.Key.Prefix):]) {
		t.Fatal("list shows the key")
	}
	if strings.Count(string(r.body), `"owner":"erin"`) != 2 {
		t.Fatalf("erin's list: %s", r.body)
	}

	id := fmt.Sprint(created.Key.ID)
	erin.do("GET", "/apikeys?user=alice", "").want(t, "erin lists alice's keys", 403, nil)
	alice.do("PUT", "/apikeys/"+id+"/enabled", `{"enabled":false}`).want(t, "alice disables erin's key", 404, nil)
	erin.do("PUT", "/apikeys/"+id+"/enabled", `{"enabled":false}`).want(t, "erin disables", 200, nil)
	newKey.do("GET", "/whoami", "").want(t, "disabled key", 401, nil)
	erin.do("PUT", "/apikeys/"+id+"/enabled", `{"enabled":true}`).want(t, "erin enables", 200, nil)
	newKey.do("GET", "/whoami", "").want(t, "enabled again", 200, nil)
	erin.do("DELETE", "/apikeys/"+id, "").want(t, "erin deletes", 204, nil)
	newKey.do("GET", "/whoami", "").want(t, "deleted key", 401, nil)

	// Manage Users acts on anyone's keys.
	var forAlice struct {
		APIKey string `json:"apiKey"`
	}
	boss.do("POST", "/apikeys", `{"user":"alice","name":"given"}`).want(t, "boss creates for alice", 201, &forAlice)
	apiClient{t: t, url: s.URL + "/api", key: forAlice.APIKey}.do("GET", "/whoami", "").want(t, "alice's new key", 200, &me)
	if me.Name != "alice" {
		t.Fatalf("key for alice is %q", me.Name)
	}
	boss.do("GET", "/apikeys?user=alice", "").want(t, "boss lists alice's keys", 200, nil)

	// Manage Users is not a way to become an Administrator: no key for one.
	boss.do("POST", "/apikeys", `{"user":"admin","name":"takeover"}`).want(t, "boss creates a key for the administrator", 403, nil)
	boss.do("GET", "/apikeys?user=admin", "").want(t, "boss lists the administrator's keys", 403, nil)
}
