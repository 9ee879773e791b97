package proxy

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/stroomzip"
)

// TestHTTPDestinationS2Fallback: a destination sends S2 entries only
// after an answer that announces them, and the standard methods again
// after one that does not. An S2 zip refused by a downstream that no
// longer announces S2 (replaced by an older weir) is sent again at once,
// deflated, in the same attempt: the send succeeds.
func TestHTTPDestinationS2Fallback(t *testing.T) {
	var announce atomic.Bool
	announce.Store(true)
	var methods []uint16
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil || len(zr.File) == 0 {
			http.Error(w, "not a zip", http.StatusBadRequest)
			return
		}
		m := zr.File[0].Method
		methods = append(methods, m)
		if announce.Load() {
			w.Header().Set(stroomzip.S2Header, "deflate, S2")
		}
		if m != zip.Deflate && m != zip.Store && !announce.Load() {
			// As a weir without S2 refuses a zip it cannot read.
			w.Header().Set("Service-Status", "400")
			w.Header().Set("Service-Error", "Compressed stream invalid: zip: unsupported compression algorithm")
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "receipt\n")
	}))
	t.Cleanup(srv.Close)
	d, err := NewHTTPDestination(config.HTTPDestination{Name: "down", ForwardURL: srv.URL + "/datafeed"}, "weir-test/1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Sender().CloseIdleConnections)
	send := func() Outcome {
		var a attr.Map
		a.Put("Feed", "F")
		return d.Send(context.Background(), meta.Aggregate{ID: 1, Feed: "F"}, &a, func(w io.Writer) error {
			zw := d.NewZip(w)
			if _, err := zw.WritePart(stroomzip.Part{Meta: bytes.NewReader([]byte("Feed:F\n")), Data: bytes.NewReader([]byte("data\n"))}); err != nil {
				return err
			}
			return zw.Close()
		})
	}
	if out := send(); !out.OK {
		t.Fatalf("first send: %+v", out)
	}
	if out := send(); !out.OK || out.Resent != "" {
		t.Fatalf("second send: %+v", out)
	}
	announce.Store(false) // the downstream is replaced
	if out := send(); !out.OK || !strings.Contains(out.Resent, "refused the zip of S2 entries (HTTP 500 - status 400 - Compressed stream invalid") {
		t.Fatalf("S2 zip to a downstream that no longer reads it, sent again deflated and said so: %+v", out)
	}
	if out := send(); !out.OK {
		t.Fatalf("the next send: %+v", out)
	}
	want := []uint16{zip.Deflate, stroomzip.MethodS2, stroomzip.MethodS2, zip.Deflate, zip.Deflate}
	if len(methods) != len(want) {
		t.Fatalf("methods %v, want %v", methods, want)
	}
	for i := range want {
		if methods[i] != want[i] {
			t.Fatalf("methods %v, want %v", methods, want)
		}
	}
}
