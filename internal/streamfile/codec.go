package streamfile

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compression is how Writers compress blocks. Readers read blocks of every
// kind whatever the Codec's Compression, so it can be changed at any time.
type Compression uint8

const (
	// S2 (Snappy's successor) compresses log text at four to five times
	// the speed of zstd's fastest level (45 KiB of the benchmark's log
	// lines: 48 against 215 µs, 1.6 against 2.7 times smaller): the
	// default, as every post is compressed on its way in and the receive
	// path is bound by CPU.
	S2 Compression = iota
	// Zstd (its fastest level) stores log text in 30 to 60% of S2's
	// bytes, for about four times its CPU.
	Zstd
	// None stores every block raw.
	None
)

// ParseCompression reads a Compression by name: s2, zstd or none.
func ParseCompression(name string) (Compression, error) {
	switch name {
	case "s2":
		return S2, nil
	case "zstd":
		return Zstd, nil
	case "none":
		return None, nil
	}
	return S2, fmt.Errorf("unknown compression %q: use s2, zstd or none", name)
}

// Codec holds what every Writer and Reader of a process shares: the zstd
// block compressor and decompressor (both expensive to build and internally
// pooled) and pools of block-sized buffers. Make one per process with
// NewCodec; it is safe for concurrent use.
type Codec struct {
	comp Compression
	enc  *zstd.Encoder
	dec  *zstd.Decoder
	crc  *crc32.Table
	bufs bufPool
	// minCompress is the smallest block compressed (minCompressSize; the
	// tests lower it to reach compressed blocks with small data).
	minCompress int
}

// NewCodec is NewCodecFor(S2).
func NewCodec() (*Codec, error) { return NewCodecFor(S2) }

// NewCodecFor builds the shared compressors and decompressors; Writers
// compress with comp. zstd runs one block at a time (EncodeAll/DecodeAll),
// so its concurrency is the number of blocks that can be (de)compressed in
// parallel across all streams; S2 needs no shared state.
func NewCodecFor(comp Compression) (*Codec, error) {
	if comp > None {
		return nil, fmt.Errorf("streamfile: unknown compression %d", comp)
	}
	procs := runtime.GOMAXPROCS(0)
	enc, err := zstd.NewWriter(nil,
		// The fastest level: every post is compressed on its way in, and
		// on log text it compresses about as well as the default level
		// (4.4x on BenchmarkWrite's data) in much less CPU, which the
		// receive path is bound by.
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(procs),
		// Blocks are compressed independently, so a window beyond the block
		// finds nothing more at the default block size, while the default
		// 8 MiB window costs each of the GOMAXPROCS encoders ~17 MiB of
		// history; 1 MiB keeps them near 3 MiB. Larger custom blocks only
		// lose matches more than 1 MiB back.
		zstd.WithWindowSize(encoderWindow),
		// Every block already carries a CRC-32C over its compressed bytes;
		// zstd's own content checksum would cost time and 4 bytes per block
		// for no extra protection.
		zstd.WithEncoderCRC(false),
	)
	if err != nil {
		return nil, fmt.Errorf("streamfile: create zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(procs),
		// No valid block inflates beyond maxBlockSize, so anything asking for
		// more is hostile or damaged; refuse it before allocating.
		zstd.WithDecoderMaxMemory(maxBlockSize),
		zstd.WithDecoderMaxWindow(maxBlockSize),
		// DecodeAll then never grows the destination past its capacity,
		// which the reader sets to the block's declared length.
		zstd.WithDecodeAllCapLimit(true),
	)
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("streamfile: create zstd decoder: %w", err)
	}
	return &Codec{comp: comp, enc: enc, dec: dec, crc: newCRCTable(), minCompress: minCompressSize}, nil
}

// Close releases the encoder's and decoder's goroutines and memory. Writers
// and Readers using the Codec must not be used afterwards.
func (c *Codec) Close() {
	// zstd.Encoder.Close only reports errors of a streaming encode, which
	// this package never starts.
	_ = c.enc.Close()
	c.dec.Close()
}

const encoderWindow = 1 << 20

// Buffer size classes are powers of two from 4 KiB up to what the largest
// block plus its headers needs, so a buffer handed out for a small block size
// is never pinned by a request for a large one, and vice versa.
const (
	minBufShift = 12
	maxBufShift = 25 // 32 MiB >= maxBlockSize + headers + zstd overhead
	numBufClass = maxBufShift - minBufShift + 1
)

// bufPool hands out byte slices whose capacity is a power of two.
type bufPool struct {
	classes [numBufClass]sync.Pool
}

func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

// get returns a slice of length n. Sizes beyond the largest class are
// allocated directly (and not pooled) rather than failing.
func (p *bufPool) get(n int) *[]byte {
	c := bufClass(n)
	if c >= numBufClass {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<(c+minBufShift))
	return &b
}

// put returns a slice obtained from get. Slices whose capacity is not one of
// the classes (the oversize ones, or ones an append reallocated) are dropped
// so each class only ever holds buffers of exactly its size.
func (p *bufPool) put(b *[]byte) {
	n := cap(*b)
	c := bufClass(n)
	if c >= numBufClass || n != 1<<(c+minBufShift) {
		return
	}
	*b = (*b)[:0]
	p.classes[c].Put(b)
}

// compressBound is the capacity the writer reserves for a compressed block:
// the zstd worst case for incompressible input is a few bytes per 128 KiB
// block plus a frame header, and S2's a length varint and a few bytes per
// literal run (s2.MaxEncodedLen), so neither encoder reallocates.
func compressBound(n int) int { return blockHeaderLen + n + n>>7 + 64 }
