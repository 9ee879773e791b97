package receive

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
)

// ZipImport is a zip file in the Stroom zip format to store as if it had
// been posted to /datafeed with Compression: ZIP and no other headers.
type ZipImport struct {
	File      string         // the staged zip
	ReceiptID string         // this hop's receipt id; the caller makes it so that a re-run can find what a previous run stored
	Received  time.Time      // when the zip was received
	Identity  *auth.Identity // who sent it: recorded as UploadUserId and UploadUsername
	// Attributes play the part of request headers (GUID is added when
	// absent); each part's meta entry overrides them. May be nil.
	Attributes *attr.Map
	Path       string // what the receive log shows as the request path
	// Progress, if not nil, is told how many bytes of the file have been
	// read so far (the directory is read more than once, so it can pass
	// the file's size a little).
	Progress func(read int64)
}

// Ingested is what an import stored.
type Ingested struct {
	Streams []int64 // ids of the streams created, in creation order
	Bytes   int64   // uncompressed data bytes stored
}

// IngestZip stores a zip file exactly as a zip post would be stored: the
// same receipt checks per part (feeds named in the meta entries), the
// same attributes (this hop's receipt information, the identity as the
// uploader, each part's meta entry over the base attributes), the same
// limits (receive.maxRequestSize bounds what the entries decompress to,
// receive.maxZipEntries their count), and one atomic commit of every
// stream. It waits for one of the receive slots (maxConcurrentReceipts)
// rather than fail when they are busy. A post that a sender would get an
// error for returns an error whose text is the message the sender would
// get; it wraps the *Error. Nothing stored is an empty Ingested and no
// error (an empty zip, or parts dropped by policy).
func (h *Handler) IngestZip(ctx context.Context, z ZipImport) (Ingested, error) {
	start := h.opt.Now()
	path := z.Path
	if path == "" {
		path = "import"
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", http.NoBody)
	if err != nil {
		return Ingested{}, fmt.Errorf("ingest %s: %w", z.File, err)
	}
	// Only the receive log reads the URL: it names the import, not a path served.
	r.URL.Path = path
	p := &post{h: h, r: r, receiptID: z.ReceiptID, received: z.Received, compression: "ZIP"}
	out, err := p.ingest(ctx, z)
	if err != nil {
		e := asError(err)
		out = outcomeRejected
		if e.Code.HTTPStatus() >= 500 {
			out = outcomeError
		}
		msg := message(e, p.feed, p.compression, p.typ)
		p.log(out, e, msg, start)
		return Ingested{}, &ingestError{msg: msg, err: e}
	}
	p.log(out, nil, "OK", start)
	return Ingested{Streams: p.streams, Bytes: p.storedBytes}, nil
}

// ingest follows run and receiveBody for a zip that is already staged.
func (p *post) ingest(ctx context.Context, z ZipImport) (outcome, error) {
	h := p.h
	p.attrs = &attr.Map{}
	if z.Attributes != nil {
		p.attrs.Overlay(z.Attributes)
	}
	if p.attrs.Value("GUID") == "" {
		p.attrs.Put("GUID", newUUID())
	}
	attr.AddReceiptInfo(p.attrs, attr.Hop{ReceiptID: p.receiptID, Time: p.received, Host: h.opt.Host})
	id := z.Identity
	if id == nil {
		id = &auth.Identity{SubjectID: auth.Unauthenticated, DisplayName: auth.Unauthenticated}
	}
	applyIdentity(p.attrs, id)
	p.identity = id
	p.feed = p.attrs.Value("Feed")

	deferFeedCheck := p.feed == "" && !h.cfg.FeedNameGenerationEnabled
	if !deferFeedCheck {
		d, err := h.check(ctx, p.attrs)
		p.feed, p.typ, p.feedKnown = d.feed, d.typ, d.known
		if err != nil {
			return "", err
		}
		if d.drop {
			return outcomeDropped, nil
		}
	} else if t := p.attrs.Value("Type"); t != "" {
		if _, err := h.streamType(t); err != nil {
			return "", err
		}
	}

	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	case <-ctx.Done():
		return "", wrap(Unavailable, ctx.Err(), "the import was stopped while it waited for a receive slot")
	}
	if m := h.opt.Metrics; m != nil {
		m.inflight.Inc()
		defer m.inflight.Dec()
	}

	f, err := os.Open(z.File)
	if err != nil {
		return "", wrap(UnknownError, err, "the staged zip cannot be opened")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", wrap(UnknownError, err, "the staged zip cannot be read")
	}
	p.rawBytes = fi.Size()
	// Copying an entry does not look at ctx; reading through this does, so
	// that a cancelled import stops within one read.
	return p.storeZipFile(ctx, &ctxReaderAt{ctx: ctx, r: f, progress: z.Progress}, fi.Size(), deferFeedCheck)
}

type ctxReaderAt struct {
	ctx      context.Context
	r        io.ReaderAt
	progress func(int64)
	read     int64
}

func (c *ctxReaderAt) ReadAt(b []byte, off int64) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.ReadAt(b, off)
	c.read += int64(n)
	if c.progress != nil {
		c.progress(c.read)
	}
	return n, err
}

// ingestError is an import refused as a post would be: its text is the
// message a sender would get.
type ingestError struct {
	msg string
	err *Error
}

func (e *ingestError) Error() string { return e.msg }
func (e *ingestError) Unwrap() error { return e.err }

// NextReceiptID issues a receipt id from this node's generator, for work
// that stores data like a post does (imports).
func (h *Handler) NextReceiptID() string { return h.opt.IDs.Next().String() }
