// Package streamfile reads and writes weir's on-disk stream files.
//
// A stream is what one post becomes: 1..n parts, each with up to three
// channels (Data, Context, Meta Data). A stream file is written once,
// sequentially, and never modified. Every (channel, part) section is cut into
// independently compressed blocks so that any byte range of any section can
// be read by inflating only the blocks that cover it, and every block and the
// index carry a CRC-32C so corruption is reported (as ErrCorrupt) rather than
// served.
//
// # Layout (format version 1)
//
// All integers are little-endian and unsigned. "crc32c" is CRC-32 with the
// Castagnoli polynomial (hash/crc32.Castagnoli), standard init and final xor.
// Offsets are absolute file offsets unless said otherwise. A file is:
//
//	header (24 bytes) | block* | index | trailer (32 bytes)
//
// The blocks exactly tile the bytes between the header and the index: no gaps,
// no overlaps. A reader can rely on that; this package checks it on open.
//
// Header, at offset 0, 24 bytes:
//
//	off size field
//	  0    8 magic      "WEIRSTRM"
//	  8    2 version    1
//	 10    2 flags      0 (reserved; readers reject other values)
//	 12    4 blockSize  the writer's uncompressed block size, 1..16 MiB;
//	                    no block of this file inflates to more than this
//	 16    4 reserved   0
//	 20    4 crc32c of header bytes [0, 20)
//
// Block, anywhere in [24, indexOffset), a 28-byte header then the payload:
//
//	off size field
//	  0    1 channel    0 = Data, 1 = Context, 2 = Meta Data
//	  1    1 encoding   0 = raw (payload is the bytes themselves),
//	                    1 = zstd (payload is one or more zstd frames),
//	                    2 = s2 (payload is one S2 block, github.com/klauspost/compress/s2)
//	  2    2 reserved   0
//	  4    4 part       0-based part number
//	  8    8 secOffset  offset of the block's first uncompressed byte within
//	                    its section
//	 16    4 clen       payload length in bytes, 1..ulen
//	 20    4 ulen       uncompressed length, 1..blockSize
//	 24    4 crc32c of block-header bytes [0, 24) followed by the payload
//	 28 clen payload
//
// A writer stores a block raw when compression would not make it smaller
// (and, by default, when it is under 4 KiB, where compressing costs more
// than it saves), so clen <= ulen always holds and raw blocks have clen == ulen. All blocks of a
// section are written in order and are full (ulen == blockSize) except the
// last, unless the writer was handed S2 blocks compressed elsewhere
// (WriteS2Block: a weir proxy's blocks, kept as they came), which may be
// shorter; readers must not depend on it: the index is authoritative.
//
// Index, at indexOffset (right after the last block, or at 24 if there are
// none), indexLength = 16 + 72*nparts + 24*nblocks bytes:
//
//	index header, 16 bytes:
//	  0    4 magic      "WIDX"
//	  4    4 nparts     number of parts (highest part written + 1; may be 0)
//	  8    4 nblocks    number of block records
//	 12    4 reserved   0
//
//	section table: 3*nparts records of 24 bytes, part-major, so record
//	i describes channel i%3 of part i/3 (part 0 Data, part 0 Context,
//	part 0 Meta Data, part 1 Data, ...). Absent sections are listed too:
//	  0    1 channel    must equal i%3
//	  1    1 flags      bit 0: present; other bits 0
//	  2    2 reserved   0
//	  4    4 part       must equal i/3
//	  8    8 size       total uncompressed bytes (0 if absent; a present
//	                    section may be empty)
//	 16    4 firstBlock index of its first record in the block table
//	 20    4 nblocks    number of its block records (0 if absent or empty)
//
//	block table: nblocks records of 24 bytes. The records of each section are
//	contiguous, in section-table order, so firstBlock of each section equals
//	the sum of nblocks of the sections before it. Within a section they are
//	in ascending secOffset: the first has secOffset 0, each next one starts
//	where the previous ended, and the ulens add up to the section's size.
//	  0    8 fileOffset offset of the block header
//	  8    8 secOffset  as in the block header
//	 16    4 clen       as in the block header
//	 20    4 ulen       as in the block header
//
// Trailer, the last 32 bytes of the file:
//
//	off size field
//	  0    8 indexOffset
//	  8    8 indexLength
//	 16    4 crc32c of the index bytes [indexOffset, indexOffset+indexLength)
//	 20    4 crc32c of trailer bytes [0, 20)
//	 24    8 magic      "WEIRSEND"
//
// indexOffset + indexLength + 32 must equal the file size, so a file that was
// cut short, or is still being written, has no valid trailer and is rejected.
//
// # Reading a range
//
// To read bytes [off, off+n) of a section, binary-search its block records
// for the one whose [secOffset, secOffset+ulen) contains off, then for each
// block up to off+n: read 28+clen bytes at fileOffset, check the crc32c, check
// that channel, part, secOffset, clen and ulen equal the index record, inflate
// (zstd, s2) or take (raw) the payload, and check it is exactly ulen bytes.
//
// # Limits
//
// Block size is at most 16 MiB, which also bounds the decoder's memory per
// block; part numbers are below 1<<20; a file has fewer than 1<<32 blocks.
package streamfile
