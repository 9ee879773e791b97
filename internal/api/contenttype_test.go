package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestJSONContentTypeAnySpelling: a JSON body is taken whatever the case of
// its media type and with whitespace around the ';' (RFC 9110 §8.3.1,
// §5.6.6), for application/json and for the merge patch that PATCH takes;
// a type that is not JSON is still 415, a JSON Patch still 415 with its
// own message, and a Content-Type that does not parse is not taken either.
func TestJSONContentTypeAnySpelling(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, nil)

	for i, ct := range []string{
		"application/json",
		"Application/JSON",
		"APPLICATION/JSON",
		"application/json ; charset=UTF-8",
		"Application/Json;Charset=\"utf-8\"",
		"application/json;\tcharset=utf-8",
		`application/json; profile="https://example.org/a+b"`,
		"application/vnd.weir+JSON",
	} {
		name := fmt.Sprintf("CT-FEED-%d", i)
		resp, body := a.call(http.MethodPost, "/api/feeds", `{"name": "`+name+`"}`, "Content-Type", ct)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			t.Errorf("POST /api/feeds with Content-Type %q: %d %s", ct, resp.StatusCode, body)
			continue
		}
		var f struct{ Name string }
		if err := json.Unmarshal([]byte(body), &f); err != nil || f.Name != name {
			t.Errorf("POST /api/feeds with Content-Type %q: %v %s", ct, err, body)
		}
	}

	// PATCH takes a merge patch, in any case too.
	for i, ct := range []string{"application/merge-patch+json", "Application/Merge-Patch+JSON", "application/MERGE-PATCH+json ; charset=utf-8"} {
		desc := fmt.Sprintf("patched %d", i)
		resp, body := a.call(http.MethodPatch, "/api/feeds/CT-FEED-0", `{"description": "`+desc+`"}`, "Content-Type", ct)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("PATCH with Content-Type %q: %d %s", ct, resp.StatusCode, body)
			continue
		}
		var f struct{ Description string }
		if err := json.Unmarshal([]byte(body), &f); err != nil || f.Description != desc {
			t.Errorf("PATCH with Content-Type %q: %v %s", ct, err, body)
		}
	}

	// What is not JSON is refused, as before.
	for _, tc := range []struct {
		method, path, ct, body, want string
	}{
		{http.MethodPost, "/api/feeds", "text/plain", `{"name": "CT-TEXT"}`, "unknown content type"},
		{http.MethodPost, "/api/feeds", "TEXT/PLAIN ; charset=utf-8", `{"name": "CT-TEXT"}`, "unknown content type"},
		{http.MethodPost, "/api/feeds", "application/xml", `{"name": "CT-XML"}`, "unknown content type"},
		{http.MethodPost, "/api/feeds", "application/json-x", `{"name": "CT-JSONX"}`, "unknown content type"},
		// A Content-Type that does not parse is left as sent: not taken for JSON.
		{http.MethodPost, "/api/feeds", "Application/JSON; =x", `{"name": "CT-BAD"}`, "unknown content type"},
		{http.MethodPatch, "/api/feeds/CT-FEED-0", "Application/JSON-Patch+JSON", `[{"op": "remove", "path": "/description"}]`, "JSON Patch"},
	} {
		resp, body := a.call(tc.method, tc.path, tc.body, "Content-Type", tc.ct)
		if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(body, tc.want) ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s %s with Content-Type %q: %d %s; want 415 saying %q", tc.method, tc.path, tc.ct, resp.StatusCode, body, tc.want)
		}
	}
	for _, name := range []string{"CT-TEXT", "CT-XML", "CT-JSONX", "CT-BAD"} {
		if resp, body := a.call(http.MethodGet, "/api/feeds/"+name, ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("feed %s was created by a refused body: %d %s", name, resp.StatusCode, body)
		}
	}
}
