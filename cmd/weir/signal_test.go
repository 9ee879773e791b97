package main_test

import (
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalEndsAtOnce: SIGTERM starts the graceful stop; with a
// post still in flight, a second SIGTERM ends the process at once, by the
// signal, instead of waiting for the post (up to 30 s) and exiting 1. The
// post was never acknowledged, and after a restart no trace of it is
// visible.
func TestSecondSignalEndsAtOnce(t *testing.T) {
	e := newEnv(t)
	const feedName = "SECOND-SIGNAL"
	e.mustAdmin("feed", "create", feedName)
	srv := e.startServer()

	pr, pw := io.Pipe()
	defer pr.Close()
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := newClient(2 * time.Minute)
		defer c.CloseIdleConnections()
		r, err := postBody(ctx, c, srv.url, pr, -1, map[string]string{"Feed": feedName, "Compression": "NONE"})
		if err == nil && r.status == 200 {
			t.Errorf("the unfinished post was acknowledged: %+v", r)
		}
		done <- err
	}()
	if _, err := io.WriteString(pw, "a post that never ends\n"+strings.Repeat("x", 64<<10)+"\n"); err != nil {
		t.Fatalf("write body: %v", err)
	}
	srv.waitInflight(t)
	// Stopping: no new connections.
	srv.stopListening(t)
	select {
	case <-srv.exited:
		t.Fatalf("weir serve exited (%s) after one SIGTERM with a post in flight", srv.state)
	default:
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("second SIGTERM: %v", err)
	}
	srv.wait(time.Minute)
	ws, ok := srv.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("after a second SIGTERM weir serve ended with %s, want killed by SIGTERM", srv.state)
	}
	if !strings.Contains(srv.logs.String(), "a second signal ends weir at once") {
		t.Errorf("the log did not say what a second signal does")
	}
	pw.Close()
	<-done

	// The unfinished post left nothing visible.
	e.startServer().terminate()
	if ss := e.listStreams(); len(ss) != 0 {
		t.Errorf("streams after the restart: %+v", ss)
	}
}
