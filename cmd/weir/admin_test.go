package main_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// expectFail checks that a command failed with a non-zero exit and that its
// stderr mentions every one of want.
func expectFail(t *testing.T, r cliResult, want ...string) {
	t.Helper()
	if r.code == 0 {
		t.Errorf("succeeded, want a failure: %s", r)
		return
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not mention %q: %s", w, r)
		}
	}
}

// postString posts a small body and returns the response; errors are fatal.
func postString(t *testing.T, c *http.Client, url, body string, headers map[string]string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := postBody(ctx, c, url, strings.NewReader(body), int64(len(body)), headers)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	return resp
}

func mustOK(t *testing.T, node string, r response) string {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("HTTP %d, Service-Status %s, Service-Error %q, body %q; want 200",
			r.status, r.header.Get("Service-Status"), r.header.Get("Service-Error"), r.body)
	}
	return receiptID(t, node, r)
}

func streamByReceipt(streams []streamJSON, id string) []streamJSON {
	var out []streamJSON
	for _, s := range streams {
		if s.ReceiptID == id {
			out = append(out, s)
		}
	}
	return out
}

// TestAdminCLI drives the admin commands and the start-up checks of serve
// as an operator would, against a running server where that matters.
func TestAdminCLI(t *testing.T) {
	e := newEnv(t)
	const feedName, dropFeed = "ADMIN-FEED", "ADMIN-DROP"

	// feed create, its failures, and feed list.
	if out := e.mustAdmin("feed", "create", feedName); !strings.Contains(out, "created feed "+feedName) {
		t.Errorf("feed create said %q", out)
	}
	expectFail(t, e.admin("feed", "create", feedName), "already exists", feedName)
	expectFail(t, e.admin("feed", "create", "bad name"), "bad name", "does not match the feed name pattern")
	expectFail(t, e.admin("feed", "create", "AB"), "does not match the feed name pattern")
	expectFail(t, e.admin("feed", "create", "STATUS-FEED", "--status", "MAYBE"), "MAYBE", "RECEIVE")
	expectFail(t, e.admin("feed", "create", "TYPE-FEED", "--type", "Nonsense"), "Nonsense", "metaTypes")
	expectFail(t, e.admin("feed", "create"), "feed create takes one feed name")
	e.mustAdmin("feed", "create", dropFeed, "--status", "DROP", "--type", "Events", "--description", "dropped on arrival")

	list := e.mustAdmin("feed", "list")
	for _, want := range [][]string{{feedName, "RECEIVE", "Raw Events"}, {dropFeed, "DROP", "Events"}} {
		found := false
		for _, line := range strings.Split(list, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == want[0] {
				found = f[1] == want[1] && strings.Contains(line, want[2])
			}
		}
		if !found {
			t.Errorf("feed list has no line %v:\n%s", want, list)
		}
	}
	feeds := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(e.mustAdmin("feed", "list", "--json")))
	for sc.Scan() {
		var f map[string]any
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("feed list --json line %q: %v", sc.Text(), err)
		}
		feeds[f["name"].(string)] = f
	}
	if f := feeds[dropFeed]; f == nil || f["status"] != "DROP" || f["streamType"] != "Events" || f["description"] != "dropped on arrival" {
		t.Errorf("feed list --json: %s is %v", dropFeed, f)
	}
	if len(feeds) != 2 {
		t.Errorf("feed list --json lists %d feeds, want 2: %v", len(feeds), feeds)
	}

	// A running server sees feed changes made with the admin command.
	srv := e.startServer()
	if !strings.Contains(srv.logs.String(), "senders are not authenticated") {
		t.Errorf("with authenticationRequired false the server must warn at start that senders are not authenticated")
	}
	c := newClient(time.Minute)
	defer c.CloseIdleConnections()
	headers := map[string]string{"Feed": feedName, "System": "ADMIN-SYS", "Environment": "PROOF"}
	plain := "first line\nsecond line\n"
	plainID := mustOK(t, e.node, postString(t, c, srv.url, plain, headers))

	if out := e.mustAdmin("feed", "update", feedName, "--status", "REJECT"); !strings.Contains(out, "status REJECT") {
		t.Errorf("feed update said %q", out)
	}
	// The server caches feeds for receive.feedCacheTTL (1s), so posts
	// within that time of the change are still received, and stored.
	var last response
	acceptedMeanwhile := 0
	for deadline := time.Now().Add(15 * time.Second); ; {
		last = postString(t, c, srv.url, "rejected?\n", headers)
		if last.status != http.StatusOK || time.Now().After(deadline) {
			break
		}
		acceptedMeanwhile++
		time.Sleep(100 * time.Millisecond)
	}
	if last.status != http.StatusNotAcceptable || last.header.Get("Service-Status") != "110" {
		t.Errorf("post to a feed updated to REJECT: HTTP %d, Service-Status %q, body %q; want 406 and 110",
			last.status, last.header.Get("Service-Status"), last.body)
	}
	e.mustAdmin("feed", "update", feedName, "--status", "receive")
	var backID string
	for deadline := time.Now().Add(15 * time.Second); ; {
		last = postString(t, c, srv.url, "back\n", headers)
		if last.status == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	backID = mustOK(t, e.node, last)
	expectFail(t, e.admin("feed", "update", "NO-SUCH-FEED", "--status", "REJECT"), "no feed named", "NO-SUCH-FEED")
	expectFail(t, e.admin("feed", "update", feedName, "--status", "SOMETIMES"), "SOMETIMES")

	dropID := mustOK(t, e.node, postString(t, c, srv.url, "dropped\n", map[string]string{"Feed": dropFeed}))

	// A zip post makes a stream of two parts, the first with a context and
	// a meta entry.
	dataA, ctxA, dataB := "part one data\nline 2\n", "context of part one\n", "part two data\n"
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for _, ent := range [][2]string{
		{"001.dat", dataA}, {"001.ctx", ctxA}, {"001.meta", "Source:alpha\nSystem:FROM-META\n"},
		{"002.dat", dataB},
	} {
		w, err := zw.Create(ent[0])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(ent[1]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zipHeaders := map[string]string{"Feed": feedName, "Compression": "ZIP", "System": "ADMIN-SYS"}
	zipID := mustOK(t, e.node, postString(t, c, srv.url, zbuf.String(), zipHeaders))

	// stream list --json, while the server runs.
	streams := e.listStreamsHaving(plainID, backID, zipID)
	if len(streams) != 3+acceptedMeanwhile {
		t.Errorf("stream list --json: %d streams, want %d (plain, back, zip and %d received before the feed's REJECT applied): %+v",
			len(streams), 3+acceptedMeanwhile, acceptedMeanwhile, streams)
	}
	if got := streamByReceipt(streams, dropID); len(got) != 0 {
		t.Errorf("a post to a DROP feed was stored: %+v", got)
	}
	ps := streamByReceipt(streams, plainID)
	if len(ps) != 1 {
		t.Fatalf("receipt %s names %d streams, want 1", plainID, len(ps))
	}
	p := ps[0]
	if p.ID <= 0 || p.Feed != feedName || p.Type != "Raw Events" || p.Status != "UNLOCKED" || p.Parts != 1 ||
		p.RawSize != int64(len(plain)) || p.Node != e.node {
		t.Errorf("plain stream: %+v", p)
	}
	for k, v := range map[string]string{
		"Feed": feedName, "System": "ADMIN-SYS", "Environment": "PROOF", "ReceiptId": plainID,
		"StreamSize": strconv.Itoa(len(plain)),
	} {
		if got := attrValue(p.Attributes, k); got != v {
			t.Errorf("plain stream attribute %s = %q, want %q (attributes %v)", k, got, v, p.Attributes)
		}
	}
	for _, k := range []string{"GUID", "ReceivedTime", "ReceiptIdPath"} {
		if attrValue(p.Attributes, k) == "" {
			t.Errorf("plain stream has no %s attribute: %v", k, p.Attributes)
		}
	}
	if got := streamByReceipt(streams, backID); len(got) != 1 {
		t.Errorf("receipt %s (after the feed was set back to RECEIVE) names %d streams, want 1", backID, len(got))
	}
	if filtered := e.listStreams("--feed", dropFeed); len(filtered) != 0 {
		t.Errorf("stream list --feed %s: %d streams, want 0", dropFeed, len(filtered))
	}
	if text := e.mustAdmin("stream", "list"); !strings.Contains(text, "RECEIPT") || !strings.Contains(text, plainID) {
		t.Errorf("stream list (text) lacks a header or receipt %s:\n%s", plainID, text)
	}

	zs := streamByReceipt(streams, zipID)
	if len(zs) != 1 {
		t.Fatalf("zip receipt %s names %d streams, want 1", zipID, len(zs))
	}
	z := zs[0]
	if z.Parts != 2 || z.RawSize != int64(len(dataA)+len(dataB)) {
		t.Errorf("zip stream: parts %d rawSize %d, want 2 and %d", z.Parts, z.RawSize, len(dataA)+len(dataB))
	}

	// stream cat: all data, one part, children.
	zid := strconv.FormatInt(z.ID, 10)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stream", "cat", strconv.FormatInt(p.ID, 10)}, plain},
		{[]string{"stream", "cat", zid}, dataA + dataB},
		{[]string{"stream", "cat", zid, "--part", "1"}, dataA},
		{[]string{"stream", "cat", zid, "--part", "2"}, dataB},
		{[]string{"stream", "cat", zid, "--part", "1", "--child", "Context"}, ctxA},
		{[]string{"stream", "cat", "--child", "context", "--part", "1", zid}, ctxA},
	} {
		if r := e.admin(tc.args...); r.code != 0 || r.stdout != tc.want {
			t.Errorf("%s\nwant stdout %q", r, tc.want)
		}
	}
	md := e.mustAdmin("stream", "cat", zid, "--part", "1", "--child", "Meta Data")
	for _, line := range []string{"Source:alpha", "System:FROM-META", "Feed:" + feedName, "ReceiptId:" + zipID, "StreamSize:" + strconv.Itoa(len(dataA))} {
		if !strings.Contains(md, line+"\n") {
			t.Errorf("part 1 Meta Data lacks %q:\n%s", line, md)
		}
	}
	md2 := e.mustAdmin("stream", "cat", zid, "--part", "2", "--child", "Meta Data")
	if !strings.Contains(md2, "System:ADMIN-SYS\n") || strings.Contains(md2, "Source:alpha") {
		t.Errorf("part 2 Meta Data should have the header's System and no meta entry of part 1:\n%s", md2)
	}
	pmd := e.mustAdmin("stream", "cat", strconv.FormatInt(p.ID, 10), "--child", "Meta Data")
	if !strings.Contains(pmd, "ReceiptId:"+plainID+"\n") || !strings.Contains(pmd, "Environment:PROOF\n") {
		t.Errorf("plain stream Meta Data:\n%s", pmd)
	}
	expectFail(t, e.admin("stream", "cat", zid, "--part", "3"), "2 part(s)")
	expectFail(t, e.admin("stream", "cat", zid, "--part", "2", "--child", "Context"), "has no Context")
	expectFail(t, e.admin("stream", "cat", zid, "--child", "Bogus"), "--child", "Bogus")
	expectFail(t, e.admin("stream", "cat", "987654"), "987654", "not found")
	expectFail(t, e.admin("stream", "cat", "abc"), `"abc"`, "not a positive number")
	expectFail(t, e.admin("stream", "cat"), "stream cat takes one stream id")
	expectFail(t, e.admin("stream", "frobnicate"), "unknown admin command")

	// serve refuses what it cannot honour, and a second server on the same
	// data directory and node.
	t.Run("authenticationRequired", func(t *testing.T) {
		// Issue 2 had `authenticationRequired: true` refuse to start until
		// sender authentication existed; now that it does, the setting must
		// still refuse to start when it cannot be honoured: no way to
		// authenticate is enabled.
		other := newEnvConfig(t, "receive:\n  authenticationRequired: true\n  enabledAuthenticationTypes: []\n")
		r := runWithin(t, 30*time.Second, append([]string{"serve", "--listen", "127.0.0.1:" + strconv.Itoa(freePort(t))}, other.storageArgs()...)...)
		expectFail(t, r, "authenticationRequired")
	})
	t.Run("unknown config key", func(t *testing.T) {
		other := newEnvConfig(t, "receive:\n  maxRequestSzie: 1G\n")
		r := runWithin(t, 30*time.Second, append([]string{"serve", "--listen", "127.0.0.1:" + strconv.Itoa(freePort(t))}, other.storageArgs()...)...)
		expectFail(t, r, "maxRequestSzie")
		expectFail(t, other.admin("feed", "list"), "maxRequestSzie")
		top := newEnvConfig(t, "listen: 127.0.0.1:0\nretention: 7d\n")
		expectFail(t, runWithin(t, 30*time.Second, append([]string{"serve"}, top.storageArgs()...)...), "retention")
	})
	t.Run("second server on the same data", func(t *testing.T) {
		r := runWithin(t, 30*time.Second, append([]string{"serve", "--node", e.node, "--listen", "127.0.0.1:" + strconv.Itoa(freePort(t))}, e.storageArgs()...)...)
		expectFail(t, r, "in use by another weir server", e.node)
	})

	// The first server is unharmed by all of this.
	mustOK(t, e.node, postString(t, c, srv.url, "still here\n", headers))
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited with %d after SIGTERM, want 0", code)
	}
}
