package main_test

// File descriptors (docs/reliability.md, "Hostile senders"): every
// connection takes one, so a flood of idle connections can leave `weir
// serve` at its limit (ulimit -n). A post that then cannot open its stream
// file must be told to come back (503 with Retry-After), not that weir
// failed (500 / 999); and once connections close, weir serves again
// without a restart.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lowestFreeFD is the lowest file descriptor number pid does not use: the
// one its next open would get. With its file limit at this number, it can
// open nothing more.
func lowestFreeFD(t *testing.T, pid int) uint64 {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot list open files: %v", err)
	}
	used := map[string]bool{}
	for _, e := range ents {
		used[e.Name()] = true
	}
	n := uint64(0)
	for used[strconv.FormatUint(n, 10)] {
		n++
	}
	return n
}

func TestFileDescriptorLimit(t *testing.T) {
	// Stream files of their own (no packs), so that each post opens one.
	e := newEnvConfig(t, "receive:\n  authenticationRequired: false\nstore:\n  packMaxSize: 0\n")
	e.mustAdmin("feed", "create", "FD-FEED")
	s := e.startServer()
	pid := s.pid()
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Skipf("cannot read weir's file limit: %v", err)
	}

	// The connection of the post is accepted first.
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	// A request on it makes sure it is accepted before the limit drops.
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", res, err)
	} else {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// Now weir may open no more files than it has open: as if idle
	// connections had taken the rest. A file weir closes between the
	// count and the post (a database connection, a start-up job's)
	// frees a slot and lets the post through: then it is counted as
	// stored, and the limit taken again.
	body := strings.Repeat("event at the file limit\n", 1000)
	var stored []string
	refused := false
	for attempt := 0; attempt < 10 && !refused; attempt++ {
		n := lowestFreeFD(t, pid)
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: old.Max}, nil); err != nil {
			t.Skipf("cannot lower weir's file limit: %v", err)
		}
		fmt.Fprintf(c, "POST /datafeed HTTP/1.1\r\nHost: x\r\nFeed: FD-FEED\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("post at the file limit: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			stored = append(stored, strings.TrimSpace(string(b)))
			if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		refused = true
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Service-Status") != "503" || res.Header.Get("Retry-After") == "" ||
			!strings.Contains(res.Header.Get("Service-Error"), "ulimit -n") {
			t.Errorf("post at the file limit: %d, Service-Status %q, Retry-After %q, Service-Error %q, body %q",
				res.StatusCode, res.Header.Get("Service-Status"), res.Header.Get("Retry-After"), res.Header.Get("Service-Error"), b)
		}
	}
	if !refused {
		t.Fatalf("10 posts at the file limit were all stored: the limit never held (%v)", stored)
	}

	// Files free again (the connections closed): weir serves at once.
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	client := newClient(10 * time.Second)
	r, err := postBody(t.Context(), client, s.url, strings.NewReader(body), int64(len(body)), map[string]string{"Feed": "FD-FEED"})
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("post after the limit: %v %v", r, err)
	}
	want := append(stored, receiptID(t, e.node, r))
	var got []string
	for _, st := range e.listStreamsHaving(want...) {
		got = append(got, st.ReceiptID)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("streams %v, want the posts answered 200 (%v): nothing of the refused one", got, want)
	}
}
