// Package datafeedkey authenticates senders by data feed key (DATA_FEED_KEY)
// and by certificate identity (CERTIFICATE_IDENTITY), as the reference
// system does.
//
// A data feed key is "sdk_" followed by 128 Base58 characters, sent in the
// Authorization header with the owner (an account id) in a second header. Only
// hashes of keys are kept: in identity files, JSON in the reference format in
// a directory that is rescanned while weir runs, and in the database, where
// `weir admin datafeed-key create` puts them. A certificate identity maps an
// (owner, certificate DN) pair to an identity; they come from the same files.
package datafeedkey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// Prefix starts every data feed key.
const Prefix = "sdk_"

const (
	// randomLen is the number of Base58 characters after the prefix.
	randomLen = 128
	// keyLen is the length of a whole key.
	keyLen = len(Prefix) + randomLen
	// saltLen is the length of an argon2 salt, as the reference generates it.
	saltLen = 32
	// base58 is the Bitcoin alphabet: no 0, O, I or l, so a key read aloud
	// or copied by hand cannot be misread.
	base58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
)

// Argon2 parameters of the reference system. They are part of the stored
// hashes: changing any of them would make every existing key fail.
const (
	argonTime    = 2
	argonMemory  = 64 * 1024 // KiB
	argonThreads = 1
	argonKeyLen  = 48
)

// bcryptMaxKey is the number of key bytes bcrypt uses. The reference
// truncates to it before hashing, so weir does too (Go's bcrypt would refuse
// a longer key when hashing). 72 bytes of a key still hold 68 random Base58
// characters, about 398 bits.
const bcryptMaxKey = 72

// Generate returns a new key: Prefix and 128 characters drawn uniformly from
// the Base58 alphabet with crypto/rand (about 750 bits).
func Generate() (string, error) {
	s, err := randomBase58(randomLen)
	if err != nil {
		return "", fmt.Errorf("generate data feed key: %w", err)
	}
	return Prefix + s, nil
}

// randomBase58 returns n characters drawn uniformly from the Base58 alphabet.
func randomBase58(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			// 232 = 4*58: rejecting larger bytes keeps every character
			// equally likely (b%58 alone would favour the first 24).
			if b < 4*58 && len(out) < n {
				out = append(out, base58[b%58])
			}
		}
	}
	return string(out), nil
}

func isBase58(c byte) bool {
	switch {
	case c >= '1' && c <= '9':
		return true
	case c >= 'A' && c <= 'Z':
		return c != 'I' && c != 'O'
	case c >= 'a' && c <= 'z':
		return c != 'l'
	}
	return false
}

// Valid reports whether key has the form of a data feed key:
// ^sdk_[A-HJ-NP-Za-km-z1-9]{128}$.
func Valid(key string) bool {
	if len(key) != keyLen || !strings.HasPrefix(key, Prefix) {
		return false
	}
	for i := len(Prefix); i < len(key); i++ {
		if !isBase58(key[i]) {
			return false
		}
	}
	return true
}

// Algorithm names how a key was hashed, as in the reference identity files.
type Algorithm string

const (
	Argon2 Algorithm = "ARGON2"
	BCrypt Algorithm = "BCRYPT_2A"
)

// parseAlgorithm accepts the exact names the reference writes.
func parseAlgorithm(s string) (Algorithm, error) {
	switch a := Algorithm(s); a {
	case Argon2, BCrypt:
		return a, nil
	}
	return "", fmt.Errorf("hash algorithm %q is not ARGON2 or BCRYPT_2A", s)
}

// Hash hashes a key with argon2id exactly as the reference does (v1.3,
// 2 iterations, 64 MiB, parallelism 1, 48 bytes, hex encoded), with the
// UTF-8 bytes of a new random 32-character Base58 string as the salt. The
// key is trimmed first, as the reference trims it.
func Hash(key string) (hash, salt string, err error) {
	salt, err = randomBase58(saltLen)
	if err != nil {
		return "", "", fmt.Errorf("hash data feed key: salt: %w", err)
	}
	return hex.EncodeToString(argon2Key(key, salt)), salt, nil
}

// Lookup is what finds a key without its owner: the hex SHA-256 of the
// (trimmed) key. Storing it gives nothing away: a key is ~750 random bits,
// which no search can recover from a fast hash any more than from argon2.
func Lookup(key string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(key)))
	return hex.EncodeToString(sum[:])
}

func argon2Key(key, salt string) []byte {
	return argon2.IDKey([]byte(strings.TrimSpace(key)), []byte(salt), argonTime, argonMemory, argonThreads, argonKeyLen)
}

// Verify reports whether key hashes to hash. ARGON2 hashes key with salt and
// compares in constant time; BCRYPT_2A ignores salt (bcrypt hashes embed
// theirs). An error means the stored hash or algorithm is unusable, not that
// the key is wrong.
func Verify(key, hash, salt string, alg Algorithm) (bool, error) {
	switch alg {
	case Argon2:
		want, err := checkArgon2(hash, salt)
		if err != nil {
			return false, err
		}
		return subtle.ConstantTimeCompare(argon2Key(key, salt), want) == 1, nil
	case BCrypt:
		k := []byte(key)
		if len(k) > bcryptMaxKey {
			k = k[:bcryptMaxKey]
		}
		err := bcrypt.CompareHashAndPassword([]byte(hash), k)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, bcrypt.ErrMismatchedHashAndPassword):
			return false, nil
		}
		return false, fmt.Errorf("verify data feed key: bcrypt hash: %w", err)
	}
	return false, fmt.Errorf("verify data feed key: unknown hash algorithm %q", alg)
}

// checkArgon2 decodes a stored argon2 hash and checks it can ever match.
func checkArgon2(hash, salt string) ([]byte, error) {
	if salt == "" {
		return nil, errors.New("verify data feed key: ARGON2 hash has no salt")
	}
	want, err := hex.DecodeString(hash)
	if err != nil || len(want) != argonKeyLen {
		return nil, fmt.Errorf("verify data feed key: ARGON2 hash is not %d hex characters", 2*argonKeyLen)
	}
	return want, nil
}

// checkStored reports why a stored hash can never verify, or nil. Identity
// files are checked with it at load so a broken entry is reported once,
// not on every post.
func checkStored(hash, salt string, alg Algorithm) error {
	switch alg {
	case Argon2:
		_, err := checkArgon2(hash, salt)
		return err
	case BCrypt:
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return fmt.Errorf("BCRYPT_2A hash: %w", err)
		}
		return nil
	}
	return fmt.Errorf("unknown hash algorithm %q", alg)
}
