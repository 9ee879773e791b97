package app_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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

// TestAPIDownloadsDoNotHoldCallSlots: a download gives its call slot back
// once it starts sending, so clients that read slowly do not leave every
// other call with 503; downloads have a bound of their own
// (api.maxConcurrentDownloads), past which they get 503 with Retry-After,
// and a download slot frees when its client goes.
func TestAPIDownloadsDoNotHoldCallSlots(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) {
		c.API.MaxConcurrentRequests = 1
		c.API.MaxConcurrentDownloads = 2
		c.API.RetryAfter = config.Duration(3 * time.Second)
	})
	reader := user(t, s, "reader", []string{access.DataView}, map[string]access.Level{testFeed: access.View})
	// Far more than the sockets between server and client hold, so that
	// a client that does not read keeps its download sending.
	big := make([]byte, 64<<20)
	for i := range big {
		big[i] = byte('a' + i%23)
	}
	id := streamByReceipt(t, s, post(t, s, big, "Feed", testFeed).ok(t)).ID
	path := fmt.Sprintf("/api/streams/%d/data", id)

	// Two clients start downloads and then read nothing.
	var stalled []net.Conn
	for range 2 {
		c := dial(t, s)
		stalled = append(stalled, c)
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+addr(s)+"\r\nAuthorization: Bearer "+reader.key+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("download: %v %v", res, err)
		}
	}
	// The one call slot is free for other calls.
	reader.do("GET", "/version", "").want(t, "a call beside two stalled downloads", http.StatusOK, nil)
	// A third download finds both download slots taken.
	r := reader.do("GET", fmt.Sprintf("/streams/%d/data", id), "")
	r.want(t, "a third download", http.StatusServiceUnavailable, nil)
	if got := r.header.Get("Retry-After"); got != "3" || !strings.Contains(string(r.body), "api.maxConcurrentDownloads") {
		t.Errorf("Retry-After %q, body %s", got, r.body)
	}
	// A client that goes frees its download slot.
	stalled[0].Close()
	apptest.WaitFor(t, "a download slot to free", func() bool {
		req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+reader.key)
		req.Header.Set("Range", "bytes=0-9")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusPartialContent && string(b) == string(big[:10])
	})
}
