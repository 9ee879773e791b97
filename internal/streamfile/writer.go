package streamfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"

	"github.com/klauspost/compress/s2"
)

// WriterOptions tunes a Writer.
type WriterOptions struct {
	// BlockSize is the number of uncompressed bytes per block; 0 means
	// DefaultBlockSize. At most 16 MiB.
	BlockSize int
}

// Writer writes one stream file sequentially. It is not safe for concurrent
// use; a stream is produced by one request handler.
//
// Memory is bounded regardless of stream size: the open section holds one
// block buffer, a compressed buffer is borrowed from the Codec only while a
// block is being emitted, and the index costs 24 bytes per block.
type Writer struct {
	w         io.Writer
	c         *Codec
	blockSize int

	off      int64 // bytes written to w so far
	nparts   int
	nblocks  int
	sections map[int]*wsection // key: part*numChannels + channel
	open     *sectionWriter
	closed   bool
	err      error // first write error; sticky because the file is then unusable

	// inflight are blocks being compressed on other goroutines, oldest
	// first; they are written in this order. A big stream compresses up
	// to pipelineDepth blocks at once, so one post uses every core while
	// its sender's bytes keep arriving.
	inflight []*pending
}

// pending is a block being compressed.
type pending struct {
	sec    *wsection
	ch     Channel
	part   int
	secOff int64
	raw    *[]byte // pooled copy of the uncompressed block
	out    *[]byte // pooled compressed block with its header, once done
	ulen   int
	done   chan struct{}
}

// pipelineDepth bounds the blocks of one stream being compressed at once
// (and so its memory: two pooled buffers per block).
var pipelineDepth = max(runtime.GOMAXPROCS(0), 2)

type wsection struct {
	size   int64
	blocks []blockEntry
}

func sectionKey(ch Channel, part int) int { return part*numChannels + int(ch) }

// NewWriter starts a stream file on w and writes its header. The caller owns
// w: the Writer never closes or syncs it.
func NewWriter(w io.Writer, c *Codec, opt WriterOptions) (*Writer, error) {
	if c == nil {
		return nil, errors.New("streamfile: new writer: nil Codec")
	}
	bs := opt.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if bs < 1 || bs > maxBlockSize {
		return nil, fmt.Errorf("streamfile: new writer: block size %d outside 1..%d", opt.BlockSize, maxBlockSize)
	}
	sw := &Writer{w: w, c: c, blockSize: bs, sections: make(map[int]*wsection)}
	hdr := appendHeader(make([]byte, 0, headerLen), fileHeader{blockSize: uint32(bs)}, c.crc)
	if err := sw.write(hdr); err != nil {
		return nil, fmt.Errorf("streamfile: write header: %w", err)
	}
	return sw, nil
}

// write writes all of b to the underlying writer and records the first
// failure, after which every operation fails: a stream file with a hole or a
// torn block cannot be completed correctly.
func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	n, err := w.w.Write(b)
	w.off += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}

// Open starts writing section (ch, part); see the package documentation for
// the ordering rules. The section is recorded as present even if nothing is
// written to it.
func (w *Writer) Open(ch Channel, part int) (io.WriteCloser, error) {
	switch {
	case w.closed:
		return nil, fmt.Errorf("streamfile: open %s part %d: writer is closed", ch, part)
	case w.err != nil:
		return nil, fmt.Errorf("streamfile: open %s part %d: earlier write failed: %w", ch, part, w.err)
	case !ch.valid():
		return nil, fmt.Errorf("streamfile: open %s part %d: invalid channel", ch, part)
	case part < 0 || part >= maxParts:
		return nil, fmt.Errorf("streamfile: open %s part %d: part outside 0..%d", ch, part, maxParts-1)
	case w.open != nil:
		return nil, fmt.Errorf("streamfile: open %s part %d: %s part %d is still open", ch, part, w.open.ch, w.open.part)
	}
	key := sectionKey(ch, part)
	if _, dup := w.sections[key]; dup {
		return nil, fmt.Errorf("streamfile: open %s part %d: section was already written", ch, part)
	}
	sec := &wsection{}
	w.sections[key] = sec
	w.nparts = max(w.nparts, part+1)
	w.open = &sectionWriter{w: w, sec: sec, ch: ch, part: part, buf: w.c.bufs.get(w.blockSize)}
	*w.open.buf = (*w.open.buf)[:0]
	return w.open, nil
}

// Close writes the index and trailer. The stream is complete only when Close
// returns nil; the caller then syncs and renames the file.
func (w *Writer) Close() error {
	if w.closed {
		return errors.New("streamfile: close writer: already closed")
	}
	if w.open != nil {
		return fmt.Errorf("streamfile: close writer: %s part %d is still open", w.open.ch, w.open.part)
	}
	if err := w.drain(0); err != nil {
		return fmt.Errorf("streamfile: close writer: %w", err)
	}
	if w.err != nil {
		return fmt.Errorf("streamfile: close writer: earlier write failed: %w", w.err)
	}
	if err := w.writeIndex(); err != nil {
		return fmt.Errorf("streamfile: write index: %w", err)
	}
	w.closed = true
	return nil
}

// writeIndex streams the index out in chunks so that Close needs no memory
// beyond one small buffer, even for files with many blocks or parts.
func (w *Writer) writeIndex() error {
	const chunk = 32 << 10
	pb := w.c.bufs.get(chunk)
	defer w.c.bufs.put(pb)
	buf := (*pb)[:0]

	indexOffset := w.off
	var crc uint32
	flush := func() error {
		crc = crc32.Update(crc, w.c.crc, buf)
		err := w.write(buf)
		buf = buf[:0]
		return err
	}

	buf = append(buf, indexMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(w.nparts))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(w.nblocks))
	buf = binary.LittleEndian.AppendUint32(buf, 0)
	var first uint32
	for part := 0; part < w.nparts; part++ {
		for ch := Channel(0); ch < numChannels; ch++ {
			sec := w.sections[sectionKey(ch, part)]
			if sec == nil {
				buf = appendSectionRec(buf, ch, part, false, 0, first, 0)
			} else {
				n := uint32(len(sec.blocks))
				buf = appendSectionRec(buf, ch, part, true, sec.size, first, n)
				first += n
			}
			if len(buf) > chunk-sectionRecLen {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	for part := 0; part < w.nparts; part++ {
		for ch := Channel(0); ch < numChannels; ch++ {
			sec := w.sections[sectionKey(ch, part)]
			if sec == nil {
				continue
			}
			for _, e := range sec.blocks {
				buf = appendBlockRec(buf, e)
				if len(buf) > chunk-blockRecLen {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	indexLength := w.off - indexOffset
	buf = appendTrailer(buf, indexOffset, indexLength, crc, w.c.crc)
	return w.write(buf)
}

// Size returns the number of bytes written to the underlying writer so far.
func (w *Writer) Size() int64 { return w.off }

// Parts returns the highest part opened so far plus one.
func (w *Writer) Parts() int { return w.nparts }

// SectionSize returns the uncompressed bytes accepted for (ch, part) so far,
// including bytes still buffered in an open section; 0 if absent.
func (w *Writer) SectionSize(ch Channel, part int) int64 {
	if !ch.valid() || part < 0 {
		return 0 // would alias another section's key
	}
	if sec := w.sections[sectionKey(ch, part)]; sec != nil {
		return sec.size
	}
	return 0
}

// sectionWriter is the io.WriteCloser Open returns.
type sectionWriter struct {
	w      *Writer
	sec    *wsection
	ch     Channel
	part   int
	buf    *[]byte // pooled, capacity >= blockSize; nil once closed
	secOff int64   // section offset of the first byte in buf
	// last is the S2 block of the bytes in buf (pooled), given by
	// WriteS2Block: kept if they turn out to be the section's last.
	last *[]byte
}

func (s *sectionWriter) Write(p []byte) (int, error) {
	if s.buf == nil {
		return 0, fmt.Errorf("streamfile: write %s part %d: section is closed", s.ch, s.part)
	}
	w := s.w
	if w.err != nil {
		return 0, fmt.Errorf("streamfile: write %s part %d: earlier write failed: %w", s.ch, s.part, w.err)
	}
	s.dropLast()
	bs := w.blockSize
	written := 0
	for len(p) > 0 {
		if len(*s.buf) == 0 && len(p) >= bs {
			// A whole block is at hand: compress it from the caller's
			// slice instead of copying it through the buffer first.
			if err := s.emit(p[:bs]); err != nil {
				return written, fmt.Errorf("streamfile: write %s part %d: %w", s.ch, s.part, err)
			}
			p = p[bs:]
			written += bs
			s.sec.size += int64(bs)
			continue
		}
		buf := *s.buf
		n := copy(buf[len(buf):bs], p)
		*s.buf = buf[:len(buf)+n]
		p = p[n:]
		written += n
		s.sec.size += int64(n)
		if len(*s.buf) == bs {
			if err := s.flush(); err != nil {
				return written, fmt.Errorf("streamfile: write %s part %d: %w", s.ch, s.part, err)
			}
		}
	}
	return written, nil
}

// flush emits the buffered bytes, if any, as the section's last block.
func (s *sectionWriter) flush() error {
	if err := s.w.err; err != nil {
		return err
	}
	if len(*s.buf) == 0 {
		return nil
	}
	var err error
	if s.last != nil {
		err = s.keep(*s.last, len(*s.buf))
		s.dropLast()
	} else {
		err = s.emit(*s.buf)
	}
	if err != nil {
		return err
	}
	*s.buf = (*s.buf)[:0]
	return nil
}

// emit compresses src and writes it as the section's next block. A full
// block, or any block while others are in flight, is compressed on its own
// goroutine (src is copied: the caller reuses it); a stream's only, short
// block is compressed here, which is all a small post ever does.
func (s *sectionWriter) emit(src []byte) error {
	w := s.w
	if w.err != nil {
		return w.err
	}
	if w.nblocks+len(w.inflight) >= maxBlocks {
		return fmt.Errorf("stream has the maximum of %d blocks", maxBlocks)
	}
	if len(w.inflight) == 0 && (len(src) < w.blockSize || pipelineDepth < 2) {
		cb := w.c.bufs.get(compressBound(len(src)))
		defer w.c.bufs.put(cb)
		w.compress(cb, s.ch, s.part, s.secOff, src)
		return s.put(*cb, len(src))
	}
	if err := w.drain(pipelineDepth - 1); err != nil {
		return err
	}
	p := &pending{sec: s.sec, ch: s.ch, part: s.part, secOff: s.secOff, ulen: len(src),
		raw: w.c.bufs.get(len(src)), out: w.c.bufs.get(compressBound(len(src))), done: make(chan struct{})}
	*p.raw = append((*p.raw)[:0], src...)
	w.inflight = append(w.inflight, p)
	go func() {
		w.compress(p.out, p.ch, p.part, p.secOff, *p.raw)
		close(p.done)
	}()
	s.secOff += int64(len(src))
	return nil
}

// put writes b, a block with its header holding ulen bytes, as the
// section's next block.
func (s *sectionWriter) put(b []byte, ulen int) error {
	w := s.w
	e := blockEntry{fileOffset: w.off, secOffset: s.secOff, clen: uint32(len(b) - blockHeaderLen), ulen: uint32(ulen)}
	if err := w.write(b); err != nil {
		return err
	}
	s.sec.blocks = append(s.sec.blocks, e)
	w.nblocks++
	s.secOff += int64(ulen)
	return nil
}

// WriteS2Block writes data as Write does, given block, an S2 block
// (github.com/klauspost/compress/s2's block format) that decodes to data,
// as the caller has checked. When the Writer compresses with S2, nothing
// is buffered, data fits in a block and block is smaller, block is kept
// as it is, sparing its compression: a weir proxy's zips of S2 entries
// carry the blocks its own store made. A full block is written at once;
// a shorter one only if nothing follows it in the section (it is then
// its last block, as Write would make it), since a sender of tiny blocks
// would otherwise make as many blocks, each a header in the file and an
// entry in the index. Otherwise data is written as Write writes it.
func (s *sectionWriter) WriteS2Block(data, block []byte) (int, error) {
	w := s.w
	if s.buf == nil || w.err != nil || w.c.comp != S2 || len(*s.buf) != 0 ||
		len(data) == 0 || len(data) > w.blockSize || len(block) == 0 || len(block) >= len(data) {
		return s.Write(data)
	}
	// What the block says it decodes to, at the cost of reading a varint:
	// a block that is not data's would be stored, and found only when read.
	if n, err := s2.DecodedLen(block); err != nil || n != len(data) {
		return s.Write(data)
	}
	if len(data) < w.blockSize {
		n, err := s.Write(data) // buffered: the buffer was empty
		if err == nil {
			s.last = w.c.bufs.get(len(block))
			copy(*s.last, block)
		}
		return n, err
	}
	if err := s.keep(block, len(data)); err != nil {
		return 0, fmt.Errorf("streamfile: write %s part %d: %w", s.ch, s.part, err)
	}
	s.sec.size += int64(len(data))
	return len(data), nil
}

// keep writes block, an S2 block of ulen bytes, as the section's next
// block.
func (s *sectionWriter) keep(block []byte, ulen int) error {
	w := s.w
	if w.nblocks+len(w.inflight) >= maxBlocks {
		return fmt.Errorf("stream has the maximum of %d blocks", maxBlocks)
	}
	// The blocks being compressed come first.
	if err := w.drain(0); err != nil {
		return err
	}
	cb := w.c.bufs.get(blockHeaderLen + len(block))
	defer w.c.bufs.put(cb)
	out := append((*cb)[:blockHeaderLen], block...)
	putBlockHeader(out, blockHeader{channel: s.ch, encoding: encS2, part: uint32(s.part), secOffset: uint64(s.secOff),
		clen: uint32(len(block)), ulen: uint32(ulen)}, block, w.c.crc)
	return s.put(out, ulen)
}

// dropLast forgets the short S2 block of the buffered bytes: more bytes
// follow them.
func (s *sectionWriter) dropLast() {
	if s.last != nil {
		s.w.c.bufs.put(s.last)
		s.last = nil
	}
}

// minCompressSize is the smallest block worth compressing. zstd's cost per
// block is mostly fixed below a few KiB (building its tables took about as
// long as compressing 30 KiB of log text, measured on the receive path's
// 1 KiB posts and their meta sections), while the bytes it saves there are
// few, beside the stream's metadata row.
const minCompressSize = 4 << 10

// compress fills *cb with src's block: its header and its compressed (or,
// when that is not smaller, raw) payload.
func (w *Writer) compress(cb *[]byte, ch Channel, part int, secOff int64, src []byte) {
	var out []byte
	enc := uint8(encRaw)
	if len(src) >= w.c.minCompress {
		// Compress behind room for the header so header and payload go
		// out in one Write.
		switch w.c.comp {
		case Zstd:
			out = w.c.enc.EncodeAll(src, (*cb)[:blockHeaderLen])
			enc = encZstd
		case S2:
			// The buffer's capacity (compressBound) is at least
			// s2.MaxEncodedLen, so Encode writes in place.
			if room := (*cb)[blockHeaderLen:cap(*cb)]; len(room) >= s2.MaxEncodedLen(len(src)) {
				out = (*cb)[:blockHeaderLen+len(s2.Encode(room, src))]
				enc = encS2
			}
		}
	}
	if enc == encRaw || len(out)-blockHeaderLen >= len(src) {
		// Small or incompressible: storing raw is as good and faster.
		enc = encRaw
		out = append((*cb)[:blockHeaderLen], src...)
	}
	*cb = out // let put see a reallocation, should EncodeAll ever make one
	payload := out[blockHeaderLen:]
	h := blockHeader{
		channel:   ch,
		encoding:  enc,
		part:      uint32(part),
		secOffset: uint64(secOff),
		clen:      uint32(len(payload)),
		ulen:      uint32(len(src)),
	}
	putBlockHeader(out, h, payload, w.c.crc)
}

// drain writes finished blocks, oldest first, until at most keep are in
// flight.
func (w *Writer) drain(keep int) error {
	for len(w.inflight) > keep {
		p := w.inflight[0]
		<-p.done
		w.inflight = w.inflight[1:]
		if w.err == nil {
			e := blockEntry{fileOffset: w.off, secOffset: p.secOff, clen: uint32(len(*p.out) - blockHeaderLen), ulen: uint32(p.ulen)}
			if err := w.write(*p.out); err == nil {
				p.sec.blocks = append(p.sec.blocks, e)
				w.nblocks++
			}
		}
		w.c.bufs.put(p.raw)
		w.c.bufs.put(p.out)
	}
	return w.err
}

// Close flushes the last partial block and ends the section. The section
// stays recorded as present even if the flush fails, since its earlier blocks
// may already be in the file; the Writer is then failed anyway.
func (s *sectionWriter) Close() error {
	if s.buf == nil {
		return fmt.Errorf("streamfile: close %s part %d: section is already closed", s.ch, s.part)
	}
	err := s.flush()
	s.dropLast()
	s.w.c.bufs.put(s.buf)
	s.buf = nil
	s.w.open = nil
	if err != nil {
		return fmt.Errorf("streamfile: close %s part %d: %w", s.ch, s.part, err)
	}
	return nil
}
