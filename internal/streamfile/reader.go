package streamfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"slices"
	"sort"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Reader gives random access to the sections of a complete stream file. It
// holds only the parsed index; block bytes are read on demand. It is safe for
// concurrent use.
type Reader struct {
	ra          io.ReaderAt
	c           *Codec
	blockSize   uint32
	indexOffset int64
	sections    []rsection // 3 per part, part-major, as in the file
}

type rsection struct {
	present bool
	size    int64
	blocks  []blockEntry
}

// NewReader opens the stream file of the given size read through ra. It reads
// and checks the header, trailer and index (including that the blocks tile
// the file exactly), so a truncated, partially written or damaged file fails
// here with an error wrapping ErrCorrupt. Block payloads are checked when
// read.
func NewReader(ra io.ReaderAt, size int64, c *Codec) (*Reader, error) {
	if c == nil {
		return nil, errors.New("streamfile: open: nil Codec")
	}
	r := &Reader{ra: ra, c: c}
	if err := r.load(size); err != nil {
		return nil, fmt.Errorf("streamfile: open: %w", err)
	}
	return r, nil
}

// readFull reads len(b) bytes at off. Running out of file is corruption (the
// index promised the bytes); any other failure is passed on as an I/O error.
// what is called only on failure, so the hot path formats nothing.
func readFull(ra io.ReaderAt, b []byte, off int64, what func() string) error {
	n, err := ra.ReadAt(b, off)
	if n == len(b) {
		return nil // io.EOF alongside a full read is allowed by io.ReaderAt
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corruptf("%s: short read at offset %d: got %d of %d bytes", what(), off, n, len(b))
	}
	return fmt.Errorf("read %s at offset %d: %w", what(), off, err)
}

func label(s string) func() string { return func() string { return s } }

func (r *Reader) load(size int64) error {
	tab := r.c.crc
	if size < headerLen+trailerLen {
		return corruptf("file is %d bytes, shorter than header and trailer (%d)", size, headerLen+trailerLen)
	}

	var hb [headerLen]byte
	if err := readFull(r.ra, hb[:], 0, label("header")); err != nil {
		return err
	}
	h, err := parseHeader(hb[:], tab)
	if err != nil {
		return err
	}
	r.blockSize = h.blockSize

	var tb [trailerLen]byte
	trailerOffset := size - trailerLen
	if err := readFull(r.ra, tb[:], trailerOffset, label("trailer")); err != nil {
		return err
	}
	if string(tb[24:]) != trailerMagic {
		return corruptf("trailer: bad magic %q at offset %d, want %q (file truncated or not completely written?)", tb[24:], trailerOffset+24, trailerMagic)
	}
	if got, want := binary.LittleEndian.Uint32(tb[20:]), crc32.Checksum(tb[:20], tab); got != want {
		return corruptf("trailer: checksum mismatch (stored %#08x, computed %#08x)", got, want)
	}
	indexOffset := binary.LittleEndian.Uint64(tb[0:])
	indexLength := binary.LittleEndian.Uint64(tb[8:])
	indexCRC := binary.LittleEndian.Uint32(tb[16:])
	// Checked in this order so no sum can overflow; afterwards the index is
	// known to lie inside the file, which bounds what is allocated for it.
	if indexOffset < headerLen || indexOffset > uint64(trailerOffset) || indexLength != uint64(trailerOffset)-indexOffset {
		return corruptf("trailer: index at offset %d length %d does not end where the trailer starts (%d)", indexOffset, indexLength, trailerOffset)
	}
	if indexLength < indexHeaderLen {
		return corruptf("trailer: index length %d is shorter than the index header (%d)", indexLength, indexHeaderLen)
	}
	r.indexOffset = int64(indexOffset)

	idx := make([]byte, indexLength)
	if err := readFull(r.ra, idx, r.indexOffset, label("index")); err != nil {
		return err
	}
	if got := crc32.Checksum(idx, tab); got != indexCRC {
		return corruptf("index at offset %d: checksum mismatch (stored %#08x, computed %#08x)", indexOffset, indexCRC, got)
	}
	return r.parseIndex(idx)
}

// parseIndex decodes and cross-checks the index. The CRC has matched, so a
// failure here means a writer bug or deliberate forgery rather than bit rot;
// it is still reported as corruption, and every count is checked against the
// index length before anything is allocated from it.
func (r *Reader) parseIndex(idx []byte) error {
	if string(idx[:4]) != indexMagic {
		return corruptf("index: bad magic %q, want %q", idx[:4], indexMagic)
	}
	nparts := uint64(binary.LittleEndian.Uint32(idx[4:]))
	nblocks := uint64(binary.LittleEndian.Uint32(idx[8:]))
	if v := binary.LittleEndian.Uint32(idx[12:]); v != 0 {
		return corruptf("index: reserved field is %#08x, want 0", v)
	}
	if nparts > maxParts {
		return corruptf("index: %d parts, more than the limit %d", nparts, maxParts)
	}
	want := indexHeaderLen + nparts*numChannels*sectionRecLen + nblocks*blockRecLen
	if want != uint64(len(idx)) {
		return corruptf("index: %d parts and %d blocks need %d bytes, index has %d", nparts, nblocks, want, len(idx))
	}
	secRecs := idx[indexHeaderLen : indexHeaderLen+nparts*numChannels*sectionRecLen]
	blockRecs := idx[indexHeaderLen+len(secRecs):]

	blocks := make([]blockEntry, nblocks)
	for i := range blocks {
		b := blockRecs[i*blockRecLen:]
		blocks[i] = blockEntry{
			fileOffset: int64(binary.LittleEndian.Uint64(b[0:])),
			secOffset:  int64(binary.LittleEndian.Uint64(b[8:])),
			clen:       binary.LittleEndian.Uint32(b[16:]),
			ulen:       binary.LittleEndian.Uint32(b[20:]),
		}
	}

	r.sections = make([]rsection, nparts*numChannels)
	var next uint64 // next unclaimed block record
	for i := range r.sections {
		s := secRecs[i*sectionRecLen:]
		ch, part := Channel(i%numChannels), i/numChannels
		name := func() string { return fmt.Sprintf("index: %s part %d", ch, part) }
		if Channel(s[0]) != ch || binary.LittleEndian.Uint32(s[4:]) != uint32(part) {
			return corruptf("%s: record %d names channel %d part %d", name(), i, s[0], binary.LittleEndian.Uint32(s[4:]))
		}
		flags, reserved := s[1], binary.LittleEndian.Uint16(s[2:])
		if flags&^flagPresent != 0 || reserved != 0 {
			return corruptf("%s: unknown flags %#02x or reserved bits %#04x", name(), flags, reserved)
		}
		size := binary.LittleEndian.Uint64(s[8:])
		first := uint64(binary.LittleEndian.Uint32(s[16:]))
		n := uint64(binary.LittleEndian.Uint32(s[20:]))
		if first != next || n > nblocks-next {
			return corruptf("%s: blocks %d..+%d, want them to start at %d and stay within %d", name(), first, n, next, nblocks)
		}
		present := flags&flagPresent != 0
		if !present && (size != 0 || n != 0) {
			return corruptf("%s: absent but has size %d and %d blocks", name(), size, n)
		}
		sec := rsection{present: present, blocks: blocks[first : first+n : first+n]}
		var secOff int64
		for j, e := range sec.blocks {
			bn := func() string { return blockName(ch, part, j, e.fileOffset) }
			if e.secOffset != secOff {
				return corruptf("index: %s: section offset %d, want %d", bn(), e.secOffset, secOff)
			}
			if e.ulen == 0 || e.ulen > r.blockSize || e.clen == 0 || e.clen > e.ulen {
				return corruptf("index: %s: lengths compressed %d, uncompressed %d outside 1 <= compressed <= uncompressed <= block size %d", bn(), e.clen, e.ulen, r.blockSize)
			}
			if e.fileOffset < headerLen || e.fileOffset > r.indexOffset-blockHeaderLen-int64(e.clen) {
				return corruptf("index: %s: %d bytes do not fit between header and index (%d..%d)", bn(), blockHeaderLen+int64(e.clen), headerLen, r.indexOffset)
			}
			secOff += int64(e.ulen)
		}
		if uint64(secOff) != size {
			return corruptf("%s: size %d, but its blocks hold %d bytes", name(), size, secOff)
		}
		sec.size = secOff
		r.sections[i] = sec
		next += n
	}
	if next != nblocks {
		return corruptf("index: %d block records, sections claim %d", nblocks, next)
	}
	return r.checkTiling(blocks)
}

// checkTiling verifies the blocks cover [header, index) exactly once. That
// catches an index pointing into the middle of a block or at garbage, which a
// per-block CRC would only report later, as a confusing read error.
func (r *Reader) checkTiling(blocks []blockEntry) error {
	sorted := slices.Clone(blocks)
	slices.SortFunc(sorted, func(a, b blockEntry) int {
		switch {
		case a.fileOffset < b.fileOffset:
			return -1
		case a.fileOffset > b.fileOffset:
			return 1
		}
		return 0
	})
	pos := int64(headerLen)
	for _, e := range sorted {
		if e.fileOffset != pos {
			return corruptf("index: block at file offset %d, want the next block at %d (gap or overlap)", e.fileOffset, pos)
		}
		pos += blockHeaderLen + int64(e.clen)
	}
	if pos != r.indexOffset {
		return corruptf("index: blocks end at file offset %d, but the index starts at %d", pos, r.indexOffset)
	}
	return nil
}

func (r *Reader) section(ch Channel, part int) *rsection {
	if !ch.valid() || part < 0 || part >= r.Parts() {
		return nil
	}
	return &r.sections[sectionKey(ch, part)]
}

// Parts returns the number of parts of the stream.
func (r *Reader) Parts() int { return len(r.sections) / numChannels }

// Has reports whether section (ch, part) was written (possibly empty).
func (r *Reader) Has(ch Channel, part int) bool {
	s := r.section(ch, part)
	return s != nil && s.present
}

// Size returns the uncompressed size of (ch, part), 0 if absent.
func (r *Reader) Size(ch Channel, part int) int64 {
	if s := r.section(ch, part); s != nil {
		return s.size
	}
	return 0
}

// Section returns random access to the uncompressed bytes of (ch, part). Each
// call returns an independent reader with its own one-block cache, so a
// sequential pass (io.Copy) inflates every block once; the reader is safe for
// concurrent ReadAt calls. An absent section is an error wrapping
// fs.ErrNotExist.
func (r *Reader) Section(ch Channel, part int) (*io.SectionReader, error) {
	s := r.section(ch, part)
	if s == nil || !s.present {
		return nil, fmt.Errorf("streamfile: section %s part %d: %w", ch, part, fs.ErrNotExist)
	}
	sra := &sectionReaderAt{r: r, sec: s, ch: ch, part: part, cacheIdx: -1}
	return io.NewSectionReader(sra, 0, s.size), nil
}

// sectionReaderAt inflates the blocks of one section on demand.
type sectionReaderAt struct {
	r    *Reader
	sec  *rsection
	ch   Channel
	part int

	// The cache holds the last block inflated for a partial read. It is
	// only touched under mu, and a replaced buffer goes back to the pool
	// only after it can no longer be reached, so concurrent ReadAts are safe
	// without holding the lock while inflating.
	mu       sync.Mutex
	cacheIdx int
	cache    *[]byte
}

func (s *sectionReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("streamfile: read %s part %d: negative offset %d", s.ch, s.part, off)
	}
	size := s.sec.size
	if off >= size {
		return 0, io.EOF
	}
	want := p
	if rem := size - off; int64(len(want)) > rem {
		want = want[:rem]
	}
	blocks := s.sec.blocks
	i := sort.Search(len(blocks), func(i int) bool {
		return blocks[i].secOffset+int64(blocks[i].ulen) > off
	})
	n := 0
	for ; n < len(want); i++ {
		e := blocks[i]
		in := off + int64(n) - e.secOffset
		dst := want[n:]
		if m, ok := s.fromCache(i, dst, in); ok {
			n += m
			continue
		}
		if in == 0 && len(dst) >= int(e.ulen) {
			// The whole block is wanted: inflate straight into the caller's
			// buffer, sparing a copy and the cache.
			if err := s.readBlock(i, dst[:e.ulen]); err != nil {
				return n, err
			}
			n += int(e.ulen)
			continue
		}
		pb := s.r.c.bufs.get(int(e.ulen))
		if err := s.readBlock(i, *pb); err != nil {
			s.r.c.bufs.put(pb)
			return n, err
		}
		n += copy(dst, (*pb)[in:])
		s.setCache(i, pb)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *sectionReaderAt) fromCache(i int, dst []byte, in int64) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil || s.cacheIdx != i {
		return 0, false
	}
	return copy(dst, (*s.cache)[in:]), true
}

func (s *sectionReaderAt) setCache(i int, pb *[]byte) {
	s.mu.Lock()
	old := s.cache
	s.cache, s.cacheIdx = pb, i
	s.mu.Unlock()
	if old != nil {
		s.r.c.bufs.put(old)
	}
}

// Verify reads every block of the file and checks it against its CRC and
// the index, without inflating it: the header, trailer and index were
// checked by NewReader, so a nil error means every byte of the file is as
// written. A damaged block is an error wrapping ErrCorrupt; a failed read
// is passed on as an I/O error.
func (r *Reader) Verify() error {
	for i := range r.sections {
		sec := &r.sections[i]
		s := &sectionReaderAt{r: r, sec: sec, ch: Channel(i % numChannels), part: i / numChannels}
		for j := range sec.blocks {
			pb, err := s.checkBlock(j)
			if pb != nil {
				r.c.bufs.put(pb)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkBlock reads block i of the section (its header and payload, into a
// buffer of the pool, returned also on failure) and verifies it against
// its CRC and the index.
func (s *sectionReaderAt) checkBlock(i int) (*[]byte, error) {
	r := s.r
	e := s.sec.blocks[i]
	// Named only on failure: formatting it per read would cost an
	// allocation on the hot path.
	name := func() string { return blockName(s.ch, s.part, i, e.fileOffset) }
	pb := r.c.bufs.get(blockHeaderLen + int(e.clen))
	raw := *pb
	if err := readFull(r.ra, raw, e.fileOffset, name); err != nil {
		return pb, fmt.Errorf("streamfile: %w", err)
	}
	h, reserved := parseBlockHeader(raw)
	payload := raw[blockHeaderLen:]
	tab := r.c.crc
	if got := crc32.Update(crc32.Checksum(raw[:24], tab), tab, payload); got != h.crc {
		return pb, corruptf("streamfile: %s: checksum mismatch (stored %#08x, computed %#08x)", name(), h.crc, got)
	}
	if h.channel != s.ch || h.part != uint32(s.part) || h.secOffset != uint64(e.secOffset) ||
		h.clen != e.clen || h.ulen != e.ulen || reserved != 0 {
		return pb, corruptf("streamfile: %s: header (%s part %d offset %d, %d→%d bytes) disagrees with the index (offset %d, %d→%d bytes)",
			name(), h.channel, h.part, h.secOffset, h.clen, h.ulen, e.secOffset, e.clen, e.ulen)
	}
	return pb, nil
}

// readBlock reads block i of the section, verifies it against its CRC and the
// index, and inflates it into dst, whose length is the block's ulen.
func (s *sectionReaderAt) readBlock(i int, dst []byte) error {
	pb, err := s.checkBlock(i)
	defer s.r.c.bufs.put(pb)
	if err != nil {
		return err
	}
	_, err = s.inflate(i, *pb, dst)
	return err
}

// inflate decodes block i of the section, read and checked by checkBlock
// into raw, into dst, whose length is the block's ulen. It returns the
// block's encoding.
func (s *sectionReaderAt) inflate(i int, raw, dst []byte) (uint8, error) {
	r := s.r
	name := func() string { return blockName(s.ch, s.part, i, s.sec.blocks[i].fileOffset) }
	h, _ := parseBlockHeader(raw)
	payload := raw[blockHeaderLen:]
	switch h.encoding {
	case encRaw:
		if h.clen != h.ulen {
			return h.encoding, corruptf("streamfile: %s: raw block of %d bytes declares %d uncompressed", name(), h.clen, h.ulen)
		}
		copy(dst, payload)
	case encZstd:
		out, err := r.c.dec.DecodeAll(payload, dst[:0:len(dst)])
		if errors.Is(err, zstd.ErrDecoderClosed) {
			return h.encoding, fmt.Errorf("streamfile: %s: %w", name(), err)
		}
		if err != nil {
			return h.encoding, corruptf("streamfile: %s: inflate: %v", name(), err)
		}
		if len(out) != len(dst) || &out[0] != &dst[0] {
			return h.encoding, corruptf("streamfile: %s: inflated to %d bytes, index says %d", name(), len(out), len(dst))
		}
	case encS2:
		// Check the declared length first: Decode would allocate for a
		// longer one.
		if n, err := s2.DecodedLen(payload); err != nil || n != len(dst) {
			return h.encoding, corruptf("streamfile: %s: s2 block declares %d bytes (%v), index says %d", name(), n, err, len(dst))
		}
		out, err := s2.Decode(dst[:0:len(dst)], payload)
		if err != nil {
			return h.encoding, corruptf("streamfile: %s: inflate: %v", name(), err)
		}
		if len(out) != len(dst) || &out[0] != &dst[0] {
			return h.encoding, corruptf("streamfile: %s: inflated to %d bytes, index says %d", name(), len(out), len(dst))
		}
	default:
		return h.encoding, corruptf("streamfile: %s: unknown encoding %d", name(), h.encoding)
	}
	return h.encoding, nil
}

// Blocks calls fn with each block of section (ch, part), in order: data is
// the block's bytes, and s2block the block as stored when that is one S2
// block (github.com/klauspost/compress/s2's block format; nil when the
// block is stored another way). Both are valid only during the call. Each
// block is checked as a read checks it. fn's error stops the walk and is
// returned as it is; an absent section is an error wrapping
// fs.ErrNotExist.
//
// It is for passing a section on in S2 without compressing it again (a
// proxy forwarding to weir): decoding an S2 block costs a fraction of
// encoding it, and the receiver needs the checksums of the bytes.
func (r *Reader) Blocks(ch Channel, part int, fn func(data, s2block []byte) error) error {
	sec := r.section(ch, part)
	if sec == nil || !sec.present {
		return fmt.Errorf("streamfile: section %s part %d: %w", ch, part, fs.ErrNotExist)
	}
	s := &sectionReaderAt{r: r, sec: sec, ch: ch, part: part, cacheIdx: -1}
	for i, e := range sec.blocks {
		err := func() error {
			pb, err := s.checkBlock(i)
			defer r.c.bufs.put(pb)
			if err != nil {
				return err
			}
			db := r.c.bufs.get(int(e.ulen))
			defer r.c.bufs.put(db)
			data := (*db)[:e.ulen]
			enc, err := s.inflate(i, *pb, data)
			if err != nil {
				return err
			}
			var s2block []byte
			if enc == encS2 {
				s2block = (*pb)[blockHeaderLen:]
			}
			return fn(data, s2block)
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// StoredSize returns the bytes that the blocks of (ch, part) take in the
// file, their headers left out: what Blocks hands over, compressed; 0 if
// the section is absent.
func (r *Reader) StoredSize(ch Channel, part int) int64 {
	sec := r.section(ch, part)
	if sec == nil {
		return 0
	}
	var n int64
	for _, e := range sec.blocks {
		n += int64(e.clen)
	}
	return n
}

// BlockSize returns the file's block size: no block holds more bytes.
func (r *Reader) BlockSize() int { return int(r.blockSize) }
