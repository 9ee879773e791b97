// Command weir-baseline is a minimal server for /datafeed that benchmarks
// compare weir with (cmd/weir-bench starts it). It does nothing else, which
// is the point:
//
//   - -mode drain: read the body to its end and answer an id. The ceiling of
//     a Go net/http server on this machine: no storage at all.
//   - -mode fsync: write the body (gunzipped when Compression: GZIP) to a new
//     file in -dir, fsync it, close it and answer an id. The naive durable
//     server: one file and one fsync per post (not even the directory is
//     fsynced).
//   - -mode group: append the body (gunzipped when Compression: GZIP) to one
//     file in -dir and answer once an fdatasync that began after the append
//     has returned; posts that arrive while a flush runs share the next one
//     (group commit). The file is zero-filled a megabyte ahead of its end,
//     as weir's packs are, so that most flushes change no metadata. No
//     compression, no index, no receipt that names the bytes: not a server
//     anyone should run, but the ceiling of any durable server on this disk
//     with this many senders, which weir-bench reports beside the others
//     when asked (-ceiling).
//
// Any method and path are accepted; a failure is 500 with the error.
package main

import (
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("mode", "drain", "drain, fsync or group")
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	dir := flag.String("dir", "", "fsync and group modes: directory for the files (created)")
	flag.Parse()
	h, err := newHandler(*mode, *dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir-baseline:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir-baseline:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(os.Stderr, "weir-baseline %s listening on %s\n", *mode, ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "weir-baseline:", err)
		os.Exit(1)
	}
}

// newHandler is the server of one mode.
func newHandler(mode, dir string) (http.Handler, error) {
	var ids atomic.Int64
	id := func() string {
		return strconv.FormatInt(time.Now().UnixMilli(), 10) + "_" + strconv.FormatInt(ids.Add(1), 10) + "_B\n"
	}
	switch mode {
	case "drain":
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			io.WriteString(w, id())
		}), nil
	case "fsync":
		if dir == "" {
			return nil, errors.New("-mode fsync needs -dir")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			receipt := id()
			if err := store(filepath.Join(dir, strings.TrimSpace(receipt)), r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			io.WriteString(w, receipt)
		}), nil
	case "group":
		if dir == "" {
			return nil, errors.New("-mode group needs -dir")
		}
		l, err := openLog(dir)
		if err != nil {
			return nil, err
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := l.append(r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			io.WriteString(w, id())
		}), nil
	}
	return nil, fmt.Errorf("-mode %q is not drain, fsync or group", mode)
}

// store writes the post's body (gunzipped when declared GZIP) to a new file
// and fsyncs it.
func store(path string, r *http.Request) error {
	var src io.Reader = r.Body
	if strings.EqualFold(strings.TrimSpace(r.Header.Get("Compression")), "GZIP") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return err
		}
		defer zr.Close()
		src = zr
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
