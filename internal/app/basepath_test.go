package app_test

import (
	"net/http"
	"testing"

	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
)

// TestBasePath serves the datafeed, the API and the health endpoints below
// a deployment base path, and nothing outside it; every response carries
// the build version.
func TestBasePath(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) { c.BasePath = "/weir" })
	s.CreateFeed(testFeed, "", "")
	for path, want := range map[string]int{
		"/weir/healthz": 200, "/weir/readyz": 200, "/weir/api/openapi.json": 200, "/weir/api/whoami": 401,
		"/healthz": 404, "/datafeed": 404, "/api/whoami": 404,
	} {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		if v := resp.Header.Get(app.VersionHeader); v != app.Version() || v == "" {
			t.Errorf("GET %s: %s %q, want %q", path, app.VersionHeader, v, app.Version())
		}
	}
	r := send(t, s, http.MethodPost, "/weir/datafeed", nil, "Feed", testFeed)
	if r.code != 200 {
		t.Fatalf("post under base path: %d %s", r.code, r.body)
	}
}
