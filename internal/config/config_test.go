package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{
		"0": 0, "10": 10, "10B": 10, "512KiB": 512 << 10, "512k": 512 << 10, "10M": 10 << 20,
		"1G": 1 << 30, "1GB": 1 << 30, "1 GiB": 1 << 30, "2T": 2 << 40,
	} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1.5G", "1P", "99999999999999T"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", bad)
		}
	}
	if s := ByteSize(10 << 30).String(); s != "10GiB" {
		t.Errorf("String = %s", s)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30s": 30 * time.Second, "1m30s": 90 * time.Second, "PT30S": 30 * time.Second,
		"PT10M": 10 * time.Minute, "P1D": 24 * time.Hour, "PT1H2M3.5S": time.Hour + 2*time.Minute + 3500*time.Millisecond,
	} {
		got, err := ParseDuration(in)
		if err != nil || got.D() != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	// The longest ISO-8601 duration that fits, and ones that do not: they
	// are refused, not wrapped round to a negative or a short duration.
	if got, err := ParseDuration("P106751D"); err != nil || got.D() != 106751*24*time.Hour {
		t.Errorf("ParseDuration(P106751D) = %v, %v", got, err)
	}
	for _, bad := range []string{"P106752D", "P300000D", "P99999999999999999999D", "PT9999999999999H",
		"P106751DT24H", "PT9999999999999S"} {
		if _, err := ParseDuration(bad); err == nil || !strings.Contains(err.Error(), "too long") {
			t.Errorf("ParseDuration(%q) = %v; want too long", bad, err)
		}
	}
	for _, bad := range []string{"", "P", "PT", "soon", "10"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) succeeded", bad)
		}
	}
}

// TestParseDurationDays: a whole number of days with a d suffix, as
// operators type lifetimes; overflow is refused as on the ISO path, and
// nothing else new (no fractions, signs, weeks or mixed units) is taken.
func TestParseDurationDays(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90d": 90 * 24 * time.Hour, "1d": 24 * time.Hour, "0d": 0, "365D": 365 * 24 * time.Hour,
		" 7d ": 7 * 24 * time.Hour, "106751d": 106751 * 24 * time.Hour,
	} {
		got, err := ParseDuration(in)
		if err != nil || got.D() != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"106752d", "99999999999999999999d"} {
		if _, err := ParseDuration(bad); err == nil || !strings.Contains(err.Error(), "too long") {
			t.Errorf("ParseDuration(%q) = %v; want too long", bad, err)
		}
	}
	for _, bad := range []string{"d", "1.5d", "-1d", "+1d", "1 d", "1d12h", "12h1d", "1w", "1dd", "P1d1"} {
		_, err := ParseDuration(bad)
		if err == nil {
			t.Errorf("ParseDuration(%q) succeeded", bad)
			continue
		}
		// The message lists every accepted form.
		for _, form := range []string{"30s", "90d", "PT30S"} {
			if !strings.Contains(err.Error(), form) {
				t.Errorf("ParseDuration(%q): %v does not name the form %s", bad, err, form)
			}
		}
	}
	// In the configuration file too.
	cfg, err := Load(write(t, "security:\n  apiKeys:\n    maxExpiry: 400d\n"))
	if err != nil || cfg.Security.APIKeys.MaxExpiry.D() != 400*24*time.Hour {
		t.Errorf("maxExpiry: 400d loaded as %v, %v", cfg.Security.APIKeys.MaxExpiry, err)
	}
}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "weir.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	cfg, err := Load(write(t, `
listen: 127.0.0.1:9999
node: n1
receive:
  receiptCheckMode: RECEIVE_ALL
  maxRequestSize: 1G
  bodyIdleTimeout: PT5S
  metaTypes: [Events, Raw Events]
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9999" || cfg.Node != "n1" || cfg.Receive.ReceiptCheckMode != ReceiveAll ||
		cfg.Receive.MaxRequestSize != 1<<30 || cfg.Receive.BodyIdleTimeout.D() != 5*time.Second ||
		len(cfg.Receive.MetaTypes) != 2 {
		t.Fatalf("unexpected config %+v", cfg)
	}
	// Untouched settings keep their defaults.
	if cfg.Data != "./weir-data" || cfg.Receive.MaxConcurrentReceipts != 64 {
		t.Fatalf("defaults lost: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadEmptyFileIsDefaults(t *testing.T) {
	cfg, err := Load(write(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	for _, body := range []string{"lisen: x\n", "receive:\n  maxRequestSise: 1G\n"} {
		_, err := Load(write(t, body))
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%q: err = %v, want unknown field error", body, err)
		}
	}
}

// TestLoadRejectsSecondDocument: a file of two YAML documents is refused,
// naming the line, where the second one (and any misspelt key in it) was
// ignored.
func TestLoadRejectsSecondDocument(t *testing.T) {
	_, err := Load(write(t, "listen: 127.0.0.1:9999\n---\nreceive:\n  maxRequestSise: 1G\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2: a second YAML document") {
		t.Errorf("two documents: err = %v, want a second document error at line 2", err)
	}
	// A document start marker before the one document, or an empty
	// document after it, is fine.
	for _, body := range []string{"---\nlisten: 127.0.0.1:9999\n", "listen: 127.0.0.1:9999\n---\n# nothing\n"} {
		cfg, err := Load(write(t, body))
		if err != nil || cfg.Listen != "127.0.0.1:9999" {
			t.Errorf("%q: %+v, %v", body, cfg.Listen, err)
		}
	}
}

func TestValidate(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	cfg.Receive.ReceiptCheckMode = ReceiptPolicy
	if err := cfg.Validate(); err != nil {
		t.Fatalf("RECEIPT_POLICY invalid: %v", err)
	}
	cfg.Receive.AuthenticationRequired = true
	cfg.Receive.EnabledAuthenticationTypes = nil
	cfg.Receive.ReceiptCheckMode = "SOMETIMES"
	cfg.DB = "mysql://x"
	cfg.TLS.CertFile = "x.pem"
	cfg.Receive.TrustedForwarders = []string{"TOKEN:proxy-1", "proxy-2", "KEY:x", "CERTIFICATE:"}
	cfg.API.MaxConcurrentDownloads = 0
	err := cfg.Validate()
	for _, want := range []string{"enabledAuthenticationTypes", "receiptCheckMode", "db:", "keyFile", "api.maxConcurrentDownloads",
		`trustedForwarders[1]: "proxy-2"`, `trustedForwarders[2]: "KEY:x"`, `trustedForwarders[3]: "CERTIFICATE:"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want mention of %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "trustedForwarders[0]") {
		t.Errorf("Validate() = %v; TOKEN:proxy-1 is a valid trusted forwarder", err)
	}
}

// TestValidateRetryAfterAndCacheTTL: Retry-After is whole seconds, so a
// retryAfter under one second (which sent no Retry-After on the datafeed's
// 503) is refused, as is a negative data feed key cache TTL, each naming
// its option.
func TestValidateRetryAfterAndCacheTTL(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"receive:\n  retryAfter: 0s\n", "receive.retryAfter: 0s must be at least 1s"},
		{"receive:\n  retryAfter: 500ms\n", "receive.retryAfter: 500ms must be at least 1s"},
		{"receive:\n  retryAfter: -5s\n", "receive.retryAfter: -5s must be at least 1s"},
		{"api:\n  retryAfter: -1s\n", "api.retryAfter: -1s must be at least 1s"},
		{"receive:\n  dataFeedKeyCacheTTL: -1m\n", "receive.dataFeedKeyCacheTTL: must not be negative"},
		{"receive:\n  forwardedPostsKept: 30m\n", "receive.forwardedPostsKept: 30m0s must be at least 1h"},
	} {
		cfg, err := Load(write(t, tc.body))
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: Validate() = %v; want %q", tc.body, err, tc.want)
		}
	}
	cfg, err := Load(write(t, "receive:\n  retryAfter: PT1S\n  dataFeedKeyCacheTTL: 0s\napi:\n  retryAfter: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("retryAfter 1s and a cache TTL of 0: %v", err)
	}
}

// TestValidateMaxHeaderBytes: receive.maxHeaderBytes is bounded above as
// well as below (4KiB to 1MiB), in serve's configuration and the proxy's,
// and the message names the option, the value, the range and, for a value
// the file sets, the file and line.
func TestValidateMaxHeaderBytes(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"4KiB", true}, {"64KiB", true}, {"1MiB", true}, {"1048576", true},
		{"4095", false}, {"0", false}, {"1048577", false}, {"2MiB", false}, {"1G", false}, {"4T", false},
	} {
		body := "data: /tmp/x\nreceive:\n  maxHeaderBytes: " + tc.value + "\n"
		path := write(t, body)
		cfg, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", tc.value, err)
		}
		p, err := LoadProxy(path)
		if err != nil {
			t.Fatalf("%s: %v", tc.value, err)
		}
		p.AddForward("http://127.0.0.1:8080/datafeed")
		for name, err := range map[string]error{"serve": cfg.Validate(), "proxy": p.ValidateProxy()} {
			if tc.ok {
				if err != nil {
					t.Errorf("%s: maxHeaderBytes %s: %v", name, tc.value, err)
				}
				continue
			}
			want := path + ":3: receive.maxHeaderBytes: " + cfg.Receive.MaxHeaderBytes.String() + " is not between 4KiB and 1MiB"
			if err := AtLines(path, err); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: maxHeaderBytes %s: %v; want %q", name, tc.value, err, want)
			}
		}
	}
}

// TestValidateListen: a listen address that net.Listen would refuse (or
// take as a named port) is refused by validation, naming the option and,
// set in the file, its file and line, in serve's configuration and the
// proxy's; before, it failed only when the server bound it, with a net
// error that did not name the option.
func TestValidateListen(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8080", ":8080", "0.0.0.0:0", "localhost:65535", "[::1]:9090", "[::]:80", "weir-1.example.com:443"} {
		cfg := Default()
		cfg.Listen = ok
		p := validProxy()
		p.Listen = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("listen %q: %v", ok, err)
		}
		if err := p.ValidateProxy(); err != nil {
			t.Errorf("proxy listen %q: %v", ok, err)
		}
	}
	for _, tc := range []struct{ value, want string }{
		{"8080", `listen: "8080" is not host:port (e.g. 127.0.0.1:8080, or :8080 for every interface): missing port in address`},
		{"localhost", `listen: "localhost" is not host:port`},
		{`":80800"`, `listen: ":80800": the port "80800" is not a number from 0 to 65535`},
		{`":65536"`, `listen: ":65536": the port "65536" is not a number from 0 to 65535`},
		{`":-1"`, `listen: ":-1": the port "-1" is not a number`},
		{`"127.0.0.1:"`, `listen: "127.0.0.1:": the port "" is not a number`},
		{`":http"`, `listen: ":http": the port "http" is not a number`},
		{`"127.0.0.1:80:80"`, `listen: "127.0.0.1:80:80" is not host:port`},
		{`"::1:8080"`, `listen: "::1:8080" is not host:port`},
		{`"my host:8080"`, `listen: "my host:8080": the host "my host" is neither an IP address nor a host name`},
	} {
		path := write(t, "data: /tmp/x\nlisten: "+tc.value+"\n")
		cfg, err := Load(path)
		if err != nil {
			t.Fatalf("listen: %s: %v", tc.value, err)
		}
		p, err := LoadProxy(path)
		if err != nil {
			t.Fatalf("listen: %s: %v", tc.value, err)
		}
		p.AddForward("http://127.0.0.1:8080/datafeed")
		for name, err := range map[string]error{"serve": cfg.Validate(), "proxy": p.ValidateProxy()} {
			if err := AtLines(path, err); err == nil || !strings.Contains(err.Error(), path+":2: "+tc.want) {
				t.Errorf("%s: listen: %s: %v; want %q", name, tc.value, err, path+":2: "+tc.want)
			}
		}
	}
}

// TestValidateNode: a node name that cannot be part of a receipt id is a
// configuration error naming the option and its line, reported with the
// file's other problems rather than when the server starts.
func TestValidateNode(t *testing.T) {
	for _, ok := range []string{"", "node-1", "A9"} {
		cfg := Default()
		cfg.Node = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("node %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"node_1", "node 1", "nœud", "a.b"} {
		path := write(t, "data: /tmp/x\nnode: \""+bad+"\"\n")
		cfg, err := Load(path)
		if err != nil {
			t.Fatalf("node: %s: %v", bad, err)
		}
		want := path + ":2: node: \"" + bad + "\" may contain only letters, digits and '-'"
		if err := AtLines(path, cfg.Validate()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("node: %s: %v; want %q", bad, err, want)
		}
	}
}

// TestValidateProxyRefusesNode: a proxy names its receipt ids by proxyId;
// a node name in its configuration would be ignored, so it is refused.
func TestValidateProxyRefusesNode(t *testing.T) {
	p := validProxy()
	p.Node = "node-1"
	if err := p.ValidateProxy(); err == nil || !strings.Contains(err.Error(), "node: weir proxy takes no node name") {
		t.Errorf("proxy with node: %v", err)
	}
}

// TestStoreDeletePurgeAge: 7 days by default; days, Go and ISO-8601
// durations are read, 0 turns the purge off, and a negative age is
// refused naming the option.
func TestStoreDeletePurgeAge(t *testing.T) {
	if got := Default().Store.DeletePurgeAge; got != Duration(7*24*time.Hour) {
		t.Errorf("default store.deletePurgeAge %v, want 7 days", got)
	}
	for body, want := range map[string]Duration{
		"store:\n  deletePurgeAge: 7d\n":   Duration(7 * 24 * time.Hour),
		"store:\n  deletePurgeAge: 36h\n":  Duration(36 * time.Hour),
		"store:\n  deletePurgeAge: P30D\n": Duration(30 * 24 * time.Hour),
		"store:\n  deletePurgeAge: 0\n":    0,
	} {
		cfg, err := Load(write(t, body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if cfg.Store.DeletePurgeAge != want {
			t.Errorf("%q: %v, want %v", body, cfg.Store.DeletePurgeAge, want)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	cfg, err := Load(write(t, "store:\n  deletePurgeAge: -1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "store.deletePurgeAge: -1h0m0s must not be negative") {
		t.Errorf("negative store.deletePurgeAge: Validate() = %v", err)
	}
}
