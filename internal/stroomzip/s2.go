package stroomzip

import (
	"archive/zip"
	"bufio"
	"io"

	"github.com/klauspost/compress/s2"
)

// MethodS2 is the zip compression method of entries compressed with S2
// (github.com/klauspost/compress/s2, its framed stream format). It is
// weir's own: the zip specification assigns no number to S2, and 0x5332
// ("S2") is not among those it assigns. Only a receiver that announces it
// in S2Header is sent such entries: the reference system cannot read
// them.
//
// A weir proxy forwarding to weir compresses with S2 because deflate
// costs far more CPU on both sides: on log text deflate's fastest level
// compresses at about 190 MB/s and inflates at 250, S2 at about 420 and
// 1,100 (docs/performance.md), for a zip about a third larger.
const MethodS2 uint16 = 0x5332

// S2Header is the response header with which a /datafeed says it reads
// zips whose entries use MethodS2; its value lists such methods ("s2").
const S2Header = "Weir-Zip-Methods"

// S2HeaderValue is S2Header's value.
const S2HeaderValue = "s2"

// s2BlockSize is the S2 block size of the entries weir writes, and the
// largest it reads: a reader holds about twice its block size while it
// reads an entry, so a sender's zip cannot make a receiver allocate more
// than about half a megabyte per reader (S2's own limit is 4 MiB).
const s2BlockSize = 256 << 10

// NewWriterS2 starts a zip whose entries are compressed with S2
// (MethodS2), for a receiver that reads them (it sends S2Header).
func NewWriterS2(w io.Writer) *Writer {
	bw := bufio.NewWriterSize(w, outBuffer)
	zw := zip.NewWriter(bw)
	// One compressor serves every entry (zip closes one before the next
	// starts); concurrency 1 compresses on the writer's goroutine, so an
	// entry costs no goroutines.
	var sw *s2.Writer
	zw.RegisterCompressor(MethodS2, func(out io.Writer) (io.WriteCloser, error) {
		if sw == nil {
			sw = s2.NewWriter(out, s2.WriterConcurrency(1), s2.WriterBlockSize(s2BlockSize))
		} else {
			sw.Reset(out)
		}
		return sw, nil
	})
	return &Writer{bw: bw, zw: zw, method: MethodS2, buf: make([]byte, 32<<10)}
}

// RegisterS2 lets zr read entries compressed with MethodS2. Entries are
// read one at a time, so one decompressor serves them all (should two
// ever be open at once, the second gets its own).
func RegisterS2(zr *zip.Reader) {
	spare := &reusedS2{}
	zr.RegisterDecompressor(MethodS2, func(r io.Reader) io.ReadCloser {
		if spare.inUse {
			return io.NopCloser(newS2Reader(r))
		}
		if spare.r == nil {
			spare.r = newS2Reader(r)
		} else {
			spare.r.Reset(r)
		}
		spare.inUse = true
		return spare
	})
}

func newS2Reader(r io.Reader) *s2.Reader {
	return s2.NewReader(r, s2.ReaderMaxBlockSize(s2BlockSize))
}

// reusedS2 is an S2 reader handed to one zip entry at a time.
type reusedS2 struct {
	r     *s2.Reader
	inUse bool
}

func (r *reusedS2) Read(p []byte) (int, error) { return r.r.Read(p) }

func (r *reusedS2) Close() error {
	r.inUse = false
	return nil
}
