package datafeedkey

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// clock is a settable time source.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *clock) now() time.Time           { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration)      { c.ns.Add(int64(d)) }
func (c *clock) in(d time.Duration) int64 { return c.now().Add(d).UnixMilli() }

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// harness is a Store over a temporary identity directory, with a settable
// clock, a count of hash verifications and the log, which must never show
// a key.
type harness struct {
	t        *testing.T
	dir      string
	clock    *clock
	logs     *syncBuffer
	verifies atomic.Int64
	keysMu   sync.Mutex
	keys     []string
	store    *Store
}

func newHarness(t *testing.T, mutate func(o *Options)) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), clock: newClock(), logs: &syncBuffer{}}
	t.Cleanup(func() {
		logs := h.logs.String()
		h.keysMu.Lock()
		defer h.keysMu.Unlock()
		for _, k := range h.keys {
			// The random part alone: no key may appear in any form.
			if strings.Contains(logs, k[len(Prefix):]) {
				t.Errorf("the log shows a key:\n%s", logs)
				return
			}
		}
	})
	h.open(mutate)
	return h
}

// open (re)opens the store; files already in dir are loaded.
func (h *harness) open(mutate func(o *Options)) {
	h.t.Helper()
	o := Options{
		Dir:         h.dir,
		OwnerHeader: "AccountId",
		CacheTTL:    5 * time.Minute,
		Logger:      slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:         h.clock.now,
	}
	if mutate != nil {
		mutate(&o)
	}
	s, err := Open(context.Background(), o)
	if err != nil {
		h.t.Fatalf("Open: %v", err)
	}
	h.t.Cleanup(s.Close)
	s.verify = func(key, hash, salt string, alg Algorithm) (bool, error) {
		h.verifies.Add(1)
		return Verify(key, hash, salt, alg)
	}
	h.store = s
}

func (h *harness) newKey() string {
	h.t.Helper()
	k, err := Generate()
	if err != nil {
		h.t.Fatal(err)
	}
	h.keysMu.Lock()
	h.keys = append(h.keys, k)
	h.keysMu.Unlock()
	return k
}

// ident is one entry of an identity file.
type ident map[string]any

func metaOf(owner string, kv ...string) map[string]string {
	m := map[string]string{"AccountId": owner}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// keyIdent hashes key with alg for an identity file.
func keyIdent(t *testing.T, key string, alg Algorithm, expiresMs int64, streamMeta map[string]string) ident {
	t.Helper()
	e := ident{"type": "DATA_FEED_KEY", "hashAlgorithm": string(alg), "expiryDateEpochMs": expiresMs, "streamMetaData": streamMeta}
	switch alg {
	case Argon2:
		hash, salt, err := Hash(key)
		if err != nil {
			t.Fatal(err)
		}
		e["hash"], e["salt"] = hash, salt
	case BCrypt:
		// As the reference hashes: the first 72 bytes; MinCost keeps tests fast.
		hash, err := bcrypt.GenerateFromPassword([]byte(key[:bcryptMaxKey]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		e["hash"], e["salt"] = string(hash), nil
	}
	return e
}

func certIdent(dn string, expiresMs int64, streamMeta map[string]string) ident {
	return ident{"type": "CERTIFICATE_DN", "certificateDn": dn, "expiryDateEpochMs": expiresMs, "streamMetaData": streamMeta}
}

// write puts an identity file in place by rename, as operators should.
func (h *harness) write(name string, ids ...ident) {
	h.t.Helper()
	b, err := json.Marshal(map[string]any{"dataFeedIdentities": ids})
	if err != nil {
		h.t.Fatal(err)
	}
	h.writeRaw(name, b)
}

func (h *harness) writeRaw(name string, b []byte) {
	h.t.Helper()
	tmp := filepath.Join(h.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.dir, name)); err != nil {
		h.t.Fatal(err)
	}
}

func post(authorization string, headers ...string) *auth.Request {
	r := httptest.NewRequest(http.MethodPost, "/datafeed", nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	attrs := new(attr.Map)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
		attrs.Put(headers[i], headers[i+1])
	}
	return &auth.Request{HTTP: r, Attrs: attrs}
}

func (h *harness) auth(authorization string, headers ...string) (*auth.Identity, error) {
	return h.store.KeyAuthenticator().Authenticate(context.Background(), post(authorization, headers...))
}

// wantIdentity checks a successful authentication as owner with attributes.
func wantIdentity(t *testing.T, id *auth.Identity, err error, owner string, attrs map[string]string) {
	t.Helper()
	if err != nil || id == nil {
		t.Fatalf("authenticate = %v, %v; want identity of %s", id, err, owner)
	}
	if want := "data-feed-identity-" + owner; id.SubjectID != want || id.DisplayName != want {
		t.Errorf("identity = %q/%q, want %q", id.SubjectID, id.DisplayName, want)
	}
	for k, v := range attrs {
		if got, ok := id.Attributes.Get(k); !ok || got != v {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, got, v, id.Attributes.Sorted())
		}
	}
}

func wantFailure(t *testing.T, id *auth.Identity, err error, code int) *auth.Failure {
	t.Helper()
	var f *auth.Failure
	if id != nil || !errors.As(err, &f) || f.Code != code {
		t.Fatalf("authenticate = %v, %v; want failure %d", id, err, code)
	}
	return f
}

// Case 39: what is not a data feed key is not this authenticator's. weir
// differs for values that start with sdk_ but are not keys: they were meant
// as data feed keys, so they fail with 313 instead of passing on.
func TestNotADataFeedKey(t *testing.T) {
	h := newHarness(t, nil)
	k := h.newKey()
	h.write("a.json", keyIdent(t, k, Argon2, h.clock.in(time.Hour), metaOf("1234")))
	for _, authz := range []string{"sdk_", "sdk_abc", "sdk_000_" + k[len(Prefix):], k + "x"} {
		id, err := h.auth(authz, "AccountId", "1234")
		var f *auth.Failure
		if id != nil || !errors.As(err, &f) || f.Code != auth.DataFeedKeyFailed || !strings.Contains(f.Detail, "malformed") {
			t.Errorf("Authorization %q: %v, %v; want 313 malformed", authz, id, err)
		}
	}
	for _, authz := range []string{"", "foo", "Bearer foo", "Bearer ", "Basic " + k, strings.ToUpper(k)} {
		id, err := h.auth(authz, "AccountId", "1234")
		if id != nil || err != nil {
			t.Errorf("Authorization %q: %v, %v; want nothing", authz, id, err)
		}
	}
	if n := h.verifies.Load(); n != 0 {
		t.Errorf("%d hash verifications for non-keys, want 0", n)
	}
}

// Cases 40 and 44, and the owner header: every failure to match looks the
// same to the sender.
func TestUnknownKeyWrongOwnerMissingOwner(t *testing.T) {
	h := newHarness(t, nil)
	k, other := h.newKey(), h.newKey()
	h.write("a.json",
		keyIdent(t, k, Argon2, h.clock.in(time.Hour), metaOf("1234")),
		keyIdent(t, other, BCrypt, h.clock.in(time.Hour), metaOf("5678")))

	var texts []string
	for name, tc := range map[string]struct{ key, owner string }{
		"unknown key, known owner":   {h.newKey(), "1234"},
		"unknown key, unknown owner": {h.newKey(), "nobody"},
		"known key, unknown owner":   {k, "foo"},
		"known key, other's owner":   {k, "5678"},
	} {
		id, err := h.auth("Bearer "+tc.key, "AccountId", tc.owner)
		f := wantFailure(t, id, err, auth.DataFeedKeyFailed)
		if f.Err != nil {
			t.Errorf("%s: internal error %v", name, f.Err)
		}
		texts = append(texts, f.Error())
	}
	for _, s := range texts[1:] {
		if s != texts[0] {
			t.Errorf("failure texts differ: %q vs %q", s, texts[0])
		}
	}

	// A file key is found by its owner only.
	id, err := h.auth(k)
	f := wantFailure(t, id, err, auth.DataFeedKeyFailed)
	if want := "the data feed key is unknown or revoked, or needs its owner in the 'AccountId' header"; !strings.HasPrefix(f.Detail, want) {
		t.Errorf("detail = %q, want it to start %q", f.Detail, want)
	}
	id, err = h.auth(k, "AccountId", "  ")
	wantFailure(t, id, err, auth.DataFeedKeyFailed)

	// The configured header name is used, found in any case.
	h2 := newHarness(t, func(o *Options) { o.OwnerHeader = "X-Owner" })
	h2.write("a.json", keyIdent(t, k, BCrypt, h2.clock.in(time.Hour), map[string]string{"x-owner": "1234"}))
	h2.store.scan()
	id, err = h2.auth(k, "AccountId", "1234")
	f = wantFailure(t, id, err, auth.DataFeedKeyFailed)
	if !strings.Contains(f.Detail, "'X-Owner'") {
		t.Errorf("detail = %q, want the configured header", f.Detail)
	}
	id, err = h2.auth(k, "X-OWNER", "1234")
	wantIdentity(t, id, err, "1234", map[string]string{"x-owner": "1234"})
}

// The owner is compared exactly, as the reference compares it.
func TestOwnerExact(t *testing.T) {
	h := newHarness(t, nil)
	k := h.newKey()
	h.write("a.json", keyIdent(t, k, BCrypt, h.clock.in(time.Hour), metaOf("Acme")))
	h.store.scan()
	id, err := h.auth(k, "AccountId", "Acme")
	wantIdentity(t, id, err, "Acme", nil)
	id, err = h.auth(k, "AccountId", "acme")
	wantFailure(t, id, err, auth.DataFeedKeyFailed)
}

// Cases 41 and 42.
func TestValidAndExpiringKey(t *testing.T) {
	h := newHarness(t, nil)
	k, k2 := h.newKey(), h.newKey()
	h.write("keys.json",
		keyIdent(t, k, Argon2, h.clock.in(time.Hour), metaOf("1234", "key1", "val1", "key2", "val2")),
		// The same key twice: the later expiry counts.
		keyIdent(t, k2, BCrypt, h.clock.in(time.Hour), metaOf("1234", "which", "first")),
		keyIdent(t, k2, BCrypt, h.clock.in(3*time.Hour), metaOf("1234", "which", "second")))
	h.store.scan()

	for _, authz := range []string{k, "Bearer " + k, "bearer " + k} {
		id, err := h.auth(authz, "AccountId", "1234", "key1", "from-header")
		wantIdentity(t, id, err, "1234", map[string]string{"AccountId": "1234", "key1": "val1", "key2": "val2"})
	}
	id, err := h.auth(k2, "AccountId", "1234")
	wantIdentity(t, id, err, "1234", map[string]string{"which": "second"})

	h.clock.add(2 * time.Hour)
	id, err = h.auth(k, "AccountId", "1234")
	wantFailure(t, id, err, auth.DataFeedKeyExpired)
	id, err = h.auth(k2, "AccountId", "1234")
	wantIdentity(t, id, err, "1234", map[string]string{"which": "second"})
	h.clock.add(2 * time.Hour)
	id, err = h.auth(k2, "AccountId", "1234")
	wantFailure(t, id, err, auth.DataFeedKeyExpired)

	// An identity already expired when its file is read is not loaded at
	// all, as in the reference: the key is unknown.
	h.open(nil)
	id, err = h.auth(k, "AccountId", "1234")
	wantFailure(t, id, err, auth.DataFeedKeyFailed)
}

// owners15 makes 15 keys over 3 owners. Per owner the first is argon2 with
// the earliest expiry (tried last, so only one slow hash per owner) and the
// rest bcrypt.
func owners15(h *harness) (keys [15]string, owners [15]string) {
	for i := range keys {
		keys[i] = h.newKey()
		owners[i] = fmt.Sprintf("%d", 1000*(1+i/5))
	}
	return keys, owners
}

func algFor(i int) Algorithm {
	if i%5 == 0 {
		return Argon2
	}
	return BCrypt
}

// Case 43 with identity files.
func TestManyKeysFromFiles(t *testing.T) {
	h := newHarness(t, nil)
	keys, owners := owners15(h)
	var a, b []ident
	for i, k := range keys {
		e := keyIdent(t, k, algFor(i), h.clock.in(time.Duration(i%5+1)*time.Hour), metaOf(owners[i], "Key", fmt.Sprint("val-", i)))
		if owners[i] == "3000" {
			b = append(b, e)
		} else {
			a = append(a, e, e) // every entry twice
		}
	}
	h.write("a.json", a...)
	h.write("b.json", b...)
	h.write("c.json", b[1]) // and one in a second file
	h.store.scan()

	for round := 1; round <= 2; round++ {
		before := h.verifies.Load()
		for i, k := range keys {
			id, err := h.auth(k, "AccountId", owners[i])
			wantIdentity(t, id, err, owners[i], map[string]string{"Key": fmt.Sprint("val-", i)})
		}
		n := h.verifies.Load() - before
		if round == 1 && n == 0 {
			t.Errorf("round 1 verified nothing")
		}
		if round == 2 && n != 0 {
			t.Errorf("round 2 made %d hash verifications, want 0 (served from the cache)", n)
		}
	}
	// Case 44: a known key with another owner. One key per owner, as each
	// try hashes against all of the other owner's keys.
	for i := 1; i < len(keys); i += 5 {
		id, err := h.auth(keys[i], "AccountId", owners[(i+5)%15])
		wantFailure(t, id, err, auth.DataFeedKeyFailed)
	}
}

// spyRepo counts the calls the store makes and can fail them.
type spyRepo struct {
	Repo
	lists, gets atomic.Int64
	fail        atomic.Bool
}

var errDatabaseDown = errors.New("database is down")

func (r *spyRepo) DataFeedKeysForAccount(ctx context.Context, account string) ([]meta.DataFeedKey, error) {
	r.lists.Add(1)
	if r.fail.Load() {
		return nil, errDatabaseDown
	}
	return r.Repo.DataFeedKeysForAccount(ctx, account)
}

func (r *spyRepo) GetDataFeedKey(ctx context.Context, id int64) (meta.DataFeedKey, error) {
	r.gets.Add(1)
	if r.fail.Load() {
		return meta.DataFeedKey{}, errDatabaseDown
	}
	return r.Repo.GetDataFeedKey(ctx, id)
}

// forEngine runs fn against a fresh metadata database of each engine.
func forEngine(t *testing.T, fn func(t *testing.T, repo *meta.Repo)) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dsn := ""
			if engine == "postgres" {
				dsn = metatest.PostgresDSN(t) // skips when not configured
			}
			repo, err := meta.Open(context.Background(), dsn, t.TempDir(), nil)
			if err != nil {
				t.Fatalf("open metadata: %v", err)
			}
			t.Cleanup(func() { _ = repo.Close() })
			fn(t, repo)
		})
	}
}

// storeKey hashes key as the admin command does (or with bcrypt) and
// stores it.
func storeKey(t *testing.T, repo *meta.Repo, key, account string, alg Algorithm, expiresMs int64, kv ...string) *meta.DataFeedKey {
	t.Helper()
	k := &meta.DataFeedKey{Account: account, Hint: key[len(Prefix) : len(Prefix)+6], Algorithm: string(alg),
		ExpiresMs: expiresMs, Attributes: new(attr.Map)}
	for i := 0; i+1 < len(kv); i += 2 {
		k.Attributes.Put(kv[i], kv[i+1])
	}
	var err error
	if alg == Argon2 {
		k.Hash, k.Salt, err = Hash(key)
	} else {
		var b []byte
		b, err = bcrypt.GenerateFromPassword([]byte(key[:bcryptMaxKey]), bcrypt.MinCost)
		k.Hash = string(b)
	}
	if err != nil {
		t.Fatal(err)
	}
	k.Lookup = Lookup(key)
	if err := repo.CreateDataFeedKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return k
}

// A key from the database authenticates without the owner header (weir's
// contract: AccountId is optional), found by its lookup hash: the owner
// comes from the key, hits are cached and still reread the row (so
// revoking works at once), and nothing is hashed for a key no row has.
// Keys with no lookup (created before weir stored one) need the owner.
func TestKeyWithoutOwner(t *testing.T) {
	forEngine(t, func(t *testing.T, repo *meta.Repo) {
		spy := &spyRepo{Repo: repo}
		h := newHarness(t, func(o *Options) { o.Repo = spy; o.Dir = "" })
		k, k2, old := h.newKey(), h.newKey(), h.newKey()
		dk := storeKey(t, repo, k, "1234", Argon2, h.clock.in(time.Hour), "System", "S1")
		storeKey(t, repo, k2, "5678", BCrypt, h.clock.in(time.Hour))
		ok := &meta.DataFeedKey{Account: "1234", Hint: "oldkey", Algorithm: string(Argon2), ExpiresMs: h.clock.in(time.Hour), Attributes: new(attr.Map)}
		var err error
		if ok.Hash, ok.Salt, err = Hash(old); err != nil {
			t.Fatal(err)
		}
		if err := repo.CreateDataFeedKey(context.Background(), ok); err != nil {
			t.Fatal(err)
		}

		for round := 1; round <= 2; round++ {
			verifies := h.verifies.Load()
			id, err := h.auth("Bearer " + k)
			wantIdentity(t, id, err, "1234", map[string]string{"System": "S1", "AccountId": "1234"})
			id, err = h.auth(k2)
			wantIdentity(t, id, err, "5678", map[string]string{"AccountId": "5678"})
			if n := h.verifies.Load() - verifies; round == 2 && n != 0 {
				t.Errorf("round 2 made %d hash verifications, want 0 (cached)", n)
			}
		}
		// The owner header, when sent, must still be the key's.
		id, err := h.auth(k, "AccountId", "5678")
		wantFailure(t, id, err, auth.DataFeedKeyFailed)

		verifies := h.verifies.Load()
		for _, key := range []string{h.newKey(), old} {
			id, err := h.auth(key)
			f := wantFailure(t, id, err, auth.DataFeedKeyFailed)
			if !strings.Contains(f.Detail, "needs its owner in the 'AccountId' header") {
				t.Errorf("detail = %q, want it to ask for the owner header", f.Detail)
			}
		}
		if n := h.verifies.Load() - verifies; n != 0 {
			t.Errorf("%d hash verifications for keys no lookup finds, want 0", n)
		}
		id, err = h.auth(old, "AccountId", "1234")
		wantIdentity(t, id, err, "1234", map[string]string{"AccountId": "1234"})

		if err := repo.RevokeDataFeedKey(context.Background(), dk.ID); err != nil {
			t.Fatal(err)
		}
		id, err = h.auth(k)
		wantFailure(t, id, err, auth.DataFeedKeyFailed)
	})
}

// Case 43 with keys in the database; a cache hit rereads the key's row.
func TestManyKeysFromDatabase(t *testing.T) {
	forEngine(t, func(t *testing.T, repo *meta.Repo) {
		spy := &spyRepo{Repo: repo}
		h := newHarness(t, func(o *Options) { o.Repo = spy; o.Dir = "" })
		keys, owners := owners15(h)
		for i, k := range keys {
			storeKey(t, repo, k, owners[i], algFor(i), h.clock.in(time.Duration(i%5+1)*time.Hour), "Key", fmt.Sprint("val-", i))
		}
		for round := 1; round <= 2; round++ {
			verifies, lists, gets := h.verifies.Load(), spy.lists.Load(), spy.gets.Load()
			for i, k := range keys {
				id, err := h.auth(k, "AccountId", owners[i])
				// The owner is added to the key's attributes.
				wantIdentity(t, id, err, owners[i], map[string]string{"Key": fmt.Sprint("val-", i), "AccountId": owners[i]})
			}
			if round == 2 {
				if n := h.verifies.Load() - verifies; n != 0 {
					t.Errorf("round 2 made %d hash verifications, want 0", n)
				}
				if n := spy.lists.Load() - lists; n != 0 {
					t.Errorf("round 2 listed keys %d times, want 0", n)
				}
				if n := spy.gets.Load() - gets; n != 15 {
					t.Errorf("round 2 read %d key rows, want 15 (one per hit)", n)
				}
			}
		}
		for i := 1; i < len(keys); i += 5 {
			id, err := h.auth(keys[i], "AccountId", owners[(i+5)%15])
			wantFailure(t, id, err, auth.DataFeedKeyFailed)
		}
	})
}

// A key revoked with the admin command stops working at once, cached or not.
func TestRevocationIsImmediate(t *testing.T) {
	forEngine(t, func(t *testing.T, repo *meta.Repo) {
		h := newHarness(t, func(o *Options) { o.Repo = repo })
		k, k2 := h.newKey(), h.newKey()
		dk := storeKey(t, repo, k, "1234", Argon2, h.clock.in(time.Hour), "System", "S1")
		storeKey(t, repo, k2, "1234", BCrypt, h.clock.in(time.Hour))
		for range 2 {
			id, err := h.auth(k, "AccountId", "1234")
			wantIdentity(t, id, err, "1234", map[string]string{"System": "S1"})
		}
		if err := repo.RevokeDataFeedKey(context.Background(), dk.ID); err != nil {
			t.Fatal(err)
		}
		id, err := h.auth(k, "AccountId", "1234")
		wantFailure(t, id, err, auth.DataFeedKeyFailed)
		// The owner's other key is unaffected.
		id, err = h.auth(k2, "AccountId", "1234")
		wantIdentity(t, id, err, "1234", nil)
	})
}

// A database failure is a 313 whose cause is kept for the log; keys from the
// files still work.
func TestDatabaseDown(t *testing.T) {
	forEngine(t, func(t *testing.T, repo *meta.Repo) {
		spy := &spyRepo{Repo: repo}
		h := newHarness(t, func(o *Options) { o.Repo = spy })
		dbKey, fileKey := h.newKey(), h.newKey()
		storeKey(t, repo, dbKey, "1234", BCrypt, h.clock.in(time.Hour))
		h.write("a.json", keyIdent(t, fileKey, BCrypt, h.clock.in(time.Hour), metaOf("1234")))
		h.store.scan()
		id, err := h.auth(dbKey, "AccountId", "1234")
		wantIdentity(t, id, err, "1234", nil)

		spy.fail.Store(true)
		for _, owner := range []string{"1234", "other"} {
			id, err = h.auth(h.newKey(), "AccountId", owner)
			f := wantFailure(t, id, err, auth.DataFeedKeyFailed)
			if !errors.Is(f.Err, errDatabaseDown) || f.Detail != "" {
				t.Errorf("failure = %+v, want the cause in Err only", f)
			}
		}
		// The cached database key needs its row, which cannot be read.
		id, err = h.auth(dbKey, "AccountId", "1234")
		if f := wantFailure(t, id, err, auth.DataFeedKeyFailed); !errors.Is(f.Err, errDatabaseDown) {
			t.Errorf("Err = %v, want the database error", f.Err)
		}
		id, err = h.auth(fileKey, "AccountId", "1234")
		wantIdentity(t, id, err, "1234", nil)
	})
}

// Wrong keys are remembered for a short while, so repeating one costs no
// hashing; after missTTL it is hashed again.
func TestMissesAreCachedBriefly(t *testing.T) {
	h := newHarness(t, nil)
	k := h.newKey()
	h.write("a.json", keyIdent(t, k, Argon2, h.clock.in(time.Hour), metaOf("1234")))
	h.store.scan()
	wrong := h.newKey()
	for range 3 {
		id, err := h.auth(wrong, "AccountId", "1234")
		wantFailure(t, id, err, auth.DataFeedKeyFailed)
	}
	if n := h.verifies.Load(); n != 1 {
		t.Errorf("%d verifications for a repeated wrong key, want 1", n)
	}
	h.clock.add(missTTL + time.Second)
	id, err := h.auth(wrong, "AccountId", "1234")
	wantFailure(t, id, err, auth.DataFeedKeyFailed)
	if n := h.verifies.Load(); n != 2 {
		t.Errorf("%d verifications after the miss expired, want 2", n)
	}
	// An owner with no keys costs one hash (against the decoy), and its
	// miss is remembered the same way.
	for range 3 {
		id, err = h.auth(wrong, "AccountId", "nobody")
		wantFailure(t, id, err, auth.DataFeedKeyFailed)
	}
	if n := h.verifies.Load(); n != 3 {
		t.Errorf("%d verifications, want 3: one for an owner without keys, then cached", n)
	}
}

// An owner is a name the sender chooses, so an owner without keys must cost
// what an owner with a key and a wrong key costs: one argon2 verification
// (against a decoy), with the same answer. Otherwise the answer's speed
// would tell which accounts have keys. Counted, not timed.
func TestUnknownOwnerCostsOneHash(t *testing.T) {
	forEngine(t, func(t *testing.T, repo *meta.Repo) {
		h := newHarness(t, func(o *Options) { o.Repo = repo })
		fileKey, dbKey, revoked, expired := h.newKey(), h.newKey(), h.newKey(), h.newKey()
		h.write("a.json",
			keyIdent(t, fileKey, Argon2, h.clock.in(time.Hour), metaOf("file-owner")),
			// Expired when read: not loaded, so its owner has no keys.
			keyIdent(t, expired, Argon2, h.clock.in(-time.Hour), metaOf("expired-owner")))
		h.store.scan()
		storeKey(t, repo, dbKey, "db-owner", Argon2, h.clock.in(time.Hour))
		rk := storeKey(t, repo, revoked, "revoked-owner", Argon2, h.clock.in(time.Hour))
		if err := repo.RevokeDataFeedKey(context.Background(), rk.ID); err != nil {
			t.Fatal(err)
		}

		var mu sync.Mutex
		var algs []Algorithm
		h.store.verify = func(key, hash, salt string, alg Algorithm) (bool, error) {
			mu.Lock()
			algs = append(algs, alg)
			mu.Unlock()
			return Verify(key, hash, salt, alg)
		}
		var want string
		for _, owner := range []string{"file-owner", "db-owner", "nobody", "revoked-owner", "expired-owner", "someone-else"} {
			mu.Lock()
			algs = nil
			mu.Unlock()
			wrong := h.newKey()
			id, err := h.auth(wrong, "AccountId", owner)
			f := wantFailure(t, id, err, auth.DataFeedKeyFailed)
			if f.Err != nil {
				t.Errorf("owner %s: internal error %v", owner, f.Err)
			}
			if want == "" {
				want = f.Error()
			} else if f.Error() != want {
				t.Errorf("owner %s: failure %q, want %q as for an owner with a key", owner, f.Error(), want)
			}
			mu.Lock()
			got := slices.Clone(algs)
			mu.Unlock()
			if len(got) != 1 || got[0] != Argon2 {
				t.Errorf("owner %s, wrong key: verifications %v, want exactly one ARGON2", owner, got)
			}
			// Repeated, the miss is cached alike: no hashing.
			mu.Lock()
			algs = nil
			mu.Unlock()
			id, err = h.auth(wrong, "AccountId", owner)
			wantFailure(t, id, err, auth.DataFeedKeyFailed)
			mu.Lock()
			n := len(algs)
			mu.Unlock()
			if n != 0 {
				t.Errorf("owner %s, the same wrong key again: %d verifications, want 0", owner, n)
			}
		}
		// The decoy is made once per store, and never lets a key in.
		d1, err := h.store.decoy()
		if err != nil {
			t.Fatal(err)
		}
		d2, _ := h.store.decoy()
		if d1 != d2 || !d1.decoy || d1.alg != Argon2 || checkStored(d1.hash, d1.salt, d1.alg) != nil {
			t.Errorf("decoy %+v then %+v, want the same well-formed ARGON2 hash", d1, d2)
		}
		// The real keys still work.
		id, err := h.auth(fileKey, "AccountId", "file-owner")
		wantIdentity(t, id, err, "file-owner", nil)
		id, err = h.auth(dbKey, "AccountId", "db-owner")
		wantIdentity(t, id, err, "db-owner", nil)
	})
}

func TestCacheExpiresAndCanBeDisabled(t *testing.T) {
	h := newHarness(t, nil)
	k := h.newKey()
	h.write("a.json", keyIdent(t, k, BCrypt, h.clock.in(24*time.Hour), metaOf("1234")))
	h.store.scan()
	h.auth(k, "AccountId", "1234")
	h.auth(k, "AccountId", "1234")
	if n := h.verifies.Load(); n != 1 {
		t.Errorf("%d verifications, want 1", n)
	}
	h.clock.add(6 * time.Minute) // past CacheTTL
	id, err := h.auth(k, "AccountId", "1234")
	wantIdentity(t, id, err, "1234", nil)
	if n := h.verifies.Load(); n != 2 {
		t.Errorf("%d verifications after the TTL, want 2", n)
	}

	h0 := newHarness(t, func(o *Options) { o.CacheTTL = 0 })
	h0.write("a.json", keyIdent(t, k, BCrypt, h0.clock.in(time.Hour), metaOf("1234")))
	h0.store.scan()
	for range 3 {
		id, err := h0.auth(k, "AccountId", "1234")
		wantIdentity(t, id, err, "1234", nil)
	}
	if n := h0.verifies.Load(); n != 3 {
		t.Errorf("%d verifications without a cache, want 3", n)
	}
}

// At most maxConcurrentHashes argon2 computations run at once, however many
// posts arrive with wrong keys.
func TestHashConcurrencyIsBounded(t *testing.T) {
	h := newHarness(t, nil)
	k := h.newKey()
	h.write("a.json", keyIdent(t, k, Argon2, h.clock.in(time.Hour), metaOf("1234")))
	h.store.scan()
	var inFlight, most atomic.Int64
	h.store.verify = func(key, hash, salt string, alg Algorithm) (bool, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		return Verify(key, hash, salt, alg)
	}
	var wg sync.WaitGroup
	for range 6 {
		wrong := h.newKey()
		wg.Go(func() {
			id, err := h.auth(wrong, "AccountId", "1234")
			if f := (*auth.Failure)(nil); id != nil || !errors.As(err, &f) || f.Code != auth.DataFeedKeyFailed {
				t.Errorf("wrong key: %v, %v", id, err)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > maxConcurrentHashes || m < 1 {
		t.Errorf("%d hashes ran at once, want 1..%d", m, maxConcurrentHashes)
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isCode(err error, code int) bool {
	var f *auth.Failure
	return errors.As(err, &f) && f.Code == code
}

// The directory is rescanned: deleted files take their keys with them,
// new and changed files take effect, even over cached answers.
func TestIdentityFilesArePolled(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PollInterval = 20 * time.Millisecond })
	k1, k2, k3 := h.newKey(), h.newKey(), h.newKey()
	h.write("one.json", keyIdent(t, k1, BCrypt, h.clock.in(time.Hour), metaOf("1234")))
	h.write("two.json", keyIdent(t, k2, BCrypt, h.clock.in(time.Hour), metaOf("1234", "Version", "1")))
	waitFor(t, "files to load", func() bool {
		_, err1 := h.auth(k1, "AccountId", "1234")
		_, err2 := h.auth(k2, "AccountId", "1234")
		return err1 == nil && err2 == nil
	})

	if err := os.Remove(filepath.Join(h.dir, "one.json")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a deleted file's key to stop working", func() bool {
		_, err := h.auth(k1, "AccountId", "1234")
		return isCode(err, auth.DataFeedKeyFailed)
	})
	id, err := h.auth(k2, "AccountId", "1234")
	wantIdentity(t, id, err, "1234", map[string]string{"Version": "1"})

	// A key refused (and remembered as a miss) works once a file adds it.
	id, err = h.auth(k3, "AccountId", "1234")
	wantFailure(t, id, err, auth.DataFeedKeyFailed)
	h.write("three.JSON", keyIdent(t, k3, BCrypt, h.clock.in(time.Hour), metaOf("1234")))
	waitFor(t, "a new file's key to work", func() bool {
		_, err := h.auth(k3, "AccountId", "1234")
		return err == nil
	})

	// A changed file's attributes replace the cached ones.
	h.write("two.json", keyIdent(t, k2, BCrypt, h.clock.in(time.Hour), metaOf("1234", "Version", "2")))
	waitFor(t, "a changed file to take effect", func() bool {
		id, err := h.auth(k2, "AccountId", "1234")
		return err == nil && id.Attributes.Value("Version") == "2"
	})

	// Removing the whole directory removes everything.
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "keys of a removed directory to stop working", func() bool {
		_, err := h.auth(k2, "AccountId", "1234")
		return isCode(err, auth.DataFeedKeyFailed)
	})
}

// A malformed file is skipped and logged; the others load.
func TestMalformedFileIsSkipped(t *testing.T) {
	h := newHarness(t, nil)
	good, inBad, inBroken := h.newKey(), h.newKey(), h.newKey()
	h.write("good.json", keyIdent(t, good, BCrypt, h.clock.in(time.Hour), metaOf("1234")))
	bad := keyIdent(t, inBad, BCrypt, h.clock.in(time.Hour), metaOf("1234"))
	bad["comment"] = "unknown fields fail the file"
	h.write("bad.json", bad)
	b, _ := json.Marshal(map[string]any{"dataFeedIdentities": []ident{keyIdent(t, inBroken, BCrypt, h.clock.in(time.Hour), metaOf("1234"))}})
	h.writeRaw("broken.json", b[:len(b)-2])
	h.writeRaw("notes.txt", []byte("not an identity file"))
	if err := os.Mkdir(filepath.Join(h.dir, "sub.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.store.scan()

	id, err := h.auth(good, "AccountId", "1234")
	wantIdentity(t, id, err, "1234", nil)
	for _, k := range []string{inBad, inBroken} {
		id, err := h.auth(k, "AccountId", "1234")
		wantFailure(t, id, err, auth.DataFeedKeyFailed)
	}
	logs := h.logs.String()
	for _, want := range []string{"bad.json", `unknown field \"comment\"`, "broken.json"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log does not mention %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "notes.txt") {
		t.Errorf("a non-JSON file was read:\n%s", logs)
	}
	// A lasting problem is logged once, not on every scan.
	h.store.scan()
	h.store.scan()
	if n := strings.Count(h.logs.String(), "broken.json"); n != 1 {
		t.Errorf("broken.json logged %d times, want 1", n)
	}
}

func TestOpenOptions(t *testing.T) {
	ctx := context.Background()
	for name, o := range map[string]Options{
		"no owner header":  {Dir: t.TempDir()},
		"relative dir":     {Dir: "identities", OwnerHeader: "AccountId"},
		"negative TTL":     {OwnerHeader: "AccountId", CacheTTL: -1},
		"negative polling": {OwnerHeader: "AccountId", PollInterval: -1},
	} {
		if s, err := Open(ctx, o); err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
	// No directory, a missing one, and a typed nil repository are all fine.
	var nilRepo *meta.Repo
	for _, o := range []Options{
		{OwnerHeader: "AccountId"},
		{OwnerHeader: "AccountId", Dir: filepath.Join(t.TempDir(), "missing"), Repo: nilRepo},
	} {
		s, err := Open(ctx, o)
		if err != nil {
			t.Fatalf("Open(%+v): %v", o, err)
		}
		k, _ := Generate()
		id, err := s.KeyAuthenticator().Authenticate(ctx, post(k, "AccountId", "1"))
		if !isCode(err, auth.DataFeedKeyFailed) || id != nil {
			t.Errorf("unknown key with no identities: %v, %v", id, err)
		}
		s.Close()
		s.Close() // twice is fine
	}
}

// Case 46: certificate identities.
func TestCertificateIdentity(t *testing.T) {
	h := newHarness(t, nil)
	const dn = "CN=John Doe,OU=Users,DC=example,DC=com"
	const dn2 = "/DC=com/DC=example/OU=Users/CN=Jane Doe"
	h.write("certs.json",
		certIdent(dn, h.clock.in(time.Hour), metaOf("Acme", "System", "S1")),
		certIdent(dn, h.clock.in(time.Hour), metaOf("Other", "System", "S2")),
		certIdent(dn2, h.clock.in(time.Hour), metaOf("Acme", "Which", "first")),
		certIdent(dn2, h.clock.in(3*time.Hour), metaOf("Acme", "Which", "second")),
		certIdent("CN=Old", h.clock.in(-time.Hour), metaOf("Acme")))
	h.store.scan()
	a := h.store.CertificateIdentityAuthenticator(func(r *http.Request) string { return r.Header.Get("X-Test-DN") })
	authn := func(headers ...string) (*auth.Identity, error) {
		return a.Authenticate(context.Background(), post("", headers...))
	}
	for name, headers := range map[string][]string{
		"nothing":             nil,
		"DN but no owner":     {"X-Test-DN", dn},
		"owner but no DN":     {"AccountId", "Acme"},
		"unknown DN":          {"X-Test-DN", "CN=Nobody", "AccountId", "Acme"},
		"unknown owner":       {"X-Test-DN", dn, "AccountId", "Nobody"},
		"DN differs in case":  {"X-Test-DN", strings.ToLower(dn), "AccountId", "Acme"},
		"expired at load":     {"X-Test-DN", "CN=Old", "AccountId", "Acme"},
		"owner of another DN": {"X-Test-DN", dn2, "AccountId", "Other"},
	} {
		if id, err := authn(headers...); id != nil || err != nil {
			t.Errorf("%s: %v, %v; want nothing", name, id, err)
		}
	}
	id, err := authn("X-Test-DN", dn, "AccountId", "Acme")
	wantIdentity(t, id, err, "Acme", map[string]string{"System": "S1", "AccountId": "Acme"})
	id, err = authn("X-Test-DN", dn, "AccountId", "other") // owner in any case
	wantIdentity(t, id, err, "Other", map[string]string{"System": "S2"})

	id, err = authn("X-Test-DN", dn2, "AccountId", "Acme")
	wantIdentity(t, id, err, "Acme", map[string]string{"Which": "first"})
	h.clock.add(2 * time.Hour) // the first has expired, the second has not
	id, err = authn("X-Test-DN", dn2, "AccountId", "Acme")
	wantIdentity(t, id, err, "Acme", map[string]string{"Which": "second"})
	h.clock.add(2 * time.Hour) // all expired
	if id, err := authn("X-Test-DN", dn2, "AccountId", "Acme"); id != nil || err != nil {
		t.Errorf("all expired: %v, %v; want nothing", id, err)
	}
	// A nil DN source never matches.
	if id, err := h.store.CertificateIdentityAuthenticator(nil).Authenticate(context.Background(), post("", "AccountId", "Acme")); id != nil || err != nil {
		t.Errorf("nil DN source: %v, %v", id, err)
	}
}

// Identities handed out are copies: changing one does not change the next.
func TestIdentityAttributesAreCopies(t *testing.T) {
	h := newHarness(t, nil)
	k := h.newKey()
	h.write("a.json", keyIdent(t, k, BCrypt, h.clock.in(time.Hour), metaOf("1234", "System", "S1")))
	h.store.scan()
	id, _ := h.auth(k, "AccountId", "1234")
	id.Attributes.Put("System", "changed")
	id, err := h.auth(k, "AccountId", "1234")
	wantIdentity(t, id, err, "1234", map[string]string{"System": "S1"})
}
