package streamfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// ErrCorrupt is wrapped by every error that reports a stream file whose bytes
// do not match the format (bad magic, checksum mismatch, truncation, an index
// that contradicts itself). I/O errors from the underlying file are not
// wrapped with it, so callers can tell damage from a failing disk or a closed
// file.
var ErrCorrupt = errors.New("stream file corrupt")

// Channel names one of the up to three byte streams of a part.
type Channel uint8

const (
	Data    Channel = 0
	Context Channel = 1
	Meta    Channel = 2
)

const numChannels = 3

// String returns the channel's name as the reference system spells it.
func (c Channel) String() string {
	switch c {
	case Data:
		return "Data"
	case Context:
		return "Context"
	case Meta:
		return "Meta Data"
	}
	return fmt.Sprintf("Channel(%d)", uint8(c))
}

func (c Channel) valid() bool { return c < numChannels }

// DefaultBlockSize is the uncompressed size of a block when WriterOptions
// leaves BlockSize at 0: large enough that zstd finds most of the redundancy
// of log-like text, small enough that a random read inflates little.
const DefaultBlockSize = 256 << 10

// The constants below are the format of version 1; doc.go describes it.
const (
	formatVersion = 1

	// maxBlockSize bounds what one block may inflate to. It is what lets a
	// reader size the decoder's memory limit and refuse hostile blocks.
	maxBlockSize = 16 << 20
	// maxParts bounds part numbers so a typo'd or hostile part number cannot
	// make the index (3 records per part, absent ones included) explode.
	maxParts = 1 << 20
	// maxBlocks is what the index's 32-bit block count can express.
	maxBlocks = 1<<32 - 1

	headerLen      = 24
	blockHeaderLen = 28
	indexHeaderLen = 16
	sectionRecLen  = 24
	blockRecLen    = 24
	trailerLen     = 32

	encRaw  = 0
	encZstd = 1
	encS2   = 2

	flagPresent = 1
)

const (
	headerMagic  = "WEIRSTRM"
	indexMagic   = "WIDX"
	trailerMagic = "WEIRSEND"
)

// newCRCTable returns the Castagnoli table. The stdlib caches it, so calling
// this per Codec costs nothing and keeps the table out of package state.
func newCRCTable() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

func corruptf(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrCorrupt)
}

// fileHeader is the decoded fixed header.
type fileHeader struct {
	blockSize uint32
}

func appendHeader(dst []byte, h fileHeader, tab *crc32.Table) []byte {
	start := len(dst)
	dst = append(dst, headerMagic...)
	dst = binary.LittleEndian.AppendUint16(dst, formatVersion)
	dst = binary.LittleEndian.AppendUint16(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, h.blockSize)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], tab))
}

func parseHeader(b []byte, tab *crc32.Table) (fileHeader, error) {
	var h fileHeader
	if len(b) < headerLen {
		return h, corruptf("header: %d bytes, want %d", len(b), headerLen)
	}
	b = b[:headerLen]
	if string(b[:8]) != headerMagic {
		return h, corruptf("header: bad magic %q, want %q", b[:8], headerMagic)
	}
	if got, want := binary.LittleEndian.Uint32(b[20:]), crc32.Checksum(b[:20], tab); got != want {
		return h, corruptf("header: checksum mismatch (stored %#08x, computed %#08x)", got, want)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != formatVersion {
		return h, corruptf("header: unsupported format version %d, want %d", v, formatVersion)
	}
	if f := binary.LittleEndian.Uint16(b[10:]); f != 0 {
		return h, corruptf("header: unknown flags %#04x", f)
	}
	if r := binary.LittleEndian.Uint32(b[16:]); r != 0 {
		return h, corruptf("header: reserved field is %#08x, want 0", r)
	}
	h.blockSize = binary.LittleEndian.Uint32(b[12:])
	if h.blockSize == 0 || h.blockSize > maxBlockSize {
		return h, corruptf("header: block size %d outside 1..%d", h.blockSize, maxBlockSize)
	}
	return h, nil
}

// blockHeader is the decoded 28-byte header in front of each block payload.
type blockHeader struct {
	channel   Channel
	encoding  uint8
	part      uint32
	secOffset uint64
	clen      uint32
	ulen      uint32
	crc       uint32
}

// putBlockHeader fills b[:blockHeaderLen] and computes the CRC over the
// header fields and payload, so the writer can emit header and payload with a
// single Write.
func putBlockHeader(b []byte, h blockHeader, payload []byte, tab *crc32.Table) {
	b[0] = byte(h.channel)
	b[1] = h.encoding
	binary.LittleEndian.PutUint16(b[2:], 0)
	binary.LittleEndian.PutUint32(b[4:], h.part)
	binary.LittleEndian.PutUint64(b[8:], h.secOffset)
	binary.LittleEndian.PutUint32(b[16:], h.clen)
	binary.LittleEndian.PutUint32(b[20:], h.ulen)
	crc := crc32.Update(crc32.Checksum(b[:24], tab), tab, payload)
	binary.LittleEndian.PutUint32(b[24:], crc)
}

func parseBlockHeader(b []byte) (h blockHeader, reserved uint16) {
	h.channel = Channel(b[0])
	h.encoding = b[1]
	reserved = binary.LittleEndian.Uint16(b[2:])
	h.part = binary.LittleEndian.Uint32(b[4:])
	h.secOffset = binary.LittleEndian.Uint64(b[8:])
	h.clen = binary.LittleEndian.Uint32(b[16:])
	h.ulen = binary.LittleEndian.Uint32(b[20:])
	h.crc = binary.LittleEndian.Uint32(b[24:])
	return h, reserved
}

// blockEntry is one block-table record. It is what both the writer and the
// reader keep in memory per block, so it is kept small (24 bytes).
type blockEntry struct {
	fileOffset int64
	secOffset  int64
	clen       uint32
	ulen       uint32
}

func appendBlockRec(dst []byte, e blockEntry) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.fileOffset))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.secOffset))
	dst = binary.LittleEndian.AppendUint32(dst, e.clen)
	return binary.LittleEndian.AppendUint32(dst, e.ulen)
}

func appendSectionRec(dst []byte, ch Channel, part int, present bool, size int64, first, n uint32) []byte {
	var flags byte
	if present {
		flags = flagPresent
	}
	dst = append(dst, byte(ch), flags, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(part))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(size))
	dst = binary.LittleEndian.AppendUint32(dst, first)
	return binary.LittleEndian.AppendUint32(dst, n)
}

func appendTrailer(dst []byte, indexOffset, indexLength int64, indexCRC uint32, tab *crc32.Table) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(indexOffset))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(indexLength))
	dst = binary.LittleEndian.AppendUint32(dst, indexCRC)
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], tab))
	return append(dst, trailerMagic...)
}

// blockName names a block for error messages the way an operator would look
// for it: by section, ordinal and where it sits in the file.
func blockName(ch Channel, part, i int, fileOffset int64) string {
	return fmt.Sprintf("%s part %d block %d at file offset %d", ch, part, i, fileOffset)
}
