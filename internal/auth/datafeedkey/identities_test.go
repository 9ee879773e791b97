package datafeedkey

import (
	"strings"
	"testing"
)

const (
	testNowMs  = int64(1_700_000_000_000)
	testFuture = "4102444800000" // 2100-01-01
	argonHash  = "213c785bf449f5ec27f412a49226f5532642a8fcc18605a8916ef7356b6721b3f23317f615dc3d2f41ec1d0537a2c0dd"
)

func parse(t *testing.T, doc string) *parsedFile {
	t.Helper()
	p, err := parseIdentities([]byte(doc), "AccountId", testNowMs, "test.json")
	if err != nil {
		t.Fatalf("parseIdentities: %v\n%s", err, doc)
	}
	return p
}

func TestParseIdentities(t *testing.T) {
	doc := `{"dataFeedIdentities": [
		{"type": "DATA_FEED_KEY", "hash": "` + argonHash + `", "salt": "salt1", "hashAlgorithm": "ARGON2",
		 "expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"AccountId": "1000", "key1": "val1", "KEY1": "second", "n": 7, "b": true, "gone": null, " ": "blank key"}},
		null,
		{"type": "CERTIFICATE_DN", "certificateDn": "CN=John Doe,OU=Users", "expiryDateEpochMs": ` + testFuture + `,
		 "streamMetaData": {"accountid": "2000"}},
		{"type": "DATA_FEED_KEY", "hash": "$2a$04$abcdefghijklmnopqrstuu5WWrDaZp4b3hV5gGq4aY0dCZRx3QbVy", "salt": null, "hashAlgorithm": "BCRYPT_2A",
		 "expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"AccountId": "1000"}}
	]}`
	p := parse(t, doc)
	if len(p.keys) != 2 || len(p.certs) != 1 || p.expired != 0 || len(p.ignored) != 0 {
		t.Fatalf("got %d keys, %d certs, %d expired, ignored %v; want 2, 1, 0, none", len(p.keys), len(p.certs), p.expired, p.ignored)
	}
	k := p.keys[0]
	if k.owner != "1000" || k.hash != argonHash || k.salt != "salt1" || k.alg != Argon2 || k.file != "test.json" {
		t.Errorf("key 0 = %+v", k)
	}
	// Case-insensitive keys, first wins; numbers and booleans as text;
	// null values and blank keys dropped.
	want := map[string]string{"AccountId": "1000", "key1": "val1", "n": "7", "b": "true"}
	if k.attrs.Len() != len(want) {
		t.Errorf("attrs = %v, want %v", k.attrs.Sorted(), want)
	}
	for kk, v := range want {
		if got, _ := k.attrs.Get(kk); got != v {
			t.Errorf("attr %s = %q, want %q", kk, got, v)
		}
	}
	if c := p.certs[0]; c.owner != "2000" || c.dn != "CN=John Doe,OU=Users" {
		t.Errorf("cert = %+v", c)
	}
	if p.keys[1].alg != BCrypt || p.keys[1].salt != "" {
		t.Errorf("bcrypt key = %+v", p.keys[1])
	}

	// The other spelling, and both at once (their lists are joined).
	p = parse(t, `{"dataFeedIdentity": [{"type": "CERTIFICATE_DN", "certificateDn": "CN=a", "expiryDateEpochMs": `+testFuture+`, "streamMetaData": {"AccountId": "1"}}]}`)
	if len(p.certs) != 1 {
		t.Errorf("dataFeedIdentity spelling: %d certs, want 1", len(p.certs))
	}
	p = parse(t, `{"dataFeedIdentities": null, "dataFeedIdentity": []}`)
	if len(p.keys)+len(p.certs) != 0 {
		t.Errorf("empty lists gave identities")
	}
	p = parse(t, `{}`)
	if len(p.keys)+len(p.certs) != 0 {
		t.Errorf("empty object gave identities")
	}
}

func TestParseIdentitiesIgnored(t *testing.T) {
	entry := func(fields string) string {
		return `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "` + argonHash + `", "salt": "s", "hashAlgorithm": "ARGON2", ` + fields + `}]}`
	}
	for name, tc := range map[string]struct {
		doc     string
		expired bool
	}{
		"expired":         {entry(`"expiryDateEpochMs": 1000, "streamMetaData": {"AccountId": "1"}`), true},
		"expires now":     {entry(`"expiryDateEpochMs": 1700000000000, "streamMetaData": {"AccountId": "1"}`), true},
		"no expiry":       {entry(`"streamMetaData": {"AccountId": "1"}`), true},
		"null expiry":     {entry(`"expiryDateEpochMs": null, "streamMetaData": {"AccountId": "1"}`), true},
		"no owner":        {entry(`"expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"Other": "1"}`), false},
		"blank owner":     {entry(`"expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"AccountId": "  "}`), false},
		"null owner":      {entry(`"expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"AccountId": null}`), false},
		"no stream meta":  {entry(`"expiryDateEpochMs": ` + testFuture), false},
		"argon2 bad hash": {strings.Replace(entry(`"expiryDateEpochMs": `+testFuture+`, "streamMetaData": {"AccountId": "1"}`), argonHash, "abc", 1), false},
		"argon2 no salt":  {strings.Replace(entry(`"expiryDateEpochMs": `+testFuture+`, "streamMetaData": {"AccountId": "1"}`), `"salt": "s"`, `"salt": null`, 1), false},
		"bcrypt bad hash": {strings.Replace(entry(`"expiryDateEpochMs": `+testFuture+`, "streamMetaData": {"AccountId": "1"}`), `"ARGON2"`, `"BCRYPT_2A"`, 1), false},
		"cert expired":    {`{"dataFeedIdentities": [{"type": "CERTIFICATE_DN", "certificateDn": "CN=a", "expiryDateEpochMs": 5, "streamMetaData": {"AccountId": "1"}}]}`, true},
		"cert blank dn":   {`{"dataFeedIdentities": [{"type": "CERTIFICATE_DN", "certificateDn": " ", "expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"AccountId": "1"}}]}`, false},
		"cert no owner":   {`{"dataFeedIdentities": [{"type": "CERTIFICATE_DN", "certificateDn": "CN=a", "expiryDateEpochMs": ` + testFuture + `}]}`, false},
	} {
		p := parse(t, tc.doc)
		if len(p.keys)+len(p.certs) != 0 {
			t.Errorf("%s: loaded %d keys, %d certs; want none", name, len(p.keys), len(p.certs))
		}
		if tc.expired && (p.expired != 1 || len(p.ignored) != 0) {
			t.Errorf("%s: expired %d, ignored %v; want counted as expired", name, p.expired, p.ignored)
		}
		if !tc.expired && (p.expired != 0 || len(p.ignored) != 1) {
			t.Errorf("%s: expired %d, ignored %v; want one reason", name, p.expired, p.ignored)
		}
	}
}

func TestParseIdentitiesErrors(t *testing.T) {
	key := func(extra string) string {
		return `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "h", "hashAlgorithm": "ARGON2", "expiryDateEpochMs": 1` + extra + `}]}`
	}
	for name, doc := range map[string]string{
		"empty":                 ``,
		"not json":              `dataFeedIdentities`,
		"truncated":             `{"dataFeedIdentities": [`,
		"top-level array":       `[]`,
		"top-level null":        `null`,
		"trailing data":         `{} {}`,
		"unknown top field":     `{"dataFeedKeys": []}`,
		"wrong case top field":  `{"DataFeedIdentities": []}`,
		"list not array":        `{"dataFeedIdentities": {}}`,
		"entry not object":      `{"dataFeedIdentities": ["x"]}`,
		"no type":               `{"dataFeedIdentities": [{"hash": "h"}]}`,
		"unknown type":          `{"dataFeedIdentities": [{"type": "API_KEY"}]}`,
		"lower-case type":       `{"dataFeedIdentities": [{"type": "data_feed_key"}]}`,
		"unknown field":         key(`, "comment": "x"`),
		"wrong case field":      key(`, "HASH": "x"`),
		"cert field on key":     key(`, "certificateDn": "CN=x"`),
		"key field on cert":     `{"dataFeedIdentities": [{"type": "CERTIFICATE_DN", "certificateDn": "CN=a", "hash": "h"}]}`,
		"old format":            `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "h", "hashAlgorithmId": "000"}]}`,
		"blank hash":            `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": " ", "hashAlgorithm": "ARGON2"}]}`,
		"no hash":               `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hashAlgorithm": "ARGON2"}]}`,
		"no algorithm":          `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "h"}]}`,
		"unknown algorithm":     `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "h", "hashAlgorithm": "SHA256"}]}`,
		"hash not string":       `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": ["h"], "hashAlgorithm": "ARGON2"}]}`,
		"expiry string":         `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "h", "hashAlgorithm": "ARGON2", "expiryDateEpochMs": "1"}]}`,
		"expiry fraction":       `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "h", "hashAlgorithm": "ARGON2", "expiryDateEpochMs": 1.5}]}`,
		"expiry overflow":       `{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "h", "hashAlgorithm": "ARGON2", "expiryDateEpochMs": 99999999999999999999}]}`,
		"meta not object":       key(`, "streamMetaData": []`),
		"meta value object":     key(`, "streamMetaData": {"a": {}}`),
		"cert without dn":       `{"dataFeedIdentities": [{"type": "CERTIFICATE_DN", "expiryDateEpochMs": 1}]}`,
		"one bad entry of many": `{"dataFeedIdentities": [{"type": "CERTIFICATE_DN", "certificateDn": "CN=a", "expiryDateEpochMs": 1}, {"type": "X"}]}`,
	} {
		if _, err := parseIdentities([]byte(doc), "AccountId", testNowMs, "x.json"); err == nil {
			t.Errorf("%s: parsed without error: %s", name, doc)
		}
	}
}

// FuzzParseIdentities checks the parser never panics and that whatever it
// loads is usable: an owner, an unexpired entry, a DN for certificates.
func FuzzParseIdentities(f *testing.F) {
	f.Add([]byte(`{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "` + argonHash + `", "salt": "s", "hashAlgorithm": "ARGON2", "expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"AccountId": "1"}}]}`))
	f.Add([]byte(`{"dataFeedIdentity": [{"type": "CERTIFICATE_DN", "certificateDn": "CN=a", "expiryDateEpochMs": ` + testFuture + `, "streamMetaData": {"accountid": "1", "K": 1}}, null]}`))
	f.Add([]byte(`{"dataFeedIdentities": [{"type": "DATA_FEED_KEY", "hash": "$2a$10$abc", "salt": null, "hashAlgorithm": "BCRYPT_2A", "expiryDateEpochMs": -1}]}`))
	f.Add([]byte(`{"dataFeedIdentities": null}`))
	f.Add([]byte(`[{"a":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parseIdentities(data, "AccountId", testNowMs, "fuzz.json")
		if err != nil {
			return
		}
		for _, k := range p.keys {
			if k.owner == "" || k.expiresMs <= testNowMs || k.hash == "" || k.attrs == nil {
				t.Fatalf("unusable key loaded: %+v", k)
			}
			if checkStored(k.hash, k.salt, k.alg) != nil {
				t.Fatalf("key with a hash that can never match loaded: %+v", k)
			}
		}
		for _, c := range p.certs {
			if c.owner == "" || c.expiresMs <= testNowMs || strings.TrimSpace(c.dn) == "" || c.attrs == nil {
				t.Fatalf("unusable certificate identity loaded: %+v", c)
			}
		}
	})
}
