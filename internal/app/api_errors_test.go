package app_test

import (
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
)

// TestAPIErrorsAreProblems: what no API route takes is answered as every
// API error is, application/problem+json: 404 for an unknown path (and an
// unknown schema, which was 200 with null), 405 with Allow for a method
// the path does not take.
func TestAPIErrorsAreProblems(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	admin := user(t, s, "erradmin", []string{access.Administrator}, nil)
	anon := apiClient{t: t, url: s.URL + "/api"}

	for _, c := range []apiClient{admin, anon} {
		c.do("GET", "/nope", "").admWantProblem(t, "unknown path", 404, "/api/nope")
		c.do("POST", "/feeds/X/nope", `{}`).admWantProblem(t, "unknown deeper path", 404)
		c.do("GET", "/schemas/Nope.json", "").admWantProblem(t, "unknown schema", 404, "Nope")
	}
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/version", "GET, HEAD"},
		{"POST", "/feeds/X-FEED", "GET, HEAD, PUT, PATCH, DELETE"},
		{"PATCH", "/feeds", "GET, HEAD, POST"},
	} {
		r := admin.do(tc.method, tc.path, "")
		r.admWantProblem(t, tc.method+" "+tc.path, 405, "not allowed", tc.allow)
		if got := r.header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
	// Routes still reach their operations, and a known schema is served.
	admin.do("GET", "/version", "").want(t, "version", 200, nil)
	r := anon.do("GET", "/schemas/Feed.json", "")
	var schema struct {
		Properties map[string]any `json:"properties"`
	}
	r.want(t, "schema", 200, &schema)
	if schema.Properties["encoding"] == nil || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("Feed schema: %s %s", r.header.Get("Content-Type"), r.body)
	}
}
