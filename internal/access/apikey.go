package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/meta"
)

// API key format: sak_<checksum>_<secret>. The secret is 128 Base58
// characters (about 750 random bits); the checksum is the first 10 hex
// characters of the SHA-256 of the secret, which lets a secret scanner (or
// weir itself, before any database lookup) tell a real key from a typo.
const (
	keyPrefix     = "sak_"
	checksumLen   = 10
	secretLen     = 128
	keyLen        = len(keyPrefix) + checksumLen + 1 + secretLen
	visibleLen    = len(keyPrefix) + checksumLen + 1 // sak_<checksum>_
	base58        = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
	maxCommentLen = 4096
)

// LooksLikeAPIKey reports whether a bearer credential claims to be a weir
// API key (it starts with sak_), as opposed to, say, an OIDC token: the API
// layer uses it to choose the verifier. It does not check the format.
func LooksLikeAPIKey(credential string) bool {
	return strings.HasPrefix(credential, keyPrefix)
}

// generateKey returns a new random key.
func generateKey() (string, error) {
	secret := make([]byte, 0, secretLen)
	buf := make([]byte, 2*secretLen)
	for len(secret) < secretLen {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("generate api key: %w", err)
		}
		for _, b := range buf {
			// Rejection sampling: 232 = 4*58, so b%58 is uniform for b < 232.
			// Taking b%58 of every byte would favour the first 24 characters.
			if b < 4*58 && len(secret) < secretLen {
				secret = append(secret, base58[b%58])
			}
		}
	}
	return keyPrefix + checksum(string(secret)) + "_" + string(secret), nil
}

func checksum(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])[:checksumLen]
}

// wellFormed reports whether key has the exact shape of an API key with a
// correct checksum. It touches no database, so garbage costs nothing.
func wellFormed(key string) bool {
	if len(key) != keyLen || !strings.HasPrefix(key, keyPrefix) || key[visibleLen-1] != '_' {
		return false
	}
	sum, secret := key[len(keyPrefix):visibleLen-1], key[visibleLen:]
	for i := 0; i < len(sum); i++ {
		if c := sum[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	for i := 0; i < len(secret); i++ {
		if strings.IndexByte(base58, secret[i]) < 0 {
			return false
		}
	}
	return checksum(secret) == sum
}

// hashKey is what is stored and looked up: the hex SHA-256 of the whole
// key. A fast unsalted hash is enough because the key is long and random
// (nothing to brute-force), and it allows a direct indexed lookup.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKey describes an API key to create.
type NewKey struct {
	Owner    string    // user name; must be a user, not a group
	Name     string    // unique per owner; "" names the key after its prefix
	Comments string    // free text
	Expires  time.Time // zero: now + the maximum expiry
}

// CreateAPIKey creates an enabled API key and returns it in plaintext, the
// only time it is ever available, with its stored form (Hash left empty).
// Expires must be in the future and no later than now + the maximum expiry.
func (s *Service) CreateAPIKey(ctx context.Context, k NewKey) (plaintext string, key meta.APIKey, err error) {
	owner, err := s.repo.GetUser(ctx, k.Owner)
	if err != nil {
		return "", meta.APIKey{}, fmt.Errorf("create api key: owner: %w", err)
	}
	if owner.Group {
		return "", meta.APIKey{}, invalidf("create api key: %q is a group; keys belong to users", k.Owner)
	}
	now := s.now()
	expires := k.Expires
	if expires.IsZero() {
		expires = now.Add(s.maxKeyExpiry)
	}
	// Compared in milliseconds, the unit stored, so that a key created with
	// exactly the maximum expiry is accepted.
	switch latest := now.Add(s.maxKeyExpiry).UnixMilli(); {
	case expires.UnixMilli() <= now.UnixMilli():
		return "", meta.APIKey{}, invalidf("create api key: expiry %s is not in the future", expires.UTC().Format(time.RFC3339))
	case expires.UnixMilli() > latest:
		return "", meta.APIKey{}, invalidf("create api key: expiry %s is later than the maximum of %s from now (security.apiKeys.maxExpiry)", expires.UTC().Format(time.RFC3339), s.maxKeyExpiry)
	}
	if len(k.Comments) > maxCommentLen || !utf8.ValidString(k.Comments) {
		return "", meta.APIKey{}, invalidf("create api key: comments must be UTF-8 and at most %d bytes", maxCommentLen)
	}
	plaintext, err = generateKey()
	if err != nil {
		return "", meta.APIKey{}, err
	}
	prefix := plaintext[:visibleLen]
	name := k.Name
	if name == "" {
		name = strings.TrimSuffix(prefix, "_")
	}
	if err := validateName("api key", name); err != nil {
		return "", meta.APIKey{}, fmt.Errorf("create api key: %w", err)
	}
	stored, err := s.repo.CreateAPIKey(ctx, meta.APIKey{
		Prefix: prefix, Hash: hashKey(plaintext), OwnerID: owner.ID, Name: name,
		Comments: k.Comments, ExpiresMs: expires.UnixMilli(),
		CreateMs: now.UnixMilli(), Enabled: true,
	})
	if err != nil {
		return "", meta.APIKey{}, err
	}
	stored.Hash = ""
	return plaintext, stored, nil
}

// ListAPIKeys returns the keys of owner, or of everyone when owner is "",
// ordered by id, with Hash left empty: it serves only to look a key up.
func (s *Service) ListAPIKeys(ctx context.Context, owner string) ([]meta.APIKey, error) {
	ks, err := s.repo.ListAPIKeys(ctx, owner)
	if err != nil {
		return nil, err
	}
	for i := range ks {
		ks[i].Hash = ""
	}
	return ks, nil
}

// GetAPIKey returns one key (Hash left empty); an API uses it to find a
// key's owner before deciding whether the caller may change it.
func (s *Service) GetAPIKey(ctx context.Context, id int64) (meta.APIKey, error) {
	k, err := s.repo.GetAPIKey(ctx, id)
	if err != nil {
		return meta.APIKey{}, err
	}
	k.Hash = ""
	return k, nil
}

// SetAPIKeyEnabled enables or disables a key; it takes effect on the next
// request (there is no cache).
func (s *Service) SetAPIKeyEnabled(ctx context.Context, id int64, enabled bool) error {
	return s.repo.SetAPIKeyEnabled(ctx, id, enabled)
}

// DeleteAPIKey removes a key for good.
func (s *Service) DeleteAPIKey(ctx context.Context, id int64) error {
	return s.repo.DeleteAPIKey(ctx, id)
}
