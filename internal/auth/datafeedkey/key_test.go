package datafeedkey

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// refKey is a key from the reference system's tests.
const refKey = "sdk_okfXqkmtns3k4828fZcnutWUFmegj3hqk83o9sYCLefWGTrRrpT6Bt23FuT1ebwcftPNaL1B7aFbK37gbpefZgQeeP3esbnvNXu612co4awVxpn33He6i1vn7g8kUFEk"

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	chars := map[rune]bool{}
	for range 50 {
		k, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		if !Valid(k) {
			t.Fatalf("Generate() = %q, not Valid", k)
		}
		if seen[k] {
			t.Fatalf("Generate() repeated %q", k)
		}
		seen[k] = true
		for _, c := range k[len(Prefix):] {
			chars[c] = true
		}
	}
	// 6400 draws from 58 characters: missing one would mean a biased or
	// broken alphabet (the chance of a fair draw missing one is ~1e-46).
	if len(chars) != len(base58) {
		t.Errorf("generated keys use %d distinct characters, want all %d", len(chars), len(base58))
	}
}

func TestValid(t *testing.T) {
	good := "sdk_" + strings.Repeat("a", 128)
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{refKey, true},
		{good, true},
		{"sdk_" + strings.Repeat("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", 3)[:128], true},
		{"", false},
		{"foo", false},
		{"Bearer " + good, false},
		{good + "a", false},
		{good[:len(good)-1], false},
		{"SDK_" + good[4:], false},
		{"sak_" + good[4:], false},
		{" " + good[1:], false},
		{good[:130] + "0a", false}, // 0, O, I and l are not Base58
		{good[:130] + "Oa", false},
		{good[:130] + "Ia", false},
		{good[:130] + "la", false},
		{good[:130] + "_a", false},
		{good[:130] + "é", false},
		// The documented form with an algorithm id is not a key to the code.
		{"sdk_000_" + strings.Repeat("a", 128), false},
		{"sdk_000_" + strings.Repeat("a", 124), false},
	} {
		if got := Valid(tc.key); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestArgon2MatchesReferenceLibrary(t *testing.T) {
	// Computed with the reference C implementation (libargon2,
	// argon2id_hash_raw, version 0x13, t=2, m=65536 KiB, p=1, 48 bytes).
	const (
		salt = "7GqxzCAhBnui4wSCicVtFdmghBxtBAQV"
		want = "213c785bf449f5ec27f412a49226f5532642a8fcc18605a8916ef7356b6721b3f23317f615dc3d2f41ec1d0537a2c0dd"
	)
	ok, err := Verify(refKey, want, salt, Argon2)
	if err != nil || !ok {
		t.Fatalf("Verify(reference vector) = %v, %v; want true", ok, err)
	}
	// Hex is accepted in either case; the reference writes lower case.
	if ok, err := Verify(refKey, strings.ToUpper(want), salt, Argon2); err != nil || !ok {
		t.Errorf("Verify(upper-case hex) = %v, %v; want true", ok, err)
	}
	// The key is trimmed before hashing, as the reference does.
	if ok, _ := Verify(" "+refKey+"\n", want, salt, Argon2); !ok {
		t.Errorf("Verify(untrimmed key) = false, want true")
	}
	if ok, _ := Verify(refKey, want, salt[1:], Argon2); ok {
		t.Errorf("Verify(wrong salt) = true")
	}
	other := refKey[:len(refKey)-1] + "j"
	if ok, _ := Verify(other, want, salt, Argon2); ok {
		t.Errorf("Verify(other key) = true")
	}
}

func TestHashRoundTrip(t *testing.T) {
	k, _ := Generate()
	hash, salt, err := Hash(k)
	if err != nil {
		t.Fatal(err)
	}
	if len(hash) != 96 || len(salt) != 32 {
		t.Errorf("Hash: %d hex characters, salt %d characters; want 96 and 32", len(hash), len(salt))
	}
	for _, c := range salt {
		if !isBase58(byte(c)) {
			t.Errorf("salt %q is not Base58", salt)
			break
		}
	}
	if hash2, salt2, _ := Hash(k); hash2 == hash || salt2 == salt {
		t.Errorf("two hashes of one key share a salt or hash")
	}
	if ok, err := Verify(k, hash, salt, Argon2); !ok || err != nil {
		t.Errorf("Verify(own hash) = %v, %v", ok, err)
	}
	if err := checkStored(hash, salt, Argon2); err != nil {
		t.Errorf("checkStored(own hash): %v", err)
	}
}

func TestVerifyBCrypt(t *testing.T) {
	k, _ := Generate()
	// The reference truncates to bcrypt's 72 bytes before hashing; Go's
	// bcrypt refuses longer input, so the test does the same.
	h, err := bcrypt.GenerateFromPassword([]byte(k[:72]), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := Verify(k, string(h), "ignored", BCrypt); !ok || err != nil {
		t.Errorf("Verify(bcrypt) = %v, %v; want true", ok, err)
	}
	other, _ := Generate()
	if ok, err := Verify(other, string(h), "", BCrypt); ok || err != nil {
		t.Errorf("Verify(bcrypt, other key) = %v, %v; want false, nil", ok, err)
	}
	// A consequence of bcrypt's limit, documented here so it is not a
	// surprise: only the first 72 bytes count.
	sameStart := k[:72] + strings.Repeat("z", len(k)-72)
	if ok, _ := Verify(sameStart, string(h), "", BCrypt); !ok {
		t.Errorf("bcrypt verification depends on bytes past 72")
	}
	if err := checkStored(string(h), "", BCrypt); err != nil {
		t.Errorf("checkStored(bcrypt): %v", err)
	}
}

func TestVerifyErrors(t *testing.T) {
	k, _ := Generate()
	for name, tc := range map[string]struct {
		hash, salt string
		alg        Algorithm
	}{
		"argon2 no salt":    {strings.Repeat("ab", 48), "", Argon2},
		"argon2 not hex":    {strings.Repeat("zz", 48), "salt", Argon2},
		"argon2 too short":  {strings.Repeat("ab", 32), "salt", Argon2},
		"bcrypt not bcrypt": {"nope", "", BCrypt},
		"unknown algorithm": {"x", "y", Algorithm("MD5")},
	} {
		if ok, err := Verify(k, tc.hash, tc.salt, tc.alg); ok || err == nil {
			t.Errorf("%s: Verify = %v, %v; want an error", name, ok, err)
		}
		if err := checkStored(tc.hash, tc.salt, tc.alg); err == nil {
			t.Errorf("%s: checkStored accepted it", name)
		}
	}
}
