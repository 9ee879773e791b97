package main_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// inflightPosts reads weir_receive_inflight from /metrics.
func inflightPosts(c *http.Client, url string) (float64, error) {
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "weir_receive_inflight "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, io.ErrUnexpectedEOF
}

// TestGracefulStop sends SIGTERM while a slow post is in flight: the server
// stops accepting connections, yet the post completes with 200 and is
// stored, and the process exits 0.
func TestGracefulStop(t *testing.T) {
	e := newEnv(t)
	const feedName = "GRACEFUL-PROOF"
	e.mustAdmin("feed", "create", feedName)
	srv := e.startServer()

	pr, pw := io.Pipe()
	defer pr.Close()
	type result struct {
		resp response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := newClient(2 * time.Minute)
		defer c.CloseIdleConnections()
		r, err := postBody(ctx, c, srv.url, pr, -1, map[string]string{"Feed": feedName, "Compression": "NONE"})
		done <- result{r, err}
	}()

	var sent strings.Builder
	write := func(s string) {
		t.Helper()
		sent.WriteString(s)
		if _, err := io.WriteString(pw, s); err != nil {
			t.Fatalf("write body: %v", err)
		}
	}
	write("slow post begins\n" + strings.Repeat("0123456789abcdef", 4096) + "\n")

	srv.waitInflight(t)
	// The server stops accepting connections while the post is still open.
	srv.stopListening(t)
	select {
	case <-srv.exited:
		t.Fatalf("weir serve exited (%s) with a post in flight", srv.state)
	case r := <-done:
		t.Fatalf("the slow post ended before its body was complete: %+v", r)
	default:
	}

	// Finish the body slowly.
	for i := range 10 {
		write("slow line " + strconv.Itoa(i) + "\n")
		time.Sleep(100 * time.Millisecond)
	}
	pw.Close()

	var res result
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the slow post got no answer within 2 minutes of its body's end")
	}
	if res.err != nil {
		t.Fatalf("the slow post failed after SIGTERM: %v", res.err)
	}
	id := mustOK(t, e.node, res.resp)
	if code := srv.wait(time.Minute); code != 0 {
		t.Errorf("weir serve exited with %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(srv.logs.String(), `"msg":"weir stopped"`) {
		t.Errorf("the server did not log that it stopped")
	}

	// After the exit, the post is stored exactly.
	ss := streamByReceipt(e.listStreams(), id)
	if len(ss) != 1 || ss[0].Status != "UNLOCKED" || ss[0].RawSize != int64(sent.Len()) {
		t.Fatalf("receipt %s names %+v, want one UNLOCKED stream of %d bytes", id, ss, sent.Len())
	}
	if r := e.admin("stream", "cat", strconv.FormatInt(ss[0].ID, 10)); r.code != 0 || r.stdout != sent.String() {
		t.Errorf("stored data differs from the slow post's body (%d bytes stored, %d sent): %s", len(r.stdout), sent.Len(), r.stderr)
	}
	if files := e.lockFiles(); len(files) > 0 {
		t.Errorf("in-flight files remain after a graceful stop: %v", files)
	}
}

// waitInflight waits until the server is receiving a post (its body).
func (s *server) waitInflight(t *testing.T) {
	t.Helper()
	mc := newClient(5 * time.Second)
	defer mc.CloseIdleConnections()
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := inflightPosts(mc, s.url)
		if err == nil && n >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the post never showed as in flight in /metrics (last: %v, %v)", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopListening sends SIGTERM and waits until the server refuses new
// connections, which it does at once while it finishes posts in flight.
func (s *server) stopListening(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			return
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the server still accepts connections 30s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
