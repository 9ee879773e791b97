package stroomzip

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPartName(t *testing.T) {
	for _, tc := range []struct {
		n    int
		k    Kind
		want string
	}{{1, Meta, "0000000001.meta"}, {1, Data, "0000000001.dat"}, {12, Context, "0000000012.ctx"}, {3, Manifest, "0000000003.mf"}} {
		if got := PartName(tc.n, tc.k); got != tc.want {
			t.Errorf("PartName(%d, %s) = %q, want %q", tc.n, tc.k, got, tc.want)
		}
	}
}

// TestWriterRoundTrip writes parts with and without context and meta and
// reads them back twice: as a random-access zip (as weir's receiver reads
// posts) and as a stream of local entries (as the reference system does).
// TestWriterRoundTrip writes parts at the default level and at level 0
// (stored) and reads them back with archive/zip and as a streaming reader
// does, from local headers only.
func TestWriterRoundTrip(t *testing.T) {
	for _, level := range []int{flate.DefaultCompression, 0} {
		t.Run(fmt.Sprintf("level=%d", level), func(t *testing.T) { testWriterRoundTrip(t, level) })
	}
}

func testWriterRoundTrip(t *testing.T, level int) {
	big := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte('a' + rng.IntN(4)) // compressible, but not trivially
	}
	mod := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	parts := []struct{ meta, ctx, data []byte }{
		{[]byte("Feed:FEED-A\nType:Raw Events\n"), []byte("context 1"), []byte("data 1\n")},
		{[]byte("Feed:FEED-B\n"), nil, big},
		{nil, nil, nil}, // data only, empty
	}
	var buf bytes.Buffer
	w := NewWriterLevel(&buf, level)
	for i, p := range parts {
		part := Part{Modified: mod}
		if p.meta != nil {
			part.Meta = bytes.NewReader(p.meta)
		}
		if p.ctx != nil {
			part.Context = bytes.NewReader(p.ctx)
		}
		if p.data != nil {
			part.Data = bytes.NewReader(p.data)
		}
		n, err := w.WritePart(part)
		if err != nil || n != i+1 {
			t.Fatalf("WritePart %d: %d %v", i, n, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Parts() != 3 || w.Bytes() != int64(len("Feed:FEED-A\nType:Raw Events\ncontext 1data 1\nFeed:FEED-B\n")+len(big)) {
		t.Fatalf("Parts %d Bytes %d", w.Parts(), w.Bytes())
	}
	wantNames := []string{"0000000001.meta", "0000000001.ctx", "0000000001.dat", "0000000002.meta", "0000000002.dat", "0000000003.dat"}
	want := map[string][]byte{
		"0000000001.meta": parts[0].meta, "0000000001.ctx": parts[0].ctx, "0000000001.dat": parts[0].data,
		"0000000002.meta": parts[1].meta, "0000000002.dat": big, "0000000003.dat": {},
	}

	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		// Stored entries are those whose reader can seek (bytes.Reader);
		// part 3 has no data reader, so its empty entry is deflated.
		wantMethod, wantMod := zip.Deflate, mod
		if level == 0 && f.Name != "0000000003.dat" {
			// MS-DOS time, without the extended timestamp: 2 s steps.
			wantMethod, wantMod = zip.Store, mod.Truncate(2*time.Second)
		}
		if f.Method != wantMethod {
			t.Errorf("%s: method %d, want %d", f.Name, f.Method, wantMethod)
		}
		if !f.Modified.Equal(wantMod) {
			t.Errorf("%s: modified %v, want %v", f.Name, f.Modified, wantMod)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if !bytes.Equal(b, want[f.Name]) {
			t.Errorf("%s: %d bytes differ from the %d written", f.Name, len(b), len(want[f.Name]))
		}
	}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("entries %v, want %v", names, wantNames)
	}
	groups, err := Groups(names)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 3 {
		t.Fatalf("%d groups", len(groups))
	}
	for i, g := range groups {
		if g.Base != strings.TrimSuffix(PartName(i+1, Data), ".dat") || g.Entry(Data) < 0 || g.Entry(Manifest) >= 0 {
			t.Errorf("group %d: %+v", i, g)
		}
	}
	if groups[0].Entry(Context) < 0 || groups[1].Entry(Context) >= 0 || groups[2].Entry(Meta) >= 0 {
		t.Errorf("groups %+v", groups)
	}

	streamed := streamEntries(t, buf.Bytes())
	if len(streamed) != len(wantNames) {
		t.Fatalf("streamed %d entries", len(streamed))
	}
	for i, e := range streamed {
		if e.name != wantNames[i] || !bytes.Equal(e.data, want[e.name]) {
			t.Errorf("streamed entry %d: %s (%d bytes)", i, e.name, len(e.data))
		}
	}
}

type entry struct {
	name string
	data []byte
}

// streamEntries reads a zip front to back from its local headers only, as
// a streaming reader (java.util.zip.ZipInputStream) does: every entry must
// be DEFLATE, since the end of an entry whose sizes come after it can only
// be found by decompressing it, or STORED with its sizes and CRC in its
// local header.
func streamEntries(t *testing.T, b []byte) []entry {
	t.Helper()
	r := bytes.NewReader(b)
	var out []entry
	for {
		var h [30]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			t.Fatalf("local header: %v", err)
		}
		if sig := binary.LittleEndian.Uint32(h[:]); sig != 0x04034b50 {
			if sig != 0x02014b50 { // the central directory follows the last entry
				t.Fatalf("signature %#x where an entry or the directory should start", sig)
			}
			return out
		}
		flags := binary.LittleEndian.Uint16(h[6:])
		method := binary.LittleEndian.Uint16(h[8:])
		nameLen, extraLen := binary.LittleEndian.Uint16(h[26:]), binary.LittleEndian.Uint16(h[28:])
		name := make([]byte, nameLen)
		if _, err := io.ReadFull(r, name); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Seek(int64(extraLen), io.SeekCurrent); err != nil {
			t.Fatal(err)
		}
		var data []byte
		switch {
		case method == zip.Store && flags&0x8 == 0:
			data = make([]byte, binary.LittleEndian.Uint32(h[18:]))
			if _, err := io.ReadFull(r, data); err != nil {
				t.Fatalf("%s: stored data: %v", name, err)
			}
			if crc := crc32.ChecksumIEEE(data); crc != binary.LittleEndian.Uint32(h[14:]) || len(data) != int(binary.LittleEndian.Uint32(h[22:])) {
				t.Fatalf("%s: stored entry's CRC or size does not match its local header", name)
			}
		case method == zip.Deflate:
			// bytes.Reader is an io.ByteReader, so flate reads exactly the
			// deflate stream and no further.
			var err error
			if data, err = io.ReadAll(flate.NewReader(r)); err != nil {
				t.Fatalf("%s: inflate: %v", name, err)
			}
		default:
			t.Fatalf("%s: method %d, flags %#x: a streaming reader cannot read it", name, method, flags)
		}
		if flags&0x8 != 0 {
			var dd [16]byte // signature, crc32, 32-bit sizes (no zip64 entries here)
			if _, err := io.ReadFull(r, dd[:]); err != nil || binary.LittleEndian.Uint32(dd[:]) != 0x08074b50 {
				t.Fatalf("%s: data descriptor: %v", name, err)
			}
		}
		out = append(out, entry{string(name), data})
	}
}

// sizedReader says it holds size bytes, whatever it really holds (a store
// section changing under the writer, or a wrong caller).
type sizedReader struct {
	*bytes.Reader
	size int64
}

func (r sizedReader) Size() int64 { return r.size }

// failingReader fails after its bytes, as a damaged store section does
// (a section: Read, Seek and Size only).
type failingReader struct{ r *bytes.Reader }

var errDamaged = fmt.Errorf("damaged")

func (f failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errDamaged
	}
	return n, err
}

func (f failingReader) Seek(off int64, whence int) (int64, error) { return f.r.Seek(off, whence) }
func (f failingReader) Size() int64                               { return f.r.Size() }

// TestWriterStoredSizes covers both ways a stored entry gets its CRC and
// size before its bytes: read whole into memory (up to maxWhole bytes,
// the buffer reused from entry to entry) or read twice, also when a
// reader's Size is wrong, and that a read error fails the entry.
func TestWriterStoredSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	content := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	sizes := []int{0, 1, 45 << 10, maxWhole - 1, maxWhole, maxWhole + 1, 10, 3 << 20, 20, 30, maxWhole + 30}
	datas := make([][]byte, len(sizes))
	var buf bytes.Buffer
	w := NewWriterLevel(&buf, 0)
	for i, n := range sizes {
		datas[i] = content(n)
		var r io.Reader = bytes.NewReader(datas[i])
		switch i {
		case 6:
			r = sizedReader{bytes.NewReader(datas[i]), 100 << 20} // says more: read twice
		case 7:
			r = sizedReader{bytes.NewReader(datas[i]), 10} // says less: falls back to reading twice
		case 8:
			r = sizedReader{bytes.NewReader(datas[i]), -5} // says nonsense: read twice
		case 9, 10:
			// Read partly already: the entry is still the whole content.
			br := bytes.NewReader(datas[i])
			if _, err := br.Seek(7, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			r = br
		}
		if _, err := w.WritePart(Part{Data: r}); err != nil {
			t.Fatalf("part %d (%d bytes): %v", i+1, n, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	streamed := streamEntries(t, buf.Bytes())
	if len(streamed) != len(sizes) {
		t.Fatalf("%d entries, want %d", len(streamed), len(sizes))
	}
	for i, e := range streamed {
		if e.name != PartName(i+1, Data) || !bytes.Equal(e.data, datas[i]) {
			t.Errorf("entry %d: %s, %d bytes, want %d bytes as written", i, e.name, len(e.data), len(datas[i]))
		}
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		if f.Method != zip.Store {
			t.Errorf("%s: method %d, want stored", f.Name, f.Method)
		}
	}

	for _, n := range []int{100, maxWhole + 100} {
		w := NewWriterLevel(io.Discard, 0)
		_, err := w.WritePart(Part{Data: failingReader{bytes.NewReader(content(n))}})
		if !errors.Is(err, errDamaged) {
			t.Errorf("%d bytes, read fails: %v, want the read error", n, err)
		}
	}
}

// FuzzWriterRoundTrip writes parts cut from arbitrary bytes, stored or
// deflated, with readers that tell their size truly, wrongly or not at
// all, and reads the zip back both ways: every entry must come back byte
// for byte, and a streaming reader must find each entry's end.
func FuzzWriterRoundTrip(f *testing.F) {
	f.Add(uint8(0), []byte("Feed:A\n\xffdata one\n\xff\xffthree\n"), int64(-1))
	f.Add(uint8(1), []byte("x\xffy"), int64(3))
	f.Add(uint8(0), bytes.Repeat([]byte("log line\n"), 500), int64(1))
	f.Fuzz(func(t *testing.T, level uint8, data []byte, hint int64) {
		lvl := int(level % 3) // 0 stored, 1 fastest, 2
		chunks := bytes.Split(data, []byte{0xff})
		if len(chunks) > 16 {
			chunks = chunks[:16]
		}
		var buf bytes.Buffer
		w := NewWriterLevel(&buf, lvl)
		for i, c := range chunks {
			var r io.Reader
			switch {
			case hint >= 0 && i == 3 && len(chunks) == 4:
				r = failingReader{bytes.NewReader(c)} // no WriterTo; fails at its end
			case hint >= 0 && i%2 == 0:
				r = sizedReader{bytes.NewReader(c), hint} // its size, or not
			default:
				r = bytes.NewReader(c)
			}
			_, err := w.WritePart(Part{Meta: bytes.NewReader([]byte("Feed:F\n")), Data: r})
			if _, ok := r.(failingReader); ok {
				if !errors.Is(err, errDamaged) {
					t.Fatalf("part %d: a failing reader gave %v", i+1, err)
				}
				return // the zip is abandoned, as a failed forward's is
			}
			if err != nil {
				t.Fatalf("part %d: %v", i+1, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		streamed := streamEntries(t, buf.Bytes())
		if len(streamed) != 2*len(chunks) {
			t.Fatalf("%d entries, want %d", len(streamed), 2*len(chunks))
		}
		zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range chunks {
			want := map[string][]byte{PartName(i+1, Meta): []byte("Feed:F\n"), PartName(i+1, Data): c}
			for j := 2 * i; j < 2*i+2; j++ {
				e := streamed[j]
				if !bytes.Equal(e.data, want[e.name]) {
					t.Fatalf("streamed %s: %q, want %q", e.name, e.data, want[e.name])
				}
				rc, err := zr.File[j].Open()
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(rc) // archive/zip checks the CRC at the end
				rc.Close()
				if err != nil || !bytes.Equal(b, want[zr.File[j].Name]) {
					t.Fatalf("%s: %q, %v", zr.File[j].Name, b, err)
				}
			}
		}
	})
}

// zeros is a section of n zero bytes: Read, Seek and Size, as a store
// section, without holding them.
type zeros struct{ n, off int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.off >= z.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), z.n-z.off)]
	clear(p)
	z.off += int64(len(p))
	return len(p), nil
}

func (z *zeros) Seek(off int64, whence int) (int64, error) {
	if whence != io.SeekStart {
		return 0, errors.New("zeros: only SeekStart")
	}
	z.off = off
	return off, nil
}

func (z *zeros) Size() int64 { return z.n }

// headWriter keeps the first bytes written and counts the rest.
type headWriter struct {
	head []byte
	n    int64
}

func (w *headWriter) Write(p []byte) (int, error) {
	if room := cap(w.head) - len(w.head); room > 0 {
		w.head = append(w.head, p[:min(room, len(p))]...)
	}
	w.n += int64(len(p))
	return len(p), nil
}

// TestWriterStoredHuge: an entry of 4 GiB or more cannot be stored with
// its sizes in its local header (they are 32 bits there, and archive/zip
// writes no zip64 extra field in a local header), so a streaming reader,
// the reference system's, would take 0xFFFFFFFF for its size. At level 0
// it is deflated in stored blocks instead, whose end such a reader finds.
func TestWriterStoredHuge(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 4 GiB")
	}
	out := &headWriter{head: make([]byte, 0, 1024)}
	w := NewWriterLevel(out, 0)
	size := int64(maxStored)
	if _, err := w.WritePart(Part{Data: &zeros{n: size}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h := out.head
	if binary.LittleEndian.Uint32(h) != 0x04034b50 {
		t.Fatalf("no local header at the start")
	}
	flags, method := binary.LittleEndian.Uint16(h[6:]), binary.LittleEndian.Uint16(h[8:])
	csize, usize := binary.LittleEndian.Uint32(h[18:]), binary.LittleEndian.Uint32(h[22:])
	if method != zip.Deflate || flags&0x8 == 0 {
		t.Fatalf("entry of %d bytes: method %d flags %#x sizes %#x/%#x in its local header, want deflate with a data descriptor",
			size, method, flags, csize, usize)
	}
	if w.Bytes() != size || out.n <= size {
		t.Errorf("Bytes %d, zip %d bytes, want %d bytes in the entry", w.Bytes(), out.n, size)
	}
	// Below the limit it is stored, its sizes in its local header.
	out = &headWriter{head: make([]byte, 0, 1024)}
	w = NewWriterLevel(out, 0)
	if _, err := w.WritePart(Part{Data: &zeros{n: 5 << 20}}); err != nil {
		t.Fatal(err)
	}
	if m, u := binary.LittleEndian.Uint16(out.head[8:]), binary.LittleEndian.Uint32(out.head[22:]); m != zip.Store || u != 5<<20 {
		t.Errorf("5 MiB entry: method %d size %d, want stored with its size", m, u)
	}
}
