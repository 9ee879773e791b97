package receive

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// contentCodings is a request's Content-Encoding in lower case. A header on
// several lines is one list (RFC 9110 5.3): "identity" and "gzip" on two
// lines read as "identity, gzip", as on one line, and are refused alike,
// rather than the first line being decoded and the rest stored still
// compressed.
func contentCodings(h http.Header) string {
	vals := h.Values("Content-Encoding")
	if len(vals) <= 1 {
		return strings.ToLower(strings.TrimSpace(strings.Join(vals, "")))
	}
	parts := make([]string, 0, len(vals))
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			parts = append(parts, strings.ToLower(v))
		}
	}
	return strings.Join(parts, ", ")
}

// decoderPools reuses gzip readers, whose buffers are the main cost of
// starting one; the others are rare on the datafeed and made per post.
type decoderPools struct {
	gzip sync.Pool
}

// open returns a decoder for a content coding (gzip, x-gzip, deflate,
// zstd) reading from r, and a func that releases it.
func (d *decoderPools) open(coding string, r io.Reader) (io.Reader, func(), error) {
	switch coding {
	case "gzip", "x-gzip":
		// Multi-member gzip (concatenated files) is read as one stream, and
		// bytes after a member that do not start another are an error.
		if zr, ok := d.gzip.Get().(*gzip.Reader); ok {
			if err := zr.Reset(r); err != nil {
				d.gzip.Put(zr)
				return nil, nil, err
			}
			return zr, func() { d.gzip.Put(zr) }, nil
		}
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { d.gzip.Put(zr) }, nil
	case "deflate":
		// HTTP's deflate coding is the zlib format (RFC 9110). zlib stops at
		// the end of its stream; reading from an io.ByteReader it reads no
		// further, so what follows can be checked: as after gzip, bytes
		// there are an error, never silently dropped.
		br := bufio.NewReader(r)
		zr, err := zlib.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return &endChecked{r: zr, rest: br}, func() { _ = zr.Close() }, nil
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			// RFC 9659 bounds the zstd content coding's window at 8 MiB;
			// a bigger one lets a tiny body pin tens of MiB per post.
			zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return nil, nil, errorf(UnknownCompression, "Content-Encoding %q is not supported: use gzip (or x-gzip), deflate or zstd, or send the body as it is", coding)
}

// endChecked is a decoder whose end must also be the end of its input.
type endChecked struct {
	r    io.Reader
	rest io.ByteReader
}

func (e *endChecked) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		if _, rerr := e.rest.ReadByte(); rerr != io.EOF {
			if rerr == nil {
				rerr = errors.New("data after the end of the compressed stream")
			}
			return n, rerr
		}
	}
	return n, err
}
