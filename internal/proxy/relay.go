package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receive"
	"github.com/weirhq/weir/internal/stroomzip"
)

// HTTPDestination forwards aggregates to a downstream /datafeed.
type HTTPDestination struct {
	name   string
	sender *HTTPSender
	cfg    config.HTTPDestination
	// readsS2 is what the downstream's last answer said of zips of S2
	// entries (stroomzip.S2Header). Until it answers once, it is sent the
	// standard methods.
	readsS2 atomic.Bool
}

// NewHTTPDestination builds an HTTP destination.
func NewHTTPDestination(cfg config.HTTPDestination, userAgent string) (*HTTPDestination, error) {
	s, err := NewHTTPSender(cfg, userAgent)
	if err != nil {
		return nil, err
	}
	return &HTTPDestination{name: cfg.Name, sender: s, cfg: cfg}, nil
}

func (d *HTTPDestination) Name() string                   { return d.name }
func (d *HTTPDestination) Target() string                 { return d.sender.URL() }
func (d *HTTPDestination) HasLiveness() bool              { return d.cfg.LivenessCheckURL != "" }
func (d *HTTPDestination) Live(ctx context.Context) error { return d.sender.Live(ctx) }

// NewZip starts the zip of a send on w, the body writer Send gave the
// send's write function (which must pass it on unwrapped: the choice
// travels with it): S2 entries when Send chose them, else entries
// deflated at compressionLevel (stored at 0).
func (d *HTTPDestination) NewZip(w io.Writer) *stroomzip.Writer {
	if c, ok := w.(*s2Body); ok && c.s2 {
		return stroomzip.NewWriterS2(w)
	}
	return stroomzip.NewWriterLevel(w, d.cfg.ZipLevel())
}

// s2Body is a send's body writer with Send's choice of S2 entries, made
// once per send: sends run concurrently, and an answer to one changes
// what the next chooses, while each send's refusal must be read by what
// it sent.
type s2Body struct {
	io.Writer
	s2 bool
}

// Sender is the destination's HTTP client.
func (d *HTTPDestination) Sender() *HTTPSender { return d.sender }

// Send posts the aggregate as a zip (Compression: ZIP) with its common
// allow-listed attributes as headers. A zip of S2 entries that is refused
// by a downstream whose answer no longer announces them (another system
// now behind the URL, an older weir, a pool of mixed backends) is sent
// again at once with the standard methods, in the same attempt: the
// refusal was of this proxy's choice of method, not of the data, and a
// queued retry could choose S2 again (another answer may announce it
// meanwhile) or never come (queue.maxRetryAge: 0).
func (d *HTTPDestination) Send(ctx context.Context, _ meta.Aggregate, attrs *attr.Map, write func(io.Writer) error) Outcome {
	s2 := d.cfg.ZipS2() && d.readsS2.Load()
	r := d.post(ctx, attrs, write, s2)
	if s2 && !r.OK() && r.HTTPStatus != 0 && !r.ReadsS2 && ctx.Err() == nil {
		first := r
		r = d.post(ctx, attrs, write, false)
		r.Bytes += first.Bytes
		r.Duration += first.Duration
		out := outcomeOf(r)
		out.Resent = fmt.Sprintf("the downstream, whose answers no longer say %s: %s, refused the zip of S2 entries (%s); sent again deflated",
			stroomzip.S2Header, stroomzip.S2HeaderValue, outcomeMessage(outcomeOf(first)))
		return out
	}
	return outcomeOf(r)
}

// post makes one POST of the zip, its entries S2 or not as s2 says, and
// remembers what the answer says of S2.
func (d *HTTPDestination) post(ctx context.Context, attrs *attr.Map, write func(io.Writer) error, s2 bool) Result {
	r := d.sender.PostStream(ctx, d.sender.Headers(attrs, "ZIP"), func(w io.Writer) error {
		return write(&s2Body{Writer: w, s2: s2})
	})
	if r.HTTPStatus != 0 {
		d.readsS2.Store(r.ReadsS2)
	}
	return r
}

func outcomeOf(r Result) Outcome {
	return Outcome{OK: r.OK(), Permanent: r.Permanent(), HTTPStatus: r.HTTPStatus, Code: r.Code, Message: r.Message,
		Receipt: r.Receipt, RetryAfter: r.RetryAfter, Bytes: r.Bytes, Duration: r.Duration, Err: r.Err}
}

// Instant relays each post to one downstream during its request (the
// instant forwarding mode): nothing is stored, and the downstream's answer
// is the sender's. Unlike the reference proxy, the downstream's status
// code reaches the sender as it is (not as 999), and this hop's ReceiptId
// and ReceiptIdPath go along as headers, so the stored stream still shows
// the whole path.
type Instant struct {
	dest *HTTPDestination
	// hopOnly are attributes that describe the sender's connection to this
	// hop, never sent on (lower case): a certificate provider's headers.
	hopOnly map[string]bool
}

// NewInstant builds the relay for an instant destination. dnHeader is
// receive.x509CertificateDnHeader: like X-SSL-Client-V-End it is a claim a
// certificate provider makes about the connection to this hop, which this
// hop believed or ignored; relayed as a header, a downstream that trusts
// this proxy as a provider would take a sender's forged one as its own
// provider's.
func NewInstant(d *HTTPDestination, dnHeader string) *Instant {
	in := &Instant{dest: d, hopOnly: map[string]bool{attr.FoldName("X-SSL-Client-V-End"): true}}
	if dnHeader != "" {
		in.hopOnly[attr.FoldName(dnHeader)] = true
	}
	return in
}

// Relay implements receive.Relay.
func (in *Instant) Relay(ctx context.Context, attrs *attr.Map, compression, contentEncoding string, body io.Reader) (string, error) {
	s := in.dest.sender
	// Every attribute goes as a header, not only the allow list's: a
	// relayed post has no meta entry of this hop's to carry the rest, so
	// the allow list would drop the sender's EffectiveTime and its own
	// headers on the way (as the reference system's instant proxy does).
	// This hop's ReceiptId and ReceiptIdPath go too, so that the next hop
	// appends to the path instead of starting one.
	h := s.headers(attrs, compression, true)
	for k := range h {
		if in.hopOnly[attr.FoldName(k)] {
			delete(h, k)
		}
	}
	if contentEncoding != "" {
		h.Set("Content-Encoding", contentEncoding)
	}
	// A relayed zip is not read here: its parts' meta entries are as the
	// sender wrote them, so the downstream must not trust them even if it
	// trusts this proxy.
	h.Set(receive.RelayHeader, receive.RelayInstant)
	r := s.Post(ctx, h, body)
	switch {
	case r.OK():
		return r.Receipt, nil
	case r.Err != nil:
		return "", receive.Unreachable(r.Err, fmt.Sprintf("the downstream %s did not answer", in.dest.name))
	case r.HTTPStatus == http.StatusServiceUnavailable:
		return "", receive.Unreachable(nil, fmt.Sprintf("the downstream %s is unavailable: %s", in.dest.name, r.Message))
	}
	return "", receive.Refusal(r.Code, r.Message)
}

// AuthHeader is the credential headers the sender sends downstream (the
// Authorization header and, with a data feed key, its owner header), or
// nil without credentials: for feed status questions to the same place.
func (s *HTTPSender) AuthHeader() http.Header {
	if s.authz == "" {
		return nil
	}
	h := http.Header{"Authorization": []string{s.authz}}
	if s.ownerKey != "" {
		h.Set(s.ownerKey, s.owner)
	}
	return h
}

// Client is the sender's HTTP client (its TLS settings and connections).
func (s *HTTPSender) Client() *http.Client { return s.client }
