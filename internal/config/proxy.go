package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/weirhq/weir/internal/feed"
)

// Proxy is the whole configuration of `weir proxy`: everything `weir serve`
// takes that applies to a proxy (listen, data, db, log, receive, tls,
// security), plus the proxy's own settings, named as in the reference
// system's proxy where they apply.
type Proxy struct {
	Config                  `yaml:",inline"`
	ProxyID                 string            `yaml:"proxyId"` // empty: generated once and kept in <data>/proxy-id.txt
	Aggregator              Aggregator        `yaml:"aggregator"`
	ForwardHTTPDestinations []HTTPDestination `yaml:"forwardHttpDestinations"`
	ForwardFileDestinations []FileDestination `yaml:"forwardFileDestinations"`
	FeedStatus              FeedStatusCheck   `yaml:"feedStatus"`
	Repository              Repository        `yaml:"repository"`
	LogStream               LogStream         `yaml:"logStream"`
}

// Aggregator configures how received items are gathered into aggregates
// before they are forwarded.
type Aggregator struct {
	Enabled                 bool     `yaml:"enabled"`
	MaxItemsPerAggregate    int      `yaml:"maxItemsPerAggregate"`    // parts (zip entry groups) per aggregate
	MaxUncompressedByteSize ByteSize `yaml:"maxUncompressedByteSize"` // uncompressed data bytes per aggregate
	AggregationFrequency    Duration `yaml:"aggregationFrequency"`    // an aggregate older than this is closed by a timer
}

// Queue configures forwarding to one destination: workers, retries and
// the liveness check.
type Queue struct {
	ForwardThreadCount     int      `yaml:"forwardThreadCount"`     // aggregates sent at once
	RetryDelay             Duration `yaml:"retryDelay"`             // wait after the first failure
	RetryDelayGrowthFactor float64  `yaml:"retryDelayGrowthFactor"` // each further failure multiplies the wait (1: constant)
	MaxRetryDelay          Duration `yaml:"maxRetryDelay"`          // the wait never grows beyond this
	MaxRetryAge            Duration `yaml:"maxRetryAge"`            // failing for longer than this: to the failure area (0: no retries)
	LivenessCheckInterval  Duration `yaml:"livenessCheckInterval"`  // how often a destination's liveness is checked
}

// UnmarshalYAML decodes a queue over the defaults, so that a key left out
// keeps its default while a key given is taken as given, zero included:
// maxRetryAge: 0 means no retries, as in the reference system, not the
// default. It is the decoder's callback form because that decodes with
// the file's decoder, which keeps unknown keys errors (yaml.Node.Decode
// would not).
func (q *Queue) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Queue // without this method, so that decoding does not recurse
	v := plain(DefaultQueue())
	if err := unmarshal(&v); err != nil {
		return err
	}
	*q = Queue(v)
	return nil
}

// HTTPDestination is a downstream /datafeed (weir serve, another proxy, or
// the reference system).
type HTTPDestination struct {
	Name       string `yaml:"name"`       // unique; it names the destination's queue: do not change it while items are queued
	ForwardURL string `yaml:"forwardUrl"` // e.g. https://weir.example.com/datafeed
	Enabled    *bool  `yaml:"enabled"`    // default true
	// Instant forwards each post during its request and relays the
	// downstream's answer; nothing is stored. Only as the one destination.
	Instant bool `yaml:"instant"`
	// Credentials for the downstream: an API key (or OIDC token) sent as
	// a bearer token, or a data feed key with its owner.
	APIKey           string    `yaml:"apiKey"`
	APIKeyFile       string    `yaml:"apiKeyFile"`
	DataFeedKey      string    `yaml:"dataFeedKey"`
	DataFeedKeyFile  string    `yaml:"dataFeedKeyFile"`
	DataFeedKeyOwner string    `yaml:"dataFeedKeyOwner"` // value of the owner header (receive.dataFeedOwnerMetaKey downstream)
	DataFeedOwnerKey string    `yaml:"dataFeedOwnerKey"` // the owner header's name; default AccountId
	TLS              ClientTLS `yaml:"tls"`
	// ForwardHeadersAdditionalAllowSet adds attribute names sent as
	// headers; everything travels in the zip's meta entries anyway.
	ForwardHeadersAdditionalAllowSet []string `yaml:"forwardHeadersAdditionalAllowSet"`
	// CompressionLevel is the deflate level of the zip's entries: 1
	// (fastest, the default) to 9 (smallest); 0 stores them uncompressed,
	// for a fast link where the proxy's and the downstream's CPU cost
	// more than the bytes.
	CompressionLevel *int `yaml:"compressionLevel"`
	// ZipCompression chooses between S2 and the standard methods:
	// "auto" (the default) compresses entries with S2 (weir's own zip
	// method, several times cheaper in CPU than deflate on both sides)
	// when the downstream's answers say it reads them, as weir's do, and
	// as compressionLevel says otherwise; "standard" always uses
	// compressionLevel.
	ZipCompression   string   `yaml:"zipCompression"`
	Timeout          Duration `yaml:"timeout"`          // one forward, start to end
	LivenessCheckURL string   `yaml:"livenessCheckUrl"` // GET; live when it answers 200. Empty: no check
	Queue            Queue    `yaml:"queue"`
}

// ClientTLS configures the proxy as a TLS client of a downstream.
type ClientTLS struct {
	CAFile   string `yaml:"caFile"`   // PEM CAs that sign the downstream's certificate; empty: the system's
	CertFile string `yaml:"certFile"` // client certificate (mutual TLS)
	KeyFile  string `yaml:"keyFile"`  // its key; must not be readable by others
}

// FileDestination writes each aggregate into a directory, for another
// process (or an offline transfer) to pick up.
type FileDestination struct {
	Name              string `yaml:"name"`
	Path              string `yaml:"path"`
	SubPathTemplate   string `yaml:"subPathTemplate"` // ${feed}, ${type}, ${year}, ${month}, ${day}, ${hour}, ${minute}, ${second}
	Enabled           *bool  `yaml:"enabled"`
	LivenessCheckPath string `yaml:"livenessCheckPath"` // live while this path exists; empty: no check
	Queue             Queue  `yaml:"queue"`
}

// FeedStatusCheck configures asking the downstream whether a feed receives
// (receive.receiptCheckMode FEED_STATUS or FEED_EXISTENCE on a proxy).
type FeedStatusCheck struct {
	URL        string   `yaml:"url"`        // empty: derived from the first HTTP destination
	APIKey     string   `yaml:"apiKey"`     // empty: the first HTTP destination's API key
	APIKeyFile string   `yaml:"apiKeyFile"` //
	CacheTTL   Duration `yaml:"cacheTTL"`   // an answer is used for this long, then refreshed in the background
	MaxEntries int      `yaml:"maxEntries"` // cached answers
	Timeout    Duration `yaml:"timeout"`    // one question to the downstream
	// Fallback applies when the downstream cannot answer: RECEIVE (store
	// and forward; the downstream decides later), REJECT or DROP.
	Fallback feed.Status `yaml:"fallback"`
}

// Repository bounds the proxy's local repository.
type Repository struct {
	// MaxSize is the most data (stored bytes) waiting to be forwarded;
	// beyond it posts get 503 with Retry-After and /readyz fails. 0: only
	// the disk bounds it.
	MaxSize ByteSize `yaml:"maxSize"`
	// MinFreeSpace is the free space the data volume keeps; below it, as
	// above. It keeps room for forwarding to finish what is queued.
	MinFreeSpace ByteSize `yaml:"minFreeSpace"`
}

// LogStream configures the receive and send log lines.
type LogStream struct {
	MetaKeys []string `yaml:"metaKeys"` // attributes each line carries
}

// DefaultQueue is a destination's queue settings when none are given.
// weir retries sooner than the reference system (10 minutes, constant):
// a proxy that waits 10 minutes after a network blip delays everything
// behind it, while growth keeps a long outage cheap.
func DefaultQueue() Queue {
	return Queue{
		ForwardThreadCount:     5,
		RetryDelay:             Duration(10 * time.Second),
		RetryDelayGrowthFactor: 2,
		MaxRetryDelay:          Duration(10 * time.Minute),
		MaxRetryAge:            Duration(7 * 24 * time.Hour),
		LivenessCheckInterval:  Duration(time.Minute),
	}
}

// DefaultProxy returns the configuration `weir proxy` runs with when
// nothing is set (it still needs a destination).
func DefaultProxy() Proxy {
	c := Default()
	c.Listen = "127.0.0.1:8090"
	c.Data = "./weir-proxy-data"
	return Proxy{
		Config: c,
		Aggregator: Aggregator{
			Enabled:                 true,
			MaxItemsPerAggregate:    1000,
			MaxUncompressedByteSize: 1 << 30,
			AggregationFrequency:    Duration(10 * time.Minute),
		},
		FeedStatus: FeedStatusCheck{
			CacheTTL:   Duration(time.Minute),
			MaxEntries: 1000,
			Timeout:    Duration(10 * time.Second),
			Fallback:   feed.Receive,
		},
		Repository: Repository{MinFreeSpace: 256 << 20},
		LogStream: LogStream{MetaKeys: []string{"GUID", "ReceiptId", "Feed", "System", "Environment",
			"RemoteHost", "RemoteAddress", "RemoteDN", "RemoteCertExpiry", "DataReceiptRule"}},
	}
}

// LoadProxy reads a YAML file over the proxy defaults; unknown keys are
// errors, and so are secrets in a file that every user can read.
func LoadProxy(path string) (Proxy, error) {
	cfg := DefaultProxy()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	if err := decodeStrict(b, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if err := checkInlineSecrets(path, cfg.inlineSecrets()); err != nil {
		return cfg, err
	}
	cfg.fillQueues()
	return cfg, nil
}

// ZipS2 reports whether the destination may be sent S2 entries when the
// downstream reads them (zipCompression is auto or not set).
func (h HTTPDestination) ZipS2() bool {
	return h.ZipCompression == "" || strings.EqualFold(h.ZipCompression, ZipCompressionAuto)
}

// The values of a destination's zipCompression.
const (
	ZipCompressionAuto     = "auto"
	ZipCompressionStandard = "standard"
)

// ZipLevel is the destination's compressionLevel, 1 when it is not set.
func (h HTTPDestination) ZipLevel() int {
	if h.CompressionLevel == nil {
		return 1
	}
	return *h.CompressionLevel
}

// AddForward adds an HTTP destination with default settings (--forward).
func (p *Proxy) AddForward(u string) {
	p.ForwardHTTPDestinations = append(p.ForwardHTTPDestinations, HTTPDestination{ForwardURL: u, Queue: DefaultQueue()})
	p.fillQueues()
}

// UnmarshalYAML decodes a destination over one with the default queue, so
// that a destination without a queue key has the defaults while a queue
// given, even one of explicit zeros, is taken as given (and validated).
func (h *HTTPDestination) UnmarshalYAML(unmarshal func(any) error) error {
	type plain HTTPDestination // without this method, so that decoding does not recurse
	v := plain{Queue: DefaultQueue()}
	if err := unmarshal(&v); err != nil {
		return err
	}
	*h = HTTPDestination(v)
	return nil
}

// UnmarshalYAML: as HTTPDestination's.
func (f *FileDestination) UnmarshalYAML(unmarshal func(any) error) error {
	type plain FileDestination
	v := plain{Queue: DefaultQueue()}
	if err := unmarshal(&v); err != nil {
		return err
	}
	*f = FileDestination(v)
	return nil
}

// fillQueues gives unnamed destinations a name and the HTTP ones their
// default timeout and owner header. Queues have their defaults already
// (from UnmarshalYAML, or AddForward).
func (p *Proxy) fillQueues() {
	for i := range p.ForwardHTTPDestinations {
		h := &p.ForwardHTTPDestinations[i]
		if h.Name == "" {
			h.Name = destinationName(h.ForwardURL, i)
		}
		if h.Timeout == 0 {
			h.Timeout = Duration(3 * time.Minute)
		}
		if h.DataFeedOwnerKey == "" {
			h.DataFeedOwnerKey = "AccountId"
		}
	}
	for i := range p.ForwardFileDestinations {
		f := &p.ForwardFileDestinations[i]
		if f.Name == "" {
			f.Name = fmt.Sprintf("file-%d", i+1)
		}
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// destinationName names an unnamed HTTP destination after its host and
// port, so that the name stays the same across restarts.
func destinationName(raw string, i int) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Sprintf("http-%d", i+1)
	}
	return unsafeName.ReplaceAllString(u.Host, "_")
}

// IsEnabled reports whether an optional enabled flag is on (default true).
func IsEnabled(b *bool) bool { return b == nil || *b }

// ValidateProxy checks the whole proxy configuration and reports every
// problem at once.
func (p *Proxy) ValidateProxy() error {
	errs := []error{p.Validate()}
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.Node != "" {
		add("node: weir proxy takes no node name (its receipt ids name its proxyId); remove it")
	}
	if p.ProxyID != "" && !validNodeName(p.ProxyID) {
		add("proxyId: %q may contain only letters, digits and '-'", p.ProxyID)
	}
	a := &p.Aggregator
	if a.MaxItemsPerAggregate < 1 {
		add("aggregator.maxItemsPerAggregate: must be at least 1")
	}
	if a.MaxUncompressedByteSize < 1 {
		add("aggregator.maxUncompressedByteSize: must be positive")
	}
	if a.AggregationFrequency <= 0 {
		add("aggregator.aggregationFrequency: must be positive")
	}
	names := map[string]bool{}
	enabled, instant := 0, 0
	checkQueue := func(prefix string, q Queue) {
		if q.ForwardThreadCount < 1 || q.ForwardThreadCount > 256 {
			add("%s.queue.forwardThreadCount: must be between 1 and 256", prefix)
		}
		if q.RetryDelay <= 0 || q.MaxRetryDelay < q.RetryDelay {
			add("%s.queue: retryDelay must be positive and maxRetryDelay at least retryDelay", prefix)
		}
		if q.RetryDelayGrowthFactor < 1 {
			add("%s.queue.retryDelayGrowthFactor: must be at least 1", prefix)
		}
		if q.MaxRetryAge < 0 {
			add("%s.queue.maxRetryAge: must not be negative", prefix)
		}
		if q.LivenessCheckInterval <= 0 {
			add("%s.queue.livenessCheckInterval: must be positive", prefix)
		}
	}
	name := func(prefix, n string) {
		if names[n] {
			add("%s.name: %q is used by another destination; names must be unique", prefix, n)
		}
		names[n] = true
	}
	for i, h := range p.ForwardHTTPDestinations {
		prefix := fmt.Sprintf("forwardHttpDestinations[%d]", i)
		name(prefix, h.Name)
		u, err := url.Parse(h.ForwardURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("%s.forwardUrl: %q is not an http:// or https:// URL", prefix, h.ForwardURL)
		}
		if l := h.CompressionLevel; l != nil && (*l < 0 || *l > 9) {
			add("%s.compressionLevel: %d is not between 0 (stored) and 9", prefix, *l)
		}
		if z := h.ZipCompression; z != "" && !strings.EqualFold(z, ZipCompressionAuto) && !strings.EqualFold(z, ZipCompressionStandard) {
			add("%s.zipCompression: %q is not auto (S2 when the downstream reads it) or standard (compressionLevel always)", prefix, z)
		}
		if h.LivenessCheckURL != "" {
			if u, err := url.Parse(h.LivenessCheckURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
				add("%s.livenessCheckUrl: %q is not an http:// or https:// URL", prefix, h.LivenessCheckURL)
			}
		}
		creds := 0
		for _, s := range []string{h.APIKey, h.APIKeyFile, h.DataFeedKey, h.DataFeedKeyFile} {
			if s != "" {
				creds++
			}
		}
		if creds > 1 {
			add("%s: set only one of apiKey, apiKeyFile, dataFeedKey, dataFeedKeyFile", prefix)
		}
		if (h.DataFeedKey != "" || h.DataFeedKeyFile != "") && h.DataFeedKeyOwner == "" {
			add("%s.dataFeedKeyOwner: a data feed key needs its owner (the account it was made for)", prefix)
		}
		if (h.TLS.CertFile == "") != (h.TLS.KeyFile == "") {
			add("%s.tls: certFile and keyFile must be set together", prefix)
		}
		if h.Timeout <= 0 {
			add("%s.timeout: must be positive", prefix)
		}
		checkQueue(prefix, h.Queue)
		if IsEnabled(h.Enabled) {
			enabled++
			if h.Instant {
				instant++
				// An instant destination relays each post's body as it
				// came: it writes no zip.
				if h.ZipCompression != "" {
					add("%s.zipCompression: an instant destination writes no zips (it relays each post as it came)", prefix)
				}
			}
		}
	}
	for i, f := range p.ForwardFileDestinations {
		prefix := fmt.Sprintf("forwardFileDestinations[%d]", i)
		name(prefix, f.Name)
		if f.Path == "" {
			add("%s.path: must be set", prefix)
		}
		if strings.Contains(f.SubPathTemplate, "..") || strings.HasPrefix(f.SubPathTemplate, "/") {
			add("%s.subPathTemplate: %q must stay inside path (no '..', not absolute)", prefix, f.SubPathTemplate)
		}
		checkQueue(prefix, f.Queue)
		if IsEnabled(f.Enabled) {
			enabled++
		}
	}
	if enabled == 0 {
		add("a proxy needs at least one enabled destination: --forward URL, forwardHttpDestinations or forwardFileDestinations")
	}
	if instant > 0 && enabled > 1 {
		add("forwardHttpDestinations: an instant destination must be the only enabled destination")
	}
	switch p.FeedStatus.Fallback {
	case feed.Receive, feed.Reject, feed.Drop:
	default:
		add("feedStatus.fallback: %q is not one of RECEIVE, REJECT, DROP", p.FeedStatus.Fallback)
	}
	if p.FeedStatus.CacheTTL <= 0 || p.FeedStatus.Timeout <= 0 || p.FeedStatus.MaxEntries < 1 {
		add("feedStatus: cacheTTL and timeout must be positive and maxEntries at least 1")
	}
	if p.FeedStatus.URL != "" {
		if u, err := url.Parse(p.FeedStatus.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			add("feedStatus.url: %q is not an http:// or https:// URL", p.FeedStatus.URL)
		}
	}
	switch p.Receive.ReceiptCheckMode {
	case FeedStatus, FeedExistence:
		if p.FeedStatusURL() == "" {
			add("receive.receiptCheckMode %s asks the downstream, but there is no HTTP destination to ask: "+
				"set feedStatus.url, or receive.receiptCheckMode: RECEIVE_ALL", p.Receive.ReceiptCheckMode)
		}
	case ReceiptPolicy:
		// The rules live in the main service's database. With FEED_STATUS
		// the proxy asks the main service about each feed and sender, and
		// the main service answers by its rules.
		add("receive.receiptCheckMode RECEIPT_POLICY: a proxy has no receipt rules of its own; " +
			"use FEED_STATUS, and the main service answers the proxy's questions by its rules")
	}
	if p.Receive.FeedNameGenerationAutoCreate {
		add("receive.feedNameGenerationAutoCreate: a proxy cannot create feeds (the downstream owns them)")
	}
	if p.Repository.MaxSize < 0 || p.Repository.MinFreeSpace < 0 {
		add("repository: maxSize and minFreeSpace must not be negative")
	}
	return errors.Join(errs...)
}

// FeedStatusURL is where feed status is asked: the configured URL, or the
// first enabled HTTP destination's base with the reference system's path.
func (p *Proxy) FeedStatusURL() string {
	if p.FeedStatus.URL != "" {
		return p.FeedStatus.URL
	}
	for _, h := range p.ForwardHTTPDestinations {
		if !IsEnabled(h.Enabled) {
			continue
		}
		u, err := url.Parse(h.ForwardURL)
		if err != nil || u.Host == "" {
			return ""
		}
		path := u.Path
		for _, suffix := range []string{"/stroom/noauth/datafeed", "/stroom/datafeed", "/datafeed"} {
			if i := strings.LastIndex(path, suffix); i >= 0 {
				path = path[:i]
				break
			}
		}
		u.Path = strings.TrimSuffix(path, "/") + "/api/feedStatus/v2/getFeedStatus"
		u.RawQuery = ""
		return u.String()
	}
	return ""
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

func validNodeName(s string) bool { return nodeName.MatchString(s) }
