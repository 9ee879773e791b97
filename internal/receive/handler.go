// Package receive is the /datafeed endpoint: it turns a post into
// attributes, runs the receipt checks before reading the body, decodes the
// body as declared, stores it durably as one or more streams and answers
// with a receipt id, or with a status code and a message the sender can act on.
package receive

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receipt"
	"github.com/weirhq/weir/internal/receiptrule"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/stroomzip"
)

// Forwarded finds the receipt id of a post a trusted forwarder sent
// before (see meta.Stream.Forward).
type Forwarded interface {
	ForwardedReceipt(ctx context.Context, k meta.ForwardKey) (receiptID string, ok bool, err error)
}

// Feeds is what the handler needs to know about feeds.
type Feeds interface {
	GetFeed(ctx context.Context, name string) (feed.Feed, error)
	CreateFeed(ctx context.Context, f feed.Feed) error
}

// Options wires a Handler.
type Options struct {
	Config config.Receive
	Feeds  Feeds
	Auth   *auth.Chain // who may send; nil: nobody is authenticated
	// CertAttributes records the client certificate's RemoteDN and
	// RemoteCertExpiry (and removes forged ones); may be nil.
	CertAttributes func(*http.Request, *attr.Map)
	Store          *store.Store
	// FeedStatuses, if set, answers FEED_STATUS and FEED_EXISTENCE checks
	// instead of the feed table (a proxy asks its downstream).
	FeedStatuses FeedStatuses
	// ReceiptRules gives the data receipt rules of RECEIPT_POLICY mode.
	ReceiptRules ReceiptRules
	// TypeFromDownstream: a post without a Type whose feed this service
	// does not know (with a default type) keeps none, and the service it
	// is forwarded to picks the feed's default type (a proxy), instead of
	// Raw Events.
	TypeFromDownstream bool
	// KeepReferenceGroups: a zip's groups of a reference type are parts of
	// one stream per feed and type, as other types' are, instead of a
	// stream each (a proxy: the service it forwards to splits them).
	KeepReferenceGroups bool
	// RecordHopReceipts: record the receipt ids earlier hops gave each
	// part (its ReceiptIdPath) with the stream, so that a query finds it by
	// them. A proxy, whose streams are a queue nobody queries, leaves it off.
	RecordHopReceipts bool
	// Relay, if set, passes each post on during its request instead of
	// storing it (a proxy's instant forwarding).
	Relay Relay
	// Admit, if set, is asked before a body is read; an error refuses the
	// post with 503 and Retry-After (a proxy's full repository).
	Admit func() error
	// Receiving, if set, is asked first, once the sender is
	// authenticated: an error refuses the post with 503 and Retry-After
	// before anything else is looked at, dropped posts and a trusted
	// forwarder's resends included. It says that this server must not
	// receive as its node now (meta.NodeLock.Err: the node's lock in the
	// database is lost), when even a receipt id it answers with could be
	// another server's.
	Receiving func() error
	// Stored, if set, is called after a post's streams are committed,
	// with the bytes they take in the store.
	Stored func(fileBytes int64)
	// Forwarded, if set, recognises a post a trusted forwarder sends again
	// (same GUID): it is answered with the receipt id of the copy already
	// stored, and not stored twice.
	Forwarded Forwarded
	// LogMetaKeys are attributes each receive-log line carries.
	LogMetaKeys []string
	IDs         *receipt.Generator
	Host        string // this host's name, appended to ReceivedPath
	TempDir     string // where zip bodies are staged; on the same disk as the store
	Log         *slog.Logger
	Metrics     *Metrics // may be nil
	Now         func() time.Time
}

// Handler serves the datafeed paths.
type Handler struct {
	opt      Options
	cfg      config.Receive
	feedName *regexp.Regexp
	types    map[string]string // lower-case type -> configured spelling
	trusted  map[string]bool   // TYPE:UploadUserId of trusted forwarders
	slots    chan struct{}
	// receiving holds the trusted forwarders' posts (sender and GUID)
	// being received now, each with a channel closed once it is committed
	// or has failed: a forwarder that gave up waiting for an answer and
	// sends the same post again while the first send is still being
	// stored waits for it (see claimForward), instead of storing the
	// post twice. Only trusted forwarders' posts with a GUID use it.
	forwardMu sync.Mutex
	receiving map[meta.ForwardKey]chan struct{}
	decoders  decoderPools
	// readNames are the lower-case header names a Connection header
	// cannot remove from a post's attributes: those weir reads from them
	// (connectionKept).
	readNames map[string]bool
	bufs      sync.Pool // *[]byte copy buffers
	readers   sync.Pool // *bufio.Reader for peeking at bodies
}

// New builds a Handler. opt.Config must have passed config.Validate.
func New(opt Options) *Handler {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{
		opt:       opt,
		cfg:       opt.Config,
		feedName:  regexp.MustCompile(opt.Config.FeedNamePattern),
		types:     make(map[string]string),
		trusted:   make(map[string]bool),
		slots:     make(chan struct{}, opt.Config.MaxConcurrentReceipts),
		receiving: make(map[meta.ForwardKey]chan struct{}),
	}
	for _, t := range opt.Config.MetaTypes {
		h.types[strings.ToLower(t)] = t
	}
	for _, f := range opt.Config.TrustedForwarders {
		typ, subject, _ := strings.Cut(f, ":")
		h.trusted[strings.ToUpper(strings.TrimSpace(typ))+":"+subject] = true
	}
	h.readNames = connectionKept(opt.Config)
	h.bufs.New = func() any { b := make([]byte, 64<<10); return &b }
	h.readers.New = func() any { return bufio.NewReaderSize(nil, 64<<10) }
	return h
}

// s2Methods is stroomzip.S2Header's value, shared by every response (the
// server only reads it).
var s2Methods = []string{stroomzip.S2HeaderValue}

// Paths are the datafeed paths, as the reference system registers them.
var Paths = []string{"/datafeed", "/stroom/datafeed", "/stroom/noauth/datafeed"}

// IsPath reports whether escaped, a clean URL path in its escaped form
// (url.URL.EscapedPath) with any base path removed, is one Register
// serves: one of Paths or below it. It matches segment by segment, each
// unescaped, as http.ServeMux does: /data%66eed is the datafeed,
// /datafeed%2Fx (one segment "datafeed/x") is not, nor is /DATAFEED.
func IsPath(escaped string) bool {
	for _, p := range Paths {
		if rest, ok := cutSegments(escaped, p); ok && (rest == "" || rest[0] == '/') {
			return true
		}
	}
	return false
}

// cutSegments removes from escaped the leading segments that, unescaped,
// are those of clean (a path with no escapes, such as "/stroom/datafeed"),
// and returns the rest ("" or from a '/').
func cutSegments(escaped, clean string) (string, bool) {
	for _, want := range strings.Split(strings.TrimPrefix(clean, "/"), "/") {
		if !strings.HasPrefix(escaped, "/") {
			return "", false
		}
		seg, _, _ := strings.Cut(escaped[1:], "/")
		if u, err := url.PathUnescape(seg); err != nil || u != want {
			return "", false
		}
		escaped = escaped[1+len(seg):]
	}
	return escaped, true
}

// Register adds the datafeed routes to mux: POST and PUT on each path and
// everything below it. Other methods get 405 with the status headers, as
// every datafeed failure does (the mux's own 405 has none).
func (h *Handler) Register(mux *http.ServeMux) {
	for _, p := range Paths {
		for _, m := range []string{http.MethodPost, http.MethodPut} {
			mux.Handle(m+" "+p, h)
			mux.Handle(m+" "+p+"/", h)
		}
		mux.HandleFunc(p, methodNotAllowed)
		mux.HandleFunc(p+"/", methodNotAllowed)
	}
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "POST, PUT")
	e := errorf(MethodNotAllowed, "%s is not a datafeed method: POST or PUT the data", r.Method)
	writeError(w, e, message(e, "", "", ""), 0)
}

// outcome is how a post ended, for the receive log and metrics.
type outcome string

const (
	outcomeReceived outcome = "received"
	outcomeEmpty    outcome = "empty" // nothing to store: empty body or a zip without entries
	outcomeDropped  outcome = "dropped"
	outcomeRejected outcome = "rejected" // the sender must change something (4xx statuses)
	outcomeError    outcome = "error"    // failed here; the sender may retry
	// duplicate: a trusted forwarder sent a post it had sent before (its
	// answer was lost); answered with the first copy's receipt id.
	outcomeDuplicate outcome = "duplicate"
)

// post is the state of one request.
type post struct {
	h           *Handler
	r           *http.Request
	lookups     context.Context // p.r's context, bounded by receive.databaseTimeout (see run)
	w           http.ResponseWriter
	receiptID   string
	received    time.Time
	attrs       *attr.Map
	feed        string // the feed as checked (may be generated)
	typ         string // resolved stream type
	compression string // as sent, for messages
	feedKnown   bool   // the feed exists (a safe metric label)
	rawBytes    int64
	storedBytes int64
	streams     []int64
	flagged     string          // undeclared compression detected: "gzip" or "zip"
	identity    *auth.Identity  // the authenticated sender
	downstream  string          // the downstream's receipt id, when relayed
	forward     meta.ForwardKey // set when a trusted forwarder sent the post with a GUID
	duplicateOf string          // the receipt id of the copy stored before, for a post sent again
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Go's server cancels a request's context as soon as it reads the end
	// of the connection's input, which a sender that shuts down its
	// sending side after its request (or after several pipelined ones)
	// causes while it waits for the answer: the credential, feed and
	// receipt rule look-ups, the relay to the downstream, would then fail
	// with "context canceled", answered as a refusal (a valid data feed key
	// got 401 / 313). A post depends on its connection only through its
	// body, whose reads fail on their own when the sender is gone, and
	// every wait below is bounded without the context (timeouts, a slot, an
	// earlier send of the same post).
	r = r.WithContext(context.WithoutCancel(r.Context()))
	if h.opt.Relay == nil {
		// Tell a weir proxy that it may send zips of S2 entries. Not when
		// relaying: the body goes on unread, to a downstream that may not
		// read them.
		w.Header()[stroomzip.S2Header] = s2Methods
	}
	now := h.opt.Now()
	id := h.opt.IDs.Next().String()
	p := &post{h: h, r: r, w: w, receiptID: id, received: now}
	out, err := p.runRecovered()
	var e *Error
	if err != nil {
		e = asError(err)
		// A 4xx is the sender's to fix (bad headers, credentials, size);
		// a 5xx may succeed on retry.
		out = outcomeRejected
		if e.Code.HTTPStatus() >= 500 {
			out = outcomeError
		}
		msg := message(e, p.feed, p.compression, p.typ)
		writeError(w, e, msg, int(h.cfg.RetryAfter.D().Seconds()))
		p.log(out, e, msg, now)
		return
	}
	if p.duplicateOf != "" {
		id = p.duplicateOf
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(id + "\n"))
	p.log(out, nil, "OK", now)
}

// runRecovered is run, with a panic (a bug in weir) turned into a 500 with
// the status headers every datafeed failure carries, instead of Go's server
// cutting the connection without a word. The post's deferred clean-ups have
// run by then, as they would have under the server's own recovery.
func (p *post) runRecovered() (out outcome, err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v) // a deliberate abort: the server cuts the connection quietly
		}
		p.h.opt.Log.Error("datafeed: a post failed on a bug in weir (a panic); answered 500",
			"receiptId", p.receiptID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		err = &Error{Code: UnknownError, Detail: "weir failed on this post (a bug; logged with receipt id " + p.receiptID +
			"); it may not have been stored: send it again"}
	}()
	return p.run()
}

// ServerMaxHeaderBytes is what the HTTP server itself reads of a request's
// line and headers, for a receive.maxHeaderBytes of limit: twice the limit,
// so that the handlers see requests somewhat over it and refuse them with
// their own status headers (datafeed) or problem (API); beyond it Go's
// server answers a bare 431.
func ServerMaxHeaderBytes(limit int) int { return 2 * limit }

// HeaderBytes is about what r's request line and headers took on the wire
// (as HTTP/1.1 text: one line per value, Host included), which is what
// receive.maxHeaderBytes limits.
func HeaderBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// dbContext bounds look-ups in the metadata database (feeds, credentials,
// resends, receipt rules) by receive.databaseTimeout, so that a database
// that stops answering refuses posts with 503 instead of holding them for
// as long as TCP takes to give up.
func (h *Handler) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := h.cfg.DatabaseTimeout.D(); d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

// run takes a post through checks, decoding and storage.
func (p *post) run() (outcome, error) {
	h := p.h
	// The server reads headers up to twice the limit (see ServerMaxHeaderBytes)
	// so that a sender just over it is told why, with status headers.
	if n, limit := HeaderBytes(p.r), int(h.cfg.MaxHeaderBytes); limit > 0 && n > limit {
		return "", errorf(HeadersTooLarge, "the request line and headers take about %d bytes, more than receive.maxHeaderBytes (%s)",
			n, config.ByteSize(limit))
	}
	// HTTP/1.0 has no chunked encoding: a body without Content-Length
	// runs to the end of the connection, which Go's server (as RFC 9112
	// says) does not read, so the post would be answered 200 with its data
	// unread. RFC 1945 asks for a Content-Length on every POST.
	if p.r.ProtoMajor == 1 && p.r.ProtoMinor == 0 && p.r.Header.Get("Content-Length") == "" {
		return "", errorf(LengthRequired, "an HTTP/1.0 request must send Content-Length (or send it as HTTP/1.1, chunked)")
	}
	var rep *repeated
	p.attrs, rep = requestAttributes(p.r, attr.Hop{ReceiptID: p.receiptID, Time: p.received, Host: h.opt.Host}, h.readNames)
	if rep != nil {
		p.feed, p.compression, p.typ = p.attrs.Value("Feed"), p.attrs.Value("Compression"), p.attrs.Value("Type")
		return "", errorf(InvalidDataFormat, "%s", rep)
	}
	// The look-ups before the body is read (credentials, feed) share one
	// bound on waiting for the database: one timer per post, not one per
	// look-up.
	var cancel context.CancelFunc
	p.lookups, cancel = h.dbContext(p.r.Context())
	defer cancel()
	if err := p.authenticate(); err != nil {
		// As for any other failure (and as the reference does), the
		// answer and the receive log name the post's feed, compression
		// and type as the sender gave them, so that an operator can tell
		// which sender is failing.
		p.feed, p.compression, p.typ = p.attrs.Value("Feed"), p.attrs.Value("Compression"), p.attrs.Value("Type")
		return "", err
	}
	if h.opt.Receiving != nil {
		if err := h.opt.Receiving(); err != nil {
			p.feed, p.compression, p.typ = p.attrs.Value("Feed"), p.attrs.Value("Compression"), p.attrs.Value("Type")
			return "", wrap(Unavailable, err, "this server cannot receive data now")
		}
	}
	p.compression = p.attrs.Value("Compression")
	p.attrs.Delete("Compression")
	compression := strings.ToUpper(p.compression)
	contentEncoding := contentCodings(p.r.Header)
	p.feed = p.attrs.Value("Feed")

	// A trusted forwarder's post sent again is answered as the first
	// copy was, before any check: that copy passed them and is stored,
	// so a feed set to REJECT since (or a full disk) must not turn the
	// resend into a refusal, which a proxy would take as final for an
	// aggregate that was delivered. Relays never count (not trusted).
	if h.opt.Relay == nil {
		dup, release, err := p.sentBefore()
		if err != nil || dup {
			return outcomeDuplicate, err
		}
		defer release()
	}

	// Checks that can reject a post run before its body is read. A zip
	// without a Feed header may name its feeds in its meta entries, so its
	// checks run per part once the entries are known. So do a trusted
	// forwarder's under receipt rules: its headers describe the forwarder,
	// and each part says who sent it, which is what the rules are about.
	deferFeedCheck := compression == "ZIP" && (p.feed == "" && !h.cfg.FeedNameGenerationEnabled ||
		h.cfg.ReceiptCheckMode == config.ReceiptPolicy && p.trustedForwarder())
	drop := false
	if !deferFeedCheck {
		d, err := h.check(p.lookups, p.attrs)
		p.feed, p.typ, p.feedKnown = d.feed, d.typ, d.known
		if err != nil {
			return "", err
		}
		drop = d.drop
	} else if t := p.attrs.Value("Type"); t != "" {
		if _, err := h.streamType(t); err != nil {
			p.typ = t
			return "", err
		}
	}

	// The compression rules hold for a dropped post too (the reference
	// answers 200 to a bad Compression on a DROP feed): a sender must learn
	// that its posts are malformed whatever the feed's status.
	switch compression {
	case "", "NONE", "GZIP", "ZIP":
	default:
		return "", errorf(UnknownCompression, "Compression %q is not one of ZIP, GZIP or NONE", p.compression)
	}
	if contentEncoding != "" && contentEncoding != "identity" && (compression == "GZIP" || compression == "ZIP") {
		return "", errorf(CompressedInvalid, "the body is declared compressed twice (Content-Encoding: %s and Compression: %s); "+
			"send only one of them", contentEncoding, compression)
	}
	if drop {
		return outcomeDropped, nil
	}
	// A body whose Content-Length is over the limit is refused before any
	// of it is read: a sender that asked with Expect: 100-continue gets
	// the 413 instead of a 100 (it was told to send its body, then refused
	// once maxRequestSize bytes of it had arrived), and no sender uploads up
	// to maxRequestSize bytes in vain.
	if limit := h.limit(); limit > 0 && p.r.ContentLength > limit {
		return "", errorf(TooLarge, "Maximum request size exceeded (%s, receive.maxRequestSize): the body is larger (Content-Length %d)",
			config.ByteSize(limit), p.r.ContentLength)
	}

	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		return "", errorf(Unavailable, "weir is receiving as many posts at once as it is configured to (receive.maxConcurrentReceipts: %d)", cap(h.slots))
	}
	if m := h.opt.Metrics; m != nil {
		m.inflight.Inc()
		defer m.inflight.Dec()
	}
	if h.opt.Admit != nil {
		if err := h.opt.Admit(); err != nil {
			return "", wrap(Unavailable, err, "cannot accept data now")
		}
	}
	if h.opt.Relay != nil {
		return p.relay(compression, contentEncoding)
	}
	return p.receiveBody(compression, contentEncoding, deferFeedCheck)
}

// authenticate identifies the sender (before any check, as in the
// reference) and records the identity on the post's attributes.
func (p *post) authenticate() error {
	if f := p.h.opt.CertAttributes; f != nil {
		f(p.r, p.attrs)
	}
	id := &auth.Identity{SubjectID: auth.Unauthenticated, DisplayName: auth.Unauthenticated}
	if a := p.h.opt.Auth; a != nil {
		var err error
		if id, err = a.Authenticate(p.lookups, &auth.Request{HTTP: p.r, Attrs: p.attrs}); err != nil {
			if meta.IsUnavailable(err) {
				// Not the credential's fault: a refusal would tell the
				// sender its key is bad.
				return &Error{Code: Unavailable, Detail: "the credentials cannot be checked now (the metadata database or identity provider is unavailable)", Internal: err}
			}
			return err
		}
	}
	applyIdentity(p.attrs, id)
	p.identity = id
	return nil
}

// certKeys are attributes only this hop's verified certificate (or trusted
// load balancer) may set.
var certKeys = []string{"RemoteDN", "RemoteCertExpiry"}

// keyDataReceiptRule records the data receipt rule that received a part
// (RECEIPT_POLICY mode). Only this service's decision may set it: a
// sender's (or an earlier hop's) is removed.
const keyDataReceiptRule = "DataReceiptRule"

// protect re-applies what this hop established about the sender to the
// attributes of one zip part, so that a meta entry in the body cannot claim
// another identity or certificate than the one that authenticated. A
// trusted forwarder's parts keep theirs (the reference system's rule for
// every sender): a proxy's meta entries name the sender it received each
// post from, which this hop cannot see.
func (p *post) protect(a *attr.Map) {
	a.Delete(keyDataReceiptRule)
	if p.trustedForwarder() {
		return
	}
	for _, k := range certKeys {
		if v, ok := p.attrs.Get(k); ok {
			a.Put(k, v)
		} else {
			a.Delete(k)
		}
	}
	applyIdentity(a, p.identity)
}

// RelayHeader, with the value RelayInstant, marks a post a proxy relays
// during its request (instant forwarding) without reading it: a zip's
// parts then say whatever its sender wrote in them.
const (
	RelayHeader  = "Weir-Relay"
	RelayInstant = "instant"
)

// trustedForwarder reports whether the sender is in
// receive.trustedForwarders and vouches for what the post's parts say: a
// post it relayed unread does not count.
func (p *post) trustedForwarder() bool {
	return p.identity != nil && p.h.trusted[string(p.identity.Type)+":"+p.identity.SubjectID] &&
		!strings.EqualFold(p.r.Header.Get(RelayHeader), RelayInstant)
}

// sentBefore tells whether a trusted forwarder (a proxy) sends, again, a
// post stored before: the same GUID from the same forwarder, which a proxy
// keeps for every attempt to send an aggregate. Such a post is answered
// with the first copy's receipt id and not stored twice: the proxy lost
// the answer (it was killed, or the connection was cut after the commit)
// and would otherwise deliver the aggregate twice. Other senders' GUIDs
// are theirs to reuse, so only trusted forwarders' count.
//
// A post it goes on to store is claimed (see claimForward) until release
// is called, which the caller does once the post is committed or has
// failed; release is never nil.
func (p *post) sentBefore() (dup bool, release func(), err error) {
	release = func() {}
	// The GUID first: trustedForwarder builds a key, which most posts
	// (none from a proxy) need not pay for.
	guid := strings.TrimSpace(p.r.Header.Get("GUID"))
	if p.h.opt.Forwarded == nil || guid == "" || !p.trustedForwarder() {
		return false, release, nil
	}
	k := meta.ForwardKey{Sender: string(p.identity.Type) + ":" + p.identity.SubjectID, GUID: forwardGUID(guid)}
	// Claimed before the look-up, so that a send that finished between
	// the two is seen: the claim is released only after the commit.
	if err := p.h.claimForward(p.r.Context(), k, p.receiptID); err != nil {
		return false, release, err
	}
	release = func() { p.h.releaseForward(k) }
	ctx, cancel := p.h.dbContext(p.r.Context())
	defer cancel()
	rid, ok, err := p.h.opt.Forwarded.ForwardedReceipt(ctx, k)
	if err != nil {
		release()
		return false, func() {}, dbFailure(Unavailable, err, "cannot tell whether this post was received before")
	}
	if ok {
		release()
		p.duplicateOf = rid
		return true, func() {}, nil
	}
	p.forward = k
	return false, release, nil
}

// maxForwardGUID bounds a GUID recorded as it was sent. PostgreSQL
// refuses an index entry over about 2.7 KB, so a longer GUID would fail
// every commit of the post; a weir proxy's are 36 characters.
const maxForwardGUID = 128

// forwardGUID is the GUID as forwarded_posts records it: as sent, or a
// digest of a long one (and of one that looks like a digest, so that no
// GUID sent stands for another).
func forwardGUID(guid string) string {
	if len(guid) <= maxForwardGUID && !strings.HasPrefix(guid, "sha256:") {
		return guid
	}
	sum := sha256.Sum256([]byte(guid))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// claimForward marks k as being received by this post. If another post
// with k is being received (the forwarder sent it again before the first
// send was answered), it waits until that one is committed or has failed,
// at most until ctx ends. Several nodes sharing a database each have their
// own claims: overlapping sends to two of them can both be stored.
func (h *Handler) claimForward(ctx context.Context, k meta.ForwardKey, receiptID string) error {
	logged := false
	for {
		h.forwardMu.Lock()
		busy, ok := h.receiving[k]
		if !ok {
			h.receiving[k] = make(chan struct{})
			h.forwardMu.Unlock()
			return nil
		}
		h.forwardMu.Unlock()
		if !logged {
			logged = true
			h.opt.Log.Info("a trusted forwarder sends a post it is still sending: waiting for its earlier send to finish",
				"receiptId", receiptID, "sender", k.Sender, "guid", k.GUID)
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return wrap(Unavailable, context.Cause(ctx),
				"an earlier send of this post (GUID %q) is still being received; send it again later", k.GUID)
		}
	}
}

// releaseForward ends the claim on k and wakes the posts waiting for it.
func (h *Handler) releaseForward(k meta.ForwardKey) {
	h.forwardMu.Lock()
	defer h.forwardMu.Unlock()
	if c, ok := h.receiving[k]; ok {
		close(c)
		delete(h.receiving, k)
	}
}

// decision is the result of the receipt checks for one feed and type.
type decision struct {
	feed, typ string
	known     bool // the feed exists
	drop      bool
	create    bool // the feed was generated and is to be created
}

// check runs the receipt checks on a set of attributes, in the reference
// system's order: type, feed name (or its generation), then the receipt
// check mode. It may set Feed in attrs (generation).
func (h *Handler) check(ctx context.Context, attrs *attr.Map) (decision, error) {
	// The feed as sent, and the type as sent when it is refused, are
	// in the message of every refusal, this one's too.
	d := decision{feed: attrs.Value("Feed")}
	if t := attrs.Value("Type"); t != "" {
		typ, err := h.streamType(t)
		if err != nil {
			d.typ = t
			return d, err
		}
		d.typ = typ
	}
	generated := false
	if d.feed == "" {
		if !h.cfg.FeedNameGenerationEnabled {
			return d, errorf(FeedMustBeSpecified, "send the feed name in a Feed header")
		}
		if missing, ok := feed.MissingMandatory(h.cfg.FeedNameGenerationMandatoryHeaders, attrs); ok {
			return d, errorf(MandatoryHeaderMissing, "Mandatory header '%s' must be provided", missing)
		}
		d.feed = feed.GenerateName(h.cfg.FeedNameTemplate, attrs)
		if d.feed == "" {
			return d, errorf(FeedMustBeSpecified, "the feed name template produced an empty name")
		}
		attrs.Put("Feed", d.feed)
		generated = true
	}

	mode := h.cfg.ReceiptCheckMode
	switch mode {
	case config.RejectAll:
		return d, errorf(RejectedByPolicy, "this service rejects all data (receiptCheckMode REJECT_ALL)")
	case config.DropAll:
		d.drop = true
		return d, nil
	}
	if h.opt.FeedStatuses != nil && (mode == config.FeedStatus || mode == config.FeedExistence) {
		return h.checkRemote(ctx, d, attrs, mode)
	}
	var f feed.Feed
	err := meta.ErrNotFound
	// A name no feed can have is unknown without asking the database:
	// PostgreSQL refuses NUL bytes and invalid UTF-8 even in a lookup.
	if nameable(d.feed) {
		f, err = h.opt.Feeds.GetFeed(ctx, d.feed)
	}
	switch {
	case err == nil:
		d.known = true
	case !errors.Is(err, meta.ErrNotFound):
		return d, dbFailure(UnknownError, err, "looking up feed %q", d.feed)
	}
	if mode == config.ReceiptPolicy {
		// After the lookup, so that the rules see the type the stream
		// would be stored as (a feed's default when none was sent); before
		// a generated feed is created, so that a refused post creates none.
		drop, err := h.checkRules(ctx, d, attrs, h.storedType(d, f))
		if err != nil || drop {
			d.drop = drop
			return d, err
		}
	}
	if !d.known && generated && h.cfg.FeedNameGenerationAutoCreate {
		if err := feed.ValidateName(h.feedName, d.feed); err != nil {
			return d, wrap(FeedNotDefined, err, "the generated feed cannot be created")
		}
		f = feed.Feed{Name: d.feed, Description: "created by feed name generation"}.WithDefaults()
		if err := h.opt.Feeds.CreateFeed(ctx, f); err != nil {
			if !errors.Is(err, meta.ErrExists) {
				return d, dbFailure(UnknownError, err, "creating generated feed %q", d.feed)
			}
			// A concurrent post created it first: use what it created.
			if f, err = h.opt.Feeds.GetFeed(ctx, d.feed); err != nil {
				return d, dbFailure(UnknownError, err, "looking up feed %q", d.feed)
			}
		}
		d.known = true
	}
	switch mode {
	case config.FeedStatus:
		if !d.known {
			return d, errorf(FeedNotReceiving, "feed %q does not exist", d.feed)
		}
		switch f.Status {
		case feed.Reject:
			return d, errorf(FeedNotReceiving, "feed %q has status REJECT", d.feed)
		case feed.Drop:
			d.drop = true
		}
	case config.FeedExistence, config.ReceiptPolicy:
		if !d.known {
			return d, errorf(FeedNotDefined, "feed %q does not exist", d.feed)
		}
	case config.ReceiveAll:
		if !nameable(d.feed) {
			return d, errorf(FeedNotDefined, "feed %q cannot exist: a feed name is UTF-8 text without control characters", d.feed)
		}
	}
	if d.typ == "" {
		// As storedType, but a feed's default type that is not one of
		// receive.metaTypes refuses the post.
		switch {
		case d.known && f.StreamType != "":
			typ, err := h.streamType(f.StreamType)
			if err != nil {
				return d, errorf(UnexpectedType, "feed %q has default stream type %q, which is not one of receive.metaTypes", d.feed, f.StreamType)
			}
			d.typ = typ
		case !h.opt.TypeFromDownstream:
			d.typ = "Raw Events"
		}
	}
	return d, nil
}

// ReceiptRules gives the current data receipt rules.
type ReceiptRules interface {
	Current(ctx context.Context) (*receiptrule.Set, error)
}

// checkRules decides a post by the data receipt rules (RECEIPT_POLICY
// mode): the first enabled rule that matches its attributes decides, and a
// post no rule matches is refused. A received post records the number of
// its rule as DataReceiptRule, as the reference system does; its feed must
// then exist, and the feed's status is not consulted (the rules replace
// it).
func (h *Handler) checkRules(ctx context.Context, d decision, attrs *attr.Map, typ string) (drop bool, err error) {
	if h.opt.ReceiptRules == nil {
		return false, errorf(UnknownError, "receive.receiptCheckMode is RECEIPT_POLICY but this service has no receipt rules")
	}
	set, err := h.opt.ReceiptRules.Current(ctx)
	if err != nil {
		return false, dbFailure(Unavailable, err, "the data receipt rules cannot be read")
	}
	dec := set.Decide(func(name string) (string, bool) {
		if typ != "" && attr.EqualName(name, "Type") {
			return typ, true
		}
		return attrs.Get(name)
	})
	if m := h.opt.Metrics; m != nil {
		rule := "none"
		if dec.Rule > 0 {
			rule = strconv.Itoa(dec.Rule)
		}
		m.rules.WithLabelValues(rule, string(dec.Action)).Inc()
	}
	switch dec.Action {
	case receiptrule.Reject:
		if dec.Rule == 0 {
			return false, errorf(RejectedByPolicy, "no data receipt rule accepts this post to feed %q", d.feed)
		}
		e := errorf(RejectedByPolicy, "data receipt rule %d%s rejects this post to feed %q", dec.Rule, ruleName(dec.Name), d.feed)
		e.Internal = errRuleRejects // marks it, without changing the message
		return false, e
	case receiptrule.Drop:
		return true, nil
	}
	attrs.Put(keyDataReceiptRule, strconv.Itoa(dec.Rule))
	return false, nil
}

// errRuleRejects is the cause of a refusal by a rule that says REJECT (as
// opposed to no rule matching).
var errRuleRejects = errors.New("refused by a REJECT rule")

// storedType is the stream type a post would be stored as: the type it
// names (in receive.metaTypes' spelling), else its feed's default, else
// Raw Events; "" when that is left to a downstream (a proxy) or the feed's
// default is not a type this service takes (refused later).
func (h *Handler) storedType(d decision, f feed.Feed) string {
	switch {
	case d.typ != "":
		return d.typ
	case d.known && f.StreamType != "":
		typ, _ := h.streamType(f.StreamType)
		return typ
	case !h.opt.TypeFromDownstream:
		return "Raw Events"
	}
	return ""
}

// ruleName quotes a rule's name for a message, if it has one.
func ruleName(name string) string {
	if name == "" {
		return ""
	}
	return " (" + strconv.Quote(name) + ")"
}

// checkRemote decides with the answer of FeedStatuses: REJECT refuses
// with the code the downstream gave (110 if none), DROP drops, and in
// FEED_EXISTENCE mode only an unknown feed is refused.
func (h *Handler) checkRemote(ctx context.Context, d decision, attrs *attr.Map, mode config.CheckMode) (decision, error) {
	ans, err := h.opt.FeedStatuses.FeedStatus(ctx, d.feed, attrs)
	if err != nil {
		return d, wrap(Unavailable, err, "the status of feed %q cannot be checked", d.feed)
	}
	d.known = ans.Known
	msg := ans.Message
	if msg == "" || msg == "OK" {
		msg = fmt.Sprintf("feed %q has status %s", d.feed, ans.Status)
	}
	if mode == config.FeedExistence {
		if !ans.Known {
			return d, errorf(FeedNotDefined, "feed %q does not exist", d.feed)
		}
		return d, nil
	}
	switch ans.Status {
	case feed.Reject:
		code := ans.Code
		if code == OK {
			code = FeedNotReceiving
		}
		if _, ok := codes[code]; !ok {
			code = FeedNotReceiving
		}
		return d, errorf(code, "%s", Detail(code, msg))
	case feed.Drop:
		d.drop = true
	}
	return d, nil
}

// nameable reports whether a feed could have this name at all.
func nameable(name string) bool {
	return utf8.ValidString(name) && !strings.ContainsFunc(name, unicode.IsControl)
}

// streamType matches a Type against the configured types, case-insensitively,
// and returns the configured spelling.
func (h *Handler) streamType(t string) (string, error) {
	if canon, ok := h.types[strings.ToLower(t)]; ok {
		return canon, nil
	}
	return "", errorf(InvalidType, "Type %q is not one of %s", t, strings.Join(h.cfg.MetaTypes, ", "))
}

// event names an outcome as the reference system's receive log does:
// RECEIVE, DROP, REJECT (the sender's data or headers were refused) or
// ERROR (everything else).
func event(out outcome, e *Error) string {
	switch {
	case e == nil && out == outcomeDropped:
		return "DROP"
	case e == nil:
		return "RECEIVE"
	}
	switch e.Code {
	case FeedMustBeSpecified, FeedNotDefined, InvalidType, MandatoryHeaderMissing, FeedNotReceiving, RejectedByPolicy, UnexpectedType:
		return "REJECT"
	}
	return "ERROR"
}

// log writes the post's receive-log line and updates the metrics.
func (p *post) log(out outcome, e *Error, msg string, start time.Time) {
	d := p.h.opt.Now().Sub(start)
	code := 0
	if e != nil {
		code = int(e.Code)
	}
	level := slog.LevelInfo
	switch {
	case out == outcomeError:
		level = slog.LevelError
	case out == outcomeRejected, p.flagged != "":
		// A body stored as sent although it looks compressed is the spec's
		// silent failure: warn, so that someone notices.
		level = slog.LevelWarn
	}
	httpStatus := http.StatusOK
	if e != nil {
		httpStatus = e.Code.HTTPStatus()
	}
	// Attrs, not key-value pairs: this runs for every post, and the
	// pairs cost an allocation per number and one for the slice.
	var buf [24]slog.Attr
	args := append(buf[:0],
		slog.String("event", event(out, e)), slog.String("receiptId", p.receiptID), slog.String("outcome", string(out)),
		slog.String("feed", p.feed), slog.String("type", p.typ),
		slog.Int("httpStatus", httpStatus), slog.Int("status", code), slog.Int64("bytes", p.rawBytes),
		slog.Int64("storedBytes", p.storedBytes), slog.Int64("durationMs", d.Milliseconds()),
		slog.String("path", p.r.URL.Path), slog.String("remote", p.r.RemoteAddr),
	)
	if p.attrs != nil {
		args = append(args, slog.String("guid", p.attrs.Value("GUID")))
	}
	if p.identity != nil {
		args = append(args, slog.String("user", p.identity.SubjectID))
	}
	if e != nil && e.Internal != nil {
		args = append(args, slog.String("cause", e.Internal.Error()))
	}
	if len(p.streams) > 0 {
		args = append(args, slog.Any("streams", p.streams))
	}
	if p.flagged != "" {
		args = append(args, slog.String("undeclaredCompression", p.flagged))
	}
	if p.downstream != "" {
		args = append(args, slog.String("downstreamReceiptId", p.downstream))
	}
	if p.duplicateOf != "" {
		args = append(args, slog.String("duplicateOf", p.duplicateOf))
	}
	if keys := p.h.opt.LogMetaKeys; len(keys) > 0 && p.attrs != nil {
		meta := make([]any, 0, len(keys))
		for _, k := range keys {
			meta = append(meta, slog.String(k, p.attrs.Value(k)))
		}
		args = append(args, slog.Group("meta", meta...))
	}
	args = append(args, slog.String("message", msg))
	p.h.opt.Log.LogAttrs(context.Background(), level, "receive", args...)
	if m := p.h.opt.Metrics; m != nil {
		label := "-"
		if p.feedKnown {
			label = p.feed
		}
		m.requests.WithLabelValues(label, string(out), strconv.Itoa(code)).Inc()
		m.bytes.WithLabelValues(label).Add(float64(p.rawBytes))
		m.stored.WithLabelValues(label).Add(float64(p.storedBytes))
		m.duration.WithLabelValues(string(out)).Observe(d.Seconds())
	}
}
