package app_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
)

// TestAPIErrorsAreProblems: what no API route takes is answered as every
// API error is, application/problem+json: 404 for an unknown path (and an
// unknown schema, which was 200 with null), 405 with Allow for a method
// the path does not take. And a 400 does not echo a large body back whole.
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

	// A 400 for a body that is not JSON echoes its start only.
	big := `{"name": "` + strings.Repeat("x", 900_000)
	r = admin.do("POST", "/feeds", big)
	p := r.admWantProblem(t, "invalid JSON", 400)
	if len(r.body) > 4096 {
		t.Fatalf("a 400 for a %d-byte body is %d bytes", len(big), len(r.body))
	}
	var raw struct {
		Errors []struct {
			Value string `json:"value"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &raw); err != nil || len(raw.Errors) != 1 ||
		!strings.HasPrefix(raw.Errors[0].Value, `{"name": "xxx`) || !strings.HasSuffix(raw.Errors[0].Value, "(cut: the first 256 of 900010 bytes)") {
		t.Fatalf("echoed value: %v %+v %+v", err, raw, p)
	}
	// So does a 422 for a long value, cut on a character boundary.
	r = admin.do("POST", "/feeds", `{"name":"LONG-FEED","streamType":"`+strings.Repeat("é", 10_000)+`"}`)
	r.admWantProblem(t, "long stream type", 422, "receive.metaTypes")
	if err := json.Unmarshal(r.body, &raw); err != nil || len(raw.Errors) != 1 ||
		raw.Errors[0].Value != strings.Repeat("é", 128)+"... (cut: the first 256 of 20000 bytes)" {
		t.Fatalf("echoed value: %v %+v", err, raw)
	}
	// A message that quotes the value is bounded too (the encoding check
	// quotes the name), and so is a 404's detail, which names the path.
	r = admin.do("POST", "/feeds", `{"name":"LONG-ENC-FEED","encoding":"`+strings.Repeat("x", 1_000_000)+`"}`)
	r.admWantProblem(t, "long encoding", 422, "encoding")
	if len(r.body) > 16<<10 {
		t.Errorf("a 422 for a 1 MB encoding name is %d bytes", len(r.body))
	}
	r = admin.do("GET", "/"+strings.Repeat("p", 60_000), "")
	r.admWantProblem(t, "long unknown path", 404)
	if len(r.body) > 16<<10 {
		t.Errorf("a 404 for a 60 KB path is %d bytes", len(r.body))
	}
	// A short value is echoed as it was.
	r = admin.do("POST", "/feeds", `{"name":"SHORT-FEED","streamType":"Nonsense"}`)
	if err := json.Unmarshal(r.body, &raw); err != nil || r.status != http.StatusUnprocessableEntity || raw.Errors[0].Value != "Nonsense" {
		t.Fatalf("short value: %d %s", r.status, r.body)
	}
}

// TestAPICommonErrorsDocumented: every API operation documents the
// statuses weir sends for it outside its handler (431, 503 with
// Retry-After), and every operation with a JSON body 400, 413 and 415 as
// well; and each of those operations really answers them (the body is
// refused before the handler runs, so nothing changes).
func TestAPICommonErrorsDocumented(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	admin := user(t, s, "docadmin", []string{access.Administrator}, nil)
	type response struct {
		Headers map[string]any            `json:"headers"`
		Content map[string]map[string]any `json:"content"`
	}
	type operation struct {
		RequestBody *struct {
			Content map[string]map[string]any `json:"content"`
		} `json:"requestBody"`
		Responses map[string]*response `json:"responses"`
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	anon := apiClient{t: t, url: s.URL + "/api"}
	anon.do("GET", "/openapi.json", "").want(t, "document", 200, &doc)
	params := regexp.MustCompile(`\{[^}]+\}`)
	checked := 0
	for path, item := range doc.Paths {
		var servers []any
		if raw, ok := item["servers"]; ok && json.Unmarshal(raw, &servers) == nil && len(servers) > 0 {
			continue // /datafeed and the operational endpoints are not the API's
		}
		for method, raw := range item {
			var op operation
			if json.Unmarshal(raw, &op) != nil || op.Responses == nil {
				continue // not an operation (parameters, summary, ...)
			}
			method = strings.ToUpper(method)
			problem := func(code string) *response {
				r := op.Responses[code]
				if r == nil || r.Content["application/problem+json"] == nil {
					t.Errorf("%s %s does not document %s as a problem", method, path, code)
					return nil
				}
				return r
			}
			problem("431")
			if r := problem("503"); r != nil && r.Headers["Retry-After"] == nil {
				t.Errorf("%s %s: 503 without Retry-After", method, path)
			}
			jsonBody := false
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Content {
					jsonBody = jsonBody || mt["schema"] != nil
				}
			}
			if !jsonBody {
				continue
			}
			checked++
			for _, code := range []string{"400", "413", "415"} {
				problem(code)
			}
			url := params.ReplaceAllString(path, "1")
			for _, tc := range []struct {
				status      int
				contentType string
				body        string
			}{
				{400, "application/json", `{} {}`},
				{400, "application/json", strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001)},
				{415, "text/plain", `{}`},
				{415, "application/json-patch+json", `[{"op":"replace","path":"/description","value":"x"}]`},
				{413, "application/json", `"` + strings.Repeat("x", 9<<20) + `"`},
			} {
				r := admin.admSend(method, url, tc.contentType, tc.body)
				if r.status != tc.status || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
					t.Errorf("%s %s with %s (%d bytes): %d %s, want %d", method, url, tc.contentType, len(tc.body),
						r.status, trunc(r.body), tc.status)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d operations with a JSON body found: the document's shape changed", checked)
	}
}
