package streamfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// corruptTestStream is small enough to flip every byte of and still has
// several blocks per section, raw and compressed ones, and an absent section.
func corruptTestStream(tb testing.TB, c *Codec) []byte {
	return encodeStream(tb, c, WriterOptions{BlockSize: 1000}, []section{
		{Data, 0, logBytes(20, 3500)},
		{Meta, 0, []byte("Feed:TEST\nType:Raw\n")},
		{Data, 1, randomBytes(21, 2100)},
		{Context, 1, nil},
	})
}

// openBytes writes b to a real file and opens it.
func openBytes(t *testing.T, c *Codec, b []byte) (*Reader, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stream")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return NewReader(f, int64(len(b)), c)
}

func TestCorruptBlockPayload(t *testing.T) {
	c := newTestCodec(t)
	const bs = 1000
	data := logBytes(20, 3500)
	file := encodeStream(t, c, WriterOptions{BlockSize: bs}, []section{{Data, 0, data}})
	r, err := NewReader(bytes.NewReader(file), int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	for bad := range 4 {
		for _, where := range []string{"payload", "header"} {
			t.Run(fmt.Sprintf("block%d/%s", bad, where), func(t *testing.T) {
				e := r.sections[0].blocks[bad]
				pos := e.fileOffset + blockHeaderLen + int64(e.clen)/2
				if where == "header" {
					pos = e.fileOffset + 20 // ulen
				}
				mutated := bytes.Clone(file)
				mutated[pos] ^= 0x20
				mr, err := openBytes(t, c, mutated)
				if err != nil {
					t.Fatalf("NewReader checks the index, not payloads, yet failed: %v", err)
				}
				sec, err := mr.Section(Data, 0)
				if err != nil {
					t.Fatal(err)
				}
				for blk := range 4 {
					start := int64(blk * bs)
					p := make([]byte, min(bs, len(data)-blk*bs))
					// Read from the middle too, so the cached path is covered.
					for _, off := range []int64{start, start + int64(len(p))/2} {
						n, err := sec.ReadAt(p[:start+int64(len(p))-off], off)
						if blk == bad {
							if !errors.Is(err, ErrCorrupt) {
								t.Fatalf("ReadAt of damaged block %d at %d: err = %v, want ErrCorrupt", blk, off, err)
							}
							name := fmt.Sprintf("block %d at file offset %d", bad, e.fileOffset)
							if !strings.Contains(err.Error(), name) {
								t.Errorf("error %q does not name %q", err, name)
							}
							continue
						}
						if err != nil && err != io.EOF {
							t.Fatalf("ReadAt of intact block %d: %v", blk, err)
						}
						if !bytes.Equal(p[:n], data[off:off+int64(n)]) {
							t.Fatalf("ReadAt of intact block %d: content differs", blk)
						}
					}
				}
				if _, err := io.Copy(io.Discard, io.NewSectionReader(sec, 0, sec.Size())); !errors.Is(err, ErrCorrupt) {
					t.Errorf("io.Copy over damaged block: err = %v, want ErrCorrupt", err)
				}
			})
		}
	}
}

// TestCorruptMetadataBytes flips, one at a time, every byte that NewReader
// checks (header, index, trailer): each must be refused.
func TestCorruptMetadataBytes(t *testing.T) {
	c := newTestCodec(t)
	file := corruptTestStream(t, c)
	r, err := NewReader(bytes.NewReader(file), int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	check := func(from, to int64, what string) {
		for pos := from; pos < to; pos++ {
			for _, mask := range []byte{0x01, 0x80} {
				mutated := bytes.Clone(file)
				mutated[pos] ^= mask
				if _, err := NewReader(bytes.NewReader(mutated), int64(len(mutated)), c); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s byte %d ^ %#x: NewReader err = %v, want ErrCorrupt", what, pos, mask, err)
				}
			}
		}
	}
	check(0, headerLen, "header")
	check(r.indexOffset, int64(len(file))-trailerLen, "index")
	check(int64(len(file))-trailerLen, int64(len(file)), "trailer")

	// The same through a real file, with a message naming the index.
	mutated := bytes.Clone(file)
	mutated[r.indexOffset+indexHeaderLen+5] ^= 1
	_, err = openBytes(t, c, mutated)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "index") {
		t.Errorf("flipped index byte: err = %v, want ErrCorrupt naming the index", err)
	}
}

func TestCorruptTruncated(t *testing.T) {
	c := newTestCodec(t)
	file := corruptTestStream(t, c)
	// Every possible truncation, down to the empty file.
	for n := range len(file) {
		if _, err := NewReader(bytes.NewReader(file[:n]), int64(n), c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("file cut to %d of %d bytes: err = %v, want ErrCorrupt", n, len(file), err)
		}
	}
	// Real files: a big stream cut by a few bytes, and a file with garbage
	// appended (as a writer that crashed mid-rewrite would leave it).
	big := encodeStream(t, c, WriterOptions{}, []section{{Data, 0, logBytes(22, 3<<20)}})
	for _, cut := range []int{1, 2, 7, trailerLen - 1, trailerLen, trailerLen + 1, 4096, len(big) / 2} {
		if _, err := openBytes(t, c, big[:len(big)-cut]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("file cut by %d bytes: err = %v, want ErrCorrupt", cut, err)
		}
	}
	if _, err := openBytes(t, c, append(bytes.Clone(big), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("file with a byte appended: err = %v, want ErrCorrupt", err)
	}
}

func TestCorruptEmptyFile(t *testing.T) {
	c := newTestCodec(t)
	_, err := openBytes(t, c, nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("empty file: err = %v, want ErrCorrupt", err)
	}
}

// TestReaderIOErrorIsNotCorrupt keeps a failing disk distinguishable from a
// damaged file.
func TestReaderIOErrorIsNotCorrupt(t *testing.T) {
	c := newTestCodec(t)
	file := corruptTestStream(t, c)
	f, err := os.CreateTemp(t.TempDir(), "stream")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(file); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(f, int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := r.Section(Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = sec.ReadAt(make([]byte, 10), 0)
	if err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, os.ErrClosed) {
		t.Errorf("ReadAt on closed file: err = %v, want os.ErrClosed and not ErrCorrupt", err)
	}
	if _, err := NewReader(f, int64(len(file)), c); err == nil || errors.Is(err, ErrCorrupt) {
		t.Errorf("NewReader on closed file: err = %v, want an I/O error, not ErrCorrupt", err)
	}
}

// TestForgedIndex builds files whose index has a valid checksum but lies, as
// a buggy writer would produce, and checks the structural validation.
func TestForgedIndex(t *testing.T) {
	c := newTestCodec(t)
	file := corruptTestStream(t, c)
	r, err := NewReader(bytes.NewReader(file), int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	idxOff := int(r.indexOffset)
	blockRecs := idxOff + indexHeaderLen + r.Parts()*numChannels*sectionRecLen
	for _, tc := range []struct {
		name   string
		mutate func(idx []byte)
		substr string
	}{
		{"block offset into another block", func(idx []byte) { idx[blockRecs-idxOff] += 1 }, "gap or overlap"},
		{"ulen over block size", func(idx []byte) { idx[blockRecs-idxOff+blockRecLen+21] = 0x10 }, "outside"},
		{"section size", func(idx []byte) { idx[indexHeaderLen+8]++ }, "its blocks hold"},
		{"absent section with blocks", func(idx []byte) { idx[indexHeaderLen+1] = 0 }, "absent"},
		{"parts count", func(idx []byte) { idx[4]++ }, "need"},
		{"channel order", func(idx []byte) { idx[indexHeaderLen] = 2 }, "names channel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forged := resealIndex(t, c, file, idxOff, tc.mutate)
			_, err := NewReader(bytes.NewReader(forged), int64(len(forged)), c)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("err = %v, want ErrCorrupt mentioning %q", err, tc.substr)
			}
		})
	}
}

// resealIndex applies mutate to the index and rewrites the trailer so its
// checksums match again.
func resealIndex(t *testing.T, c *Codec, file []byte, idxOff int, mutate func([]byte)) []byte {
	t.Helper()
	out := bytes.Clone(file)
	end := len(out) - trailerLen
	idx := out[idxOff:end]
	mutate(idx)
	crc := crc32.Checksum(idx, c.crc)
	return append(out[:end], appendTrailer(nil, int64(idxOff), int64(len(idx)), crc, c.crc)...)
}

// TestForgedBlock damages blocks and then recomputes every checksum (as the
// fuzzer's reseal does), so the checks behind the CRC are what must catch it.
func TestForgedBlock(t *testing.T) {
	for _, comp := range []struct {
		c   Compression
		enc uint8
	}{{Zstd, encZstd}, {S2, encS2}} {
		t.Run(fmt.Sprint(comp.enc), func(t *testing.T) { testForgedBlock(t, comp.c, comp.enc) })
	}
}

func testForgedBlock(t *testing.T, comp Compression, enc uint8) {
	c := newTestCodecFor(t, comp)
	file := corruptTestStream(t, c)
	r, err := NewReader(bytes.NewReader(file), int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	// Data part 0 is log text in 1000-byte blocks: compressed.
	e := r.sections[sectionKey(Data, 0)].blocks[1]
	if file[e.fileOffset+1] != enc {
		t.Fatalf("test stream's Data part 0 block 1 has encoding %d, want %d", file[e.fileOffset+1], enc)
	}
	payload := e.fileOffset + blockHeaderLen
	for _, tc := range []struct {
		name   string
		mutate func(b []byte)
		substr string
	}{
		{"garbage payload", func(b []byte) {
			copy(b[payload:payload+int64(e.clen)], bytes.Repeat([]byte{0xff}, int(e.clen)))
		}, ""},
		{"payload bytes flipped", func(b []byte) {
			for i := payload + int64(e.clen)/2; i < payload+int64(e.clen); i++ {
				b[i] ^= 0x5a
			}
		}, ""},
		{"unknown encoding", func(b []byte) { b[e.fileOffset+1] = 7 }, "unknown encoding"},
		{"compressed block relabelled raw", func(b []byte) { b[e.fileOffset+1] = encRaw }, "raw block"},
		{"block header names another part", func(b []byte) { b[e.fileOffset+4] = 9 }, "disagrees with the index"},
		{"block header reserved bits", func(b []byte) { b[e.fileOffset+2] = 1 }, "disagrees with the index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(file)
			tc.mutate(b)
			b = reseal(c, b)
			mr, err := NewReader(bytes.NewReader(b), int64(len(b)), c)
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			sec, err := mr.Section(Data, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = sec.ReadAt(make([]byte, 10), e.secOffset+5)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.substr) || !strings.Contains(err.Error(), "block 1 at file offset") {
				t.Errorf("ReadAt: err = %v, want ErrCorrupt naming block 1 and mentioning %q", err, tc.substr)
			}
			if _, err := sec.ReadAt(make([]byte, 10), 5); err != nil {
				t.Errorf("ReadAt of intact block 0: %v", err)
			}
		})
	}
}

// TestForgedUncompressedLength declares the last block of a section one byte
// longer, consistently in block header, index and section size, with all
// checksums recomputed: only the inflated length can tell.
func TestForgedUncompressedLength(t *testing.T) {
	for _, comp := range []struct {
		c   Compression
		enc uint8
	}{{Zstd, encZstd}, {S2, encS2}} {
		t.Run(fmt.Sprint(comp.enc), func(t *testing.T) { testForgedUncompressedLength(t, comp.c, comp.enc) })
	}
}

func testForgedUncompressedLength(t *testing.T, comp Compression, enc uint8) {
	c := newTestCodecFor(t, comp)
	file := corruptTestStream(t, c)
	r, err := NewReader(bytes.NewReader(file), int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	blocks := r.sections[sectionKey(Data, 0)].blocks
	last := len(blocks) - 1 // Data part 0's blocks come first in the table
	e := blocks[last]
	if file[e.fileOffset+1] != enc {
		t.Fatalf("last block has encoding %d, want %d", file[e.fileOffset+1], enc)
	}
	b := bytes.Clone(file)
	le := binary.LittleEndian
	le.PutUint32(b[e.fileOffset+20:], e.ulen+1)
	rec := r.indexOffset + indexHeaderLen + int64(r.Parts()*numChannels*sectionRecLen) + int64(last*blockRecLen)
	le.PutUint32(b[rec+20:], e.ulen+1)
	secRec := r.indexOffset + indexHeaderLen // Data part 0 is the first section record
	le.PutUint64(b[secRec+8:], uint64(r.Size(Data, 0)+1))
	b = reseal(c, b)

	mr, err := NewReader(bytes.NewReader(b), int64(len(b)), c)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	sec, err := mr.Section(Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sec.ReadAt(make([]byte, 1), e.secOffset)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("block %d", last)) {
		t.Errorf("ReadAt of block with forged length: err = %v, want ErrCorrupt naming block %d", err, last)
	}
}

// eioReaderAt fails every read at or past off with EIO, as a bad sector.
type eioReaderAt struct {
	b   []byte
	off int64
}

func (r eioReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.off && off < r.off+1 {
		return 0, &os.PathError{Op: "read", Path: "stream", Err: syscall.EIO}
	}
	return bytes.NewReader(r.b).ReadAt(p, off)
}

// TestVerify: Verify checks every block of a file without inflating it:
// nil for an intact file, ErrCorrupt for a byte flipped in any block's
// header or payload, and an I/O error (not ErrCorrupt) for a failed read.
func TestVerify(t *testing.T) {
	c := newTestCodec(t)
	file := corruptTestStream(t, c)
	r, err := NewReader(bytes.NewReader(file), int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(); err != nil {
		t.Fatalf("Verify of an intact file: %v", err)
	}
	for pos := int64(headerLen); pos < r.indexOffset; pos++ {
		mutated := bytes.Clone(file)
		mutated[pos] ^= 0x01
		r, err := NewReader(bytes.NewReader(mutated), int64(len(mutated)), c)
		if err != nil {
			t.Fatalf("byte %d flipped: NewReader: %v (blocks are checked when read)", pos, err)
		}
		if err := r.Verify(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: Verify = %v, want ErrCorrupt", pos, err)
		}
	}
	r, err = NewReader(eioReaderAt{b: file, off: headerLen + 100}, int64(len(file)), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(); err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, syscall.EIO) {
		t.Errorf("Verify with a failing read = %v, want EIO and not ErrCorrupt", err)
	}
}
