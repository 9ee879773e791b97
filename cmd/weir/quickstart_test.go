package main_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestQuickStart follows the README's quick start as a new user would: in
// an empty directory, with no configuration at all (so the data directory
// is the relative ./weir-data and senders must authenticate), start the
// server, create a feed and a data feed key, post plain and gzipped data,
// read it back, and call the API with the bootstrap administrator's key.
func TestQuickStart(t *testing.T) {
	if os.Getenv("WEIR_TEST_DB") == "postgres" {
		t.Skip("the quick start uses the embedded default database; it runs in the SQLite pass")
	}
	dir := t.TempDir()
	port := strconv.Itoa(freePort(t))
	base := "http://127.0.0.1:" + port

	weir := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, weirBin, args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("weir %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}

	var logs syncBuffer
	srv := exec.Command(weirBin, "serve", "--listen", "127.0.0.1:"+port)
	srv.Dir = dir
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("weir serve log:\n%s", tail(logs.String(), 6000))
		}
	})
	// "weir started" is logged once everything is ready, bootstrap included;
	// the port alone opens a moment earlier.
	deadline := time.Now().Add(time.Minute)
	for {
		if strings.Contains(logs.String(), `"msg":"weir started"`) {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("weir serve exited at start: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("weir serve did not listen within a minute\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "bootstrap-admin-api-key") {
		t.Errorf("the log does not name the bootstrap key file")
	}

	weir("admin", "feed", "create", "TEST-FEED")
	key := strings.TrimSpace(weir("admin", "datafeed-key", "create", "--account", "1000"))
	events := "some event\nanother event\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(events))
	zw.Close()

	post := func(body []byte, hdr ...string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/datafeed", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Feed", "TEST-FEED")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(b), "\n") {
			t.Fatalf("post %v: %d %s %s", hdr, resp.StatusCode, resp.Header.Get("Service-Error"), b)
		}
		return strings.TrimSpace(string(b))
	}
	// The specification's reference check (no AccountId: the key names its
	// account), then the README's compression checks, which send it.
	post([]byte(events), "Type", "Raw Events", "Compression", "NONE")
	post(gz.Bytes(), "Compression", "GZIP", "AccountId", "1000")
	post(gz.Bytes(), "Content-Encoding", "gzip", "AccountId", "1000")

	list := weir("admin", "stream", "list")
	if strings.Count(list, "TEST-FEED") != 3 {
		t.Fatalf("stream list:\n%s", list)
	}
	for _, id := range []string{"1", "2", "3"} {
		if got := weir("admin", "stream", "cat", id); got != events {
			t.Errorf("stream %s: %q, want %q", id, got, events)
		}
	}

	admin, err := os.ReadFile(filepath.Join(dir, "weir-data", "bootstrap-admin-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/api/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(admin)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"admin"`) {
		t.Fatalf("whoami with the bootstrap key: %d %s", resp.StatusCode, b)
	}
}
