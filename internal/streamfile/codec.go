package streamfile

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Codec holds what every Writer and Reader of a process shares: the zstd
// block compressor and decompressor (both expensive to build and internally
// pooled) and pools of block-sized buffers. Make one per process with
// NewCodec; it is safe for concurrent use.
type Codec struct {
	enc  *zstd.Encoder
	dec  *zstd.Decoder
	crc  *crc32.Table
	bufs bufPool
}

// NewCodec builds the shared compressor and decompressor. Both run one block
// at a time (EncodeAll/DecodeAll), so their concurrency is the number of
// blocks that can be (de)compressed in parallel across all streams.
func NewCodec() (*Codec, error) {
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
	return &Codec{enc: enc, dec: dec, crc: newCRCTable()}, nil
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
// block plus a frame header, so this avoids EncodeAll reallocating.
func compressBound(n int) int { return blockHeaderLen + n + n>>7 + 64 }
