package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/proxy"
	"github.com/weirhq/weir/internal/receipt"
	"github.com/weirhq/weir/internal/receive"
)

// NewProxy starts `weir proxy` but for serving: the same datafeed, with
// receipt ids of origin P, its own durable repository, aggregation and
// forwarding.
func NewProxy(ctx context.Context, cfg config.Proxy, log *slog.Logger) (*App, error) {
	if err := cfg.ValidateProxy(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	if err := os.MkdirAll(cfg.Data, 0o750); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	id, err := ProxyID(cfg.ProxyID, cfg.Data)
	if err != nil {
		return nil, err
	}
	return newApp(ctx, cfg.Config, id, log, &cfg)
}

// proxyIDFile keeps a generated proxy id, so that receipt ids name the same
// proxy after every restart.
const proxyIDFile = "proxy-id.txt"

// ProxyID is the configured proxy id, else the one kept in the data
// directory, else a new one (kept there for next time).
func ProxyID(configured, dataDir string) (string, error) {
	if configured != "" {
		if !receipt.ValidNode(configured) {
			return "", fmt.Errorf("proxy id %q: it may contain only letters, digits and '-'", configured)
		}
		return configured, nil
	}
	p := filepath.Join(dataDir, proxyIDFile)
	b, err := os.ReadFile(p)
	if err == nil {
		if id := strings.TrimSpace(string(b)); receipt.ValidNode(id) {
			return id, nil
		}
		return "", fmt.Errorf("%s does not hold a valid proxy id (letters, digits and '-'): fix or remove it", p)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read proxy id: %w", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := "proxy-" + hex.EncodeToString(r[:])
	if err := fsutil.WriteFileSynced(p, []byte(id+"\n"), 0o640); err != nil {
		return "", fmt.Errorf("keep proxy id: %w", err)
	}
	return id, nil
}

// startProxy builds the proxy's destinations, feed status checks and
// forwarding engine, adds them to the datafeed handler's options, and
// registers the operational endpoints.
func (a *App) startProxy(ctx context.Context, cfg config.Proxy, id string, ro *receive.Options, mux *http.ServeMux, metrics http.Handler) error {
	log := a.log
	ua := fmt.Sprintf("weir-proxy/%s go/%s", Version(), runtime.Version())
	var targets []proxy.Target
	var instant *proxy.HTTPDestination
	var first *proxy.HTTPDestination
	for _, h := range cfg.ForwardHTTPDestinations {
		if !config.IsEnabled(h.Enabled) {
			continue
		}
		d, err := proxy.NewHTTPDestination(h, ua)
		if err != nil {
			return err
		}
		if first == nil {
			first = d
		}
		if h.Instant {
			instant = d
			continue
		}
		targets = append(targets, proxy.Target{Destination: d, Queue: h.Queue})
	}
	for _, f := range cfg.ForwardFileDestinations {
		if !config.IsEnabled(f.Enabled) {
			continue
		}
		d, err := proxy.NewFileDestination(f, id, nil)
		if err != nil {
			return err
		}
		targets = append(targets, proxy.Target{Destination: d, Queue: f.Queue})
	}

	ro.LogMetaKeys = cfg.LogStream.MetaKeys
	// Whatever the receipt check mode, a proxy that only forwards to other
	// services does not decide the type of a post that names none: the
	// main service knows the feed's default. A file destination has no
	// service behind it to decide: there a typeless post is Raw Events, as
	// at a main service that does not know the feed.
	ro.TypeFromDownstream = true
	for _, f := range cfg.ForwardFileDestinations {
		if config.IsEnabled(f.Enabled) {
			ro.TypeFromDownstream = false
		}
	}
	// Nor does it split a zip's reference groups into streams of their
	// own: it forwards them as they came, as the reference proxy does, and
	// the main service stores each as a stream.
	ro.KeepReferenceGroups = true
	switch cfg.Receive.ReceiptCheckMode {
	case config.FeedStatus, config.FeedExistence:
		hdr, err := feedStatusHeader(cfg, first)
		if err != nil {
			return err
		}
		fsc := proxy.NewFeedStatusClient(proxy.FeedStatusOptions{
			URL: cfg.FeedStatusURL(), Client: feedStatusClient(first), Header: hdr,
			CacheTTL: cfg.FeedStatus.CacheTTL.D(), MaxEntries: cfg.FeedStatus.MaxEntries,
			Timeout: cfg.FeedStatus.Timeout.D(), Fallback: cfg.FeedStatus.Fallback,
			Log: log.With("log", "feedstatus"),
		})
		ro.FeedStatuses = fsc
		a.closers = append(a.closers, fsc.Close)
	}

	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("GET /readyz", http.HandlerFunc(a.ready))
	mux.Handle("GET /metrics", metrics)

	if instant != nil {
		ro.Relay = proxy.NewInstant(instant, cfg.Receive.X509CertificateDnHeader)
		log.Info("proxy forwards instantly: each post is relayed during its request and nothing is stored",
			"destination", instant.Name(), "url", instant.Target())
		return nil
	}
	a.proxy = proxy.New(proxy.Options{
		Repo: a.repo, Store: a.store, Aggregator: cfg.Aggregator, Targets: targets, Repository: cfg.Repository,
		DataDir: cfg.Data, LogMetaKeys: cfg.LogStream.MetaKeys, Log: log.With("log", "proxy"),
		SendLog: log.With("log", "send"), Registry: a.registry,
	})
	ro.Stored = a.proxy.Stored
	ro.Admit = a.proxy.Admit
	if err := a.proxy.Start(ctx); err != nil {
		a.proxy = nil
		return fmt.Errorf("start forwarding: %w", err)
	}
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Destination.Name() + "=" + t.Destination.Target()
	}
	log.Info("proxy forwards stored posts", "proxyId", id, "destinations", names,
		"aggregation", cfg.Aggregator.Enabled, "maxItems", cfg.Aggregator.MaxItemsPerAggregate,
		"maxBytes", cfg.Aggregator.MaxUncompressedByteSize.String(), "frequency", cfg.Aggregator.AggregationFrequency.String())
	return nil
}

// feedStatusHeader is the credential sent with feed status questions: the
// configured key, else the first HTTP destination's.
func feedStatusHeader(cfg config.Proxy, first *proxy.HTTPDestination) (http.Header, error) {
	key := cfg.FeedStatus.APIKey
	if cfg.FeedStatus.APIKeyFile != "" {
		if err := auth.CheckSecretFile(cfg.FeedStatus.APIKeyFile); err != nil {
			return nil, fmt.Errorf("feedStatus.apiKeyFile: %w", err)
		}
		b, err := os.ReadFile(cfg.FeedStatus.APIKeyFile)
		if err != nil {
			return nil, fmt.Errorf("feedStatus.apiKeyFile: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
		return h, nil
	}
	if first != nil {
		if v := first.Sender().AuthHeader(); v != nil {
			return v, nil
		}
	}
	return h, nil
}

// feedStatusClient asks with the first destination's TLS settings, since
// the feed status URL is usually on the same downstream.
func feedStatusClient(first *proxy.HTTPDestination) *http.Client {
	if first == nil {
		return nil
	}
	return first.Sender().Client()
}
