package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// startIn starts a long-running weir command in dir and waits until it
// logs "weir started"; it is killed at cleanup.
func startIn(t *testing.T, dir string, args ...string) *syncBuffer {
	t.Helper()
	var logs syncBuffer
	cmd := exec.Command(weirBin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("weir %s log:\n%s", args[0], tail(logs.String(), 6000))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), `"msg":"weir started"`) {
		select {
		case err := <-exited:
			t.Fatalf("weir %s exited at start: %v\n%s", strings.Join(args, " "), err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("weir %s did not start within a minute\n%s", strings.Join(args, " "), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &logs
}

// TestProxyQuickStart follows the README's proxy quick start and two-hop
// example as a new user would, in an empty directory with the embedded
// defaults (authentication required everywhere): a user and API key for
// the proxy on the main service, a data feed key for senders on the proxy,
// a post through one proxy and then through an edge proxy in front of it.
// Only the ports differ (free ones) and the aggregation frequency is 1s
// instead of 10s.
func TestProxyQuickStart(t *testing.T) {
	if os.Getenv("WEIR_TEST_DB") == "postgres" {
		t.Skip("the quick start uses the embedded default database; it runs in the SQLite pass")
	}
	dir := t.TempDir()
	mainPort, proxyPort, edgePort := freePort(t), freePort(t), freePort(t)
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
	secret := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(dir+"/"+name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(dir+"/"+name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	startIn(t, dir, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", mainPort))
	weir("admin", "feed", "create", "TEST-FEED")
	weir("admin", "user", "create", "proxy-1")
	secret("main.key", weir("admin", "api-key", "create", "--user", "proxy-1"))
	file("proxy.yaml", fmt.Sprintf(`listen: 127.0.0.1:%d
aggregator:
  aggregationFrequency: 1s
forwardHttpDestinations:
  - name: main
    forwardUrl: http://127.0.0.1:%d/datafeed
    apiKeyFile: main.key
`, proxyPort, mainPort))
	pkey := strings.TrimSpace(weir("admin", "datafeed-key", "create", "--account", "1000", "--data", "./weir-proxy-data"))
	startIn(t, dir, "proxy", "--config", "proxy.yaml")

	post := func(port int, key, body string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/datafeed", port), strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("AccountId", "1000")
		req.Header.Set("Feed", "TEST-FEED")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Service-Status")
	}
	code, r1, _ := post(proxyPort, pkey, "some event\nanother event\n")
	if code != 200 || !regexp.MustCompile(`^\d{13}_\d{4}_P_proxy-[0-9a-f]{16}$`).MatchString(r1) {
		t.Fatalf("post to the proxy: %d %q", code, r1)
	}
	// The proxy asks the main service about feeds with its API key.
	if code, _, st := post(proxyPort, pkey, "x"); code != 200 || st != "" {
		t.Fatalf("second post: %d %s", code, st)
	}
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/datafeed", proxyPort), strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+pkey)
	req.Header.Set("AccountId", "1000")
	req.Header.Set("Feed", "NOT-A-FEED")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 406 || resp.Header.Get("Service-Status") != "110" {
		t.Fatalf("post for an unknown feed at the proxy: %v %v", resp, err)
	}

	// A part of a stream at the main service names the proxy's receipt
	// first in its ReceiptIdPath (each part keeps its own attributes).
	// It returns the stream's meta data.
	waitPath := func(first string, hops int) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			for _, line := range strings.Split(strings.TrimSpace(weir("admin", "stream", "list", "--json")), "\n") {
				var s struct {
					ID int64 `json:"id"`
				}
				if line == "" || json.Unmarshal([]byte(line), &s) != nil {
					continue
				}
				meta := weir("admin", "stream", "cat", fmt.Sprint(s.ID), "--child", "Meta Data")
				for _, l := range strings.Split(meta, "\n") {
					v, ok := strings.CutPrefix(l, "ReceiptIdPath:")
					if p := strings.Split(strings.TrimSpace(v), ","); ok && p[0] == first && len(p) == hops {
						return meta
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no part at the main service with ReceiptIdPath starting %s (%d hops):\n%s", first, hops, weir("admin", "stream", "list", "--json"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	meta1 := waitPath(r1, 2)
	// The sender's receipt id finds the stream with the CLI, as the README
	// shows.
	var found struct {
		ID        int64  `json:"id"`
		ReceiptID string `json:"receiptId"`
	}
	listed := strings.TrimSpace(weir("admin", "stream", "list", "--receipt", r1, "--json"))
	if strings.Count(listed, "\n") != 0 || json.Unmarshal([]byte(listed), &found) != nil ||
		!strings.Contains(meta1, "ReceiptId:"+found.ReceiptID+"\n") {
		t.Errorf("admin stream list --receipt %s: %q, want the one stream whose part names it", r1, listed)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		q := weir("proxy", "queue", "--data", "./weir-proxy-data")
		if strings.Count(strings.TrimSpace(q), "\n") == 0 && strings.HasPrefix(q, "AGGREGATE") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy queue not empty:\n%s", q)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Two hops: an edge proxy in front of the first.
	secret("edge.key", weir("admin", "datafeed-key", "create", "--account", "2000", "--data", "./weir-proxy-data"))
	file("edge.yaml", fmt.Sprintf(`listen: 127.0.0.1:%d
data: ./weir-edge-data
proxyId: edge-1
aggregator:
  aggregationFrequency: 1s
forwardHttpDestinations:
  - name: proxy-1
    forwardUrl: http://127.0.0.1:%d/datafeed
    dataFeedKeyFile: edge.key
    dataFeedKeyOwner: "2000"
`, edgePort, proxyPort))
	ekey := strings.TrimSpace(weir("admin", "datafeed-key", "create", "--account", "1000", "--data", "./weir-edge-data"))
	startIn(t, dir, "proxy", "--config", "edge.yaml")
	code, r2, _ := post(edgePort, ekey, "through two proxies\n")
	if code != 200 || !regexp.MustCompile(`^\d{13}_\d{4}_P_edge-1$`).MatchString(r2) {
		t.Fatalf("post to the edge proxy: %d %q", code, r2)
	}
	// Each hop records the identity that authenticated to it, over what
	// the part's .meta entry says (the README says so): the main service
	// the first proxy's user, the first proxy the edge key's account.
	meta := waitPath(r2, 3)
	for _, want := range []string{"UploadUserId:proxy-1", "AccountId:2000"} {
		if !slices.Contains(strings.Split(meta, "\n"), want) {
			t.Errorf("two-hop part's meta data has no %q:\n%s", want, meta)
		}
	}
}
