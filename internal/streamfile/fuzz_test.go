package streamfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"
)

// FuzzReader feeds NewReader arbitrary bytes. Nothing may panic or allocate
// beyond what the input size justifies; an in-memory file has no I/O errors,
// so every failure must be ErrCorrupt; and whatever opens must read every
// section to its declared size or fail with ErrCorrupt.
//
// Each input is tried as is and once more with all its checksums recomputed
// (see reseal): random mutations almost never get past a CRC, and the
// resealed copy is what lets the fuzzer reach the index validation, the block
// header checks and the zstd decoder with hostile data.
func FuzzReader(f *testing.F) {
	c := newTestCodec(f)
	text := bytes.Repeat([]byte("level=info msg=\"stream stored\" feed=TEST-EVENTS part=0\n"), 20)
	shapes := [][]section{
		nil,
		{{Data, 0, []byte("hello")}},
		{{Data, 0, text}, {Meta, 0, []byte("Feed:TEST\n")}},
		{{Data, 1, randomBytes(30, 300)}, {Context, 0, nil}, {Meta, 1, text[:100]}},
		{{Meta, 3, text}, {Data, 0, randomBytes(31, 40)}},
	}
	// Seeds of both compressions: the reader reads any block with one
	// codec, whatever its codec writes.
	s2c := newTestCodecFor(f, S2)
	for i, secs := range shapes {
		w := c
		if i%2 == 1 {
			w = s2c
		}
		file := encodeStream(f, w, WriterOptions{BlockSize: 64 << (i % 3)}, secs)
		f.Add(file)
		for _, cut := range []int{1, trailerLen, len(file) / 2} {
			if cut <= len(file) {
				f.Add(file[:len(file)-cut])
			}
		}
	}
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, b []byte) {
		checkArbitrary(t, c, b)
		checkArbitrary(t, c, reseal(c, b))
	})
}

func checkArbitrary(t *testing.T, c *Codec, b []byte) {
	{
		r, err := NewReader(bytes.NewReader(b), int64(len(b)), c)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("NewReader on in-memory bytes: %v, want ErrCorrupt", err)
			}
			return
		}
		for part := range r.Parts() {
			for ch := Data; ch <= Meta; ch++ {
				sec, err := r.Section(ch, part)
				if !r.Has(ch, part) {
					if err == nil || r.Size(ch, part) != 0 {
						t.Fatalf("absent %s part %d: Section err %v, Size %d", ch, part, err, r.Size(ch, part))
					}
					continue
				}
				if err != nil {
					t.Fatalf("Section(%s, %d): %v", ch, part, err)
				}
				n, err := io.Copy(io.Discard, io.NewSectionReader(sec, 0, sec.Size()))
				if err != nil {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("reading %s part %d: %v, want ErrCorrupt", ch, part, err)
					}
					continue
				}
				if n != r.Size(ch, part) {
					t.Fatalf("read %d bytes of %s part %d, Size says %d", n, ch, part, r.Size(ch, part))
				}
				// A read across the middle, which takes the cached path.
				if n > 2 {
					p := make([]byte, n/2)
					if _, err := sec.ReadAt(p, n/3); err != nil && err != io.EOF {
						t.Fatalf("ReadAt after a clean read of %s part %d: %v", ch, part, err)
					}
				}
			}
		}
	}
}

// reseal returns a copy of b in which every checksum this format has is made
// to match whatever the bytes say: header, each block reachable by walking
// block lengths from the header to the index, the index and the trailer.
func reseal(c *Codec, b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) < headerLen+trailerLen {
		return b
	}
	le := binary.LittleEndian
	le.PutUint32(b[20:], crc32.Checksum(b[:20], c.crc))
	tr := b[len(b)-trailerLen:]
	indexOffset, indexLength := le.Uint64(tr[0:]), le.Uint64(tr[8:])
	end := uint64(len(b) - trailerLen)
	if indexOffset >= headerLen && indexOffset <= end {
		for pos := uint64(headerLen); pos+blockHeaderLen <= indexOffset; {
			clen := uint64(le.Uint32(b[pos+16:]))
			if pos+blockHeaderLen+clen > indexOffset {
				break
			}
			h := b[pos : pos+blockHeaderLen]
			payload := b[pos+blockHeaderLen : pos+blockHeaderLen+clen]
			le.PutUint32(h[24:], crc32.Update(crc32.Checksum(h[:24], c.crc), c.crc, payload))
			pos += blockHeaderLen + clen
		}
		if indexLength == end-indexOffset {
			le.PutUint32(tr[16:], crc32.Checksum(b[indexOffset:end], c.crc))
		}
	}
	le.PutUint32(tr[20:], crc32.Checksum(tr[:20], c.crc))
	return b
}
