package datafeedkey

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receive"
)

// HintLen is how many characters after the prefix are kept as a stored key's
// hint: enough to tell an operator's keys apart, far too few to help a
// guesser.
const HintLen = 6

// DefaultLifetime is the lifetime of a key created without an expiry.
const DefaultLifetime = 365 * 24 * time.Hour

// ErrInvalid is wrapped by Create's errors for a request that can never
// succeed as given (an empty account, an expiry in the past, an attribute
// that would not be stored as written).
var ErrInvalid = errors.New("invalid data feed key")

// Creator stores keys (*meta.Repo).
type Creator interface {
	CreateDataFeedKey(ctx context.Context, k *meta.DataFeedKey) error
}

// NewKey describes a key to create in the database.
type NewKey struct {
	Account string    // the owner senders name in OwnerHeader; exact, no surrounding space
	Expires time.Time // zero: Now + DefaultLifetime; otherwise must be after Now
	// Attributes are applied to every stream sent with the key; nil for none.
	// Keys and values must be stored exactly as given: no surrounding space,
	// no control characters, no ':' in a key (the meta format's separator).
	Attributes  map[string]string
	OwnerHeader string    // e.g. "AccountId": refused as an attribute, it is the account
	Now         time.Time // zero: time.Now()
}

// Create generates a key, stores its argon2 hash (never the key) with repo
// and returns the key, which nobody can recover later, and the stored row.
// The admin command and the API both create keys through it, so that keys
// made either way are the same.
func Create(ctx context.Context, repo Creator, n NewKey) (string, meta.DataFeedKey, error) {
	if n.Now.IsZero() {
		n.Now = time.Now()
	}
	if n.Expires.IsZero() {
		n.Expires = n.Now.Add(DefaultLifetime)
	}
	attrs, err := checkNewKey(n)
	if err != nil {
		return "", meta.DataFeedKey{}, err
	}
	key, err := Generate()
	if err != nil {
		return "", meta.DataFeedKey{}, err
	}
	hash, salt, err := Hash(key)
	if err != nil {
		return "", meta.DataFeedKey{}, err
	}
	k := meta.DataFeedKey{
		Account:    n.Account,
		Hint:       key[len(Prefix) : len(Prefix)+HintLen],
		Hash:       hash,
		Salt:       salt,
		Algorithm:  string(Argon2),
		Lookup:     Lookup(key),
		ExpiresMs:  n.Expires.UnixMilli(),
		CreateMs:   n.Now.UnixMilli(),
		Attributes: attrs,
	}
	if err := repo.CreateDataFeedKey(ctx, &k); err != nil {
		return "", meta.DataFeedKey{}, err
	}
	return key, k, nil
}

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// checkNewKey refuses what would be stored other than as written (attr.Map
// trims, and the meta format replaces line breaks and ':' in keys) and
// returns the attributes as a map.
func checkNewKey(n NewKey) (*attr.Map, error) {
	switch {
	case strings.TrimSpace(n.Account) == "":
		return nil, invalidf("the account is empty")
	case strings.TrimSpace(n.Account) != n.Account:
		return nil, invalidf("the account %q starts or ends with space", n.Account)
	case !printable(n.Account):
		return nil, invalidf("the account %q contains a control character or is not UTF-8", n.Account)
	case !n.Expires.After(n.Now):
		return nil, invalidf("the expiry %s is not in the future", n.Expires.UTC().Format(time.RFC3339))
	}
	m := new(attr.Map)
	for k, v := range n.Attributes {
		switch {
		case k == "" || strings.TrimSpace(k) != k || !printable(k) || strings.Contains(k, ":"):
			return nil, invalidf("attribute name %q is empty, has surrounding space, a control character or ':'", k)
		case strings.TrimSpace(v) != v || !printable(v):
			return nil, invalidf("the value of attribute %s has surrounding space or a control character", k)
		case n.OwnerHeader != "" && attr.EqualName(k, n.OwnerHeader):
			return nil, invalidf("attribute %s is the key's account; it cannot be set as an attribute", k)
		}
		// A key's attributes are laid over a post's after weir has added
		// its own: a key must neither overwrite those (ReceiptId,
		// UploadUserId, ...) nor store what weir keeps out of every stream
		// (Authorization, ...).
		if why := receive.ReservedAttribute(k); why != "" {
			return nil, invalidf("attribute %s cannot be set on a key: %s", k, why)
		}
		if _, dup := m.Get(k); dup {
			// Attribute names are case-insensitive: one would replace the other.
			return nil, invalidf("attribute %s is given twice (names are case-insensitive)", k)
		}
		m.Put(k, v)
	}
	return m, nil
}

func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}
