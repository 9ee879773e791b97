// Package config holds weir's one typed configuration: defaults in code,
// a strict YAML file on top (unknown keys are errors), flags on top of that.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/feed"
)

// Config is the whole configuration of a weir process.
type Config struct {
	Listen   string   `yaml:"listen"`
	BasePath string   `yaml:"basePath"` // deployment base path before /datafeed, /api and the health endpoints
	Data     string   `yaml:"data"`
	DB       string   `yaml:"db"`
	Node     string   `yaml:"node"`
	Log      Log      `yaml:"log"`
	Receive  Receive  `yaml:"receive"`
	Store    Store    `yaml:"store"`
	TLS      TLS      `yaml:"tls"`
	Security Security `yaml:"security"`
	API      API      `yaml:"api"`
	// NodeLockCheckInterval is how often a server on PostgreSQL checks
	// that it still holds its node's lock (and, while it has lost it,
	// tries to take it again); 0: meta.DefaultNodeLockCheckInterval. Not
	// read from the file: tests shorten it.
	NodeLockCheckInterval time.Duration `yaml:"-"`
	// NodeLockStartWait is how long a starting server waits for its node's
	// lock held by another session; 0: meta.DefaultNodeLockStartWait. Not
	// read from the file: tests shorten it.
	NodeLockStartWait time.Duration `yaml:"-"`
	// NodeLockReleaseWait is how long a lock just lost and held by another
	// session is tried again before that session is blamed; 0: a second
	// (meta.NodeLockOptions.ReleaseWait). Not read from the file: tests
	// lengthen it.
	NodeLockReleaseWait time.Duration `yaml:"-"`
}

// API configures the REST API.
type API struct {
	MaxConcurrentRequests int `yaml:"maxConcurrentRequests"` // more at once get 503 with Retry-After
	// MaxConcurrentDownloads bounds the stream and export downloads being
	// sent; a download gives its request slot back when it starts sending,
	// so that slow readers cannot hold the slots every other call needs.
	MaxConcurrentDownloads int      `yaml:"maxConcurrentDownloads"`
	RetryAfter             Duration `yaml:"retryAfter"`
	// ExportMinFreeSpace is the free space an export leaves on the data
	// volume: an export that would go below it fails, so that a large
	// export cannot fill the disk that posts are stored on.
	ExportMinFreeSpace ByteSize `yaml:"exportMinFreeSpace"`
	// ExportRetention is how long a finished export (its operation and
	// zip) is kept; 0 keeps them until they are deleted.
	ExportRetention Duration `yaml:"exportRetention"`
	// MaxOperationsPerUser bounds the exports and imports one user may
	// have PENDING or RUNNING: one user's queue must not hold up everyone
	// else's operations, nor fill the database and the disk (staged
	// uploads). 0: no bound.
	MaxOperationsPerUser int `yaml:"maxOperationsPerUser"`
}

// TLS makes weir serve HTTPS, optionally with client certificates (mutual TLS).
type TLS struct {
	CertFile     string `yaml:"certFile"`     // PEM certificate chain; empty: plain HTTP
	KeyFile      string `yaml:"keyFile"`      // PEM private key; must not be readable by others
	ClientCAFile string `yaml:"clientCAFile"` // PEM CAs that sign client certificates
	ClientAuth   string `yaml:"clientAuth"`   // none, request (verify if sent) or require
}

// Security configures API callers and token verification.
type Security struct {
	OIDC    OIDC    `yaml:"oidc"`
	APIKeys APIKeys `yaml:"apiKeys"`
}

// OIDC configures verification of OpenID Connect bearer tokens.
type OIDC struct {
	Issuer              string   `yaml:"issuer"`              // issuer URL; discovery and JWKS come from it; empty: no OIDC
	Audiences           []string `yaml:"audiences"`           // accepted "aud" values (client ids)
	UniqueIdentityClaim string   `yaml:"uniqueIdentityClaim"` // becomes UploadUserId
	UsernameClaim       string   `yaml:"usernameClaim"`       // becomes UploadUsername
}

// APIKeys configures weir's own API keys.
type APIKeys struct {
	MaxExpiry Duration `yaml:"maxExpiry"` // longest lifetime a key may be given
}

// Log configures the process log.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // json or text
}

// CheckMode is the receipt check mode, named as in the reference system.
type CheckMode string

const (
	FeedStatus    CheckMode = "FEED_STATUS"
	FeedExistence CheckMode = "FEED_EXISTENCE"
	ReceiveAll    CheckMode = "RECEIVE_ALL"
	DropAll       CheckMode = "DROP_ALL"
	RejectAll     CheckMode = "REJECT_ALL"
	// ReceiptPolicy decides by the data receipt rules (package
	// receiptrule), then requires the feed to exist.
	ReceiptPolicy CheckMode = "RECEIPT_POLICY"
)

// CompressedBodyAction says what to do with a body declared uncompressed that
// starts with gzip or zip magic bytes (the spec's silent failure).
type CompressedBodyAction string

const (
	CompressedStore      CompressedBodyAction = "store"      // store as sent, flag the stream, count, warn
	CompressedReject     CompressedBodyAction = "reject"     // 406 with a clear Service-Error
	CompressedDecompress CompressedBodyAction = "decompress" // treat it as declared GZIP / ZIP
)

// Receive holds the receipt settings. Names follow the reference system's
// ReceiveDataConfig where they apply.
type Receive struct {
	AuthenticationRequired             bool                 `yaml:"authenticationRequired"`
	ReceiptCheckMode                   CheckMode            `yaml:"receiptCheckMode"`
	MaxRequestSize                     ByteSize             `yaml:"maxRequestSize"`
	MetaTypes                          []string             `yaml:"metaTypes"`
	FeedNameGenerationEnabled          bool                 `yaml:"feedNameGenerationEnabled"`
	FeedNameTemplate                   string               `yaml:"feedNameTemplate"`
	FeedNameGenerationMandatoryHeaders []string             `yaml:"feedNameGenerationMandatoryHeaders"`
	FeedNameGenerationAutoCreate       bool                 `yaml:"feedNameGenerationAutoCreate"`
	FeedNamePattern                    string               `yaml:"feedNamePattern"`
	CompressedBodyWithoutHeader        CompressedBodyAction `yaml:"compressedBodyWithoutHeader"`
	MaxConcurrentReceipts              int                  `yaml:"maxConcurrentReceipts"`
	RetryAfter                         Duration             `yaml:"retryAfter"`
	ReadHeaderTimeout                  Duration             `yaml:"readHeaderTimeout"`
	MaxHeaderBytes                     ByteSize             `yaml:"maxHeaderBytes"`
	BodyIdleTimeout                    Duration             `yaml:"bodyIdleTimeout"`
	MaxZipEntries                      int                  `yaml:"maxZipEntries"`
	MaxMetaEntrySize                   ByteSize             `yaml:"maxMetaEntrySize"`
	EnabledAuthenticationTypes         []string             `yaml:"enabledAuthenticationTypes"`
	DataFeedIdentitiesDir              string               `yaml:"dataFeedIdentitiesDir"` // relative to the data directory unless absolute
	DataFeedOwnerMetaKey               string               `yaml:"dataFeedOwnerMetaKey"`
	DataFeedKeyCacheTTL                Duration             `yaml:"dataFeedKeyCacheTTL"`
	// FeedCacheTTL is how long the receive path trusts a feed it looked up
	// (status, default type) before asking the database again. Changes made
	// through this server apply at once; changes by another process (the
	// admin command, another node) within this time. 0: ask every post.
	FeedCacheTTL                Duration `yaml:"feedCacheTTL"`
	X509CertificateDnHeader     string   `yaml:"x509CertificateDnHeader"`
	X509CertificateDnFormat     string   `yaml:"x509CertificateDnFormat"`
	AllowedCertificateProviders []string `yaml:"allowedCertificateProviders"`
	// TrustedForwarders are the senders whose zip parts keep the
	// identity, certificate and data feed key attributes their meta
	// entries carry: proxies, which record the sender they received each
	// post from. Anyone else's parts get this hop's. Each is
	// TYPE:UploadUserId, the type being how the sender authenticated (so
	// that a certificate whose CN is an API key user's name is not that
	// user): TOKEN:proxy-1 (an API key's user, or an OIDC token's),
	// DATA_FEED_KEY:data-feed-identity-2000, CERTIFICATE:<CN>,
	// CERTIFICATE_IDENTITY:<subject>.
	TrustedForwarders []string `yaml:"trustedForwarders"`
	// ForwardedPostsKept is how long a trusted forwarder's post is
	// remembered by its GUID, so that a resend gets the first copy's
	// receipt id instead of being stored again. It must outlast the
	// forwarders' retries (a weir proxy's queue.maxRetryAge, 7 days by
	// default); each remembered post costs a row.
	ForwardedPostsKept Duration `yaml:"forwardedPostsKept"`
	// DatabaseTimeout is how long a post waits for the metadata database,
	// for each look-up (feed, credentials, resends) and for the commit of
	// its streams: past it the post is refused with 503 and Retry-After,
	// as when the database refuses connections, instead of waiting as
	// long as TCP does for a database cut off without a reset (minutes).
	DatabaseTimeout Duration `yaml:"databaseTimeout"`
}

// Store configures the stream store.
type Store struct {
	BlockSize ByteSize `yaml:"blockSize"`
	// PackMaxSize is the largest stored stream (compressed) that is kept in
	// memory and written with the other small posts of its group commit
	// into one shared pack file (one fsync for the batch); bigger streams
	// get a file of their own. 0: every stream gets its own file.
	PackMaxSize ByteSize `yaml:"packMaxSize"`
	// Compression is how stored blocks are compressed: s2 (fast, the
	// default), zstd (smaller, about four times the CPU) or none. Blocks
	// of every kind stay readable whatever it is set to later.
	Compression string `yaml:"compression"`
	// DeletePurgeAge is how long a stream deleted through the API (marked
	// DELETED) stays restorable: past it, the main service removes its
	// bytes and row for good (a packed stream's by compaction of its
	// pack, or with the pack, when all of its streams go), as the
	// reference system's "Data Delete" job does streams DELETED longer
	// than its deletePurgeAge. 0 keeps deleted streams for ever.
	DeletePurgeAge Duration `yaml:"deletePurgeAge"`
	// Commit is when a post whose streams are all packed is answered:
	// "log" (the default) once its record, its data and rows, is durable
	// in the store's log (its pack), its rows going into the metadata
	// database a few milliseconds later in a transaction shared with the
	// posts around it (an API call on the node waits for the rows of the
	// posts it answered before the call); "transaction" only once its
	// rows' transaction committed, which every post then waits for. Posts
	// with a stream too big for a pack, and those a trusted forwarder
	// sends with a GUID, always wait for their transaction.
	Commit string `yaml:"commit"`
	// PurgeInterval is how often the purge of deleted streams runs (and
	// at start); 0: hourly. Not read from the file: tests shorten it.
	PurgeInterval time.Duration `yaml:"-"`
}

// Values of store.commit.
const (
	CommitLog         = "log"
	CommitTransaction = "transaction"
)

// DefaultMetaTypes are the stream types a post may name, as in the reference system.
var defaultMetaTypes = []string{
	"Context", "Detections", "Error", "Events", "Meta Data", "Raw Events",
	"Raw Reference", "Records", "Reference", "Test Events", "Test Reference",
}

// Default returns the configuration weir runs with when nothing is set.
func Default() Config {
	return Config{
		Listen: "127.0.0.1:8080",
		Data:   "./weir-data",
		Log:    Log{Level: "info", Format: "json"},
		Receive: Receive{
			AuthenticationRequired:             true,
			ReceiptCheckMode:                   FeedStatus,
			MaxRequestSize:                     10 << 30,
			MetaTypes:                          append([]string(nil), defaultMetaTypes...),
			FeedNameTemplate:                   "${accountid}-${component}-${format}-${schema}",
			FeedNameGenerationMandatoryHeaders: []string{"AccountId", "Component", "Format", "Schema"},
			FeedNamePattern:                    feed.DefaultNamePattern,
			CompressedBodyWithoutHeader:        CompressedStore,
			MaxConcurrentReceipts:              64,
			RetryAfter:                         Duration(5 * time.Second),
			ReadHeaderTimeout:                  Duration(10 * time.Second),
			MaxHeaderBytes:                     64 << 10,
			BodyIdleTimeout:                    Duration(60 * time.Second),
			MaxZipEntries:                      10000,
			MaxMetaEntrySize:                   1 << 20,
			EnabledAuthenticationTypes:         []string{"DATA_FEED_KEY", "TOKEN", "CERTIFICATE"},
			DataFeedIdentitiesDir:              "data_feed_identities",
			DataFeedOwnerMetaKey:               "AccountId",
			DataFeedKeyCacheTTL:                Duration(5 * time.Minute),
			FeedCacheTTL:                       Duration(time.Second),
			ForwardedPostsKept:                 Duration(30 * 24 * time.Hour),
			DatabaseTimeout:                    Duration(30 * time.Second),
			X509CertificateDnHeader:            "X-SSL-CLIENT-S-DN",
			X509CertificateDnFormat:            "LDAP",
		},
		Store: Store{BlockSize: 256 << 10, PackMaxSize: 256 << 10, Compression: "s2", Commit: CommitLog, DeletePurgeAge: Duration(7 * 24 * time.Hour)},
		TLS:   TLS{ClientAuth: "request"},
		API: API{MaxConcurrentRequests: 64, MaxConcurrentDownloads: 64, RetryAfter: Duration(time.Second), ExportMinFreeSpace: 1 << 30,
			ExportRetention: Duration(7 * 24 * time.Hour), MaxOperationsPerUser: 100},
		Security: Security{
			OIDC:    OIDC{UniqueIdentityClaim: "sub", UsernameClaim: "preferred_username"},
			APIKeys: APIKeys{MaxExpiry: Duration(365 * 24 * time.Hour)},
		},
	}
}

// Load reads a YAML file over the defaults. Unknown keys are errors so that a
// misspelt setting never silently falls back to its default. A file that
// every user can read is refused when it holds a secret.
func Load(path string) (Config, error) {
	cfg := Default()
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
	return cfg, nil
}

func decodeStrict(b []byte, cfg any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file is the defaults
		}
		return err
	}
	// Only the first document would be read: a second one, which could
	// hold any key, misspelt or not, would be ignored without a word.
	// An empty one (a trailing ---) is harmless.
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if empty := len(next.Content) == 0 || (len(next.Content) == 1 && next.Content[0].Tag == "!!null"); !empty {
			return fmt.Errorf("line %d: a second YAML document (after ---): the configuration is one document", next.Line)
		}
	}
}

// The bounds of receive.maxHeaderBytes.
const (
	minHeaderBytes = 4 << 10
	maxHeaderBytes = 1 << 20
)

// Validate checks the whole configuration and reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Listen == "" {
		add("listen: must be set (host:port)")
	} else if err := checkListen(c.Listen); err != nil {
		add("listen: %v", err)
	}
	if c.Node != "" && !validNodeName(c.Node) {
		add("node: %q may contain only letters, digits and '-' (it is part of every receipt id)", c.Node)
	}
	if c.BasePath != "" && (!strings.HasPrefix(c.BasePath, "/") || strings.HasSuffix(c.BasePath, "/") || strings.ContainsAny(c.BasePath, "?#{} ")) {
		add("basePath: %q must start with '/', not end with '/', and be a plain path (e.g. /weir)", c.BasePath)
	}
	if c.Data == "" {
		add("data: must be set (a directory)")
	}
	if c.DB != "" && !strings.HasPrefix(c.DB, "postgres://") && !strings.HasPrefix(c.DB, "postgresql://") {
		add("db: %q is neither empty (SQLite in the data directory) nor a postgres:// URL", c.DB)
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		add("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		add("log.format: %q is not one of json, text", c.Log.Format)
	}
	r := &c.Receive
	for _, t := range r.EnabledAuthenticationTypes {
		switch strings.ToUpper(t) {
		case "DATA_FEED_KEY", "TOKEN", "CERTIFICATE", "CERTIFICATE_IDENTITY":
		default:
			add("receive.enabledAuthenticationTypes: %q is not one of DATA_FEED_KEY, TOKEN, CERTIFICATE, CERTIFICATE_IDENTITY", t)
		}
	}
	if r.AuthenticationRequired && len(r.EnabledAuthenticationTypes) == 0 {
		add("receive.enabledAuthenticationTypes: must list at least one type when authenticationRequired is true")
	}
	if strings.TrimSpace(r.DataFeedOwnerMetaKey) == "" {
		add("receive.dataFeedOwnerMetaKey: must name a header")
	}
	for i, f := range r.TrustedForwarders {
		typ, subject, _ := strings.Cut(f, ":")
		if _, err := auth.ParseType(typ); err != nil || strings.TrimSpace(subject) == "" {
			add("receive.trustedForwarders[%d]: %q is not TYPE:UploadUserId, TYPE one of DATA_FEED_KEY, CERTIFICATE_IDENTITY, TOKEN, CERTIFICATE (e.g. TOKEN:proxy-1)", i, f)
		}
	}
	switch strings.ToUpper(r.X509CertificateDnFormat) {
	case "LDAP", "OPEN_SSL":
	default:
		add("receive.x509CertificateDnFormat: %q is not one of LDAP, OPEN_SSL", r.X509CertificateDnFormat)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		add("tls: certFile and keyFile must be set together")
	}
	switch c.TLS.ClientAuth {
	case "none", "request", "require":
	default:
		add("tls.clientAuth: %q is not one of none, request, require", c.TLS.ClientAuth)
	}
	if c.TLS.ClientAuth == "require" && c.TLS.ClientCAFile == "" {
		add("tls.clientAuth: require needs tls.clientCAFile")
	}
	if c.TLS.CertFile == "" && c.TLS.KeyFile == "" && (c.TLS.ClientCAFile != "" || c.TLS.ClientAuth == "require") {
		// Without a server certificate weir serves plain HTTP, where no
		// client certificate can be asked for: starting would accept
		// every connection that was meant to need one.
		add("tls.clientCAFile and tls.clientAuth need tls.certFile and tls.keyFile: without them weir serves plain HTTP and cannot ask for client certificates")
	}
	if c.API.MaxConcurrentRequests < 1 {
		add("api.maxConcurrentRequests: must be at least 1")
	}
	if c.API.MaxConcurrentDownloads < 1 {
		add("api.maxConcurrentDownloads: must be at least 1")
	}
	if c.API.ExportMinFreeSpace < 0 {
		add("api.exportMinFreeSpace: must not be negative")
	}
	if c.API.ExportRetention < 0 {
		add("api.exportRetention: must not be negative")
	}
	if c.API.MaxOperationsPerUser < 0 {
		add("api.maxOperationsPerUser: must not be negative")
	}
	if c.Security.APIKeys.MaxExpiry <= 0 {
		add("security.apiKeys.maxExpiry: must be positive")
	}
	switch r.ReceiptCheckMode {
	case FeedStatus, FeedExistence, ReceiptPolicy, ReceiveAll, DropAll, RejectAll:
	default:
		add("receive.receiptCheckMode: %q is not one of FEED_STATUS, FEED_EXISTENCE, RECEIPT_POLICY, RECEIVE_ALL, DROP_ALL, REJECT_ALL", r.ReceiptCheckMode)
	}
	if r.MaxRequestSize < 0 {
		add("receive.maxRequestSize: must not be negative")
	}
	// Retry-After is whole seconds: less than one would send none (or 0).
	if r.RetryAfter < Duration(time.Second) {
		add("receive.retryAfter: %v must be at least 1s (Retry-After is in whole seconds)", r.RetryAfter)
	}
	if c.API.RetryAfter < Duration(time.Second) {
		add("api.retryAfter: %v must be at least 1s (Retry-After is in whole seconds)", c.API.RetryAfter)
	}
	if r.DataFeedKeyCacheTTL < 0 {
		add("receive.dataFeedKeyCacheTTL: must not be negative (0 turns the cache off)")
	}
	if r.FeedCacheTTL < 0 {
		add("receive.feedCacheTTL: must not be negative (0 turns the cache off)")
	}
	if r.DatabaseTimeout < Duration(time.Second) || r.DatabaseTimeout > Duration(10*time.Minute) {
		add("receive.databaseTimeout: %v is not between 1s and 10m", r.DatabaseTimeout)
	}
	if r.ForwardedPostsKept < Duration(time.Hour) {
		add("receive.forwardedPostsKept: %v must be at least 1h (and should outlast the forwarders' retries: a weir proxy's queue.maxRetryAge is 7 days by default)", r.ForwardedPostsKept)
	}
	if len(r.MetaTypes) == 0 {
		add("receive.metaTypes: must list at least one stream type")
	}
	if _, err := regexp.Compile(r.FeedNamePattern); err != nil {
		add("receive.feedNamePattern: %v", err)
	}
	if r.FeedNameGenerationEnabled && strings.TrimSpace(r.FeedNameTemplate) == "" {
		add("receive.feedNameTemplate: must be set when feedNameGenerationEnabled is true")
	}
	switch r.CompressedBodyWithoutHeader {
	case CompressedStore, CompressedReject, CompressedDecompress:
	default:
		add("receive.compressedBodyWithoutHeader: %q is not one of store, reject, decompress", r.CompressedBodyWithoutHeader)
	}
	if r.MaxConcurrentReceipts < 1 {
		add("receive.maxConcurrentReceipts: must be at least 1")
	}
	if r.ReadHeaderTimeout <= 0 {
		add("receive.readHeaderTimeout: must be positive")
	}
	if r.BodyIdleTimeout <= 0 {
		add("receive.bodyIdleTimeout: must be positive")
	}
	// The server buffers up to twice this (receive.ServerMaxHeaderBytes)
	// of each connection's request line and headers before a handler sees
	// them. The upper bound is Go's own default for
	// http.Server.MaxHeaderBytes (1MiB), 32 times the reference system's
	// configured 32KiB (Jetty's default is 8KiB): no sender needs more.
	if r.MaxHeaderBytes < minHeaderBytes || r.MaxHeaderBytes > maxHeaderBytes {
		add("receive.maxHeaderBytes: %v is not between %v and %v", r.MaxHeaderBytes, ByteSize(minHeaderBytes), ByteSize(maxHeaderBytes))
	}
	if r.MaxZipEntries < 1 {
		add("receive.maxZipEntries: must be at least 1")
	}
	if r.MaxMetaEntrySize < 1<<10 {
		add("receive.maxMetaEntrySize: must be at least 1KiB")
	}
	if c.Store.BlockSize < 4<<10 || c.Store.BlockSize > 16<<20 {
		add("store.blockSize: must be between 4KiB and 16MiB")
	}
	if c.Store.PackMaxSize < 0 || c.Store.PackMaxSize > 16<<20 {
		add("store.packMaxSize: must be between 0 (off) and 16MiB")
	}
	if c.Store.DeletePurgeAge < 0 {
		add("store.deletePurgeAge: %v must not be negative (0 keeps deleted streams for ever)", c.Store.DeletePurgeAge)
	}
	switch c.Store.Compression {
	case "s2", "zstd", "none":
	default:
		add("store.compression: %q is not one of s2, zstd, none", c.Store.Compression)
	}
	switch c.Store.Commit {
	case CommitLog, CommitTransaction:
	default:
		add("store.commit: %q is not one of %s, %s", c.Store.Commit, CommitLog, CommitTransaction)
	}
	return errors.Join(errs...)
}

// checkListen checks a listen address as net.Listen would take it, so that
// a typo (listen: 8080, :80800) is refused with the configuration's other
// problems, naming the option, rather than when the server binds. The port
// must be a number (0: any free port); the host may be empty (every
// interface), an IP address or a name.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:8080, or :8080 for every interface): %v", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: the port %q is not a number from 0 to 65535", addr, port)
	}
	if strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("%q: the host %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

// FeedNameRegexp is the compiled feed name pattern; call after Validate.
func (c *Config) FeedNameRegexp() *regexp.Regexp {
	return regexp.MustCompile(c.Receive.FeedNamePattern)
}
