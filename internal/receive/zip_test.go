package receive

import (
	"archive/zip"
	"bytes"
	"context"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
	"github.com/weirhq/weir/internal/stroomzip"
)

// s2Source is an entry's content as S2 blocks (stroomzip.Blocks), as a
// weir proxy's store holds them.
type s2Source struct {
	*bytes.Reader
	data, blocks [][]byte
}

func (s *s2Source) EachBlock(fn func(data, s2block []byte) error) error {
	for i, d := range s.data {
		if err := fn(d, s.blocks[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *s2Source) BlockLimits() (int, int64) {
	var n int64
	for _, b := range s.blocks {
		n += int64(len(b))
	}
	return streamfile.DefaultBlockSize, n
}

// postZip posts a zip to h and returns the recorded answer.
func postZip(h http.Handler, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/datafeed", bytes.NewReader(body))
	req.Header.Set("Feed", "FUZZ")
	req.Header.Set("Compression", "ZIP")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestS2ZipBlocksKept: the data of a zip of S2 entries (from a weir proxy)
// is stored as the S2 blocks it came in, not compressed again, and reads
// back exactly.
func TestS2ZipBlocksKept(t *testing.T) {
	h, repo, st := benchHandler(t, 0)
	rng := rand.New(rand.NewPCG(8, 9))
	text := make([]byte, 2*streamfile.DefaultBlockSize+3000)
	for i := range text {
		text[i] = "abcd \n"[rng.IntN(6)]
	}
	bs := streamfile.DefaultBlockSize
	src := &s2Source{Reader: bytes.NewReader(text), data: [][]byte{text[:bs], text[bs : 2*bs], text[2*bs:]}}
	for _, d := range src.data {
		src.blocks = append(src.blocks, s2.EncodeBest(nil, d)) // not what the store would make
	}
	var body bytes.Buffer
	zw := stroomzip.NewWriterS2(&body)
	if _, err := zw.WritePart(stroomzip.Part{Meta: strings.NewReader("Feed:FUZZ\n"), Data: src}); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	rec := postZip(h, body.Bytes())
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Header().Get("Service-Error"))
	}
	id := strings.TrimSpace(rec.Body.String())
	rows, err := repo.ListStreams(context.Background(), meta.StreamFilter{ReceiptID: id})
	if err != nil || len(rows) != 1 {
		t.Fatalf("receipt %q: %d streams (%v)", id, len(rows), err)
	}
	r, err := st.Open(context.Background(), rows[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []byte
	i := 0
	err = r.Blocks(streamfile.Data, 0, func(data, block []byte) error {
		got = append(got, data...)
		if i < len(src.blocks) && !bytes.Equal(block, src.blocks[i]) {
			t.Errorf("block %d: stored as %d bytes of S2, not the %d it came in", i, len(block), len(src.blocks[i]))
		}
		i++
		return nil
	})
	if err != nil || !bytes.Equal(got, text) {
		t.Fatalf("stored %d bytes (%v), want the %d sent", len(got), err, len(text))
	}
	if i != len(src.blocks) {
		t.Errorf("%d blocks stored, want %d", i, len(src.blocks))
	}
}

// TestS2ZipEntryChecked: an S2 entry whose bytes do not match the zip's
// record of them (CRC, size) or whose S2 stream is damaged is refused as
// a corrupt compressed stream, and nothing is stored.
func TestS2ZipEntryChecked(t *testing.T) {
	h, repo, _ := benchHandler(t, 0)
	rng := rand.New(rand.NewPCG(10, 11))
	data := make([]byte, 20000)
	for i := range data {
		data[i] = "abcdefgh \n"[rng.IntN(10)]
	}
	var s2b bytes.Buffer
	sw := s2.NewWriter(&s2b, s2.WriterConcurrency(1))
	sw.Write(data)
	sw.Close()
	stream := s2b.Bytes()
	damaged := bytes.Clone(stream)
	damaged[len(damaged)-5] ^= 0x40
	sum := crc32.ChecksumIEEE(data)
	for _, tc := range []struct {
		name   string
		stream []byte
		crc    uint32
		size   int
		detail string
	}{
		{"CRC", stream, sum + 1, len(data), "checksum error"},
		{"declared shorter", stream, sum, len(data) - 1, "more bytes than its declared"},
		{"declared longer", stream, sum, len(data) + 1, "not its declared"},
		{"damaged S2 stream", damaged, sum, len(data), "corrupt S2 stream"},
		{"cut short", stream[:len(stream)-100], sum, len(data), "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body bytes.Buffer
			zw := zip.NewWriter(&body)
			w, err := zw.CreateRaw(&zip.FileHeader{Name: "1.dat", Method: stroomzip.MethodS2, CRC32: tc.crc,
				CompressedSize64: uint64(len(tc.stream)), UncompressedSize64: uint64(tc.size)})
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(w, bytes.NewReader(tc.stream))
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			rec := postZip(h, body.Bytes())
			se := rec.Header().Get("Service-Error")
			if rec.Code != http.StatusInternalServerError || rec.Header().Get("Service-Status") != "400" ||
				!strings.Contains(se, `zip entry "1.dat" is corrupt`) || !strings.Contains(se, tc.detail) {
				t.Errorf("HTTP %d, Service-Status %s, Service-Error %q; want 500, 400, the entry corrupt (%s)",
					rec.Code, rec.Header().Get("Service-Status"), se, tc.detail)
			}
			rows, err := repo.ListStreams(context.Background(), meta.StreamFilter{})
			if err != nil || len(rows) != 0 {
				t.Errorf("%d streams stored (%v), want none", len(rows), err)
			}
		})
	}

	// An entry with a data descriptor (as s2's writer through zip writes
	// them): refused when the descriptor's CRC is not the directory's,
	// as the zip's own reader refuses it.
	var body bytes.Buffer
	zw := stroomzip.NewWriterS2(&body)
	if _, err := zw.WritePart(stroomzip.Part{Data: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	dd := bytes.LastIndex(body.Bytes(), []byte("PK\x07\x08"))
	if dd < 0 {
		t.Fatal("no data descriptor in the zip")
	}
	if rec := postZip(h, body.Bytes()); rec.Code != http.StatusOK {
		t.Fatalf("intact zip with a data descriptor: HTTP %d %s", rec.Code, rec.Header().Get("Service-Error"))
	}
	bad := bytes.Clone(body.Bytes())
	bad[dd+4] ^= 1
	rec := postZip(h, bad)
	if se := rec.Header().Get("Service-Error"); rec.Header().Get("Service-Status") != "400" || !strings.Contains(se, "data descriptor's CRC") {
		t.Errorf("data descriptor with another CRC: HTTP %d, Service-Error %q", rec.Code, se)
	}
}
