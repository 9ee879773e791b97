package stroomzip

import (
	"archive/zip"
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"github.com/klauspost/compress/flate"
)

// PartName is the canonical entry name of kind k of part n (from 1), as
// the reference system's proxy writes them: 0000000001.meta,
// 0000000001.ctx, 0000000001.dat.
func PartName(n int, k Kind) string {
	ext := [...]string{Data: "dat", Context: "ctx", Meta: "meta", Manifest: "mf"}[k]
	return fmt.Sprintf("%010d.%s", n, ext)
}

// Part is one part to write. Meta and Context are optional; a nil Data
// writes an empty data entry, since a part always has one.
type Part struct {
	Meta    io.Reader
	Context io.Reader
	Data    io.Reader
	// Modified is the entries' modification time; zero means now.
	Modified time.Time
}

// Writer writes a zip in the Stroom zip format that /datafeed (here or on
// the reference system) accepts with Compression: ZIP. Each part's entries
// are written meta first, so that a reader that streams the zip knows a
// part's attributes (its Feed) before its data, as the reference system's
// stream reader requires. Every entry is DEFLATE (or STORED with its sizes
// up front, see NewWriterLevel): a streaming reader cannot find the end of
// a STORED entry whose sizes follow its data (Go writes the sizes in a
// data descriptor after each entry), but it can find the end of a deflate
// stream. Zip64 records are added when sizes need them. NewWriterS2's
// entries are S2 instead, for weir's receivers alone, which read the
// central directory.
type Writer struct {
	bw     *bufio.Writer // under zw: the zip reaches w in large writes
	zw     *zip.Writer
	stored bool   // level 0: entries STORED, sizes and CRC in their local headers
	method uint16 // of the entries not stored: zip.Deflate, or MethodS2
	parts  int
	bytes  int64  // uncompressed bytes written to entries
	buf    []byte // copy buffer of every entry (io.Copy would allocate one per entry)
	whole  []byte // a stored entry read whole, for its CRC and then its bytes
	enc    []byte // a block compressed for an S2 entry of Blocks
}

// outBuffer is the size of the writes the zip reaches its writer in. A
// proxy's forward goes through a pipe into a chunked request: each write
// becomes at least a chunk and a system call, and zip's own buffer would
// be 4 KiB (zip writes into this one instead: bufio reuses a writer that
// is big enough).
const outBuffer = 64 << 10

// maxWhole is the largest stored entry read once into memory (its CRC
// computed there, then its bytes written); a larger one is read twice.
// Most forwarded posts are far smaller, and reading a store section twice
// means decompressing it twice.
const maxWhole = 1 << 20

// NewWriter starts a zip on w. Close must be called to write its directory.
func NewWriter(w io.Writer) *Writer { return NewWriterLevel(w, flate.DefaultCompression) }

// NewWriterLevel starts a zip whose entries are deflated at level (a
// compress/flate level: flate.BestSpeed for data in transit, where
// compression time matters more than size). Level 0 stores entries
// uncompressed, for links where CPU costs more than bytes: an entry whose
// reader can seek (the store's sections can) has its CRC and size
// computed before it is written (read into memory when it is at most
// maxWhole bytes, else read twice), so that its local header carries them
// and a streaming reader finds its end; others, and entries too large for
// a local header's 32-bit sizes, are deflated as usual (at level 0, in
// uncompressed deflate blocks).
func NewWriterLevel(w io.Writer, level int) *Writer {
	bw := bufio.NewWriterSize(w, outBuffer)
	zw := zip.NewWriter(bw)
	// klauspost's deflate is several times faster than the standard
	// library's at a similar ratio; exports are dominated by compression.
	// Entries are written one at a time (zip closes one before the next
	// starts), so one compressor serves them all: a new one per entry
	// allocated about 1 MiB, which dominated a proxy's forwarding of
	// aggregates of small posts.
	var fw *flate.Writer
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		if fw == nil {
			var err error
			fw, err = flate.NewWriter(out, level)
			return fw, err
		}
		fw.Reset(out)
		return fw, nil
	})
	return &Writer{bw: bw, zw: zw, stored: level == 0, method: zip.Deflate, buf: make([]byte, 32<<10)}
}

// WritePart writes the next part and returns its number (from 1).
func (w *Writer) WritePart(p Part) (int, error) {
	n := w.parts + 1
	mod := p.Modified
	if mod.IsZero() {
		mod = time.Now()
	}
	data := p.Data
	if data == nil {
		data = eof{}
	}
	for _, e := range []struct {
		kind Kind
		r    io.Reader
	}{{Meta, p.Meta}, {Context, p.Context}, {Data, data}} {
		if e.r == nil {
			continue
		}
		name := PartName(n, e.kind)
		c, err := w.entry(name, mod, e.r)
		w.bytes += c
		if err != nil {
			return 0, fmt.Errorf("zip entry %s: %w", name, err)
		}
	}
	w.parts = n
	return n, nil
}

// entry writes one entry with r's content: STORED with its CRC and size
// up front when the writer stores and r can be read twice, else DEFLATE
// (or S2, for a writer of NewWriterS2, from r's S2 blocks when it has
// them).
func (w *Writer) entry(name string, mod time.Time, r io.Reader) (int64, error) {
	rs, ok := r.(io.ReadSeeker)
	if b, isBlocks := r.(Blocks); isBlocks && w.method == MethodS2 && blocksFit(b) {
		n, err := w.s2Blocks(name, mod, b)
		if err != errTooLarge || !ok {
			return n, err
		}
		// Larger than its limits said: compressed as any reader's.
		if _, err := rs.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
	}
	if !w.stored || !ok {
		ew, err := w.zw.CreateHeader(&zip.FileHeader{Name: name, Method: w.method, Modified: mod})
		if err != nil {
			return 0, err
		}
		return io.CopyBuffer(ew, r, w.buf)
	}
	fh := &zip.FileHeader{Name: name, Method: zip.Store}
	fh.SetModTime(mod) //nolint:staticcheck // CreateRaw takes the MS-DOS time fields only
	// An entry is the reader's whole content, from its start, however it
	// is read.
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if sz, ok := r.(interface{ Size() int64 }); ok && sz.Size() >= 0 && sz.Size() <= maxWhole {
		b, err := readWhole(rs, w.whole[:0], sz.Size(), maxWhole)
		w.whole = b[:0]
		if err == nil {
			fh.CRC32 = crc32.ChecksumIEEE(b)
			fh.CompressedSize64, fh.UncompressedSize64 = uint64(len(b)), uint64(len(b))
			ew, err := w.zw.CreateRaw(fh)
			if err != nil {
				return 0, err
			}
			n, err := ew.Write(b)
			return int64(n), err
		}
		if err != errTooLarge {
			return 0, err
		}
		// Larger than it said: read it twice after all.
		if _, err := rs.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
	}
	h := crc32.NewIEEE()
	n, err := io.CopyBuffer(h, rs, w.buf)
	if err != nil {
		return 0, err
	}
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if n >= maxStored {
		// A local header's sizes are 32 bits: a larger entry's need a
		// zip64 extra field there, which archive/zip does not write in a
		// local header, and a streaming reader would take the 32-bit
		// marker for the size. Deflate it instead (at level 0 flate
		// writes stored blocks, so this costs no compression): a streaming
		// reader finds the end of a deflate stream, and the zip64 sizes
		// follow it in the data descriptor.
		ew, err := w.zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: mod})
		if err != nil {
			return 0, err
		}
		return io.CopyBuffer(ew, rs, w.buf)
	}
	fh.CRC32 = h.Sum32()
	fh.CompressedSize64, fh.UncompressedSize64 = uint64(n), uint64(n)
	ew, err := w.zw.CreateRaw(fh)
	if err != nil {
		return 0, err
	}
	c, err := io.CopyBuffer(ew, rs, w.buf)
	if err == nil && c != n {
		err = fmt.Errorf("entry changed while it was written: %d bytes, then %d", n, c)
	}
	return c, err
}

var errTooLarge = fmt.Errorf("entry larger than %d bytes", maxWhole)

// maxStored is the size from which an entry is not stored with its sizes
// in its local header (0xFFFFFFFF there means "see the zip64 extra field").
const maxStored = 1<<32 - 1

// readWhole reads r to its end into b (grown as needed; size is what r
// says it holds), failing with errTooLarge beyond limit bytes.
func readWhole(r io.Reader, b []byte, size int64, limit int) ([]byte, error) {
	b = slices.Grow(b, int(min(size, int64(limit)))+1) // +1: EOF is seen without growing
	for {
		if len(b) > limit {
			return b, errTooLarge
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):min(cap(b), limit+1)])
		b = b[:len(b)+n]
		if err == io.EOF {
			if len(b) > limit {
				return b, errTooLarge
			}
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// Parts is the number of parts written.
func (w *Writer) Parts() int { return w.parts }

// Bytes is the number of uncompressed bytes written to entries so far.
func (w *Writer) Bytes() int64 { return w.bytes }

// Close writes the zip's central directory. It does not close the
// underlying writer.
func (w *Writer) Close() error {
	if err := w.zw.Close(); err != nil {
		return fmt.Errorf("finish zip: %w", err)
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("finish zip: %w", err)
	}
	return nil
}

type eof struct{}

func (eof) Read([]byte) (int, error) { return 0, io.EOF }
