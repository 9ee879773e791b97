package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"

	"github.com/weirhq/weir/internal/fsutil"
)

// The group mode is a ceiling, so it takes the cheapest ways weir could
// take too: klauspost's gzip (what weir decodes with; the naive mode keeps
// the standard library's, as a naive server would) and reused buffers.
var (
	bufs  = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	gzips sync.Pool // *gzip.Reader
)

// zeroAhead is how far past the data the log is zero-filled, as weir's packs.
const zeroAhead = 1 << 20

// groupLog is -mode group: one append-only file, flushed once for all the
// posts written since the last flush began.
type groupLog struct {
	f *os.File

	mu      sync.Mutex
	end     int64 // where the next post goes
	zeroed  int64 // the file's length: zeros past end
	written uint64
	zeros   []byte

	flushMu sync.Mutex // one flush at a time
	cond    *sync.Cond // on mu: a flush finished
	durable uint64     // posts counted in written that a flush covered
	err     error      // the last flush's error, sticky
}

func openLog(dir string) (*groupLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	l := &groupLog{f: f, zeros: make([]byte, zeroAhead)}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

// append reads the post's body, writes it at the log's end and returns once
// a flush that began after the write has returned.
func (l *groupLog) append(r *http.Request) error {
	buf := bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufs.Put(buf)
	if strings.EqualFold(strings.TrimSpace(r.Header.Get("Compression")), "GZIP") {
		zr, _ := gzips.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(r.Body)
		} else {
			err = zr.Reset(r.Body)
		}
		if err != nil {
			return err
		}
		_, err = buf.ReadFrom(zr)
		gzips.Put(zr)
		if err != nil {
			return err
		}
	} else if _, err := buf.ReadFrom(r.Body); err != nil {
		return err
	}
	body := buf.Bytes()
	l.mu.Lock()
	off := l.end
	l.end += int64(len(body))
	if l.end > l.zeroed {
		if _, err := l.f.WriteAt(l.zeros, l.end); err != nil {
			l.mu.Unlock()
			return fmt.Errorf("zero-fill: %w", err)
		}
		l.zeroed = l.end + zeroAhead
	}
	l.mu.Unlock()
	if _, err := l.f.WriteAt(body, off); err != nil {
		return err
	}
	l.mu.Lock()
	l.written++
	mine := l.written
	l.mu.Unlock()
	return l.waitDurable(mine)
}

// waitDurable returns once post number n is covered by a flush. The first
// waiter to find no flush running starts one for everything written so far;
// the others wait for it and, if it does not cover them, go again.
func (l *groupLog) waitDurable(n uint64) error {
	for {
		l.mu.Lock()
		for l.durable < n && !l.flushMu.TryLock() {
			l.cond.Wait()
		}
		if l.durable >= n {
			err := l.err
			l.mu.Unlock()
			return err
		}
		// This goroutine holds flushMu and flushes what is written so far.
		upTo := l.written
		l.mu.Unlock()
		err := fsutil.Fdatasync(l.f)
		l.mu.Lock()
		if err != nil && l.err == nil {
			l.err = err
		}
		l.durable = upTo
		l.flushMu.Unlock()
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}
