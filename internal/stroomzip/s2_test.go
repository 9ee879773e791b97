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

// testBlocks is a Blocks source: its blocks, with the S2 block of those
// that have one, readable as a whole too (for a writer that does not take
// them block by block).
type testBlocks struct {
	*bytes.Reader
	data, s2 [][]byte
	maxBlock int
	claim    int64 // what BlockLimits says they take, if not 0
	walked   bool
	err      error
}

func newTestBlocks(maxBlock int, data, s2blocks [][]byte) *testBlocks {
	return &testBlocks{Reader: bytes.NewReader(bytes.Join(data, nil)), data: data, s2: s2blocks, maxBlock: maxBlock}
}

func (b *testBlocks) EachBlock(fn func(data, s2block []byte) error) error {
	b.walked = true
	for i, d := range b.data {
		if b.err != nil && i == len(b.data)-1 {
			return b.err
		}
		if err := fn(d, b.s2[i]); err != nil {
			return err
		}
	}
	return nil
}

func (b *testBlocks) BlockLimits() (int, int64) {
	if b.claim != 0 {
		return b.maxBlock, b.claim
	}
	var n int64
	for i, d := range b.data {
		if b.s2[i] != nil {
			n += int64(len(b.s2[i]))
		} else {
			n += int64(len(d))
		}
	}
	return b.maxBlock, n
}

// lying makes b's BlockLimits say its blocks take 1000 bytes.
func lying(b *testBlocks) *testBlocks { b.claim = 1000; return b }

// TestWriterS2Blocks: a zip of NewWriterS2 frames the S2 blocks of a
// Blocks source as they are (their bytes are in the entry), compresses
// the blocks that have none, and reads back exactly with its CRC and
// sizes; a source whose blocks a receiver would refuse, or too large to
// build in memory (also when found so only while it is read), is
// compressed as any reader; a source's error fails the part.
func TestWriterS2Blocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	text := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcd \n"[rng.IntN(6)]
		}
		return b
	}
	noise := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	// EncodeBest's blocks differ from what the writer's own compression
	// makes of the same bytes, so finding them shows they were passed on.
	enc := func(b []byte) []byte { return s2.EncodeBest(nil, b) }
	t1, t2, t3 := text(s2BlockSize), text(s2BlockSize), text(5000)
	small, random := text(300), noise(100<<10)
	for _, tc := range []struct {
		name    string
		src     *testBlocks
		passed  bool     // taken block by block
		inEntry [][]byte // bytes the entry holds as they are
	}{
		{"S2 blocks", newTestBlocks(s2BlockSize, [][]byte{t1, t2, t3}, [][]byte{enc(t1), enc(t2), enc(t3)}), true, [][]byte{enc(t1), enc(t2), enc(t3)}},
		{"blocks without S2", newTestBlocks(s2BlockSize, [][]byte{small, random, t3}, [][]byte{nil, nil, enc(t3)}), true, [][]byte{random, enc(t3)}},
		{"no blocks", newTestBlocks(s2BlockSize, nil, nil), true, nil},
		{"blocks larger than a receiver reads", newTestBlocks(2*s2BlockSize, [][]byte{t3}, [][]byte{enc(t3)}), false, nil},
		{"larger than an entry built in memory", newTestBlocks(s2BlockSize, [][]byte{random, noise(maxWhole)}, [][]byte{nil, nil}), false, nil},
		{"larger than its limits said", lying(newTestBlocks(s2BlockSize, [][]byte{random, noise(s2BlockSize), noise(s2BlockSize), noise(s2BlockSize), noise(s2BlockSize)}, make([][]byte, 5))), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriterS2(&buf)
			if _, err := w.WritePart(Part{Data: tc.src}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.src.walked != tc.passed {
				t.Errorf("taken block by block: %v, want %v", tc.src.walked, tc.passed)
			}
			want := bytes.Join(tc.src.data, nil)
			if w.Bytes() != int64(len(want)) {
				t.Errorf("Bytes() = %d, want %d", w.Bytes(), len(want))
			}
			zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			if err != nil {
				t.Fatal(err)
			}
			RegisterS2(zr)
			f := zr.File[0]
			if f.Method != MethodS2 || f.UncompressedSize64 != uint64(len(want)) {
				t.Errorf("entry method %d, %d bytes; want %d, %d", f.Method, f.UncompressedSize64, MethodS2, len(want))
			}
			raw, err := f.OpenRaw()
			if err != nil {
				t.Fatal(err)
			}
			rawBytes, err := io.ReadAll(raw)
			if err != nil {
				t.Fatal(err)
			}
			for i, b := range tc.inEntry {
				if !bytes.Contains(rawBytes, b) {
					t.Errorf("block %d (%d bytes) is not in the entry as it was", i, len(b))
				}
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc) // checks the chunks' and the zip's CRCs
			rc.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("read back %d bytes (%v), want %d", len(got), err, len(want))
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		src := newTestBlocks(s2BlockSize, [][]byte{t1, t3}, [][]byte{enc(t1), nil})
		src.err = errors.New("disk on fire")
		w := NewWriterS2(io.Discard)
		if _, err := w.WritePart(Part{Data: src}); !errors.Is(err, src.err) {
			t.Errorf("WritePart: %v, want the source's error", err)
		}
	})
}
