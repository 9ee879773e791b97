package streamfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestChannelString(t *testing.T) {
	for ch, want := range map[Channel]string{Data: "Data", Context: "Context", Meta: "Meta Data", 7: "Channel(7)"} {
		if got := ch.String(); got != want {
			t.Errorf("Channel(%d).String() = %q, want %q", uint8(ch), got, want)
		}
	}
}

// roundTripSections is the stream the round-trip tests write, in write order:
// interleaved channels and parts, parts out of order, a part with nothing at
// all (4), empty and single-byte sections, and every size around one block.
func roundTripSections(bs int) []section {
	mixed := make([]byte, 0, 2<<20)
	for i := uint64(0); len(mixed) < 2<<20; i++ {
		if i%2 == 0 {
			mixed = append(mixed, randomBytes(100+i, 100_000)...)
		} else {
			mixed = append(mixed, logBytes(100+i, 100_000)...)
		}
	}
	return []section{
		{Data, 0, []byte{}},
		{Data, 1, logBytes(1, bs-1)},
		{Meta, 0, []byte("x")},
		{Data, 2, randomBytes(2, 3<<20)},
		{Context, 1, randomBytes(3, bs)},
		{Meta, 1, logBytes(4, bs+1)},
		{Data, 5, []byte("part five\n")},
		{Meta, 2, logBytes(5, 3<<20+12345)},
		{Context, 3, mixed},
		{Context, 0, logBytes(6, 1)},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, comp := range []Compression{S2, Zstd, None} {
		t.Run(fmt.Sprintf("compression=%d", comp), func(t *testing.T) { testRoundTrip(t, comp) })
	}
}

func testRoundTrip(t *testing.T, comp Compression) {
	c := newTestCodecFor(t, comp)
	for _, bs := range []int{0, 4093, 64 << 10} {
		t.Run(fmt.Sprintf("blocksize=%d", bs), func(t *testing.T) {
			effective := bs
			if effective == 0 {
				effective = DefaultBlockSize
			}
			secs := roundTripSections(effective)
			path, w := writeStream(t, c, WriterOptions{BlockSize: bs}, secs)

			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if w.Size() != st.Size() {
				t.Errorf("Writer.Size() = %d, file has %d bytes", w.Size(), st.Size())
			}
			if w.Parts() != 6 {
				t.Errorf("Writer.Parts() = %d, want 6", w.Parts())
			}
			r := openStream(t, c, path)
			if r.Parts() != 6 {
				t.Errorf("Reader.Parts() = %d, want 6", r.Parts())
			}

			want := map[[2]int][]byte{}
			for _, s := range secs {
				want[[2]int{int(s.ch), s.part}] = s.data
			}
			for part := range 6 {
				for ch := Data; ch <= Meta; ch++ {
					data, ok := want[[2]int{int(ch), part}]
					if r.Has(ch, part) != ok {
						t.Errorf("Has(%s, %d) = %v, want %v", ch, part, !ok, ok)
					}
					if got := r.Size(ch, part); got != int64(len(data)) {
						t.Errorf("Size(%s, %d) = %d, want %d", ch, part, got, len(data))
					}
					if got := w.SectionSize(ch, part); got != int64(len(data)) {
						t.Errorf("SectionSize(%s, %d) = %d, want %d", ch, part, got, len(data))
					}
					if !ok {
						if _, err := r.Section(ch, part); !errors.Is(err, fs.ErrNotExist) {
							t.Errorf("Section(%s, %d) of absent section: err = %v, want fs.ErrNotExist", ch, part, err)
						}
						continue
					}
					checkSection(t, r, ch, part, data, effective)
				}
			}
		})
	}
}

// checkSection reads a section back sequentially and at random ranges.
func checkSection(t *testing.T, r *Reader, ch Channel, part int, want []byte, bs int) {
	t.Helper()
	sec, err := r.Section(ch, part)
	if err != nil {
		t.Fatalf("Section(%s, %d): %v", ch, part, err)
	}
	var got bytes.Buffer
	if _, err := io.Copy(&got, io.NewSectionReader(sec, 0, sec.Size())); err != nil {
		t.Fatalf("io.Copy(%s, %d): %v", ch, part, err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("io.Copy(%s, %d): %d bytes differ from the %d written", ch, part, got.Len(), len(want))
	}

	rng := rand.New(rand.NewPCG(uint64(part), uint64(ch)))
	size := int64(len(want))
	buf := make([]byte, 3*bs+10)
	for i := range 200 {
		var off int64
		switch {
		case i%4 == 0 && size > 0: // start on a block boundary
			off = int64(rng.IntN(int(size)/bs+1)) * int64(bs)
		case i%4 == 1 && size > 0: // end just past a block boundary
			off = max(0, int64(rng.IntN(int(size)/bs+1))*int64(bs)-int64(rng.IntN(3)))
		default:
			off = rng.Int64N(size + 2)
		}
		n := rng.IntN(len(buf) + 1)
		if i%5 == 0 {
			n = rng.IntN(16)
		}
		p := buf[:n]
		m, err := sec.ReadAt(p, off)
		wantN := int(max(0, min(int64(n), size-off)))
		if m != wantN {
			t.Fatalf("ReadAt(%s, %d, len %d, off %d) = %d bytes, want %d (err %v)", ch, part, n, off, m, wantN, err)
		}
		if wantN < n && err != io.EOF {
			t.Fatalf("ReadAt(%s, %d, len %d, off %d) past end: err = %v, want io.EOF", ch, part, n, off, err)
		}
		if wantN == n && err != nil && !(err == io.EOF && off+int64(n) >= size) {
			t.Fatalf("ReadAt(%s, %d, len %d, off %d): %v", ch, part, n, off, err)
		}
		if wantN > 0 && !bytes.Equal(p[:m], want[off:off+int64(m)]) {
			t.Fatalf("ReadAt(%s, %d, len %d, off %d): content differs", ch, part, n, off)
		}
	}
}

// countingReaderAt counts reads of the underlying file: one per block read.
type countingReaderAt struct {
	ra    io.ReaderAt
	reads atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.ra.ReadAt(p, off)
}

func TestSequentialReadInflatesEachBlockOnce(t *testing.T) {
	c := newTestCodec(t)
	const bs = 50_000
	data := logBytes(7, 20*bs+777)
	path, _ := writeStream(t, c, WriterOptions{BlockSize: bs}, []section{{Data, 0, data}})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	cra := &countingReaderAt{ra: f}
	r, err := NewReader(cra, st.Size(), c)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := r.Section(Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, bufSize := range []int{1000, 32 << 10, bs + 1} {
		cra.reads.Store(0)
		var got bytes.Buffer
		// A struct wrapper hides WriterTo/ReaderFrom so the buffer size is ours.
		if _, err := io.CopyBuffer(struct{ io.Writer }{&got}, struct{ io.Reader }{io.NewSectionReader(sec, 0, sec.Size())}, make([]byte, bufSize)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("buffer %d: content differs", bufSize)
		}
		if n := cra.reads.Load(); n != 21 {
			t.Errorf("buffer %d: %d block reads for 21 blocks, want each block read once", bufSize, n)
		}
	}
}

func TestConcurrentReadAt(t *testing.T) {
	c := newTestCodec(t)
	const bs = 8 << 10
	data := logBytes(8, 40*bs+5)
	path, _ := writeStream(t, c, WriterOptions{BlockSize: bs}, []section{{Meta, 0, data}})
	r := openStream(t, c, path)
	sec, err := r.Section(Meta, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			p := make([]byte, 3*bs)
			for range 300 {
				off := rng.Int64N(int64(len(data)))
				n := rng.IntN(len(p)) + 1
				// Mostly small reads so goroutines fight over the cache.
				if rng.IntN(4) != 0 {
					n = rng.IntN(100) + 1
				}
				m, err := sec.ReadAt(p[:n], off)
				if err != nil && err != io.EOF {
					errs <- err
					return
				}
				if !bytes.Equal(p[:m], data[off:off+int64(m)]) {
					errs <- fmt.Errorf("goroutine %d: ReadAt(len %d, off %d) content differs", g, n, off)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEmptyStream(t *testing.T) {
	c := newTestCodec(t)
	path, w := writeStream(t, c, WriterOptions{}, nil)
	if w.Parts() != 0 || w.Size() != headerLen+indexHeaderLen+trailerLen {
		t.Errorf("empty stream: Parts %d, Size %d", w.Parts(), w.Size())
	}
	r := openStream(t, c, path)
	if r.Parts() != 0 || r.Has(Data, 0) || r.Size(Data, 0) != 0 {
		t.Errorf("empty stream read back: Parts %d, Has %v, Size %d", r.Parts(), r.Has(Data, 0), r.Size(Data, 0))
	}
	if _, err := r.Section(Data, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Section on empty stream: err = %v, want fs.ErrNotExist", err)
	}
}

// TestIncompressibleStoredRaw checks random data costs only the block headers.
func TestIncompressibleStoredRaw(t *testing.T) {
	c := newTestCodec(t)
	data := randomBytes(11, 1<<20)
	path, w := writeStream(t, c, WriterOptions{BlockSize: 64 << 10}, []section{{Data, 0, data}})
	overhead := w.Size() - int64(len(data))
	if max := int64(headerLen + 16*blockHeaderLen + indexHeaderLen + 3*sectionRecLen + 16*blockRecLen + trailerLen); overhead != max {
		t.Errorf("random 1 MiB stored in %d bytes: overhead %d, want %d (raw blocks)", w.Size(), overhead, max)
	}
	r := openStream(t, c, path)
	checkSection(t, r, Data, 0, data, 64<<10)
}

// TestSmallBlocksRaw: with the codec's defaults, a block under
// minCompressSize is stored raw (zstd's fixed cost is not worth it there)
// and a larger one of the same text compressed; both read back.
func TestSmallBlocksRaw(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	text := bytes.Repeat([]byte("2024-03-01T12:34:56Z host=web-01 level=INFO msg=ok\n"), 400)
	small := text[:minCompressSize-1]
	path, _ := writeStream(t, c, WriterOptions{}, []section{{Data, 0, small}, {Meta, 0, text}})
	r := openStream(t, c, path)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ch   Channel
		want uint8
	}{{Data, encRaw}, {Meta, encS2}} {
		e := r.sections[sectionKey(tc.ch, 0)].blocks[0]
		if got := file[e.fileOffset+1]; got != tc.want {
			t.Errorf("%s block of %d bytes has encoding %d, want %d", tc.ch, e.ulen, got, tc.want)
		}
	}
	checkSection(t, r, Data, 0, small, DefaultBlockSize)
	checkSection(t, r, Meta, 0, text, DefaultBlockSize)
}

func TestWriterErrors(t *testing.T) {
	c := newTestCodec(t)
	mustOpen := func(w *Writer, ch Channel, part int) io.WriteCloser {
		t.Helper()
		sw, err := w.Open(ch, part)
		if err != nil {
			t.Fatalf("Open(%s, %d): %v", ch, part, err)
		}
		return sw
	}
	wantErr := func(err error, what, substr string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), substr) {
			t.Errorf("%s: err = %v, want one mentioning %q", what, err, substr)
		}
	}

	for _, bs := range []int{-1, maxBlockSize + 1} {
		_, err := NewWriter(io.Discard, c, WriterOptions{BlockSize: bs})
		wantErr(err, fmt.Sprintf("NewWriter(BlockSize %d)", bs), "block size")
	}

	w, err := NewWriter(io.Discard, c, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Open(3, 0)
	wantErr(err, "Open(invalid channel)", "invalid channel")
	_, err = w.Open(Data, -1)
	wantErr(err, "Open(part -1)", "part outside")
	_, err = w.Open(Data, maxParts)
	wantErr(err, "Open(part maxParts)", "part outside")

	sw := mustOpen(w, Data, 0)
	_, err = w.Open(Meta, 0)
	wantErr(err, "two sections open at once", "Data part 0 is still open")
	wantErr(w.Close(), "Close with a section open", "Data part 0 is still open")
	if _, err := sw.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(sw.Close(), "section closed twice", "already closed")
	_, err = sw.Write([]byte("x"))
	wantErr(err, "write after section close", "section is closed")
	_, err = w.Open(Data, 0)
	wantErr(err, "open the same section twice", "already written")
	mustOpen(w, Meta, 0).Close()
	if err := w.Close(); err != nil {
		t.Fatalf("Close after closing the open section: %v", err)
	}
	wantErr(w.Close(), "Writer closed twice", "already closed")
	_, err = w.Open(Context, 0)
	wantErr(err, "Open after Close", "writer is closed")
}

// failingWriter accepts limit bytes, then fails.
type failingWriter struct{ limit int }

// errDiskFull is a comparable value type, so errors.Is matches it without a
// package-level sentinel variable.
type errDiskFull struct{}

func (errDiskFull) Error() string { return "disk full" }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n := f.limit
		f.limit = 0
		return n, errDiskFull{}
	}
	f.limit -= len(p)
	return len(p), nil
}

func TestWriterFailureIsSticky(t *testing.T) {
	c := newTestCodec(t)
	if _, err := NewWriter(&failingWriter{limit: 10}, c, WriterOptions{}); !errors.Is(err, errDiskFull{}) {
		t.Fatalf("NewWriter on failing writer: err = %v, want errDiskFull", err)
	}
	w, err := NewWriter(&failingWriter{limit: 5000}, c, WriterOptions{BlockSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := w.Open(Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sw.Write(randomBytes(1, 100_000))
	if !errors.Is(err, errDiskFull{}) {
		t.Fatalf("Write past the failure: err = %v, want errDiskFull", err)
	}
	if _, err := sw.Write([]byte("more")); !errors.Is(err, errDiskFull{}) {
		t.Errorf("Write after failure: err = %v, want errDiskFull", err)
	}
	if err := sw.Close(); !errors.Is(err, errDiskFull{}) {
		t.Errorf("section Close after failure: err = %v, want errDiskFull", err)
	}
	if _, err := w.Open(Meta, 0); !errors.Is(err, errDiskFull{}) {
		t.Errorf("Open after failure: err = %v, want errDiskFull", err)
	}
	if err := w.Close(); !errors.Is(err, errDiskFull{}) {
		t.Errorf("Close after failure: err = %v, want errDiskFull", err)
	}
}

func TestReaderAbsentAndInvalid(t *testing.T) {
	c := newTestCodec(t)
	path, _ := writeStream(t, c, WriterOptions{}, []section{{Data, 1, []byte("hello")}})
	r := openStream(t, c, path)
	for _, tc := range []struct {
		ch   Channel
		part int
	}{{Data, 0}, {Meta, 1}, {Data, 2}, {Data, -1}, {5, 1}} {
		if r.Has(tc.ch, tc.part) || r.Size(tc.ch, tc.part) != 0 {
			t.Errorf("Has/Size(%s, %d) report a section that was never written", tc.ch, tc.part)
		}
		if _, err := r.Section(tc.ch, tc.part); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Section(%s, %d): err = %v, want fs.ErrNotExist", tc.ch, tc.part, err)
		}
	}
	sec, err := r.Section(Data, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sec.ReadAt(make([]byte, 1), -1); err == nil {
		t.Error("ReadAt at negative offset succeeded")
	}
	if n, err := sec.ReadAt(make([]byte, 1), 5); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at end = %d, %v; want 0, io.EOF", n, err)
	}
}
