package api

import (
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// connKey is the context key of a request's connection (see ConnContext).
type connKey struct{}

// ConnContext is for http.Server.ConnContext: it lets a download see its
// connection, to tell whether the client still takes its bytes (see
// idleResponseWriter).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// idleResponseWriter fails a download whose client takes nothing of it for
// idle (receive.bodyIdleTimeout), and only such a one. Each write, a piece
// of at most idleWritePiece bytes at a time, has idle to reach the
// client; and while one waits (the socket's buffers full), the deadline
// moves on for as long as the client acknowledges bytes: a write returns
// only once all of it is in the socket's buffer, which the system makes
// room in only once a third of it has gone, a megabyte or more on a fast
// link, so a client reading slowly but steadily had its download cut
// (below 4.4 KB/s with the default 60 s, or far faster with big buffers).
type idleResponseWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration

	done chan struct{}
	wg   sync.WaitGroup
}

// idleWritePiece is the most idleResponseWriter writes under one deadline
// where it cannot see the client's progress (not Linux, not TCP).
const idleWritePiece = 16 << 10

func newIdleResponseWriter(r *http.Request, w http.ResponseWriter, idle time.Duration) *idleResponseWriter {
	iw := &idleResponseWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: idle, done: make(chan struct{})}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	for i := 0; i < 4; i++ { // a TLS connection, or a listener's wrapper
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	tcp, ok := c.(syscall.Conn)
	if !ok {
		return iw
	}
	acked, ok := bytesAcked(tcp)
	if !ok {
		return iw
	}
	iw.wg.Add(1)
	go func() {
		defer iw.wg.Done()
		t := time.NewTicker(max(idle/4, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-iw.done:
				return
			case <-t.C:
			}
			if n, ok := bytesAcked(tcp); ok && n != acked {
				acked = n
				// A deadline passed already is not extended (the write
				// has failed): this only moves one that is still ahead.
				_ = iw.rc.SetWriteDeadline(time.Now().Add(idle))
			}
		}
	}()
	return iw
}

func (w *idleResponseWriter) Write(p []byte) (int, error) {
	var done int
	for len(p) > 0 {
		piece := p[:min(len(p), idleWritePiece)]
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.idle))
		n, err := w.ResponseWriter.Write(piece)
		done += n
		if err != nil {
			return done, err
		}
		p = p[n:]
	}
	return done, nil
}

// stop ends the watch before the download returns: the server clears the
// write deadline after the answer, and nothing may set one after that
// (the connection's next request would inherit it).
func (w *idleResponseWriter) stop() {
	close(w.done)
	w.wg.Wait()
}

func (w *idleResponseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
