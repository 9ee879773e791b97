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
	mode := flag.String("mode", "drain", "drain or fsync")
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	dir := flag.String("dir", "", "fsync mode: directory for the files (created)")
	flag.Parse()
	var h http.Handler
	var ids atomic.Int64
	id := func() string {
		return strconv.FormatInt(time.Now().UnixMilli(), 10) + "_" + strconv.FormatInt(ids.Add(1), 10) + "_B\n"
	}
	switch *mode {
	case "drain":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			io.WriteString(w, id())
		})
	case "fsync":
		if *dir == "" {
			fmt.Fprintln(os.Stderr, "weir-baseline: -mode fsync needs -dir")
			os.Exit(2)
		}
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "weir-baseline:", err)
			os.Exit(1)
		}
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			receipt := id()
			if err := store(filepath.Join(*dir, strings.TrimSpace(receipt)), r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			io.WriteString(w, receipt)
		})
	default:
		fmt.Fprintf(os.Stderr, "weir-baseline: -mode %q is not drain or fsync\n", *mode)
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
