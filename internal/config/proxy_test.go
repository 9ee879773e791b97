package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/feed"
)

func TestDefaultProxy(t *testing.T) {
	p := DefaultProxy()
	if p.Listen != "127.0.0.1:8090" || p.Data != "./weir-proxy-data" {
		t.Errorf("listen %q, data %q; want 127.0.0.1:8090, ./weir-proxy-data", p.Listen, p.Data)
	}
	want := Aggregator{Enabled: true, MaxItemsPerAggregate: 1000, MaxUncompressedByteSize: 1 << 30,
		AggregationFrequency: Duration(10 * time.Minute)}
	if p.Aggregator != want {
		t.Errorf("aggregator = %+v, want %+v", p.Aggregator, want)
	}
	if p.FeedStatus.Fallback != feed.Receive || p.FeedStatus.URL != "" || p.FeedStatus.MaxEntries < 1 ||
		p.FeedStatus.CacheTTL <= 0 || p.FeedStatus.Timeout <= 0 {
		t.Errorf("feedStatus = %+v", p.FeedStatus)
	}
	if len(p.ForwardHTTPDestinations)+len(p.ForwardFileDestinations) != 0 || p.ProxyID != "" {
		t.Errorf("defaults carry destinations or an id: %+v", p)
	}
	// Everything else is the serve defaults.
	d := Default()
	d.Listen, d.Data = p.Listen, p.Data
	if !reflect.DeepEqual(p.Config, d) {
		t.Errorf("proxy defaults differ from serve defaults beyond listen and data:\n got %+v\nwant %+v", p.Config, d)
	}
	// Defaults plus one destination are valid.
	p.AddForward("http://127.0.0.1:8080/datafeed")
	if err := p.ValidateProxy(); err != nil {
		t.Errorf("defaults with --forward: %v", err)
	}
}

func TestLoadProxy(t *testing.T) {
	p, err := LoadProxy(write(t, `
listen: 0.0.0.0:9090
data: /var/lib/weir-proxy
proxyId: edge-1
receive:
  receiptCheckMode: FEED_EXISTENCE
  maxRequestSize: 2G
  authenticationRequired: false
aggregator:
  enabled: false
  maxItemsPerAggregate: 50
  maxUncompressedByteSize: 64M
  aggregationFrequency: PT30S
forwardHttpDestinations:
  - name: central
    forwardUrl: https://weir.example.com/datafeed
    apiKeyFile: /etc/weir/key
    tls:
      caFile: /etc/weir/ca.pem
      certFile: /etc/weir/client.pem
      keyFile: /etc/weir/client.key
    forwardHeadersAdditionalAllowSet: [System]
    timeout: 1m
    livenessCheckUrl: https://weir.example.com/healthz
    queue:
      forwardThreadCount: 2
      retryDelay: 30s
  - forwardUrl: http://127.0.0.1:8080/stroom/datafeed
    enabled: false
    dataFeedKey: sdk_abc
    dataFeedKeyOwner: acct-1
    dataFeedOwnerKey: Owner
forwardFileDestinations:
  - name: outbox
    path: /var/spool/weir
    subPathTemplate: ${feed}/${year}
    livenessCheckPath: /var/spool/weir/.live
    queue:
      maxRetryAge: P1D
feedStatus:
  url: https://status.example.com/api/feedStatus/v2/getFeedStatus
  apiKey: status-key
  cacheTTL: 2m
  maxEntries: 50
  timeout: 5s
  fallback: REJECT
repository:
  maxSize: 10G
  minFreeSpace: 1G
logStream:
  metaKeys: [Feed, GUID]
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Listen != "0.0.0.0:9090" || p.Data != "/var/lib/weir-proxy" || p.ProxyID != "edge-1" ||
		p.Receive.ReceiptCheckMode != FeedExistence || p.Receive.MaxRequestSize != 2<<30 || p.Receive.AuthenticationRequired {
		t.Errorf("serve settings: %+v", p.Config)
	}
	// Untouched serve settings keep their defaults.
	if p.Receive.MaxConcurrentReceipts != 64 || p.Log.Format != "json" {
		t.Errorf("serve defaults lost: %+v", p.Config)
	}
	if want := (Aggregator{Enabled: false, MaxItemsPerAggregate: 50, MaxUncompressedByteSize: 64 << 20,
		AggregationFrequency: Duration(30 * time.Second)}); p.Aggregator != want {
		t.Errorf("aggregator = %+v, want %+v", p.Aggregator, want)
	}
	dq := DefaultQueue()
	if len(p.ForwardHTTPDestinations) != 2 {
		t.Fatalf("%d HTTP destinations, want 2", len(p.ForwardHTTPDestinations))
	}
	q := dq
	q.ForwardThreadCount, q.RetryDelay = 2, Duration(30*time.Second)
	wantCentral := HTTPDestination{
		Name: "central", ForwardURL: "https://weir.example.com/datafeed", APIKeyFile: "/etc/weir/key",
		TLS:                              ClientTLS{CAFile: "/etc/weir/ca.pem", CertFile: "/etc/weir/client.pem", KeyFile: "/etc/weir/client.key"},
		ForwardHeadersAdditionalAllowSet: []string{"System"},
		Timeout:                          Duration(time.Minute),
		LivenessCheckURL:                 "https://weir.example.com/healthz",
		DataFeedOwnerKey:                 "AccountId",
		Queue:                            q,
	}
	if got := p.ForwardHTTPDestinations[0]; !reflect.DeepEqual(got, wantCentral) {
		t.Errorf("central\n got %+v\nwant %+v", got, wantCentral)
	}
	second := p.ForwardHTTPDestinations[1]
	if second.Name != "127.0.0.1_8080" || IsEnabled(second.Enabled) || second.DataFeedKey != "sdk_abc" ||
		second.DataFeedKeyOwner != "acct-1" || second.DataFeedOwnerKey != "Owner" ||
		second.Timeout != Duration(3*time.Minute) || second.Queue != dq {
		t.Errorf("second destination = %+v", second)
	}
	fq := dq
	fq.MaxRetryAge = Duration(24 * time.Hour)
	wantFile := []FileDestination{{Name: "outbox", Path: "/var/spool/weir", SubPathTemplate: "${feed}/${year}",
		LivenessCheckPath: "/var/spool/weir/.live", Queue: fq}}
	if !reflect.DeepEqual(p.ForwardFileDestinations, wantFile) {
		t.Errorf("file destinations\n got %+v\nwant %+v", p.ForwardFileDestinations, wantFile)
	}
	wantFS := FeedStatusCheck{URL: "https://status.example.com/api/feedStatus/v2/getFeedStatus", APIKey: "status-key",
		CacheTTL: Duration(2 * time.Minute), MaxEntries: 50, Timeout: Duration(5 * time.Second), Fallback: feed.Reject}
	if p.FeedStatus != wantFS {
		t.Errorf("feedStatus = %+v, want %+v", p.FeedStatus, wantFS)
	}
	if p.Repository != (Repository{MaxSize: 10 << 30, MinFreeSpace: 1 << 30}) {
		t.Errorf("repository = %+v", p.Repository)
	}
	if !slices.Equal(p.LogStream.MetaKeys, []string{"Feed", "GUID"}) {
		t.Errorf("logStream.metaKeys = %v", p.LogStream.MetaKeys)
	}
	if err := p.ValidateProxy(); err != nil {
		t.Errorf("ValidateProxy: %v", err)
	}
	if got := p.FeedStatusURL(); got != wantFS.URL {
		t.Errorf("FeedStatusURL = %q, want the configured %q", got, wantFS.URL)
	}
}

func TestLoadProxyPartialFileKeepsDefaults(t *testing.T) {
	p, err := LoadProxy(write(t, "aggregator:\n  maxItemsPerAggregate: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultProxy().Aggregator
	want.MaxItemsPerAggregate = 7
	if p.Aggregator != want || p.Listen != "127.0.0.1:8090" || p.Data != "./weir-proxy-data" {
		t.Errorf("partial file: aggregator %+v, listen %q, data %q", p.Aggregator, p.Listen, p.Data)
	}
	if p, err := LoadProxy(write(t, "")); err != nil || !reflect.DeepEqual(p, DefaultProxy()) {
		t.Errorf("empty file = %+v, %v; want the defaults", p, err)
	}
}

func TestLoadProxyRejectsUnknownKeys(t *testing.T) {
	for _, body := range []string{
		"aggregator:\n  maxItems: 10\n",
		"forwardHttpDestinations:\n  - forwardURL: http://h/datafeed\n",
		"forwardFileDestinations:\n  - path: /x\n    queue:\n      threads: 2\n",
		"feedStatus:\n  uri: http://h\n",
		"forwardDestinations: []\n",
	} {
		_, err := LoadProxy(write(t, body))
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%q: err = %v, want unknown field error", body, err)
		}
	}
	if _, err := LoadProxy(write(t, "aggregator:\n  maxUncompressedByteSize: lots\n")); err == nil {
		t.Error("bad byte size accepted")
	}
}

// validProxy is a valid configuration to break one setting at a time.
func validProxy() Proxy {
	p := DefaultProxy()
	p.AddForward("http://127.0.0.1:8080/datafeed")
	return p
}

func off() *bool { b := false; return &b }

func TestValidateProxy(t *testing.T) {
	if p := validProxy(); p.ValidateProxy() != nil {
		t.Fatalf("valid proxy: %v", p.ValidateProxy())
	}
	for _, tc := range []struct {
		name   string
		change func(p *Proxy)
		want   string
	}{
		{"no destination", func(p *Proxy) {
			p.ForwardHTTPDestinations = nil
			p.Receive.ReceiptCheckMode = ReceiveAll
		}, "at least one enabled destination"},
		{"only disabled destinations", func(p *Proxy) {
			p.ForwardHTTPDestinations[0].Enabled = off()
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", Enabled: off(), Queue: DefaultQueue()}}
			p.Receive.ReceiptCheckMode = ReceiveAll
		}, "at least one enabled destination"},
		{"duplicate names", func(p *Proxy) {
			p.ForwardFileDestinations = []FileDestination{{Name: p.ForwardHTTPDestinations[0].Name, Path: "/x", Queue: DefaultQueue()}}
		}, `forwardFileDestinations[0].name: "127.0.0.1_8080" is used by another destination`},
		{"duplicate derived names", func(p *Proxy) { p.AddForward("http://127.0.0.1:8080/other/datafeed") },
			`forwardHttpDestinations[1].name: "127.0.0.1_8080" is used`},
		{"bad URL", func(p *Proxy) { p.ForwardHTTPDestinations[0].ForwardURL = "ftp://h/datafeed" }, "forwardHttpDestinations[0].forwardUrl"},
		{"URL without host", func(p *Proxy) { p.ForwardHTTPDestinations[0].ForwardURL = "http:///datafeed" }, "forwardHttpDestinations[0].forwardUrl"},
		{"two credentials", func(p *Proxy) {
			h := &p.ForwardHTTPDestinations[0]
			h.APIKey, h.DataFeedKeyFile, h.DataFeedKeyOwner = "k", "/f", "acct"
		}, "set only one of apiKey, apiKeyFile, dataFeedKey, dataFeedKeyFile"},
		{"data feed key without owner", func(p *Proxy) { p.ForwardHTTPDestinations[0].DataFeedKey = "sdk_x" }, "dataFeedKeyOwner"},
		{"data feed key file without owner", func(p *Proxy) { p.ForwardHTTPDestinations[0].DataFeedKeyFile = "/k" }, "dataFeedKeyOwner"},
		{"client cert without key", func(p *Proxy) { p.ForwardHTTPDestinations[0].TLS.CertFile = "c.pem" }, "forwardHttpDestinations[0].tls"},
		{"instant with another destination", func(p *Proxy) {
			p.ForwardHTTPDestinations[0].Instant = true
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", Queue: DefaultQueue()}}
		}, "instant destination must be the only enabled destination"},
		{"FEED_STATUS without an HTTP destination", func(p *Proxy) {
			p.ForwardHTTPDestinations = nil
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", Queue: DefaultQueue()}}
		}, "receive.receiptCheckMode FEED_STATUS asks the downstream"},
		{"FEED_EXISTENCE with only a disabled HTTP destination", func(p *Proxy) {
			p.Receive.ReceiptCheckMode = FeedExistence
			p.ForwardHTTPDestinations[0].Enabled = off()
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", Queue: DefaultQueue()}}
		}, "receive.receiptCheckMode FEED_EXISTENCE asks the downstream"},
		{"RECEIPT_POLICY", func(p *Proxy) { p.Receive.ReceiptCheckMode = ReceiptPolicy }, "a proxy has no receipt rules of its own; use FEED_STATUS"},
		{"autoCreate", func(p *Proxy) { p.Receive.FeedNameGenerationAutoCreate = true }, "receive.feedNameGenerationAutoCreate"},
		{"bad fallback", func(p *Proxy) { p.FeedStatus.Fallback = "IGNORE" }, `feedStatus.fallback: "IGNORE"`},
		{"bad feedStatus url", func(p *Proxy) { p.FeedStatus.URL = "status.example.com" }, "feedStatus.url"},
		{"subPathTemplate with ..", func(p *Proxy) {
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", SubPathTemplate: "${feed}/../../etc", Queue: DefaultQueue()}}
		}, "forwardFileDestinations[0].subPathTemplate"},
		{"absolute subPathTemplate", func(p *Proxy) {
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", SubPathTemplate: "/etc", Queue: DefaultQueue()}}
		}, "forwardFileDestinations[0].subPathTemplate"},
		{"file destination without path", func(p *Proxy) {
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Queue: DefaultQueue()}}
		}, "forwardFileDestinations[0].path"},
		{"bad proxyId", func(p *Proxy) { p.ProxyID = "edge 1" }, "proxyId"},
		{"zero max items", func(p *Proxy) { p.Aggregator.MaxItemsPerAggregate = 0 }, "aggregator.maxItemsPerAggregate"},
		{"zero frequency", func(p *Proxy) { p.Aggregator.AggregationFrequency = 0 }, "aggregator.aggregationFrequency"},
		{"bad thread count", func(p *Proxy) { p.ForwardHTTPDestinations[0].Queue.ForwardThreadCount = 1000 }, "queue.forwardThreadCount"},
		{"max retry delay below retry delay", func(p *Proxy) {
			p.ForwardHTTPDestinations[0].Queue.MaxRetryDelay = Duration(time.Second)
		}, "maxRetryDelay at least retryDelay"},
		{"shrinking retry delay", func(p *Proxy) { p.ForwardHTTPDestinations[0].Queue.RetryDelayGrowthFactor = 0.5 }, "retryDelayGrowthFactor"},
		{"negative repository size", func(p *Proxy) { p.Repository.MaxSize = -1 }, "repository"},
		{"compression level 10", func(p *Proxy) { ten := 10; p.ForwardHTTPDestinations[0].CompressionLevel = &ten }, "compressionLevel"},
		{"zip compression unknown", func(p *Proxy) { p.ForwardHTTPDestinations[0].ZipCompression = "zstd" }, "zipCompression"},
		{"serve setting", func(p *Proxy) { p.Log.Level = "loud" }, "log.level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validProxy()
			tc.change(&p)
			err := p.ValidateProxy()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ValidateProxy() = %v; want mention of %q", err, tc.want)
			}
		})
	}
}

func TestValidateProxyValidCases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(p *Proxy)
	}{
		{"instant alone", func(p *Proxy) { p.ForwardHTTPDestinations[0].Instant = true }},
		{"instant with disabled others", func(p *Proxy) {
			p.ForwardHTTPDestinations[0].Instant = true
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", Enabled: off(), Queue: DefaultQueue()}}
		}},
		{"file only, RECEIVE_ALL", func(p *Proxy) {
			p.ForwardHTTPDestinations = nil
			p.Receive.ReceiptCheckMode = ReceiveAll
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", SubPathTemplate: "${feed}/${year}", Queue: DefaultQueue()}}
		}},
		{"file only, FEED_STATUS with feedStatus.url", func(p *Proxy) {
			p.ForwardHTTPDestinations = nil
			p.FeedStatus.URL = "https://h/api/feedStatus/v2/getFeedStatus"
			p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", Queue: DefaultQueue()}}
		}},
		{"data feed key with owner", func(p *Proxy) {
			p.ForwardHTTPDestinations[0].DataFeedKey, p.ForwardHTTPDestinations[0].DataFeedKeyOwner = "sdk_x", "acct"
		}},
		{"fallback DROP", func(p *Proxy) { p.FeedStatus.Fallback = feed.Drop }},
		{"stored zip", func(p *Proxy) { zero := 0; p.ForwardHTTPDestinations[0].CompressionLevel = &zero }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validProxy()
			tc.change(&p)
			if err := p.ValidateProxy(); err != nil {
				t.Errorf("ValidateProxy() = %v", err)
			}
		})
	}
}

func TestValidateProxyReportsAllProblems(t *testing.T) {
	p := validProxy()
	p.AddForward("ftp://x")
	p.ForwardHTTPDestinations[0].APIKey = "k"
	p.ForwardHTTPDestinations[0].APIKeyFile = "/k"
	p.FeedStatus.Fallback = "MAYBE"
	p.Receive.FeedNameGenerationAutoCreate = true
	p.Aggregator.MaxItemsPerAggregate = 0
	p.ForwardFileDestinations = []FileDestination{{Name: "f", Path: "/x", SubPathTemplate: "../up", Queue: DefaultQueue()}}
	p.Log.Format = "xml"
	err := p.ValidateProxy()
	if err == nil {
		t.Fatal("ValidateProxy succeeded")
	}
	for _, want := range []string{
		"forwardHttpDestinations[1].forwardUrl",
		"forwardHttpDestinations[0]: set only one of",
		"feedStatus.fallback",
		"feedNameGenerationAutoCreate",
		"aggregator.maxItemsPerAggregate",
		"forwardFileDestinations[0].subPathTemplate",
		"log.format",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	// One joined error, one problem a line.
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("ValidateProxy error %T is not a joined error", err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n < 7 {
		t.Errorf("%d lines for 7 problems:\n%v", n, err)
	}
}

func TestFeedStatusURL(t *testing.T) {
	for _, tc := range []struct {
		name     string
		explicit string
		dests    []HTTPDestination
		want     string
	}{
		{"datafeed", "", []HTTPDestination{{ForwardURL: "http://h:8080/datafeed"}}, "http://h:8080/api/feedStatus/v2/getFeedStatus"},
		{"base path and stroom", "", []HTTPDestination{{ForwardURL: "https://h/weir/stroom/datafeed"}}, "https://h/weir/api/feedStatus/v2/getFeedStatus"},
		{"stroom noauth", "", []HTTPDestination{{ForwardURL: "https://h/stroom/noauth/datafeed"}}, "https://h/api/feedStatus/v2/getFeedStatus"},
		{"trailing slash", "", []HTTPDestination{{ForwardURL: "http://h:8080/datafeed/"}}, "http://h:8080/api/feedStatus/v2/getFeedStatus"},
		{"query dropped", "", []HTTPDestination{{ForwardURL: "http://h/datafeed?x=1"}}, "http://h/api/feedStatus/v2/getFeedStatus"},
		{"explicit wins", "https://s/status", []HTTPDestination{{ForwardURL: "http://h:8080/datafeed"}}, "https://s/status"},
		{"explicit without destination", "https://s/status", nil, "https://s/status"},
		{"disabled skipped", "", []HTTPDestination{
			{ForwardURL: "http://first:1/datafeed", Enabled: off()},
			{ForwardURL: "http://second:2/datafeed"},
		}, "http://second:2/api/feedStatus/v2/getFeedStatus"},
		{"first enabled wins", "", []HTTPDestination{
			{ForwardURL: "http://first:1/datafeed"},
			{ForwardURL: "http://second:2/datafeed"},
		}, "http://first:1/api/feedStatus/v2/getFeedStatus"},
		{"all disabled", "", []HTTPDestination{{ForwardURL: "http://h/datafeed", Enabled: off()}}, ""},
		{"none", "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultProxy()
			p.FeedStatus.URL = tc.explicit
			p.ForwardHTTPDestinations = tc.dests
			if got := p.FeedStatusURL(); got != tc.want {
				t.Errorf("FeedStatusURL() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDestinationNames(t *testing.T) {
	p := DefaultProxy()
	p.AddForward("http://127.0.0.1:8080/datafeed")
	p.AddForward("https://weir.example.com/stroom/datafeed")
	p.AddForward("http://[::1]:9000/datafeed")
	p.AddForward("not a url")
	p.ForwardFileDestinations = []FileDestination{{Path: "/a"}, {Name: "named", Path: "/b"}}
	p.fillQueues()
	got := []string{}
	for _, h := range p.ForwardHTTPDestinations {
		got = append(got, h.Name)
	}
	for _, f := range p.ForwardFileDestinations {
		got = append(got, f.Name)
	}
	want := []string{"127.0.0.1_8080", "weir.example.com", "_1_9000", "http-4", "file-1", "named"}
	if !slices.Equal(got, want) {
		t.Errorf("names = %v, want %v", got, want)
	}
	// Stable: filling again (e.g. a later AddForward) renames nothing, and a
	// fresh configuration with the same URLs gets the same names.
	p.AddForward("http://other:1/datafeed")
	if n := p.ForwardHTTPDestinations[0].Name; n != "127.0.0.1_8080" {
		t.Errorf("name changed to %q", n)
	}
	q := DefaultProxy()
	q.AddForward("http://127.0.0.1:8080/datafeed")
	if n := q.ForwardHTTPDestinations[0].Name; n != "127.0.0.1_8080" {
		t.Errorf("fresh name %q", n)
	}
	// AddForward gives the defaults.
	h := q.ForwardHTTPDestinations[0]
	if h.Queue != DefaultQueue() || h.Timeout != Duration(3*time.Minute) || h.DataFeedOwnerKey != "AccountId" || !IsEnabled(h.Enabled) {
		t.Errorf("added destination %+v", h)
	}
	// Named in YAML: the name is kept.
	p2, err := LoadProxy(write(t, "forwardHttpDestinations:\n  - name: mine\n    forwardUrl: http://127.0.0.1:8080/datafeed\n"))
	if err != nil || p2.ForwardHTTPDestinations[0].Name != "mine" {
		t.Errorf("named destination: %+v, %v", p2.ForwardHTTPDestinations, err)
	}
	p3, err := LoadProxy(write(t, "forwardHttpDestinations:\n  - forwardUrl: http://127.0.0.1:8080/datafeed\n"))
	if err != nil || p3.ForwardHTTPDestinations[0].Name != "127.0.0.1_8080" {
		t.Errorf("unnamed destination from YAML: %+v, %v", p3.ForwardHTTPDestinations, err)
	}
}

// TestLoadProxyMaxRetryAgeZero: an explicit maxRetryAge of 0 means no
// retries (the reference system's meaning) and is kept, with the queue's
// other settings at their defaults; a queue without it, and a destination
// without a queue, keep the 7-day default. Other explicit zeros are kept
// too, so that validation names them instead of a default replacing them.
func TestLoadProxyMaxRetryAgeZero(t *testing.T) {
	p, err := LoadProxy(write(t, `
forwardHttpDestinations:
  - name: zero
    forwardUrl: http://127.0.0.1:8080/datafeed
    queue:
      maxRetryAge: 0
  - name: iso-zero
    forwardUrl: http://127.0.0.1:8081/datafeed
    queue:
      maxRetryAge: PT0S
      forwardThreadCount: 2
  - name: unset
    forwardUrl: http://127.0.0.1:8082/datafeed
    queue:
      forwardThreadCount: 2
  - name: no-queue
    forwardUrl: http://127.0.0.1:8083/datafeed
forwardFileDestinations:
  - path: /x
    queue:
      maxRetryAge: 0s
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ValidateProxy(); err != nil {
		t.Fatalf("ValidateProxy: %v", err)
	}
	noRetries := DefaultQueue()
	noRetries.MaxRetryAge = 0
	threads := DefaultQueue()
	threads.ForwardThreadCount = 2
	isoZero := threads
	isoZero.MaxRetryAge = 0
	for i, want := range []Queue{noRetries, isoZero, threads, DefaultQueue()} {
		if got := p.ForwardHTTPDestinations[i].Queue; got != want {
			t.Errorf("%s: queue %+v, want %+v", p.ForwardHTTPDestinations[i].Name, got, want)
		}
	}
	if got := p.ForwardFileDestinations[0].Queue; got != noRetries {
		t.Errorf("file destination: queue %+v, want %+v", got, noRetries)
	}
	if DefaultQueue().MaxRetryAge != Duration(7*24*time.Hour) {
		t.Errorf("default maxRetryAge %s, want 168h", DefaultQueue().MaxRetryAge)
	}

	p, err = LoadProxy(write(t, "forwardHttpDestinations:\n  - forwardUrl: http://h/datafeed\n    queue:\n      forwardThreadCount: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ValidateProxy(); err == nil || !strings.Contains(err.Error(), "forwardThreadCount") {
		t.Errorf("explicit forwardThreadCount 0: %v; want it refused, not replaced by the default", err)
	}

	// A queue of explicit zeros only is taken as given too (it is not "no
	// queue"), and refused.
	p, err = LoadProxy(write(t, `forwardHttpDestinations:
  - forwardUrl: http://h/datafeed
    queue: {forwardThreadCount: 0, retryDelay: 0, retryDelayGrowthFactor: 0, maxRetryDelay: 0, maxRetryAge: 0, livenessCheckInterval: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ValidateProxy(); err == nil || !strings.Contains(err.Error(), "forwardThreadCount") {
		t.Errorf("a queue of zeros: %v; want it refused, not replaced by the defaults", err)
	}
}
