package datafeedkey

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/meta"
)

// Repo is where keys created with the admin command live (*meta.Repo).
type Repo interface {
	DataFeedKeysForAccount(ctx context.Context, account string) ([]meta.DataFeedKey, error)
	DataFeedKeysByLookup(ctx context.Context, lookup string) ([]meta.DataFeedKey, error)
	GetDataFeedKey(ctx context.Context, id int64) (meta.DataFeedKey, error)
}

// Options configures a Store.
type Options struct {
	Dir          string        // identity files directory (absolute); "" or missing dir = no files
	OwnerHeader  string        // e.g. "AccountId"
	CacheTTL     time.Duration // how long a verified (key, owner) is remembered; 0 = no caching
	PollInterval time.Duration // how often Dir is rescanned; 0 -> 5s
	Repo         Repo          // keys created with the admin command; may be nil
	Logger       *slog.Logger
	Now          func() time.Time
}

const (
	defaultPollInterval = 5 * time.Second

	// maxConcurrentHashes bounds the argon2 computations in flight. Each
	// takes 64 MiB for about 50-100 ms, so without a bound a flood of posts
	// with wrong keys would need 64 MiB per concurrent post.
	maxConcurrentHashes = 2

	// missTTL is how long a (key, owner) that matched nothing is
	// remembered. A sender retrying a wrong key in a loop then costs one
	// lookup, not a hash per candidate per post. It is short because a key
	// can become valid later (added to a file; the cache is cleared when
	// files change, but not when a key is created in the database, which a
	// sender cannot know before it is created anyway). It does not slow
	// down guessing fresh keys, but the key space (~750 bits) does that.
	missTTL = 10 * time.Second

	// maxCacheEntries bounds each of the hit and miss caches, so random
	// keys cannot grow them without limit. Entries are fixed-size hashes.
	maxCacheEntries = 10000

	// maxFileSize bounds an identity file read into memory.
	maxFileSize = 16 << 20

	// identityPrefix starts the subject of a data feed identity, as in the
	// reference: data-feed-identity-<owner>.
	identityPrefix = "data-feed-identity-"
)

// Store holds the identities from the identity files and authenticates data
// feed keys against them and the database. It is safe for concurrent use.
//
// Checking a key means hashing it once per stored key of the owner (argon2id:
// 64 MiB, tens of milliseconds), or once against a decoy when the owner has
// none, so that timing does not tell which owners have keys. Results are
// cached by SHA-256 of (owner, key); the plaintext is never kept. A hit lasts
// CacheTTL, but:
//   - a hit on a database key rereads that key's row, so revoking it with the
//     admin command takes effect on the next post;
//   - any change to the identity files clears the cache (hits and misses),
//     so a removed file key stops and an added one starts on the next scan;
//   - a miss (a key matching none of the owner's keys) lasts at most missTTL.
//
// At most maxConcurrentHashes hashes run at once; posts beyond that wait (or
// give up with their request's context).
type Store struct {
	dir          string
	ownerHeader  string
	cacheTTL     time.Duration
	pollInterval time.Duration
	repo         Repo
	log          *slog.Logger
	now          func() time.Time
	// verify is Verify; tests replace it to count hash computations.
	verify func(key, hash, salt string, alg Algorithm) (bool, error)
	// decoy is the stored form of a key no sender has, made on first use:
	// an owner with no keys is checked against it (see authenticate).
	decoy func() (candidate, error)

	sem chan struct{} // a slot per concurrent hash computation

	// idx is the identities of all files, replaced whole on every change
	// so readers never lock.
	idx atomic.Pointer[index]
	// scanMu serialises scans (the poller's, and Open's before it starts);
	// it guards files and dirMissing.
	scanMu     sync.Mutex
	files      map[string]*fileState
	dirMissing bool

	mu   sync.Mutex
	hits map[[32]byte]*hit
	miss map[[32]byte]*miss

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// index is the identities of all files.
type index struct {
	keys  map[string][]*keyIdentity  // by owner, exact
	certs map[string][]*certIdentity // by dnKey of the certificate DN; file name then file order
	nKeys int
}

// fileState is what was last read from one identity file.
type fileState struct {
	info    fs.FileInfo
	parsed  *parsedFile // nil when the file could not be read or parsed
	retry   bool        // a read error: try again on the next scan even if unchanged
	lastErr string      // the error last logged, so a lasting problem is logged once
}

// hit is a (key, owner) that matched a key. It is valid only against the
// index it was matched with: any change to the files clears the cache.
type hit struct {
	idx   *index
	until time.Time
	file  *keyIdentity // the matched file identity, or nil
	dbID  int64        // the matched database key when file is nil
}

// miss is a (key, owner) that matched nothing.
type miss struct {
	idx   *index
	until time.Time
}

// Open loads the identity files and starts rescanning Dir every
// PollInterval. A file that cannot be read or parsed is logged and skipped;
// a missing Dir is no files (it is rescanned, so it may appear later).
func Open(ctx context.Context, o Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open data feed identities: %w", err)
	}
	switch {
	case strings.TrimSpace(o.OwnerHeader) == "":
		return nil, errors.New("open data feed identities: no owner header name")
	case o.Dir != "" && !filepath.IsAbs(o.Dir):
		return nil, fmt.Errorf("open data feed identities: directory %q is not absolute", o.Dir)
	case o.CacheTTL < 0 || o.PollInterval < 0:
		return nil, errors.New("open data feed identities: negative cache TTL or poll interval")
	}
	if r, ok := o.Repo.(*meta.Repo); ok && r == nil {
		o.Repo = nil // a typed nil would pass the nil check below and panic on use
	}
	s := &Store{
		dir:          o.Dir,
		ownerHeader:  strings.TrimSpace(o.OwnerHeader),
		cacheTTL:     o.CacheTTL,
		pollInterval: cmp.Or(o.PollInterval, defaultPollInterval),
		repo:         o.Repo,
		log:          o.Logger,
		now:          o.Now,
		verify:       Verify,
		decoy:        sync.OnceValues(newDecoy),
		sem:          make(chan struct{}, maxConcurrentHashes),
		files:        map[string]*fileState{},
		hits:         map[[32]byte]*hit{},
		miss:         map[[32]byte]*miss{},
		done:         make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.idx.Store(&index{})
	s.scan()
	// The poller outlives Open's context; Close stops it.
	pollCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = cancel
	go s.poll(pollCtx)
	return s, nil
}

// Close stops rescanning. Authentication keeps working with what was
// loaded last.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done
	})
}

func (s *Store) poll(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.pollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.scan()
			s.pruneCaches()
		}
	}
}

// scan rereads the files of Dir that appeared or changed (modification
// time, size or identity, so a file replaced by rename is noticed) and drops
// those that disappeared.
func (s *Store) scan() {
	if s.dir == "" {
		return
	}
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	entries, err := os.ReadDir(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !s.dirMissing {
			s.log.Info("data feed identities directory does not exist; no identity files loaded", "dir", s.dir)
			s.dirMissing = true
		}
		entries = nil // everything loaded from it is gone
	case err != nil:
		// Keep what is loaded: a passing error must not lock out every sender.
		s.log.Warn("cannot read data feed identities directory; keeping the identities loaded", "dir", s.dir, "err", err)
		return
	case s.dirMissing:
		s.dirMissing = false
		s.log.Info("data feed identities directory appeared", "dir", s.dir)
	}
	changed := false
	seen := map[string]bool{}
	// What changed is logged once it is in effect (after rebuild): a log
	// line saying that a file's keys authenticate, or no longer do, must
	// be true when it is read.
	var logs []func()
	for _, e := range entries {
		name := e.Name()
		if !strings.EqualFold(filepath.Ext(name), ".json") {
			continue
		}
		path := filepath.Join(s.dir, name)
		// Stat follows symbolic links, which mounted secrets and config
		// maps are made of; directories and dangling links are skipped.
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		seen[name] = true
		old := s.files[name]
		if old != nil && !old.retry && sameFile(old.info, fi) {
			continue
		}
		st := s.load(path, fi, old, &logs)
		s.files[name] = st
		changed = true
	}
	for name := range s.files {
		if !seen[name] {
			delete(s.files, name)
			path := filepath.Join(s.dir, name)
			logs = append(logs, func() {
				s.log.Info("data feed identity file removed; its identities no longer authenticate", "file", path)
			})
			changed = true
		}
	}
	if changed {
		s.rebuild()
	}
	for _, l := range logs {
		l()
	}
}

func sameFile(a, b fs.FileInfo) bool {
	return a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size() && os.SameFile(a, b)
}

// load reads and parses one file. A file that does not parse contributes
// nothing until it changes: failing closed means an edit that breaks a file
// cannot leave a removed key working. Write files by rename to avoid a
// window where a half-written file is read.
func (s *Store) load(path string, fi fs.FileInfo, old *fileState, logs *[]func()) *fileState {
	st := &fileState{info: fi}
	logOnce := func(msg string, err error) {
		st.lastErr = err.Error()
		if old == nil || old.lastErr != st.lastErr {
			*logs = append(*logs, func() { s.log.Error(msg, "file", path, "err", err) })
		}
	}
	data, info, err := readFile(path)
	if err != nil {
		st.retry = true
		logOnce("cannot read data feed identity file; none of its identities authenticate until it can be read", err)
		return st
	}
	st.info = info
	p, err := parseIdentities(data, s.ownerHeader, s.now().UnixMilli(), filepath.Base(path))
	if err != nil {
		// Say what it means for senders: the identities loaded from an
		// earlier version of the file stop working too (failing closed).
		logOnce("data feed identity file is not valid; none of its identities authenticate until it is fixed", err)
		return st
	}
	st.parsed = p
	*logs = append(*logs, func() {
		for _, reason := range p.ignored {
			s.log.Warn("data feed identity ignored", "file", path, "reason", reason)
		}
		s.log.Info("data feed identity file loaded", "file", path,
			"keys", len(p.keys), "certificateIdentities", len(p.certs), "expired", p.expired, "ignored", len(p.ignored))
	})
	return st
}

// readFile reads at most maxFileSize bytes and the file's own stat, which
// describes what was read even if the name is replaced meanwhile.
func readFile(path string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > maxFileSize {
		return nil, nil, fmt.Errorf("larger than %d MiB", maxFileSize>>20)
	}
	return data, fi, nil
}

// rebuild makes a new index from every loaded file and clears the caches,
// which were computed against the old one.
func (s *Store) rebuild() {
	idx := &index{keys: map[string][]*keyIdentity{}, certs: map[string][]*certIdentity{}}
	names := make([]string, 0, len(s.files))
	for name := range s.files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := s.files[name].parsed
		if p == nil {
			continue
		}
		for _, k := range p.keys {
			idx.keys[k.owner] = append(idx.keys[k.owner], k)
			idx.nKeys++
		}
		for _, c := range p.certs {
			k := dnKey(c.dn)
			idx.certs[k] = append(idx.certs[k], c)
		}
	}
	s.idx.Store(idx)
	s.mu.Lock()
	s.hits = map[[32]byte]*hit{}
	s.miss = map[[32]byte]*miss{}
	s.mu.Unlock()
}

// KeyAuthenticator authenticates DATA_FEED_KEY credentials.
func (s *Store) KeyAuthenticator() auth.Authenticator { return keyAuthenticator{s} }

// CertificateIdentityAuthenticator authenticates CERTIFICATE_IDENTITY: the
// owner header and the client's certificate DN, which dn returns ("" when
// there is no verified DN).
func (s *Store) CertificateIdentityAuthenticator(dn func(*http.Request) string) auth.Authenticator {
	return certAuthenticator{s: s, dn: dn}
}

type keyAuthenticator struct{ s *Store }

func (a keyAuthenticator) Authenticate(ctx context.Context, r *auth.Request) (*auth.Identity, error) {
	if r == nil || r.HTTP == nil {
		return nil, nil
	}
	key := r.Authorization()
	if !Valid(key) {
		if strings.HasPrefix(key, Prefix) {
			// Meant as a data feed key but not one: say so, rather than
			// "no credential" (the reference passes it on to the token
			// authenticator, which can only fail it less clearly).
			return nil, auth.Failf(auth.DataFeedKeyFailed,
				"the data feed key is malformed: a key is %s followed by 128 Base58 characters", Prefix)
		}
		return nil, nil // not a data feed key: the next authenticator's
	}
	s := a.s
	// Without the owner header (optional in weir's contract; mandatory in
	// the reference) a key created by weir is found by its lookup hash.
	// Keys from identity files have none and still need their owner.
	owner := s.owner(r)
	id, err := s.authenticate(ctx, key, owner)
	var f *auth.Failure
	if owner == "" && errors.As(err, &f) && f.Code == auth.DataFeedKeyFailed && f.Detail == "" && f.Err == nil {
		// Found by itself the key may also be revoked or unknown: the
		// answer must not send a sender with a revoked key off to add a
		// header that cannot help.
		return nil, auth.Failf(auth.DataFeedKeyFailed,
			"the data feed key is unknown or revoked, or needs its owner in the '%s' header (keys from identity files and keys created before weir stored a lookup for them need it)", s.ownerHeader)
	}
	return id, err
}

// owner is the owner the sender names: the owner header among the post's
// attributes (headers and query parameters, case-insensitive).
func (s *Store) owner(r *auth.Request) string {
	if r.Attrs != nil {
		return strings.TrimSpace(r.Attrs.Value(s.ownerHeader))
	}
	if r.HTTP != nil {
		return strings.TrimSpace(r.HTTP.Header.Get(s.ownerHeader))
	}
	return ""
}

// unknownKey is the failure for a key that matches nothing. It is the same
// whether the owner is unknown, has no keys, or has other keys, so it tells
// a guesser nothing.
func unknownKey() error { return &auth.Failure{Code: auth.DataFeedKeyFailed} }

// internalFailure is a 313 whose cause is logged but not sent.
func internalFailure(err error) error {
	return &auth.Failure{Code: auth.DataFeedKeyFailed, Err: fmt.Errorf("data feed key: %w", err)}
}

// candidate is a stored key a presented key may match.
type candidate struct {
	hash, salt string
	alg        Algorithm
	expiresMs  int64
	file       *keyIdentity      // from an identity file, or
	db         *meta.DataFeedKey // from the database, or
	decoy      bool              // the decoy: never a match
}

// newDecoy hashes a fresh random key exactly as real keys are hashed
// (argon2id, the reference's parameters). The key is dropped, so nothing
// can match the decoy; checking a key against it costs what checking
// against a real argon2 key costs. A Store makes it once, lazily.
func newDecoy() (candidate, error) {
	key, err := Generate()
	if err != nil {
		return candidate{}, fmt.Errorf("decoy key: %w", err)
	}
	hash, salt, err := Hash(key)
	if err != nil {
		return candidate{}, fmt.Errorf("decoy key: %w", err)
	}
	return candidate{hash: hash, salt: salt, alg: Argon2, decoy: true}, nil
}

func (s *Store) authenticate(ctx context.Context, key, owner string) (*auth.Identity, error) {
	ck := cacheKey(key, owner)
	if id, ok, err := s.cached(ctx, ck, owner); ok {
		return id, err
	}
	idx := s.idx.Load()
	cands, dbErr := s.candidates(ctx, idx, key, owner)
	if len(cands) == 0 && owner == "" {
		// Found by its lookup (the SHA-256 of the key itself), an unknown
		// key is answered at once by design: that no key has this hash
		// tells nothing about any account or key, since finding one that
		// has it means knowing the key (~750 random bits). Nothing is
		// hashed, so nothing is cached either.
		if dbErr != nil {
			return nil, internalFailure(dbErr)
		}
		return nil, unknownKey()
	}
	// The owner, though, is a name the sender chooses. Answering at once
	// for an owner without (usable) keys, when an owner with keys costs an
	// argon2 hash, would let anyone tell by timing which accounts have
	// keys. So such an owner is hashed against a decoy (below, under the
	// same bound), and its miss is cached like any other. So is an owner
	// whose database keys could not be read (an owner with file keys is
	// hashed then too); that answer is an internal failure, not cached.
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, internalFailure(ctx.Err())
	}
	defer func() { <-s.sem }()
	// Posts with the same key queue here when it is not cached yet; all but
	// the first find it cached now.
	if id, ok, err := s.cached(ctx, ck, owner); ok {
		return id, err
	}
	if len(cands) == 0 {
		d, err := s.decoy()
		if err != nil {
			return nil, internalFailure(err)
		}
		cands = []candidate{d}
	}
	c, verifyErr := s.match(key, cands)
	if c != nil && c.decoy {
		c = nil // cannot happen (no sender has the decoy's key), but never let it in
	}
	if c == nil {
		if err := errors.Join(dbErr, verifyErr); err != nil {
			// The key may be in what could not be read: do not remember a miss.
			return nil, internalFailure(err)
		}
		s.remember(ck, nil, idx)
		return nil, unknownKey()
	}
	h := &hit{file: c.file}
	if c.db != nil {
		h.dbID = c.db.ID
		s.remember(ck, h, idx)
		return s.dbIdentity(*c.db)
	}
	s.remember(ck, h, idx)
	return s.identity(owner, c.expiresMs, c.file.attrs)
}

// cacheKey identifies a (key, owner) pair without keeping the key. The
// owner is hashed in too so that an entry has a fixed size whatever the
// sender puts in the owner header.
func cacheKey(key, owner string) [32]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(owner)))
	h.Write(n[:])
	h.Write([]byte(owner))
	h.Write([]byte(key))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// cached answers from the cache when it can (ok). A hit on a database key
// rereads its row, so a key revoked with the admin command stops working at
// once; a hit on a file key is valid only while the files are unchanged.
func (s *Store) cached(ctx context.Context, ck [32]byte, owner string) (id *auth.Identity, ok bool, err error) {
	now := s.now()
	idx := s.idx.Load()
	s.mu.Lock()
	h, m := s.hits[ck], s.miss[ck]
	s.mu.Unlock()
	switch {
	case h != nil && h.idx == idx && now.Before(h.until):
		if h.file != nil {
			id, err := s.identity(owner, h.file.expiresMs, h.file.attrs)
			return id, true, err
		}
		k, err := s.repo.GetDataFeedKey(ctx, h.dbID)
		switch {
		case errors.Is(err, meta.ErrNotFound), err == nil && (k.RevokedMs != 0 || (owner != "" && k.Account != owner)):
			s.forget(ck, h)
			return nil, false, nil // verify afresh: another key may still match
		case err != nil:
			return nil, true, internalFailure(err)
		}
		id, err := s.dbIdentity(k)
		return id, true, err
	case m != nil && m.idx == idx && now.Before(m.until):
		return nil, true, unknownKey()
	}
	return nil, false, nil
}

// candidates are the owner's keys from the files and the database, or with
// no owner the database keys whose lookup is the key's. A database error is
// returned beside the file keys, which can still match.
func (s *Store) candidates(ctx context.Context, idx *index, key, owner string) ([]candidate, error) {
	var out []candidate
	if owner != "" {
		for _, k := range idx.keys[owner] {
			out = append(out, candidate{hash: k.hash, salt: k.salt, alg: k.alg, expiresMs: k.expiresMs, file: k})
		}
	}
	var dbErr error
	if s.repo != nil {
		var ks []meta.DataFeedKey
		var err error
		if owner != "" {
			ks, err = s.repo.DataFeedKeysForAccount(ctx, owner)
		} else {
			ks, err = s.repo.DataFeedKeysByLookup(ctx, Lookup(key))
		}
		if err != nil {
			dbErr = err
		}
		for i := range ks {
			k := &ks[i]
			if k.RevokedMs != 0 || (owner != "" && k.Account != owner) {
				continue
			}
			out = append(out, candidate{hash: k.Hash, salt: k.Salt, alg: Algorithm(k.Algorithm), expiresMs: k.ExpiresMs, db: k})
		}
	}
	// Latest expiry first: the first match is then the one the reference
	// picks (the latest-expiring of all matches), and if it has expired,
	// every match has.
	slices.SortStableFunc(out, func(a, b candidate) int { return cmp.Compare(b.expiresMs, a.expiresMs) })
	return out, dbErr
}

// match hashes key against the candidates in order and returns the first
// that matches. Identical (algorithm, salt, hash) entries, such as the same
// key listed twice, are hashed once.
func (s *Store) match(key string, cands []candidate) (*candidate, error) {
	type stored struct {
		alg        Algorithm
		hash, salt string
	}
	tried := map[stored]bool{}
	var firstErr error
	for i := range cands {
		c := &cands[i]
		k := stored{c.alg, c.hash, c.salt}
		if tried[k] {
			continue
		}
		tried[k] = true
		ok, err := s.verify(key, c.hash, c.salt, c.alg)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if ok {
			return c, nil
		}
	}
	return nil, firstErr
}

// remember caches a hit (h != nil) or a miss.
func (s *Store) remember(ck [32]byte, h *hit, idx *index) {
	if s.cacheTTL <= 0 {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx.Load() != idx {
		return // the files changed while hashing: this result is stale
	}
	if h != nil {
		h.idx, h.until = idx, now.Add(s.cacheTTL)
		prune(s.hits, now, func(h *hit) time.Time { return h.until })
		s.hits[ck] = h
		delete(s.miss, ck)
		return
	}
	prune(s.miss, now, func(m *miss) time.Time { return m.until })
	s.miss[ck] = &miss{idx: idx, until: now.Add(min(missTTL, s.cacheTTL))}
}

// forget drops a hit that turned out stale, unless it was replaced meanwhile.
func (s *Store) forget(ck [32]byte, h *hit) {
	s.mu.Lock()
	if s.hits[ck] == h {
		delete(s.hits, ck)
	}
	s.mu.Unlock()
}

// pruneCaches drops expired entries; the poller calls it.
func (s *Store) pruneCaches() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, h := range s.hits {
		if !now.Before(h.until) {
			delete(s.hits, k)
		}
	}
	for k, m := range s.miss {
		if !now.Before(m.until) {
			delete(s.miss, k)
		}
	}
}

// prune makes room for one more entry in a full cache: expired entries go
// first, then arbitrary ones (map order), down to 90% so this runs rarely.
func prune[V any](m map[[32]byte]V, now time.Time, until func(V) time.Time) {
	if len(m) < maxCacheEntries {
		return
	}
	for k, v := range m {
		if !now.Before(until(v)) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < maxCacheEntries*9/10 {
			break
		}
		delete(m, k)
	}
}

// identity is the sender's identity for a matched key, or 314 when the key
// has expired.
func (s *Store) identity(owner string, expiresMs int64, attrs *attr.Map) (*auth.Identity, error) {
	if s.now().UnixMilli() >= expiresMs {
		return nil, &auth.Failure{Code: auth.DataFeedKeyExpired}
	}
	return &auth.Identity{
		SubjectID:   identityPrefix + owner,
		DisplayName: identityPrefix + owner,
		// A copy: the caller may change it, and the loaded one is shared.
		Attributes: attrs.Clone(),
	}, nil
}

// dbIdentity is identity for a database key. The owner header is added to
// its attributes, as an identity file's streamMetaData always holds it, so
// that every stream records the owner in the key's own spelling.
func (s *Store) dbIdentity(k meta.DataFeedKey) (*auth.Identity, error) {
	attrs := k.Attributes.Clone()
	attrs.Put(s.ownerHeader, k.Account)
	return s.identity(k.Account, k.ExpiresMs, attrs)
}

type certAuthenticator struct {
	s  *Store
	dn func(*http.Request) string
}

// Authenticate finds the certificate identity of (owner, DN): the owner
// compared without regard to case, the DN as dnKey writes it. Anything missing or
// unmatched is "not mine", as in the reference, so the plain certificate
// authenticator can still accept the certificate.
func (a certAuthenticator) Authenticate(ctx context.Context, r *auth.Request) (*auth.Identity, error) {
	if r == nil || a.dn == nil {
		return nil, nil
	}
	s := a.s
	owner := s.owner(r)
	if owner == "" || r.HTTP == nil {
		return nil, nil
	}
	dn := a.dn(r.HTTP)
	if strings.TrimSpace(dn) == "" {
		return nil, nil
	}
	nowMs := s.now().UnixMilli()
	for _, c := range s.idx.Load().certs[dnKey(dn)] {
		if strings.EqualFold(c.owner, owner) && nowMs < c.expiresMs {
			return &auth.Identity{
				SubjectID:   identityPrefix + c.owner,
				DisplayName: identityPrefix + c.owner,
				Attributes:  c.attrs.Clone(),
			}, nil
		}
	}
	return nil, nil
}

// dnKey is the form in which certificate DNs are compared. An LDAP DN may
// be written with spaces around its ',' and '=' separators and with
// attribute names in any case (RFC 4514 readers accept them), and the
// reference's own TLS (Java) writes "CN=Log Sender, O=Example, C=GB" where
// Go and nginx write "CN=Log Sender,O=Example,C=GB": an identity file
// written for one must match the DN of the other. Values keep their case
// and inner spaces; an escaped character (say "\,") stays escaped, and an
// escaped trailing space is kept. Anything else, such as an OpenSSL-form DN,
// is compared as written, trimmed.
func dnKey(dn string) string {
	dn = strings.TrimSpace(dn)
	if strings.HasPrefix(dn, "/") || !strings.Contains(dn, "=") {
		return dn
	}
	var b strings.Builder
	b.Grow(len(dn))
	start, first := 0, true
	rdn := func(s string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		s = trimDN(s)
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			b.WriteString(s)
			return
		}
		b.WriteString(strings.ToUpper(trimDN(s[:eq])))
		b.WriteByte('=')
		b.WriteString(trimDN(s[eq+1:]))
	}
	for i := 0; i < len(dn); i++ {
		switch dn[i] {
		case '\\':
			i++ // the escaped byte never separates
		case ',':
			rdn(dn[start:i])
			start = i + 1
		}
	}
	rdn(dn[start:])
	return b.String()
}

// trimDN trims spaces, keeping a trailing space that is escaped.
func trimDN(s string) string {
	s = strings.TrimLeft(s, " ")
	for strings.HasSuffix(s, " ") && !strings.HasSuffix(s, "\\ ") {
		s = s[:len(s)-1]
	}
	return s
}
