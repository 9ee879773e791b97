// Package app wires weir's parts into a running service and owns its
// lifecycle. Tests start whole servers in-process through it.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/api"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/proxy"
	"github.com/weirhq/weir/internal/receipt"
	"github.com/weirhq/weir/internal/receiptrule"
	"github.com/weirhq/weir/internal/receive"
	"github.com/weirhq/weir/internal/repeatlog"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// App is a running main service.
type App struct {
	cfg      config.Config
	log      *slog.Logger
	lock     *os.File
	repo     *meta.Repo
	codec    *streamfile.Codec
	store    *store.Store
	srv      *http.Server
	ln       net.Listener
	sec      *security
	api      *api.Server
	registry *prometheus.Registry
	stopping atomic.Bool
	dbReady  readinessLog // what /readyz last logged of the database
	proxy    *proxy.Proxy // nil on the main service
	closers  []func()     // run when storage closes
	// nodeLock is the node's lock in the database; posts are refused and
	// the server is not ready while it is lost and cannot be taken again
	// (Err), and nothing is purged until it is taken again (Held).
	nodeLock *meta.NodeLock
}

// NewLogger builds the process logger from the log settings.
func NewLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// NodeName is the configured node name, or the host name made safe for
// receipt ids.
func NodeName(configured string) (string, error) {
	if configured != "" {
		if !receipt.ValidNode(configured) {
			return "", fmt.Errorf("node %q: a node name may contain only letters, digits and '-'", configured)
		}
		return configured, nil
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "weir"
	}
	return receipt.SanitiseNode(host), nil
}

// receivedPathHost is the name this host appends to ReceivedPath, found as
// the reference system finds it: DOCKER_HOST_HOSTNAME, then DOCKER_HOST_IP
// (in a container these name the machine that received the data, where
// the container's own host name is a random id), then the host name, then
// the node name.
func receivedPathHost(getenv func(string) string, hostname func() (string, error), node string) string {
	for _, key := range []string{"DOCKER_HOST_HOSTNAME", "DOCKER_HOST_IP"} {
		if v := strings.TrimSpace(getenv(key)); v != "" {
			return v
		}
	}
	if h, err := hostname(); err == nil && h != "" {
		return h
	}
	return node
}

// Open stores: the data directory (locked for this node), the metadata
// repository and the stream store. Admin commands use it read-only.
type Open struct {
	Repo  *meta.Repo
	Codec *streamfile.Codec
	Store *store.Store
	// nodeLock is the node's lock in the database (see
	// meta.Repo.LockNode); nil when read-only.
	nodeLock *meta.NodeLock
}

// Close releases what OpenStorage opened.
func (o *Open) Close() {
	if o.Store != nil {
		o.Store.Close()
	}
	if o.Codec != nil {
		o.Codec.Close()
	}
	if o.nodeLock != nil {
		o.nodeLock.Release()
		o.nodeLock = nil
	}
	if o.Repo != nil {
		_ = o.Repo.Close()
	}
}

// OpenStorage opens the repository and store of cfg. With readOnly the
// store neither recovers nor writes, so it is safe beside a running server.
func OpenStorage(ctx context.Context, cfg config.Config, node string, log *slog.Logger, reg prometheus.Registerer, readOnly bool) (*Open, error) {
	o := &Open{}
	var err error
	if o.Repo, err = meta.Open(ctx, cfg.DB, cfg.Data, log); err != nil {
		return nil, fmt.Errorf("open metadata: %w", err)
	}
	// Before the store recovers the node's streams: another server's.
	if !readOnly {
		if o.nodeLock, err = o.Repo.LockNode(ctx, node, meta.NodeLockOptions{
			CheckInterval: cfg.NodeLockCheckInterval, StartWait: cfg.NodeLockStartWait,
			ReleaseWait: cfg.NodeLockReleaseWait}); err != nil {
			o.Close()
			return nil, err
		}
	}
	// Before the store recovers anything: in another data directory it
	// would look for the node's files in the wrong place.
	if err := checkDataDir(ctx, o.Repo, cfg.Data, readOnly); err != nil {
		o.Close()
		return nil, err
	}
	comp, err := streamfile.ParseCompression(cfg.Store.Compression)
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("store.compression: %w", err)
	}
	if o.Codec, err = streamfile.NewCodecFor(comp); err != nil {
		o.Close()
		return nil, fmt.Errorf("start codec: %w", err)
	}
	var m *store.Metrics
	if reg != nil {
		m = store.NewMetrics(reg)
	}
	// A commit waits for a PostgreSQL server at most receive.databaseTimeout.
	// SQLite's waits are bounded already (its busy timeout), and a
	// deadline would make its driver start a goroutine for every statement.
	var commitTimeout time.Duration
	if o.Repo.Engine() == "postgres" {
		commitTimeout = cfg.Receive.DatabaseTimeout.D()
	}
	o.Store, err = store.Open(ctx, o.Repo, o.Codec, store.Options{
		Root: filepath.Join(cfg.Data, "store"), Node: node, BlockSize: int(cfg.Store.BlockSize), PackMax: int(cfg.Store.PackMaxSize),
		Logger: log, Metrics: m, ReadOnly: readOnly, Held: o.nodeLock.Held, CommitTimeout: commitTimeout,
		Log: cfg.Store.Commit == config.CommitLog,
	})
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	return o, nil
}

// New starts everything but serving: it locks the data directory for this
// node, opens storage (cleaning up what a crash left), and listens.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	node, err := NodeName(cfg.Node)
	if err != nil {
		return nil, err
	}
	return newApp(ctx, cfg, node, log, nil)
}

// newApp builds the main service, or with pcfg the proxy: the same
// storage, security and datafeed handler, with the proxy's receipt ids,
// feed status checks and forwarding instead of the REST API.
func newApp(ctx context.Context, cfg config.Config, node string, log *slog.Logger, pcfg *config.Proxy) (*App, error) {
	var err error
	a := &App{cfg: cfg, log: log, registry: prometheus.NewRegistry()}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ok := false
	defer func() {
		if !ok {
			a.closeStorage()
		}
	}()
	tlsConfig, err := serverTLS(cfg.TLS)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Data, 0o750); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if a.lock, err = lockNode(cfg.Data, node); err != nil {
		return nil, err
	}
	st, err := OpenStorage(ctx, cfg, node, log, a.registry, false)
	if err != nil {
		return nil, err
	}
	a.repo, a.codec, a.store, a.nodeLock = st.Repo, st.Codec, st.Store, st.nodeLock
	// Staging files of posts that were in flight at a crash are worthless.
	// Only once the node's lock is held: on a shared data directory a
	// server of the same name on another host (which the directory's lock
	// may not see) would remove the live server's.
	tmp := filepath.Join(cfg.Data, "tmp", node)
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("clean %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	if a.sec, err = newSecurity(ctx, cfg, a.repo, log); err != nil {
		return nil, err
	}
	origin := byte('S')
	if pcfg != nil {
		origin = 'P'
	}
	ids, err := receipt.NewGenerator(origin, node, nil)
	if err != nil {
		return nil, err
	}
	// Ids stay unique across a restart whose clock reads earlier than
	// ids already issued (see receipt.Generator.Keep).
	// A write that fails (a full disk) is tried again every second while
	// posts arrive: logged at most once a minute.
	idLog := log.With("log", "receipt-ids")
	idFailures := repeatlog.New(time.Minute)
	if err := ids.Keep(filepath.Join(cfg.Data, "receipt-ids-"+node), func(err error) {
		if ok, n := idFailures.Failed(time.Now()); ok {
			idLog.Error("receipt ids may repeat after a restart with the clock set back; logged at most once a minute", "err", err, "notLogged", n)
		}
	}); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() {
		if err := ids.Close(); err != nil {
			idLog.Warn("cannot record the last receipt id; the next start's ids begin up to 10 s ahead of the clock", "err", err)
		}
	})
	host := receivedPathHost(os.Getenv, os.Hostname, node)
	ro := receive.Options{
		Config: cfg.Receive, Feeds: meta.NewFeedCache(a.repo, cfg.Receive.FeedCacheTTL.D()), Store: a.store, IDs: ids, Host: host, TempDir: tmp,
		Auth: a.sec.chain, CertAttributes: a.sec.certs.Attributes, Forwarded: a.repo,
		Log: log.With("log", "receive"), Metrics: receive.NewMetrics(a.registry),
		Receiving: a.nodeLock.Err,
	}
	a.pruneForwardedPosts(log, cfg.Receive.ForwardedPostsKept.D())
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{Registry: a.registry})
	if pcfg != nil {
		if err := a.startProxy(ctx, *pcfg, node, &ro, mux, metrics); err != nil {
			return nil, err
		}
		h := receive.New(ro)
		h.Register(mux)
		fs := proxyFeedStatus(h, a.sec.chain, log.With("log", "feedstatus"))
		mux.Handle("POST /api/feedStatus/v2/getFeedStatus", fs)
		mux.Handle("POST /api/feedStatus/v1/getFeedStatus", fs)
	} else {
		ro.RecordHopReceipts = true
		rules := receiptrule.NewSource(a.repo, 0, log.With("log", "receipt-rules"))
		ro.ReceiptRules = rules
		if cfg.Receive.ReceiptCheckMode == config.ReceiptPolicy {
			// Read now, not by the first post. Until they can be read,
			// posts get 503 with Retry-After.
			if set, err := rules.Current(ctx); err != nil {
				log.Error("the data receipt rules cannot be read; posts are refused with 503 until they can", "err", err)
			} else {
				log.Info("data receipt rules decide every post (receiptCheckMode RECEIPT_POLICY)", "rules", set.Len())
			}
		}
		h := receive.New(ro)
		h.Register(mux)
		var tokens api.Tokens
		if cfg.Security.OIDC.Issuer != "" {
			tokens = a.sec.tokens
		}
		a.purgeDeleted(log.With("log", "purge"), cfg.Store.DeletePurgeAge.D(), cfg.Store.PurgeInterval)
		if a.api, err = api.Register(mux, api.Deps{Repo: a.repo, Store: a.store, Access: a.sec.access, Tokens: tokens,
			FeedNames: cfg.FeedNameRegexp(), Log: log.With("log", "api"), Version: Version(), BasePath: cfg.BasePath,
			Node: node, DataDir: cfg.Data, Config: cfg, Receiver: h, ReceiptRules: rules,
			Ready: http.HandlerFunc(a.ready), Metrics: metrics,
		}); err != nil {
			return nil, err
		}
	}
	a.srv = &http.Server{
		Handler:           boundUnreadBody(cfg.Receive.BodyIdleTimeout.D(), withVersion(Version(), servingUncleanDatafeed(cfg.BasePath, underBasePath(cfg.BasePath, mux)))),
		ReadHeaderTimeout: cfg.Receive.ReadHeaderTimeout.D(),
		MaxHeaderBytes:    receive.ServerMaxHeaderBytes(int(cfg.Receive.MaxHeaderBytes)),
		IdleTimeout:       2 * time.Minute,
		ConnContext:       api.ConnContext, // a download watches its client take its bytes
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if a.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if tlsConfig != nil {
		a.ln = tls.NewListener(a.ln, tlsConfig)
	}
	// Last, so that a start refused for any other reason creates nothing.
	if err := a.sec.bootstrap(ctx, cfg.Data, log); err != nil {
		_ = a.ln.Close()
		return nil, err
	}
	if !cfg.Receive.AuthenticationRequired {
		log.Warn("senders are not authenticated: anyone who can reach the datafeed can post data " +
			"(receive.authenticationRequired is false)")
	}
	role := "service"
	if pcfg != nil {
		role = "proxy"
	}
	log.Info("weir started", "role", role, "listen", a.ln.Addr().String(), "tls", tlsConfig != nil, "data", cfg.Data, "db", a.repo.Engine(), "node", node)
	ok = true
	return a, nil
}

// lockNode takes an exclusive lock so that two servers never write the
// same data directory as the same node (their crash recovery would delete
// each other's in-flight streams).
func lockNode(dataDir, node string) (*os.File, error) {
	p := filepath.Join(dataDir, "node-"+node+".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another weir server as node %q (%s is locked): %w", dataDir, node, p, err)
	}
	return f, nil
}

// Addr is the address the service listens on.
func (a *App) Addr() string { return a.ln.Addr().String() }

// Repo is the metadata repository.
func (a *App) Repo() *meta.Repo { return a.repo }

// Store is the stream store.
func (a *App) Store() *store.Store { return a.store }

// Access is the users, permissions and API keys service.
func (a *App) Access() *access.Service { return a.sec.access }

// API is the registered REST API (for its OpenAPI document).
func (a *App) API() *api.Server { return a.api }

// Registry is the metrics registry (for tests).
func (a *App) Registry() *prometheus.Registry { return a.registry }

func (a *App) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var problems []string
	if a.stopping.Load() {
		problems = append(problems, "shutting down")
	}
	// /readyz needs no credentials, so the database's error (which can
	// name hosts, paths and users) goes to the log, not to the caller.
	dbErr := a.repo.Ping(ctx)
	if dbErr != nil {
		problems = append(problems, "metadata database unavailable")
	}
	if r.Context().Err() == nil { // not a prober that went away meanwhile
		a.dbReady.observe(a.log, dbErr, time.Now())
	}
	if err := a.nodeLock.Err(); err != nil {
		problems = append(problems, err.Error())
	}
	if free, err := freeBytes(a.cfg.Data); err == nil && free < 64<<20 {
		problems = append(problems, fmt.Sprintf("data volume has only %d bytes free", free))
	}
	if a.proxy != nil {
		problems = append(problems, a.proxy.Problems()...)
	}
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, strings.Join(problems, "; ")+"\n")
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// readinessLog logs the readiness check's database failures without
// flooding the log: probes poll /readyz every few seconds, so a failure is
// logged when it starts, then only when its text changes and at most once
// per readinessLogInterval, and the recovery once.
type readinessLog struct {
	mu      sync.Mutex
	lastErr string    // the failure last logged; "" while the database answers
	logged  time.Time // when lastErr was logged
}

// readinessLogInterval is the least time between two logged failures of
// a database that has not recovered in between.
const readinessLogInterval = time.Minute

func (l *readinessLog) observe(log *slog.Logger, err error, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		if l.lastErr != "" {
			log.Info("metadata database answers again")
			l.lastErr = ""
		}
		return
	}
	text := err.Error()
	if text == l.lastErr || (l.lastErr != "" && now.Sub(l.logged) < readinessLogInterval) {
		return
	}
	l.lastErr, l.logged = text, now
	log.Warn("metadata database does not answer; /readyz answers 503", "err", err)
}

// pruneForwardedPosts forgets, hourly (and at start), the forwarded posts
// older than kept (receive.forwardedPostsKept), until storage closes.
func (a *App) pruneForwardedPosts(log *slog.Logger, kept time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Hour)
		defer t.Stop()
		for {
			n, err := a.repo.PruneForwardedPosts(ctx, time.Now().Add(-kept).UnixMilli())
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("cannot forget old forwarded posts; trying again in an hour", "err", err)
			case n > 0:
				log.Info("forgot forwarded posts older than 30 days", "count", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	a.closers = append(a.closers, func() { cancel(); <-done })
}

// purgeDeleted removes for good, at start and then every interval
// (hourly when 0), this node's streams DELETED longer than age
// (store.deletePurgeAge; 0: never), until storage closes. A run cut short
// (an error, or the shutdown) is finished by the next.
func (a *App) purgeDeleted(log *slog.Logger, age, interval time.Duration) {
	if age <= 0 {
		log.Info("deleted streams are kept for ever (store.deletePurgeAge is 0)")
		return
	}
	if interval <= 0 {
		interval = time.Hour
	}
	st, lock := a.store, a.nodeLock
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			// Without its node's lock (PostgreSQL) the server may not
			// act as its node: another server may have started as it,
			// whose streams these rows now are, their files on its disk.
			// Removing the rows would leave those files named by no row.
			if err := lock.Held(); err != nil {
				log.Debug("deleted streams are not removed while the node lock is lost", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				continue
			}
			res, err := st.PurgeDeleted(ctx, time.Now().Add(-age).UnixMilli())
			if res.Streams > 0 {
				log.Info("removed streams deleted longer than store.deletePurgeAge for good",
					"count", res.Streams, "bytes", res.Bytes, "compactedPacks", res.Packs, "deletePurgeAge", age.String())
			}
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, meta.ErrNodeLockLost):
				// Stopped between batches, as the check above would.
				log.Debug("deleted streams are not removed while the node lock is lost", "err", err)
			default:
				log.Warn("cannot remove deleted streams for good; trying again at the next run", "err", err, "interval", interval.String())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	a.closers = append(a.closers, func() { cancel(); <-done })
}

func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Run serves until ctx is done, then shuts down gracefully: in-flight
// posts finish (and are committed) before storage closes.
func (a *App) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- a.srv.Serve(a.ln) }()
	select {
	case err := <-errc:
		a.closeStorage()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return a.Shutdown(30 * time.Second)
}

// Shutdown stops accepting posts, waits up to grace for in-flight ones,
// and closes storage.
func (a *App) Shutdown(grace time.Duration) error {
	a.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := a.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("posts still in flight after %s: %w", grace, err)
		_ = a.srv.Close()
	}
	a.closeStorage()
	a.log.Info("weir stopped")
	return err
}

func (a *App) closeStorage() {
	for _, c := range a.closers {
		c()
	}
	a.closers = nil
	if a.proxy != nil {
		a.proxy.Stop()
		a.proxy = nil
	}
	if a.api != nil {
		a.api.Close()
		a.api = nil
	}
	if a.sec != nil {
		a.sec.close()
		a.sec = nil
	}
	(&Open{Repo: a.repo, Codec: a.codec, Store: a.store, nodeLock: a.nodeLock}).Close()
	a.repo, a.codec, a.store, a.nodeLock = nil, nil, nil, nil
	if a.lock != nil {
		_ = a.lock.Close()
		a.lock = nil
	}
}

// VersionHeader carries the build version on every response, so a client
// can tell which version of the API answered it.
const VersionHeader = "Weir-Version"

func withVersion(version string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(VersionHeader, version)
		h.ServeHTTP(w, r)
	})
}

// boundUnreadBody bounds the time Go's HTTP/1 server waits for the part of
// a request body that the handler did not read. When a handler answers
// without reading the body (a refusal before it: 401, 406, 405, a 404, or
// /healthz called with a body), the server reads what is left of it (up to
// 256 KiB, so that the connection can be used again) before it sends the
// answer, and again when it closes the body, all with no read deadline: a
// sender that declared a body and never sent it (or, after Expect:
// 100-continue, rightly waited for a 100 that never came) held its
// connection and goroutine for as long as it stayed connected, and got no
// answer at all when the Expect header was missing. Now the rest of such
// a body has idle (receive.bodyIdleTimeout) to arrive, as a body that is
// read has between reads; after that the connection is closed, the answer
// sent with Connection: close. A body that was never asked for (Expect:
// 100-continue and no 100 sent) is not waited for: the sender must not send
// it.
func boundUnreadBody(idle time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &watchedBody{ReadCloser: r.Body}
		r2 := new(http.Request)
		*r2 = *r
		r2.Body = b
		h.ServeHTTP(w, r2)
		if b.eof.Load() {
			return
		}
		deadline := time.Now().Add(idle)
		if !b.read.Load() && strings.EqualFold(r.Header.Get("Expect"), "100-continue") && r.ProtoAtLeast(1, 1) {
			deadline = time.Now()
		}
		_ = http.NewResponseController(w).SetReadDeadline(deadline)
	})
}

// watchedBody tells whether a request body was read, and read to its end
// (atomically: a proxy's relay may still be reading it from its HTTP
// client's goroutine).
type watchedBody struct {
	io.ReadCloser
	read, eof atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// servingUncleanDatafeed serves a request whose URL path is not clean
// (//datafeed, /./datafeed, /x/../datafeed, /weir//datafeed: a doubled
// slash, a . or .. segment) as its clean path when that is a datafeed path
// below base, instead of letting http.ServeMux answer it with a 307 to the
// clean path. Senders of this protocol do not follow a redirect of a post
// and would see a 307 without Service-Status; a sender whose base URL ends
// in "/" (http://host:8080/ + /datafeed) is a common configuration slip.
// The clean path is computed as ServeMux does (on the escaped path, a
// trailing slash kept), so the request is then served exactly as the clean
// path would be. Other unclean paths (the API, /healthz, /metrics, and a
// clean path outside base, such as /weir/../datafeed) are left to the mux
// and still get its redirect: base is matched on the clean path, so no
// cleaning lets a request out of it.
func servingUncleanDatafeed(base string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect || r.URL == nil {
			h.ServeHTTP(w, r)
			return
		}
		escaped := r.URL.EscapedPath()
		clean := cleanPath(escaped)
		if clean == escaped {
			h.ServeHTTP(w, r)
			return
		}
		rest, ok := strings.CutPrefix(clean, base)
		if !ok || !receive.IsPath(rest) {
			h.ServeHTTP(w, r)
			return
		}
		unescaped, err := url.PathUnescape(clean)
		if err != nil {
			h.ServeHTTP(w, r)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = unescaped, clean
		r2.URL = &u
		h.ServeHTTP(w, r2)
	})
}

// cleanPath is http.ServeMux's: path.Clean, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// underBasePath serves h below a deployment base path (e.g. /weir, so that
// /weir/datafeed and /weir/api/... work); nothing is served outside it.
func underBasePath(base string, h http.Handler) http.Handler {
	if base == "" {
		return h
	}
	outer := http.NewServeMux()
	outer.Handle(base+"/", http.StripPrefix(base, h))
	return outer
}
