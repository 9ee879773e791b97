package receive

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receipt"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
	"github.com/weirhq/weir/internal/stroomzip"
)

// fuzzHandler is the fuzz target's Handler.
func fuzzHandler(f *testing.F) (*Handler, *meta.Repo, *store.Store) {
	return benchHandler(f, config.Default().Store.PackMaxSize)
}

// benchHandler is a Handler on a real store in a temporary directory,
// packing streams up to packMax bytes (0: a file per stream).
func benchHandler(f testing.TB, packMax config.ByteSize) (*Handler, *meta.Repo, *store.Store) {
	dir := f.TempDir()
	repo, err := meta.Open(context.Background(), "", dir, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { repo.Close() })
	if err := repo.CreateFeed(context.Background(), feed.Feed{Name: "FUZZ"}.WithDefaults()); err != nil {
		f.Fatal(err)
	}
	codec, err := streamfile.NewCodec()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(codec.Close)
	st, err := store.Open(context.Background(), repo, codec, store.Options{Root: filepath.Join(dir, "store"), Node: "fuzz", PackMax: int(packMax)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(st.Close)
	ids, _ := receipt.NewGenerator('S', "fuzz", nil)
	cfg := config.Default().Receive
	cfg.MaxRequestSize = 1 << 20 // decompression bombs must stop here
	cfg.MaxZipEntries = 64
	h := New(Options{Config: cfg, Feeds: repo, Store: st, IDs: ids, Host: "fuzz", TempDir: dir})
	return h, repo, st
}

var fuzzModes = []struct{ compression, encoding string }{
	{"", ""}, {"NONE", ""}, {"GZIP", ""}, {"ZIP", ""},
	{"", "gzip"}, {"", "deflate"}, {"", "zstd"}, {"GZIP", "gzip"},
}

// FuzzDecode posts arbitrary bodies under every compression mode. Whatever
// the bytes, the handler answers with a status from the table, never
// panics, and a 200 for an undeclared, unflagged body stores it exactly.
func FuzzDecode(f *testing.F) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("LINE1\n"))
	zw.Close()
	var zb bytes.Buffer
	zr := zip.NewWriter(&zb)
	w, _ := zr.Create("1.dat")
	w.Write([]byte("data"))
	w, _ = zr.Create("1.meta")
	w.Write([]byte("Feed:FUZZ\nK:V\n"))
	zr.Close()
	// A zip of S2 entries, as a weir proxy sends.
	var s2b bytes.Buffer
	s2w := stroomzip.NewWriterS2(&s2b)
	s2w.WritePart(stroomzip.Part{Meta: bytes.NewReader([]byte("Feed:FUZZ\nK:V\n")), Data: bytes.NewReader([]byte("data data data data\n"))})
	s2w.Close()
	for i := range fuzzModes {
		f.Add(uint8(i), []byte("SOME TEST DATA"))
		f.Add(uint8(i), gz.Bytes())
		f.Add(uint8(i), zb.Bytes())
		f.Add(uint8(i), s2b.Bytes())
		f.Add(uint8(i), []byte{})
	}
	h, repo, st := fuzzHandler(f)
	valid := make(map[string]bool)
	for _, c := range Codes() {
		valid[strconv.Itoa(int(c))] = true
	}
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		m := fuzzModes[int(mode)%len(fuzzModes)]
		req := httptest.NewRequest(http.MethodPost, "/datafeed", bytes.NewReader(body))
		req.Header.Set("Feed", "FUZZ")
		if m.compression != "" {
			req.Header.Set("Compression", m.compression)
		}
		if m.encoding != "" {
			req.Header.Set("Content-Encoding", m.encoding)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		status := rec.Header().Get("Service-Status")
		if rec.Code == http.StatusOK {
			if status != "" {
				t.Fatalf("200 with Service-Status %s", status)
			}
		} else if !valid[status] || rec.Header().Get("Service-Error") == "" || !bytes.HasSuffix(rec.Body.Bytes(), []byte("\n")) {
			t.Fatalf("HTTP %d with Service-Status %q Service-Error %q", rec.Code, status, rec.Header().Get("Service-Error"))
		}
		if rec.Code != http.StatusOK || m.encoding != "" || (m.compression != "" && m.compression != "NONE") ||
			len(body) == 0 || sniff(body) != "" {
			return
		}
		id := rec.Body.String()
		rows, err := repo.ListStreams(context.Background(), meta.StreamFilter{ReceiptID: id[:len(id)-1]})
		if err != nil || len(rows) != 1 {
			t.Fatalf("receipt %q: %d streams, %v", id, len(rows), err)
		}
		r, err := st.Open(context.Background(), rows[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		sec, err := r.Section(streamfile.Data, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(sec)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("stored %d bytes (%v), sent %d", len(got), err, len(body))
		}
	})
}
