package receive

import (
	"archive/zip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/flate"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
	"github.com/weirhq/weir/internal/stroomzip"
)

// zipTarget is the stream that parts with one feed and type go to (one
// group only, for a reference type).
type zipTarget struct {
	w     *store.Writer
	parts int
	size  int64
	attrs *attr.Map
	rules []string // the data receipt rules that received its parts, in order, once each
	// common holds the attributes the zip's meta and manifest entries give
	// every part of the stream alike (nil before the first part): they
	// become the stream's own, which finds search.
	common *attr.Map
}

// share keeps in t.common the attributes of entry (a part's meta and
// manifest) that every part so far has had, with the same value.
func (t *zipTarget) share(entry *attr.Map) {
	if t.common == nil {
		t.common = entry.Clone()
		return
	}
	var gone []string
	for k, v := range t.common.All() {
		if w, ok := entry.Get(k); !ok || w != v {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		t.common.Delete(k)
	}
}

// writeErr remembers the error of its writer, so that a failed copy can be
// told apart: the store's (writing) or the sender's (reading).
type writeErr struct {
	w   io.Writer
	err error
}

func (w *writeErr) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if err != nil {
		w.err = err
	}
	return n, err
}

// maxDirEntryBytes is the most directory bytes an entry is allowed on
// average: a header (46), a name up to stroomzip.MaxNameLength, and 2 KiB of
// extra fields and comment, far more than any zip tool writes (Info-ZIP's
// extra fields take 28 bytes, a comment usually none).
const maxDirEntryBytes = 46 + stroomzip.MaxNameLength + 2<<10

// emptyEntry reports whether a zip entry holds no data: its size says so,
// and so does its content when it has compressed bytes (an empty deflate
// stream has two), since a size is only what the zip claims.
func emptyEntry(zf *zip.File) bool {
	if zf.UncompressedSize64 > 0 {
		return false
	}
	if zf.CompressedSize64 == 0 {
		return true
	}
	rc, err := zf.Open()
	if err != nil {
		return false
	}
	defer rc.Close()
	// io.EOF only when not a byte could be read (a corrupt entry is an
	// error of its own, and counts as not empty).
	_, err = io.ReadFull(rc, make([]byte, 1))
	return err == io.EOF
}

// storeZip stores a body in the Stroom zip format. The body is staged to a
// file first: a zip's directory is at its end, and reading it from a file
// lets weir check the entry count and every part's feed before storing
// anything, and read zips that stream readers cannot (data descriptors).
func (p *post) storeZip(raw *bodyReader, body io.Reader, deferFeedCheck bool) (outcome, error) {
	h := p.h
	f, err := os.CreateTemp(h.opt.TempDir, "zip-*.staging")
	if err != nil {
		return "", storeError(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	staging := &writeErr{w: f}
	size, err := io.Copy(staging, body)
	if err != nil {
		if staging.err != nil {
			return "", storeError(staging.err)
		}
		// Reading the body failed, not the store: the sender's doing,
		// classified as for any other body (a zip comes without a
		// Content-Encoding).
		return "", p.readError(raw, err, false)
	}
	// The body is all here: the post no longer depends on the connection.
	// Go cancels the request's context when the sender shuts down its
	// sending side after the body, which must not fail the checks below.
	return p.storeZipFile(context.WithoutCancel(p.r.Context()), f, size, deferFeedCheck)
}

// storeZipFile stores a zip that is all here (a staged body or an
// imported file) as one or more streams.
func (p *post) storeZipFile(ctx context.Context, f io.ReaderAt, size int64, deferFeedCheck bool) (outcome, error) {
	h := p.h
	dir, err := stroomzip.FindDirectory(f, size)
	if err != nil {
		return "", wrap(CompressedInvalid, err, "the body is not a valid zip file")
	}
	// Go's reader holds every entry's name, extra field and comment in
	// memory: bounded by the entry limit, not by the body's size.
	if maxDir := int64(h.cfg.MaxZipEntries) * maxDirEntryBytes; dir.Size > maxDir {
		return "", errorf(TooLarge, "the zip's central directory is %s (the names, extra fields and comments of its entries), "+
			"more than weir reads for receive.maxZipEntries (%d entries of %d bytes each at most: %s)",
			config.ByteSize(dir.Size), h.cfg.MaxZipEntries, maxDirEntryBytes, config.ByteSize(maxDir))
	}
	// The bound from the directory's size counts an entry with a long name
	// several times: when it is over the limit, count the entries.
	if limit := uint64(h.cfg.MaxZipEntries); dir.EntryBound() > limit {
		n, err := stroomzip.CountEntries(f, dir)
		if err != nil {
			return "", wrap(CompressedInvalid, err, "the body is not a valid zip file")
		}
		if n > limit {
			return "", errorf(TooLarge, "the zip has %d entries, more than receive.maxZipEntries (%d)", n, limit)
		}
	}
	zr, err := zip.NewReader(f, size)
	if err != nil {
		return "", wrap(CompressedInvalid, err, "the body is not a valid zip file")
	}
	// klauspost's inflate is about a fifth faster than the standard
	// library's, and a proxy's aggregates arrive as zips of many entries.
	// Entries are read one at a time, so one inflater serves them all
	// (should two ever be open at once, the second gets its own).
	spare := &reusedInflater{}
	zr.RegisterDecompressor(zip.Deflate, func(r io.Reader) io.ReadCloser {
		if spare.inUse {
			return flate.NewReader(r)
		}
		if spare.ReadCloser == nil {
			spare.ReadCloser = flate.NewReader(r)
		} else if err := spare.ReadCloser.(flate.Resetter).Reset(r, nil); err != nil {
			return flate.NewReader(r)
		}
		spare.inUse = true
		return spare
	})
	// A weir proxy forwarding here sends S2 entries (Handler announces
	// them in stroomzip.S2Header).
	stroomzip.RegisterS2(zr)
	// The end record's count is 16 bits and the reader only checks it
	// modulo 65536, so a zip can declare fewer entries than it holds.
	if n := len(zr.File); n > h.cfg.MaxZipEntries {
		return "", errorf(TooLarge, "the zip has %d entries, more than receive.maxZipEntries (%d)", n, h.cfg.MaxZipEntries)
	}
	if err := stroomzip.CheckStart(f, zr.File); err != nil {
		return "", wrap(CompressedInvalid, err, "the body is not one whole zip file")
	}
	names := make([]string, len(zr.File))
	for i, zf := range zr.File {
		names[i] = zf.Name
		// Go's reader reads an encrypted entry's ciphertext as if it were
		// the data, and fails on it with a misleading "corrupt".
		if zf.Flags&0x1 != 0 {
			return "", errorf(CompressedInvalid, "zip entry %q is encrypted: weir reads no encrypted zips; send the zip without a password", zf.Name)
		}
		// Groups skips directories: one that holds bytes is data that
		// would be lost.
		if stroomzip.IsDir(zf.Name) && !emptyEntry(zf) {
			return "", errorf(InvalidDataFormat, "the zip breaks the Stroom zip format: zip entry %q names a directory (it ends in '/' or '\\') "+
				"but holds data (%d bytes by the zip's directory): give the data a file name", zf.Name, zf.UncompressedSize64)
		}
	}
	groups, err := stroomzip.Groups(names)
	if err != nil {
		return "", wrap(InvalidDataFormat, err, "the zip breaks the Stroom zip format")
	}

	post := h.opt.Store.Begin()
	post.SetForward(p.forward)
	committed := false
	defer func() {
		if !committed {
			post.Abort()
		}
	}()
	hop := attr.Hop{ReceiptID: p.receiptID, Time: p.received, Host: h.opt.Host}
	decoded := &zipBudget{limit: h.limit()}
	targets := make(map[[2]string]*zipTarget)
	var order []*zipTarget
	decisions := make(map[[2]string]decision)
	var stored int64
	// The first part the receipt rules refused and dropped (see
	// dropRefusedPart), and its feed and type, for when no part is left.
	var refused error
	var refusedFeed, refusedType string
	for gi := range groups {
		g := &groups[gi]
		entry := &attr.Map{}
		// A manifest's attributes apply first; the meta entry's override them.
		for _, k := range []stroomzip.Kind{stroomzip.Manifest, stroomzip.Meta} {
			if i := g.Entry(k); i >= 0 {
				m, err := p.readMetaEntry(zr.File[i], decoded)
				if err != nil {
					return "", err
				}
				entry.Overlay(m)
			}
		}
		merged := attr.MergeEntry(p.attrs, entry, hop)
		p.protect(merged)
		d, err := p.checkPart(ctx, merged, decisions, g.Base, deferFeedCheck)
		if err != nil {
			if p.dropRefusedPart(err, merged, g.Base) {
				if refused == nil {
					refused, refusedFeed, refusedType = err, d.feed, d.typ
				}
				continue
			}
			// The refusal is about this part: its message names this
			// part's feed and type (none, when it names no feed), not
			// those of an earlier part.
			p.feed, p.typ, p.feedKnown = d.feed, d.typ, d.known
			return "", err
		}
		if d.drop {
			continue
		}
		// Groups of one feed and type are the parts of one stream, except
		// reference data: it is looked up by effective time, so each group
		// of a reference type is a stream of its own with its own
		// effective time, as the reference system stores it.
		single := !h.opt.KeepReferenceGroups && meta.IsReferenceType(d.typ)
		key := [2]string{d.feed, d.typ}
		t := targets[key]
		if single {
			t = nil
		}
		if t == nil {
			w, err := post.NewStream(ctx, store.Spec{
				Feed: d.feed, Type: d.typ, CreateMs: p.received.UnixMilli(),
				EffectiveMs: p.effectiveMs(merged), ReceiptID: p.receiptID,
			})
			if err != nil {
				return "", storeError(err)
			}
			sa := p.attrs.Clone()
			// The rule that received the request's headers, if any, is not
			// the one that received the parts (added below).
			sa.Delete(keyDataReceiptRule)
			sa.Put("Feed", d.feed)
			putType(sa, d.typ)
			t = &zipTarget{w: w, attrs: sa}
			if !single {
				targets[key] = t
			}
			order = append(order, t)
			if p.feed == "" {
				p.feed, p.typ, p.feedKnown = d.feed, d.typ, d.known
			}
		}
		if r := merged.Value(keyDataReceiptRule); r != "" && !slices.Contains(t.rules, r) {
			t.rules = append(t.rules, r)
		}
		t.share(entry)
		part := t.parts
		t.parts++
		n, err := p.copyEntry(t.w, streamfile.Data, part, zr.File, g.Entry(stroomzip.Data), decoded)
		if err != nil {
			return "", err
		}
		if i := g.Entry(stroomzip.Context); i >= 0 {
			if _, err := p.copyEntry(t.w, streamfile.Context, part, zr.File, i, decoded); err != nil {
				return "", err
			}
		}
		merged.Put("Feed", d.feed)
		putType(merged, d.typ)
		merged.Put("StreamSize", strconv.FormatInt(n, 10))
		if err := p.writeMeta(t.w, part, merged); err != nil {
			return "", err
		}
		t.size += n
		stored += n
		if single {
			if err := t.w.Done(); err != nil {
				return "", storeError(err)
			}
		}
	}
	if len(order) == 0 {
		switch {
		case refused != nil:
			// Every part the rules did not drop otherwise was refused:
			// refuse the post, so that the proxy keeps it (in its failure
			// area) rather than think it delivered.
			if p.feed == "" {
				p.feed, p.typ = refusedFeed, refusedType
			}
			return "", refused
		case len(groups) == 0:
			return outcomeEmpty, nil
		}
		return outcomeDropped, nil
	}
	for _, t := range order {
		if t.common.Len() > 0 {
			// What every part's meta says is the stream's too (a post a
			// proxy forwarded says it there, not in headers), merged over
			// the headers as each part's meta is.
			feed, typ := t.attrs.Value("Feed"), t.attrs.Value("Type")
			t.attrs = attr.MergeEntry(t.attrs, t.common, hop)
			p.protect(t.attrs)
			t.attrs.Put("Feed", feed)
			putType(t.attrs, typ)
		}
		if len(t.rules) > 0 {
			t.attrs.Put(keyDataReceiptRule, strings.Join(t.rules, ","))
		}
		t.attrs.Put("StreamSize", strconv.FormatInt(t.size, 10))
		t.w.SetAttributes(t.attrs)
	}
	return p.commit(post, &committed, stored)
}

// dropRefusedPart decides whether a part the receipt rules refuse is
// dropped, and the rest of the zip stored, instead of refusing the whole
// post: so for a trusted forwarder. A proxy has acknowledged every part to
// its sender already and cannot tell one of them, so refusing its
// aggregate would only hold back (in its failure area) the parts the rules
// accept, from senders who did nothing wrong. The part is logged, with the
// receipt ids its sender got.
//
// Only a rule that says REJECT drops a part: a part no rule matches (the
// rules may be empty or half written) refuses the post as a whole, and so
// does a zip whose every part is refused.
func (p *post) dropRefusedPart(err error, a *attr.Map, base string) bool {
	var e *Error
	if p.h.cfg.ReceiptCheckMode != config.ReceiptPolicy || !p.trustedForwarder() ||
		!errors.As(err, &e) || e.Internal != errRuleRejects {
		return false
	}
	if m := p.h.opt.Metrics; m != nil {
		m.droppedParts.Inc()
	}
	p.h.opt.Log.Warn("the data receipt rules refuse a part of a trusted forwarder's zip: the part is dropped, the rest stored",
		"receiptId", p.receiptID, "part", base, "feed", a.Value("Feed"), "uploadUserId", a.Value("UploadUserId"),
		"receiptIdPath", a.Value(attr.KeyReceiptIDPath), "reason", e.Detail)
	return true
}

// checkPart runs the receipt checks for one part's feed and type, once per
// distinct pair in a post. Every part is checked, including parts whose
// meta entry names another feed, and any rejection rejects the whole post.
func (p *post) checkPart(ctx context.Context, a *attr.Map, cache map[[2]string]decision, base string, deferred bool) (decision, error) {
	key := [2]string{a.Value("Feed"), a.Value("Type")}
	// Receipt rules may look at any attribute, and record their decision
	// in the part's own: each part is decided alone.
	rules := p.h.cfg.ReceiptCheckMode == config.ReceiptPolicy
	if d, ok := cache[key]; ok && !rules {
		return d, nil
	}
	lctx, cancel := p.h.dbContext(ctx)
	d, err := p.h.check(lctx, a)
	cancel()
	if err != nil {
		var e *Error
		if deferred && errors.As(err, &e) && e.Code == FeedMustBeSpecified {
			return d, errorf(FeedMustBeSpecified, "part %q has no Feed in its meta entry and the post has no Feed header", base)
		}
		if errors.As(err, &e) {
			e.Detail = "part " + strconv.Quote(base) + ": " + e.Detail
		}
		return d, err
	}
	cache[key] = d
	return d, nil
}

// zipBudget counts decompressed bytes across all entries of a zip, so that
// maxRequestSize bounds what a zip expands to (zip bombs included).
type zipBudget struct {
	limit int64
	n     int64
}

func (b *zipBudget) reader(r io.Reader) io.Reader { return &budgetReader{r: r, b: b} }

type budgetReader struct {
	r io.Reader
	b *zipBudget
}

func (r *budgetReader) Read(p []byte) (int, error) {
	b := r.b
	if b.limit > 0 && int64(len(p)) > b.limit-b.n+1 {
		p = p[:b.limit-b.n+1]
	}
	n, err := r.r.Read(p)
	if berr := b.add(n); berr != nil {
		return n, berr
	}
	return n, err
}

// add counts n more decompressed bytes.
func (b *zipBudget) add(n int) error {
	b.n += int64(n)
	if b.limit > 0 && b.n > b.limit {
		return errorf(TooLarge, "Maximum request size exceeded (%s, receive.maxRequestSize): the zip's entries decompress to more", config.ByteSize(b.limit))
	}
	return nil
}

// copyEntry copies zip entry i (or nothing, when i < 0, so that the part
// still has its section) into one section of a stream.
func (p *post) copyEntry(w *store.Writer, ch streamfile.Channel, part int, files []*zip.File, i int, budget *zipBudget) (int64, error) {
	var src io.Reader = eofReader{}
	var name string
	if i >= 0 && files[i].Method == stroomzip.MethodS2 {
		return p.copyS2Entry(w, ch, part, files[i], budget)
	}
	if i >= 0 {
		name = files[i].Name
		rc, err := files[i].Open()
		if err != nil {
			return 0, wrap(CompressedInvalid, err, "zip entry %q cannot be read", name)
		}
		defer rc.Close()
		src = budget.reader(rc)
	}
	return p.copySection(w, ch, part, src, func(err error) error {
		var e *Error
		if errors.As(err, &e) {
			return e
		}
		return wrap(CompressedInvalid, err, "zip entry %q is corrupt", name)
	})
}

// s2BlockWriter is a stream section that can keep S2 blocks as they come
// (the store's, when it compresses with S2).
type s2BlockWriter interface {
	WriteS2Block(data, block []byte) (int, error)
}

// copyS2Entry copies an entry of stroomzip.MethodS2 (from a weir proxy)
// into one section of a stream chunk by chunk, so that the store keeps
// the S2 blocks it is given instead of compressing their bytes again
// (about a fifth of the CPU of receiving a proxy's zips). It checks what
// the zip's own reader checks: the chunks' checksums, the entry's size
// and CRC.
func (p *post) copyS2Entry(w *store.Writer, ch streamfile.Channel, part int, zf *zip.File, budget *zipBudget) (int64, error) {
	raw, err := zf.OpenRaw()
	if err != nil {
		return 0, wrap(CompressedInvalid, err, "zip entry %q cannot be read", zf.Name)
	}
	dst, err := w.Open(ch, part)
	if err != nil {
		return 0, storeError(err)
	}
	bw, _ := dst.(s2BlockWriter)
	var (
		total int64
		sum   uint32
		werr  error // the store's
	)
	err = stroomzip.EachS2Block(raw, func(data, block []byte) error {
		if err := budget.add(len(data)); err != nil {
			return err
		}
		total += int64(len(data))
		if uint64(total) > zf.UncompressedSize64 {
			return fmt.Errorf("%w: more bytes than its declared %d", zip.ErrFormat, zf.UncompressedSize64)
		}
		sum = crc32.Update(sum, crc32.IEEETable, data)
		if bw != nil {
			_, werr = bw.WriteS2Block(data, block)
		} else {
			_, werr = dst.Write(data)
		}
		return werr
	})
	if err == nil && uint64(total) != zf.UncompressedSize64 {
		err = fmt.Errorf("%w: %d bytes, not its declared %d", io.ErrUnexpectedEOF, total, zf.UncompressedSize64)
	}
	// As the zip's reader: a CRC of 0 without a data descriptor is taken
	// for one never set.
	if err == nil && (zf.CRC32 != 0 || zf.Flags&0x8 != 0) && sum != zf.CRC32 {
		err = zip.ErrChecksum
	}
	if err == nil {
		err = checkDataDescriptor(zf, raw)
	}
	cerr := dst.Close() // on a failure too, as copySection closes its section
	var e *Error
	switch {
	case err == nil && cerr != nil:
		return total, storeError(cerr)
	case err == nil:
		return total, nil
	case err == werr:
		return total, storeError(err)
	case errors.As(err, &e):
		return total, e
	}
	return total, wrap(CompressedInvalid, err, "zip entry %q is corrupt", zf.Name)
}

// checkDataDescriptor checks, as the zip's own reader does, that an entry
// whose sizes and CRC follow its bytes (flag 0x8, a data descriptor) has
// them, with the directory's CRC. raw is the entry's OpenRaw, a section of
// the zip (if it is not, there is nothing to read the descriptor from).
func checkDataDescriptor(zf *zip.File, raw io.Reader) error {
	sr, ok := raw.(*io.SectionReader)
	if zf.Flags&0x8 == 0 || !ok {
		return nil
	}
	ra, off, n := sr.Outer()
	// The signature in front of it is optional.
	var b [16]byte
	got, _ := ra.ReadAt(b[:], off+n)
	crc, need := binary.LittleEndian.Uint32(b[:]), 12
	if crc == dataDescriptorSignature {
		crc, need = binary.LittleEndian.Uint32(b[4:]), 16
	}
	switch {
	case got < need:
		return fmt.Errorf("its data descriptor is cut short: %w", io.ErrUnexpectedEOF)
	case crc != zf.CRC32:
		return fmt.Errorf("its data descriptor's CRC differs from the directory's: %w", zip.ErrChecksum)
	}
	return nil
}

// dataDescriptorSignature is the optional signature of a zip entry's data
// descriptor ("PK\x07\x08").
const dataDescriptorSignature = 0x08074b50

// reusedInflater is an inflater handed to one zip entry at a time.
type reusedInflater struct {
	io.ReadCloser
	inUse bool
}

func (r *reusedInflater) Close() error {
	r.inUse = false
	return r.ReadCloser.Close()
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// readMetaEntry reads and parses a meta or manifest entry, bounded in size.
func (p *post) readMetaEntry(zf *zip.File, budget *zipBudget) (*attr.Map, error) {
	max := int64(p.h.cfg.MaxMetaEntrySize)
	rc, err := zf.Open()
	if err != nil {
		return nil, wrap(CompressedInvalid, err, "zip entry %q cannot be read", zf.Name)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(budget.reader(rc), max+1))
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, wrap(CompressedInvalid, err, "zip entry %q is corrupt", zf.Name)
	}
	if int64(len(b)) > max {
		return nil, errorf(TooLarge, "zip meta entry %q is larger than receive.maxMetaEntrySize (%s)", zf.Name, config.ByteSize(max))
	}
	m, err := attr.ParseMeta(b)
	if err != nil {
		return nil, wrap(InvalidDataFormat, err, "zip meta entry %q", zf.Name)
	}
	return m, nil
}

// putType records a resolved type; a proxy that leaves the type to its
// downstream has none to record.
func putType(a *attr.Map, typ string) {
	if typ != "" {
		a.Put("Type", typ)
	}
}
