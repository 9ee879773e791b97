package stroomzip

import (
	"archive/zip"
	"bufio"
	"errors"
	"io"
	"sync"

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
// 1,100 (docs/performance.md), for a bigger zip.
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

// The S2 writers and readers of every zip, kept between entries and
// between zips: each holds buffers of about twice s2BlockSize (a reader
// about 530 KiB), which a proxy sending an aggregate a second, or a main
// service receiving them, would otherwise allocate for every one.
var (
	s2Writers = sync.Pool{New: func() any {
		return s2.NewWriter(nil, s2.WriterConcurrency(1), s2.WriterBlockSize(s2BlockSize))
	}}
	s2Readers = sync.Pool{New: func() any {
		return s2.NewReader(nil, s2.ReaderMaxBlockSize(s2BlockSize))
	}}
)

// NewWriterS2 starts a zip whose entries are compressed with S2
// (MethodS2), for a receiver that reads them (it sends S2Header).
func NewWriterS2(w io.Writer) *Writer {
	bw := bufio.NewWriterSize(w, outBuffer)
	zw := zip.NewWriter(bw)
	// Concurrency 1 compresses on the writer's goroutine, so an entry
	// costs no goroutines.
	zw.RegisterCompressor(MethodS2, func(out io.Writer) (io.WriteCloser, error) {
		sw := s2Writers.Get().(*s2.Writer)
		sw.Reset(out)
		return pooledS2Writer{sw}, nil
	})
	return &Writer{bw: bw, zw: zw, method: MethodS2, buf: make([]byte, 32<<10)}
}

// pooledS2Writer goes back to the pool when its entry is closed.
type pooledS2Writer struct{ *s2.Writer }

func (w pooledS2Writer) Close() error {
	err := w.Writer.Close()
	w.Writer.Reset(nil)
	s2Writers.Put(w.Writer)
	return err
}

// RegisterS2 lets zr read entries compressed with MethodS2.
func RegisterS2(zr *zip.Reader) {
	zr.RegisterDecompressor(MethodS2, func(r io.Reader) io.ReadCloser {
		sr := s2Readers.Get().(*s2.Reader)
		sr.Reset(r)
		return &pooledS2Reader{r: sr}
	})
}

// pooledS2Reader goes back to the pool when its entry is closed.
type pooledS2Reader struct{ r *s2.Reader }

func (p *pooledS2Reader) Read(b []byte) (int, error) {
	if p.r == nil {
		return 0, errors.New("s2: read after close")
	}
	return p.r.Read(b)
}

func (p *pooledS2Reader) Close() error {
	if p.r != nil {
		p.r.Reset(nil)
		s2Readers.Put(p.r)
		p.r = nil
	}
	return nil
}
