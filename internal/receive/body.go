package receive

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// bodyReader reads the request body: it bounds its size, gives up on a
// sender that stops sending, and remembers the first failure as a status so
// that a decoder's own error never hides the real cause.
type bodyReader struct {
	r     io.Reader
	rc    *http.ResponseController
	idle  time.Duration
	limit int64 // 0: unlimited
	n     int64
	err   error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.limit > 0 && int64(len(p)) > b.limit-b.n+1 {
		p = p[:b.limit-b.n+1] // one byte past the limit is enough to know it was exceeded
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle)) // unsupported transports keep their own timeouts
	n, err := b.r.Read(p)
	b.n += int64(n)
	switch {
	case b.limit > 0 && b.n > b.limit:
		b.err = errorf(TooLarge, "Maximum request size exceeded (%s, receive.maxRequestSize): the body is larger", config.ByteSize(b.limit))
	case err == nil || err == io.EOF:
		return n, err
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.err = errorf(UnknownError, "the sender sent no data for %s (receive.bodyIdleTimeout)", b.idle)
	default:
		b.err = wrap(UnknownError, err, "reading the request body failed")
	}
	return n, b.err
}

// limitReader bounds the decoded size of a body.
type limitReader struct {
	r     io.Reader
	limit int64
	n     int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.limit > 0 && int64(len(p)) > l.limit-l.n+1 {
		p = p[:l.limit-l.n+1]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.limit > 0 && l.n > l.limit {
		return n, errorf(TooLarge, "Maximum request size exceeded (%s, receive.maxRequestSize): the decompressed data is larger", config.ByteSize(l.limit))
	}
	return n, err
}

func (h *Handler) limit() int64 { return int64(h.cfg.MaxRequestSize) }

// receiveBody decodes and stores the body of a post that passed its checks.
func (p *post) receiveBody(compression, contentEncoding string, deferFeedCheck bool) (outcome, error) {
	h := p.h
	raw := &bodyReader{r: p.r.Body, rc: http.NewResponseController(p.w), idle: h.cfg.BodyIdleTimeout.D(), limit: h.limit()}
	defer func() { p.rawBytes = raw.n }()
	var src io.Reader = raw
	if contentEncoding != "" && contentEncoding != "identity" {
		dec, release, err := h.decoders.open(contentEncoding, raw)
		if err != nil {
			if err == io.EOF && raw.n == 0 {
				return outcomeEmpty, nil // an empty body is empty however it is declared
			}
			return "", p.readError(raw, err, true)
		}
		defer release()
		src = &limitReader{r: dec, limit: h.limit()}
	}
	br := h.readers.Get().(*bufio.Reader)
	br.Reset(src)
	defer func() { br.Reset(nil); h.readers.Put(br) }()
	magic, err := br.Peek(4)
	if len(magic) == 0 {
		if err == io.EOF {
			return outcomeEmpty, nil
		}
		return "", p.readError(raw, err, contentEncoding != "")
	}

	if compression == "" || compression == "NONE" {
		if format := sniff(magic); format != "" {
			p.flagged = format
			if m := h.opt.Metrics; m != nil {
				m.undeclared.WithLabelValues(format).Inc()
			}
			switch h.cfg.CompressedBodyWithoutHeader {
			case config.CompressedReject:
				// Content-Encoding is an alternative for gzip only: HTTP has
				// no zip coding.
				alt := ""
				if format == "gzip" {
					alt = " (or Content-Encoding: gzip)"
				}
				return "", errorf(UndeclaredCompression, "the body starts like %s data but Compression is %q; "+
					"send Compression: %s%s or send the data uncompressed", format, p.compression, upper(format), alt)
			case config.CompressedDecompress:
				compression = upper(format)
			default:
				p.attrs.Put("UndeclaredCompression", upper(format))
			}
		}
	}
	switch compression {
	case "GZIP":
		gz, release, err := h.decoders.open("gzip", br)
		if err != nil {
			return "", p.readError(raw, err, true)
		}
		defer release()
		return p.storeSingle(raw, &limitReader{r: gz, limit: h.limit()}, true)
	case "ZIP":
		return p.storeZip(raw, br, deferFeedCheck)
	}
	return p.storeSingle(raw, br, contentEncoding != "")
}

func upper(format string) string {
	if format == "gzip" {
		return "GZIP"
	}
	return "ZIP"
}

// sniff names the compressed format whose magic bytes start b, if any.
func sniff(b []byte) string {
	switch {
	case len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b:
		return "gzip"
	case len(b) >= 4 && bytes.HasPrefix(b, []byte("PK")) &&
		(b[2] == 3 && b[3] == 4 || b[2] == 5 && b[3] == 6 || b[2] == 7 && b[3] == 8):
		return "zip"
	}
	return ""
}

// readError classifies a failure to read the (decoded) body: the body's
// own failure or limit wins; otherwise a decoder failed, which means the
// compressed data is invalid.
func (p *post) readError(raw *bodyReader, err error, decoding bool) error {
	if raw.err != nil {
		return raw.err
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if decoding {
		// The sender's own bytes ran out mid-stream (raw.err is nil): the
		// data was cut off, or what follows a complete gzip member is too
		// short to be another, so "unexpected EOF" alone would mislead.
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return wrap(CompressedInvalid, err, "the compressed data ends early, or is followed by bytes that are not compressed data")
		}
		return wrap(CompressedInvalid, err, "the data could not be decompressed")
	}
	return wrap(UnknownError, err, "reading the request body failed")
}

// storeError classifies a failure of the store. Its cause is logged, not
// sent: it names the server's paths (and, for the database, its address),
// which a sender cannot act on.
func storeError(err error) error {
	if store.IsNoSpace(err) || meta.IsFull(err) {
		return &Error{Code: Unavailable, Detail: "the store is out of disk space", Internal: err}
	}
	if store.IsTooManyFiles(err) {
		return &Error{Code: Unavailable, Detail: "weir has as many files open as it may (connections included; see ulimit -n)", Internal: err}
	}
	if errors.Is(err, store.ErrBehind) {
		detail := "the metadata database has not yet recorded the data of posts already received"
		if meta.IsUnavailable(err) {
			detail += ": the metadata database is unavailable"
		}
		return &Error{Code: Unavailable, Detail: detail, Internal: err}
	}
	if meta.IsUnavailable(err) {
		return dbFailure(UnknownError, err, "storing the data failed")
	}
	return &Error{Code: UnknownError, Detail: "storing the data failed (the server's log has the cause)", Internal: err}
}

// dbFailure classifies a failed call to the metadata database (or the
// store, which commits there). One that could not reach it (refused, cut
// off, timed out: meta.IsUnavailable) refuses the post with 503 and
// Retry-After, so that the sender tries again, and its cause is logged,
// never sent: its text names the database's address and user. Anything
// else is code, with the cause in the message.
func dbFailure(code Code, err error, format string, a ...any) *Error {
	detail := fmt.Sprintf(format, a...)
	if meta.IsUnavailable(err) {
		return &Error{Code: Unavailable, Detail: detail + ": the metadata database is unavailable", Internal: err}
	}
	return &Error{Code: code, Detail: detail, Err: err}
}

// effectiveMs is the stream's effective time: EffectiveTime, else the
// legacy periodStartTime, else the receive time.
func (p *post) effectiveMs(a *attr.Map) int64 {
	for _, k := range []string{"EffectiveTime", "periodStartTime"} {
		if v := a.Value(k); v != "" {
			if t, err := attr.ParseTime(v); err == nil {
				return t.UnixMilli()
			}
		}
	}
	return p.received.UnixMilli()
}

// storeSingle stores an uncompressed or gzip body as one stream of one part.
func (p *post) storeSingle(raw *bodyReader, src io.Reader, decoding bool) (outcome, error) {
	ctx := p.r.Context()
	post := p.h.opt.Store.Begin()
	post.SetForward(p.forward)
	committed := false
	defer func() {
		if !committed {
			post.Abort()
		}
	}()
	sw, err := post.NewStream(ctx, store.Spec{
		Feed: p.feed, Type: p.typ, CreateMs: p.received.UnixMilli(),
		EffectiveMs: p.effectiveMs(p.attrs), ReceiptID: p.receiptID,
	})
	if err != nil {
		return "", storeError(err)
	}
	n, err := p.copySection(sw, streamfile.Data, 0, src, func(err error) error { return p.readError(raw, err, decoding) })
	if err != nil {
		return "", err
	}
	if n == 0 {
		// A gzip body that decompresses to nothing: nothing to store.
		return outcomeEmpty, nil
	}
	a := p.attrs.Clone()
	a.Put("StreamSize", strconv.FormatInt(n, 10))
	// A Type sent in any case is recorded as the type it resolved to, as a
	// zip part's is, so that the attribute agrees with the stream's type
	// (and a proxy's aggregates, keyed by it, do not split by spelling).
	if a.Value("Type") != "" {
		putType(a, p.typ)
	}
	if err := p.writeMeta(sw, 0, a); err != nil {
		return "", err
	}
	sw.SetAttributes(a)
	return p.commit(post, &committed, n)
}

func (p *post) commit(post *store.Post, committed *bool, stored int64) (outcome, error) {
	streams, err := post.Commit(p.r.Context())
	if err != nil {
		return "", storeError(err)
	}
	*committed = true
	p.storedBytes = stored
	var fileBytes int64
	for _, s := range streams {
		p.streams = append(p.streams, s.ID)
		fileBytes += s.FileSize
	}
	if p.h.opt.Stored != nil {
		p.h.opt.Stored(fileBytes)
	}
	return outcomeReceived, nil
}

// copySection copies src into one section of a stream. Read failures are
// classified by readErr; write failures are the store's.
func (p *post) copySection(sw *store.Writer, ch streamfile.Channel, part int, src io.Reader, readErr func(error) error) (int64, error) {
	dst, err := sw.Open(ch, part)
	if err != nil {
		return 0, storeError(err)
	}
	bp := p.h.bufs.Get().(*[]byte)
	defer p.h.bufs.Put(bp)
	buf := *bp
	var total int64
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = dst.Close()
				return total, storeError(werr)
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			_ = dst.Close()
			return total, readErr(rerr)
		}
	}
	if err := dst.Close(); err != nil {
		return total, storeError(err)
	}
	return total, nil
}

// writeMeta stores a part's attributes as its Meta Data child.
func (p *post) writeMeta(sw *store.Writer, part int, a *attr.Map) error {
	w, err := sw.Open(streamfile.Meta, part)
	if err != nil {
		return storeError(err)
	}
	if _, err := w.Write(attr.AppendMeta(nil, a)); err != nil {
		_ = w.Close()
		return storeError(err)
	}
	if err := w.Close(); err != nil {
		return storeError(fmt.Errorf("meta data: %w", err))
	}
	// Data that came through proxies can be found by the receipt ids they
	// gave it, not only by this hop's.
	if p.h.opt.RecordHopReceipts {
		sw.AddHopReceiptIDs(attr.EarlierReceiptIDs(a))
	}
	return nil
}
