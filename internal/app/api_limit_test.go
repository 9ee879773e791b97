package app_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
)

// TestAPIOverload: with api.maxConcurrentRequests calls running, the next
// call gets 503 with Retry-After at once instead of queueing; when the
// running call ends, calls succeed again.
func TestAPIOverload(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) {
		c.API.MaxConcurrentRequests = 1
		c.API.RetryAfter = config.Duration(3 * time.Second)
	})
	importer := user(t, s, "importer", []string{access.DataImport}, nil)

	// An import whose body arrives slowly holds the only slot.
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/api/imports", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+importer.key)
	req.Header.Set("Content-Type", "application/zip")
	done := make(chan *http.Response, 1)
	go func() {
		// The upload is cut off below on purpose, so an error is expected.
		resp, _ := http.DefaultClient.Do(req)
		done <- resp
	}()
	if _, err := pw.Write([]byte("PK")); err != nil { // the handler is now reading the body
		t.Fatal(err)
	}

	var r apiResp
	apptest.WaitFor(t, "the API to refuse a second call", func() bool {
		r = apiClient{t: t, url: s.URL + "/api"}.do("GET", "/version", "")
		return r.status == http.StatusServiceUnavailable
	})
	r.want(t, "second call", http.StatusServiceUnavailable, nil)
	if got := r.header.Get("Retry-After"); got != "3" {
		t.Errorf("Retry-After %q, want 3", got)
	}

	pw.CloseWithError(io.ErrUnexpectedEOF) // the import ends (failed upload)
	if resp := <-done; resp != nil {
		resp.Body.Close()
	}
	apptest.WaitFor(t, "the slot to free", func() bool {
		return apiClient{t: t, url: s.URL + "/api"}.do("GET", "/version", "").status == http.StatusOK
	})
}
