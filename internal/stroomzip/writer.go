package stroomzip

import (
	"archive/zip"
	"fmt"
	"hash/crc32"
	"io"
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
// stream reader requires. Every entry is DEFLATE: a streaming reader
// cannot find the end of a STORED entry whose sizes follow its data (Go
// writes the sizes in a data descriptor after each entry), but it can find
// the end of a deflate stream. Zip64 records are added when sizes need them.
type Writer struct {
	zw     *zip.Writer
	stored bool // level 0: entries STORED, sizes and CRC in their local headers
	parts  int
	bytes  int64 // uncompressed bytes written to entries
}

// NewWriter starts a zip on w. Close must be called to write its directory.
func NewWriter(w io.Writer) *Writer { return NewWriterLevel(w, flate.DefaultCompression) }

// NewWriterLevel starts a zip whose entries are deflated at level (a
// compress/flate level: flate.BestSpeed for data in transit, where
// compression time matters more than size). Level 0 stores entries
// uncompressed, for links where CPU costs more than bytes: an entry whose
// reader can seek (the store's sections can) is read twice, once for its
// CRC and size, so that its local header carries them and a streaming
// reader finds its end; others are deflated as usual.
func NewWriterLevel(w io.Writer, level int) *Writer {
	zw := zip.NewWriter(w)
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
	return &Writer{zw: zw, stored: level == 0}
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
		ew, err := w.create(name, mod, e.r)
		if err != nil {
			return 0, fmt.Errorf("zip entry %s: %w", name, err)
		}
		c, err := io.Copy(ew, e.r)
		w.bytes += c
		if err != nil {
			return 0, fmt.Errorf("zip entry %s: %w", name, err)
		}
	}
	w.parts = n
	return n, nil
}

// create starts an entry for r's content: STORED with its CRC and size
// up front when the writer stores and r can be read twice, else DEFLATE.
func (w *Writer) create(name string, mod time.Time, r io.Reader) (io.Writer, error) {
	rs, ok := r.(io.ReadSeeker)
	if !w.stored || !ok {
		return w.zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: mod})
	}
	h := crc32.NewIEEE()
	n, err := io.Copy(h, rs)
	if err != nil {
		return nil, err
	}
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	fh := &zip.FileHeader{Name: name, Method: zip.Store, CRC32: h.Sum32(),
		CompressedSize64: uint64(n), UncompressedSize64: uint64(n)}
	fh.SetModTime(mod) //nolint:staticcheck // CreateRaw takes the MS-DOS time fields only
	return w.zw.CreateRaw(fh)
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
	return nil
}

type eof struct{}

func (eof) Read([]byte) (int, error) { return 0, io.EOF }
