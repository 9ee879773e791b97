package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strconv"
)

// Bodies are generated deterministically and are distinct per post: every
// body starts with a header line naming its post number, followed by data
// cut from shared, read-only templates built once at start. Nothing is
// copied or compressed per post:
//
//   - -lines N: the header line and N-1 short log lines (one of a few dozen
//     precomputed variants, chosen by the post number).
//   - -size S up to pageSize: the header and a window of the template.
//   - -size S above pageSize: the header and pages of the template, streamed,
//     so a post of any size is sent in constant memory.
//
// With gzip, the body is a sequence of gzip members (RFC 1952 allows any
// number; gunzip, Go's gzip.Reader and weir read them as one stream): the
// header line in a member made by hand as a stored deflate block, then the
// precompressed member of each variant or page. So gzip bodies cost no
// compression per post either; the receiver decompresses every byte.

const (
	headerLen = 32      // "#weir-load post 000000000000042\n"
	pageSize  = 1 << 20 // page of a streamed body, and the largest body built in one piece
	nVariants = 64      // distinct line variants / windows for small bodies
	nPages    = 16      // distinct pages for streamed bodies
	slabSize  = 2 << 20 // template of log text for -size bodies (and a page more)
	// gzHeadLen is the size of the hand-made gzip member holding the header line.
	gzHeadLen = 10 + 5 + headerLen + 8
)

// plan describes the bodies of one run.
type plan struct {
	gz        bool
	chunk     int   // largest Read returned, so the chunk size with chunked encoding (0: as asked)
	size      int64 // uncompressed bytes per post; in lines mode, of variant 0
	linesMode bool

	// Small bodies: one piece after the header, variants[k%len].
	variants   [][]byte
	variantsGz [][]byte

	// Streamed bodies: nFull pages, pages[(k+i)%len], then tail.
	pages   [][]byte
	pagesGz [][]byte
	nFull   int64
	tail    []byte
	tailGz  []byte
}

// logLine appends one short log line (about 46 bytes) to b.
func logLine(b []byte, r *rand.Rand) []byte {
	levels := [...]string{"INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"}
	ops := [...]string{"read", "write", "login", "logout", "list", "sync", "open", "close"}
	codes := [...]int{200, 200, 200, 201, 204, 304, 400, 403, 404, 500}
	b = fmt.Appendf(b, "%02d:%02d:%02d.%03d %s web-%02d u=%05d %s %d %d\n",
		r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000), levels[r.IntN(len(levels))], r.IntN(40),
		r.IntN(100000), ops[r.IntN(len(ops))], codes[r.IntN(len(codes))], r.IntN(900))
	return b
}

// longLine appends one longer log line (about 150 bytes) to b.
func longLine(b []byte, r *rand.Rand) []byte {
	levels := [...]string{"INFO ", "DEBUG", "WARN ", "ERROR", "INFO ", "INFO "}
	services := [...]string{"auth", "billing", "gateway", "search", "ingest", "scheduler", "mailer"}
	actions := [...]string{"login", "logout", "read", "write", "delete", "refresh", "export", "import"}
	codes := [...]int{200, 200, 200, 201, 204, 400, 403, 404, 500}
	return fmt.Appendf(b, "2026-%02d-%02dT%02d:%02d:%02d.%03dZ %s host-%03d svc=%s user=u%05d action=%s status=%d latencyMs=%d req=%016x\n",
		1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000),
		levels[r.IntN(len(levels))], r.IntN(200), services[r.IntN(len(services))], r.IntN(100000),
		actions[r.IntN(len(actions))], codes[r.IntN(len(codes))], r.IntN(5000), r.Uint64())
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// gzipBytes compresses b into one gzip member at the default level.
func gzipBytes(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

// newLinesPlan: posts of n lines (the header and n-1 log lines).
func newLinesPlan(n int, gz bool, seed uint64) *plan {
	p := &plan{gz: gz, linesMode: true}
	r := newRand(seed)
	for v := 0; v < nVariants; v++ {
		var b []byte
		for i := 1; i < n; i++ {
			b = logLine(b, r)
		}
		p.variants = append(p.variants, b)
	}
	p.size = int64(min(n, 1)*headerLen + len(p.variants[0]))
	if n == 0 {
		p.variants = [][]byte{nil}
		p.size = 0
	}
	if gz {
		for _, v := range p.variants {
			p.variantsGz = append(p.variantsGz, gzipBytes(v))
		}
	}
	return p
}

// newSizePlan: posts of exactly size bytes (uncompressed).
func newSizePlan(size int64, gz bool, seed uint64) *plan {
	p := &plan{gz: gz, size: size}
	r := newRand(seed)
	slabLen := slabSize
	if size <= 64<<10 {
		slabLen = 256 << 10 // enough variety for small posts, quick to build
	}
	var slab []byte
	for len(slab) < slabLen+pageSize {
		slab = longLine(slab, r)
	}
	rest := size - headerLen
	if rest < 0 {
		rest = 0
	}
	if rest <= pageSize {
		nv := nVariants
		if rest > 0 && rest*nVariants > 4<<20 {
			nv = max(4, int(4<<20/rest)) // bounded work at start for big posts
		}
		stride := max((len(slab)-int(rest))/nv, 1)
		for v := 0; v < nv; v++ {
			p.variants = append(p.variants, slab[v*stride:v*stride+int(rest)])
		}
		if gz {
			for _, v := range p.variants {
				p.variantsGz = append(p.variantsGz, gzipBytes(v))
			}
		}
		return p
	}
	p.nFull = rest / pageSize
	np := int(min(nPages, p.nFull)) // a post of n pages needs no more than n distinct ones
	stride := (len(slab) - pageSize) / np
	for i := 0; i < np; i++ {
		p.pages = append(p.pages, slab[i*stride:i*stride+pageSize])
	}
	p.tail = slab[len(slab)-pageSize : len(slab)-pageSize+int(rest%pageSize)]
	if gz {
		for _, pg := range p.pages {
			p.pagesGz = append(p.pagesGz, gzipBytes(pg))
		}
		if len(p.tail) > 0 {
			p.tailGz = gzipBytes(p.tail)
		}
	}
	return p
}

// header writes post k's header line (headerLen bytes) into dst.
func header(dst []byte, k int64) {
	copy(dst, "#weir-load post 000000000000000\n")
	var num [20]byte
	n := strconv.AppendInt(num[:0], k, 10)
	copy(dst[headerLen-1-len(n):headerLen-1], n)
}

// gzHeader writes the first n bytes (n <= headerLen) of post k's header
// line as a complete gzip member (a stored deflate block) into dst, and
// returns its length, n+23.
func gzHeader(dst []byte, k int64, n int) int {
	copy(dst, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}) // magic, deflate, no flags, no mtime, unknown OS
	dst[10] = 1                                              // BFINAL, stored
	binary.LittleEndian.PutUint16(dst[11:], uint16(n))
	binary.LittleEndian.PutUint16(dst[13:], ^uint16(n))
	var h [headerLen]byte
	header(h[:], k)
	copy(dst[15:15+n], h[:n])
	binary.LittleEndian.PutUint32(dst[15+n:], crc32.ChecksumIEEE(dst[15:15+n]))
	binary.LittleEndian.PutUint32(dst[19+n:], uint32(n))
	return n + 23
}

// headLen is the uncompressed length of the header line of every post.
func (p *plan) headLen() int64 { return min(p.size, headerLen) }

// piece returns the i-th piece after the header of post k, and whether
// there is one.
func (p *plan) piece(k, i int64) ([]byte, bool) {
	if p.variants != nil {
		if i > 0 {
			return nil, false
		}
		v := int(k % int64(len(p.variants)))
		if p.gz {
			return p.variantsGz[v], true
		}
		return p.variants[v], true
	}
	switch {
	case i < p.nFull:
		j := int((k + i) % int64(len(p.pages)))
		if p.gz {
			return p.pagesGz[j], true
		}
		return p.pages[j], true
	case i == p.nFull && len(p.tail) > 0:
		if p.gz {
			return p.tailGz, true
		}
		return p.tail, true
	}
	return nil, false
}

// rawSize is the uncompressed size of post k.
func (p *plan) rawSize(k int64) int64 {
	if p.variants != nil {
		return p.headLen() + int64(len(p.variants[k%int64(len(p.variants))]))
	}
	return p.size
}

// wireSize is the number of bytes post k's body has on the wire.
func (p *plan) wireSize(k int64) int64 {
	if !p.gz {
		return p.rawSize(k)
	}
	n := int64(0)
	if p.headLen() > 0 {
		n = 23 + p.headLen()
	}
	for i := int64(0); ; i++ {
		b, ok := p.piece(k, i)
		if !ok {
			return n
		}
		n += int64(len(b))
	}
}

// body is the request body of post k: an io.ReadCloser that the HTTP client
// reads, with no allocation beyond itself.
type body struct {
	p    *plan
	k    int64
	head [gzHeadLen]byte
	cur  []byte
	next int64 // next piece
}

func (p *plan) body(k int64) *body {
	b := &body{p: p, k: k}
	switch {
	case p.headLen() == 0:
	case p.gz:
		b.cur = b.head[:gzHeader(b.head[:], k, int(p.headLen()))]
	default:
		header(b.head[:], k)
		b.cur = b.head[:p.headLen()]
	}
	return b
}

func (b *body) Read(dst []byte) (int, error) {
	if b.p.chunk > 0 && len(dst) > b.p.chunk {
		dst = dst[:b.p.chunk]
	}
	n := 0
	for n < len(dst) {
		if len(b.cur) == 0 {
			next, ok := b.p.piece(b.k, b.next)
			if !ok {
				break
			}
			b.cur = next
			b.next++
			continue
		}
		c := copy(dst[n:], b.cur)
		b.cur = b.cur[c:]
		n += c
	}
	if n == 0 && len(dst) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (b *body) Close() error { return nil }
