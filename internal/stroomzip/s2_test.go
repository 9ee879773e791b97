package stroomzip

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
)

// TestWriterS2RoundTrip: a zip of NewWriterS2 has every entry in
// MethodS2, reads back exactly through RegisterS2 (several blocks, an
// empty entry), and is refused by a reader without it.
func TestWriterS2RoundTrip(t *testing.T) {
	big := make([]byte, 3<<20) // twelve blocks
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte('a' + rng.IntN(4))
	}
	want := map[string][]byte{
		"0000000001.meta": []byte("Feed:FEED-A\n"), "0000000001.ctx": []byte("context"), "0000000001.dat": []byte("data 1\n"),
		"0000000002.dat": big, "0000000003.dat": {},
	}
	var buf bytes.Buffer
	w := NewWriterS2(&buf)
	for _, p := range []Part{
		{Meta: bytes.NewReader(want["0000000001.meta"]), Context: bytes.NewReader(want["0000000001.ctx"]), Data: bytes.NewReader(want["0000000001.dat"])},
		{Data: bytes.NewReader(big)},
		{},
	} {
		if _, err := w.WritePart(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > len(big)/2 {
		t.Errorf("the zip is %d bytes for %d of data: not compressed", buf.Len(), len(big))
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if len(zr.File) != len(want) {
		t.Fatalf("%d entries, want %d", len(zr.File), len(want))
	}
	if _, err := zr.File[0].Open(); !errors.Is(err, zip.ErrAlgorithm) {
		t.Errorf("opened without RegisterS2: %v, want zip.ErrAlgorithm", err)
	}
	RegisterS2(zr)
	for _, f := range zr.File {
		if f.Method != MethodS2 {
			t.Errorf("%s: method %d, want %d", f.Name, f.Method, MethodS2)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(b, want[f.Name]) {
			t.Errorf("%s: %d bytes (%v), want %d", f.Name, len(b), err, len(want[f.Name]))
		}
	}
}

// TestRegisterS2BlockBound: an entry whose S2 blocks are larger than
// weir writes (up to S2's own 4 MiB) is refused as corrupt rather than
// read with buffers of that size.
func TestRegisterS2BlockBound(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(MethodS2, func(out io.Writer) (io.WriteCloser, error) {
		return s2.NewWriter(out, s2.WriterBlockSize(4<<20), s2.WriterUncompressed()), nil
	})
	ew, err := zw.CreateHeader(&zip.FileHeader{Name: "0000000001.dat", Method: MethodS2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ew.Write(make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	RegisterS2(zr)
	rc, err := zr.File[0].Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if n, err := io.Copy(io.Discard, rc); err == nil {
		t.Errorf("read %d bytes of an entry with 4 MiB blocks; want an error", n)
	}
}
