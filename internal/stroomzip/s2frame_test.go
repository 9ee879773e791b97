package stroomzip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
)

// s2Stream is data as an S2 stream written by s2's own writer (blocks of
// s2BlockSize, uncompressed chunks for what does not compress, padding).
func s2Stream(t testing.TB, data []byte, opts ...s2.WriterOption) []byte {
	t.Helper()
	var b bytes.Buffer
	w := s2.NewWriter(&b, append([]s2.WriterOption{s2.WriterConcurrency(1), s2.WriterBlockSize(s2BlockSize)}, opts...)...)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// chunk is one chunk of the framing format.
func chunk(typ byte, body []byte) []byte {
	n := len(body)
	return append([]byte{typ, byte(n), byte(n >> 8), byte(n >> 16)}, body...)
}

// dataChunk is a data chunk of data, with block as its body if not nil.
func dataChunk(data, block []byte) []byte {
	body := binary.LittleEndian.AppendUint32(nil, maskedCRC(data))
	if block == nil {
		return chunk(s2ChunkUncompressed, append(body, data...))
	}
	return chunk(s2ChunkCompressed, append(body, block...))
}

// eachBlock collects what EachS2Block hands over.
func eachBlock(stream []byte) (data []byte, blocks int, err error) {
	err = EachS2Block(bytes.NewReader(stream), func(d, block []byte) error {
		data = append(data, d...)
		if block != nil {
			blocks++
			if got, err := s2.Decode(nil, block); err != nil || !bytes.Equal(got, d) {
				return errors.New("a block that does not decode to its bytes")
			}
		}
		return nil
	})
	return data, blocks, err
}

// TestEachS2Block: the streams that s2's writer makes (compressible and
// not, padded, with an index, Snappy's identifier) and those that
// NewWriterS2 makes from stored blocks are read exactly, each compressed
// chunk handed over as its block; a damaged or hostile stream is refused
// with ErrS2Corrupt, or io.ErrUnexpectedEOF when cut short, and fn's
// error comes back as it is.
func TestEachS2Block(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	text := make([]byte, 700<<10)
	for i := range text {
		text[i] = "abcd \n"[rng.IntN(6)]
	}
	noise := make([]byte, 100<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	mixed := append(bytes.Clone(text), noise...)
	for _, tc := range []struct {
		name   string
		stream []byte
		want   []byte
		blocks int
	}{
		{"s2 writer", s2Stream(t, mixed), mixed, 3},
		{"padded", s2Stream(t, text, s2.WriterPadding(4096)), text, 3},
		{"with an index", s2Stream(t, text, s2.WriterAddIndex()), text, 3},
		{"Snappy's identifier", s2Stream(t, text, s2.WriterSnappyCompat()), text, 11}, // Snappy's 64 KiB blocks
		{"empty", nil, nil, 0},
		{"only the identifier", []byte(s2StreamID), nil, 0},
		{"identifier repeated", append(append([]byte(s2StreamID), s2StreamID...), dataChunk([]byte("x\n"), nil)...), []byte("x\n"), 0},
		{"skippable chunk", append(append([]byte(s2StreamID), chunk(0x80, make([]byte, 1000))...), dataChunk(text[:5000], s2.Encode(nil, text[:5000]))...), text[:5000], 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, blocks, err := eachBlock(tc.stream)
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("%d bytes (%v), want %d", len(got), err, len(tc.want))
			}
			if blocks != tc.blocks {
				t.Errorf("%d blocks handed over, want %d", blocks, tc.blocks)
			}
		})
	}

	small := text[:5000]
	good := dataChunk(small, s2.Encode(nil, small))
	badCRC := bytes.Clone(good)
	badCRC[5] ^= 1
	over := text[:s2BlockSize+1]
	for _, tc := range []struct {
		name   string
		stream []byte
		want   error
	}{
		{"no identifier", good, ErrS2Corrupt},
		{"another identifier", append(chunk(s2ChunkStreamID, []byte("S2sTwX")), good...), ErrS2Corrupt},
		{"identifier of another length", chunk(s2ChunkStreamID, []byte("S2sTwOO")), ErrS2Corrupt},
		{"checksum", append([]byte(s2StreamID), badCRC...), ErrS2Corrupt},
		{"block larger than weir writes", append([]byte(s2StreamID), dataChunk(over, s2.Encode(nil, over))...), ErrS2Corrupt},
		{"uncompressed chunk larger than weir writes", append([]byte(s2StreamID), dataChunk(over, nil)...), ErrS2Corrupt},
		{"chunk longer than any block", append([]byte(s2StreamID), 0, 0xff, 0xff, 0xff), ErrS2Corrupt},
		{"chunk without a checksum", append([]byte(s2StreamID), chunk(s2ChunkUncompressed, []byte{1, 2})...), ErrS2Corrupt},
		{"not a block", append([]byte(s2StreamID), dataChunk(small, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2})...), ErrS2Corrupt},
		{"reserved chunk type", append([]byte(s2StreamID), chunk(0x02, []byte("abcd"))...), ErrS2Corrupt},
		// After Snappy's identifier, Snappy's 64 KiB blocks (a review
		// found these taken where s2's reader refuses them).
		{"Snappy stream, uncompressed chunk over 64 KiB", append(chunk(s2ChunkStreamID, []byte("sNaPpY")), dataChunk(text[:65<<10], nil)...), ErrS2Corrupt},
		{"Snappy stream, block over 64 KiB", append(chunk(s2ChunkStreamID, []byte("sNaPpY")), dataChunk(text[:65<<10], s2.Encode(nil, text[:65<<10]))...), ErrS2Corrupt},
		{"cut in a chunk", append([]byte(s2StreamID), good[:len(good)-1]...), io.ErrUnexpectedEOF},
		{"cut in a chunk header", append([]byte(s2StreamID), good[:2]...), io.ErrUnexpectedEOF},
		{"cut in a skippable chunk", append([]byte(s2StreamID), chunk(0x80, make([]byte, 10))[:8]...), io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := eachBlock(tc.stream); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			// RegisterS2's reader refuses it too.
			r := s2.NewReader(bytes.NewReader(tc.stream), s2.ReaderMaxBlockSize(s2BlockSize))
			if _, err := io.Copy(io.Discard, r); err == nil {
				t.Errorf("s2's reader took it")
			}
		})
	}

	stop := errors.New("stop")
	calls := 0
	err := EachS2Block(bytes.NewReader(s2Stream(t, text)), func([]byte, []byte) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("fn's error: %v after %d calls, want it after 1", err, calls)
	}
}

// FuzzEachS2Block: whatever the bytes, EachS2Block and the S2 reader of
// RegisterS2 agree: where the reader reads a stream to its end, EachS2Block
// hands over the same bytes, and where it refuses one, so does EachS2Block.
func FuzzEachS2Block(f *testing.F) {
	f.Add(s2Stream(f, []byte("some log lines\nsome log lines\nsome log lines\n")))
	f.Add(s2Stream(f, bytes.Repeat([]byte("x"), 300<<10)))
	f.Add(append([]byte(s2StreamID), dataChunk([]byte("x\n"), nil)...))
	f.Add(s2Stream(f, bytes.Repeat([]byte("snappy "), 20<<10), s2.WriterSnappyCompat()))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, stream []byte) {
		var want bytes.Buffer
		_, rerr := io.Copy(&want, s2.NewReader(bytes.NewReader(stream), s2.ReaderMaxBlockSize(s2BlockSize)))
		got, _, err := eachBlock(stream)
		switch {
		case rerr == nil && err != nil:
			t.Fatalf("s2's reader read %d bytes; EachS2Block: %v", want.Len(), err)
		case rerr != nil && err == nil:
			t.Fatalf("s2's reader refused it (%v); EachS2Block read %d bytes", rerr, len(got))
		case err == nil && !bytes.Equal(got, want.Bytes()):
			t.Fatalf("EachS2Block read %d bytes, s2's reader %d", len(got), want.Len())
		}
	})
}
