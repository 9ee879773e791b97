package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// post sends body to url, gzipped when gz, and returns the answer.
func post(t *testing.T, url string, body []byte, gz bool) string {
	t.Helper()
	send := body
	if gz {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(body)
		zw.Close()
		send = b.Bytes()
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(send))
	if err != nil {
		t.Error(err)
		return ""
	}
	if gz {
		req.Header.Set("Compression", "GZIP")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	ans, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d: %s", resp.StatusCode, ans)
	}
	return string(ans)
}

// bodies are distinct posts, none a part of another.
func bodies(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(strings.Repeat(fmt.Sprintf("<post %04d>", i), 1+i%7) + "\n")
	}
	return out
}

// sendAll posts every body from 8 senders at once, every third gzipped.
func sendAll(t *testing.T, url string, all [][]byte) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(all); i += 8 {
				if ans := post(t, url, all[i], i%3 == 0); !strings.HasSuffix(ans, "_B\n") {
					t.Errorf("post %d: answer %q is not an id", i, ans)
				}
			}
		})
	}
	wg.Wait()
}

func TestFsyncModeWritesAFilePerPost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "files")
	h, err := newHandler("fsync", dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	all := bodies(40)
	sendAll(t, srv.URL, all)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[string(b)] = true
	}
	for i, b := range all {
		if !got[string(b)] {
			t.Errorf("post %d is in no file", i)
		}
	}
	if len(entries) != len(all) {
		t.Errorf("%d files for %d posts", len(entries), len(all))
	}
}

// TestGroupModeKeepsEveryPost: every answered post is in the log once,
// whole (the posts are appended, gunzipped, one after another), followed by
// nothing but the zeros written ahead; and every post was covered by a
// flush that began after it was written.
func TestGroupModeKeepsEveryPost(t *testing.T) {
	dir := t.TempDir()
	l, err := openLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := l.append(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "1_1_B\n")
	}))
	defer srv.Close()
	all := bodies(200)
	sendAll(t, srv.URL, all)
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, b := range all {
		total += len(b)
		if n := bytes.Count(log, b); n != 1 {
			t.Errorf("post %d is in the log %d times", i, n)
		}
	}
	if len(bytes.Trim(log[total:], "\x00")) != 0 {
		t.Errorf("after the %d bytes of the posts, the log holds more than zeros", total)
	}
	if int64(len(log)) != l.zeroed || l.zeroed <= int64(total) {
		t.Errorf("log of %d bytes, zeroed to %d, posts %d bytes: want the zeros past the posts", len(log), l.zeroed, total)
	}
	if l.written != uint64(len(all)) || l.durable != l.written || l.err != nil {
		t.Errorf("written %d, durable %d, error %v; want %d, %d, nil", l.written, l.durable, l.err, len(all), len(all))
	}
}

func TestUnknownMode(t *testing.T) {
	for _, c := range []struct{ mode, dir string }{{"fast", ""}, {"fsync", ""}, {"group", ""}} {
		if _, err := newHandler(c.mode, c.dir); err == nil {
			t.Errorf("mode %q dir %q: no error", c.mode, c.dir)
		}
	}
}
