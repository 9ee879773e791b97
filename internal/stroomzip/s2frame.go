package stroomzip

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
)

// Blocks is an entry's content that can be handed over block by block,
// each block with its S2 block encoding when it has one: a section of a
// weir stream file, which the store compressed with S2 when it received
// it. A writer of S2 entries (NewWriterS2) frames those blocks as they are
// instead of compressing the bytes again, which was about an eighth of a
// forwarding proxy's CPU.
type Blocks interface {
	// EachBlock calls fn with each block of the content in order: its
	// bytes, and its S2 block (nil when it has none). Both are valid only
	// during the call; fn's error is returned as it is.
	EachBlock(fn func(data, s2block []byte) error) error
	// BlockLimits returns the most bytes a block holds and the bytes all
	// the blocks take as stored (an S2 block, or the bytes). An entry
	// that grows larger than they promise is read again from its start
	// as any reader (so a source should be an io.ReadSeeker as well).
	BlockLimits() (maxBlock int, stored int64)
}

// s2StreamID is the chunk that starts every S2 stream (the framing format
// of github.com/klauspost/compress/s2, Snappy's with its own identifier).
const s2StreamID = "\xff\x06\x00\x00S2sTwO"

// The chunk types of the framing format that carry data: the chunk is a
// 3-byte little-endian length, then the masked CRC-32C of the chunk's
// uncompressed bytes, then those bytes as one S2 block or as they are.
const (
	s2ChunkCompressed   = 0x00
	s2ChunkUncompressed = 0x01
)

// maskedCRC is the framing format's checksum of a chunk's bytes.
func maskedCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b)
	return c>>15 | c<<17 + 0xa282ead8
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// s2Blocks writes an entry of MethodS2 whose S2 stream is made of src's
// blocks: a block stored as S2 is framed as it is, any other is compressed
// here. The entry is built in memory, so its local header carries its CRC
// and sizes, as a stored entry's does; should it grow past maxWhole (or
// 4 GiB uncompressed), errTooLarge says so before anything is written.
func (w *Writer) s2Blocks(name string, mod time.Time, src Blocks) (int64, error) {
	buf := append(w.whole[:0], s2StreamID...)
	var (
		sum  uint32 // the zip's CRC-32 of the entry's bytes
		size int64
	)
	err := src.EachBlock(func(data, block []byte) error {
		sum = crc32.Update(sum, crc32.IEEETable, data)
		size += int64(len(data))
		if block == nil {
			// Stored raw (small, or incompressible) or with zstd.
			w.enc = s2.Encode(w.enc[:cap(w.enc)], data)
			block = w.enc
		}
		typ, payload := byte(s2ChunkCompressed), block
		if len(block) >= len(data) {
			typ, payload = s2ChunkUncompressed, data
		}
		n := 4 + len(payload)
		buf = append(buf, typ, byte(n), byte(n>>8), byte(n>>16))
		buf = binary.LittleEndian.AppendUint32(buf, maskedCRC(data))
		buf = append(buf, payload...)
		// BlockLimits counts neither the chunks' headers nor what a block
		// not stored as S2 becomes in S2; and a local header's sizes are
		// 32 bits (see maxStored).
		if len(buf) > maxWhole || size >= maxStored {
			return errTooLarge
		}
		return nil
	})
	w.whole = buf[:0]
	if err != nil {
		return 0, err
	}
	fh := &zip.FileHeader{Name: name, Method: MethodS2, CRC32: sum,
		CompressedSize64: uint64(len(buf)), UncompressedSize64: uint64(size)}
	fh.SetModTime(mod) //nolint:staticcheck // CreateRaw takes the MS-DOS time fields only
	ew, err := w.zw.CreateRaw(fh)
	if err != nil {
		return 0, err
	}
	if _, err := ew.Write(buf); err != nil {
		return 0, err
	}
	return size, nil
}

// blocksFit reports whether src's blocks can make an entry of s2Blocks: a
// receiver reads no S2 chunk of more than s2BlockSize bytes, and the
// entry is built in memory.
func blocksFit(src Blocks) bool {
	maxBlock, stored := src.BlockLimits()
	// Each block adds a chunk header and checksum; a block stored other
	// than as S2 may grow by S2's bound on incompressible bytes.
	return maxBlock <= s2BlockSize && stored+int64(s2.MaxEncodedLen(maxBlock)) <= maxWhole
}

// ErrS2Corrupt is wrapped by EachS2Block's errors about the stream itself
// (as opposed to fn's, or its reader's).
var ErrS2Corrupt = errors.New("corrupt S2 stream")

// More chunk types of the framing format: the stream identifier; those
// from 0x80 to 0xfe (padding, an index) may be skipped, and the rest are
// reserved.
const (
	s2ChunkStreamID    = 0xff
	s2ChunkSkippable   = 0x80
	s2StreamIDBody     = "S2sTwO"
	snappyStreamIDBody = "sNaPpY"
	snappyBlockSize    = 64 << 10
)

// s2Frames are the buffers of EachS2Block: a chunk as read (at most an S2
// block of s2BlockSize bytes and its checksum) and its bytes decoded.
type s2Frames struct{ chunk, data []byte }

var s2FramePool = sync.Pool{New: func() any {
	return &s2Frames{chunk: make([]byte, 4+s2.MaxEncodedLen(s2BlockSize)), data: make([]byte, s2BlockSize)}
}}

// EachS2Block reads r, the S2 stream of an entry of MethodS2 as it is
// stored (zip.File.OpenRaw), and calls fn with each chunk's bytes and,
// when the chunk holds them as one S2 block, that block (nil otherwise);
// both are valid only during the call. It is for a receiver that stores
// S2 blocks itself: it can keep them as they came instead of compressing
// the bytes again. It checks what RegisterS2's reader checks: the stream
// identifier first, each chunk's checksum, no chunk of more than the
// s2BlockSize bytes weir writes (so its memory is bounded), no reserved
// chunk type. Those failures wrap ErrS2Corrupt; fn's error and r's are
// returned as they are (a stream cut short is io.ErrUnexpectedEOF).
func EachS2Block(r io.Reader, fn func(data, s2block []byte) error) error {
	f := s2FramePool.Get().(*s2Frames)
	defer s2FramePool.Put(f)
	var hdr [4]byte
	started := false
	// A stream of Snappy's identifier holds Snappy's blocks, of at most
	// 64 KiB: s2's reader refuses longer ones there.
	maxBlock := s2BlockSize
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		typ, n := hdr[0], int(hdr[1])|int(hdr[2])<<8|int(hdr[3])<<16
		if !started && typ != s2ChunkStreamID {
			return fmt.Errorf("%w: chunk of type %#02x before the stream identifier", ErrS2Corrupt, typ)
		}
		switch {
		case typ == s2ChunkStreamID:
			if n != len(s2StreamIDBody) {
				return fmt.Errorf("%w: stream identifier of %d bytes", ErrS2Corrupt, n)
			}
			id := f.chunk[:n]
			if _, err := io.ReadFull(r, id); err != nil {
				return unexpected(err)
			}
			switch string(id) {
			case s2StreamIDBody:
				maxBlock = s2BlockSize
			case snappyStreamIDBody:
				maxBlock = snappyBlockSize
			default:
				return fmt.Errorf("%w: stream identifier %q", ErrS2Corrupt, id)
			}
			started = true
		case typ == s2ChunkCompressed || typ == s2ChunkUncompressed:
			if n < 4 || n > len(f.chunk) {
				return fmt.Errorf("%w: data chunk of %d bytes (at most %d)", ErrS2Corrupt, n, len(f.chunk))
			}
			c := f.chunk[:n]
			if _, err := io.ReadFull(r, c); err != nil {
				return unexpected(err)
			}
			sum, payload := binary.LittleEndian.Uint32(c), c[4:]
			data, block := payload, []byte(nil)
			if typ == s2ChunkCompressed {
				dn, err := s2.DecodedLen(payload)
				if err != nil {
					return fmt.Errorf("%w: %v", ErrS2Corrupt, err)
				}
				if dn > maxBlock {
					return fmt.Errorf("%w: a block of %d bytes (at most %d)", ErrS2Corrupt, dn, maxBlock)
				}
				if data, err = s2.Decode(f.data[:dn], payload); err != nil {
					return fmt.Errorf("%w: %v", ErrS2Corrupt, err)
				}
				block = payload
			} else if len(data) > maxBlock {
				return fmt.Errorf("%w: an uncompressed chunk of %d bytes (at most %d)", ErrS2Corrupt, len(data), maxBlock)
			}
			if maskedCRC(data) != sum {
				return fmt.Errorf("%w: a chunk's checksum does not match its bytes", ErrS2Corrupt)
			}
			if err := fn(data, block); err != nil {
				return err
			}
		case typ >= s2ChunkSkippable: // padding, and others a reader may skip
			if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
				return unexpected(err)
			}
		default:
			return fmt.Errorf("%w: reserved chunk type %#02x", ErrS2Corrupt, typ)
		}
	}
}

// unexpected is a read error inside a chunk: its end is missing.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
