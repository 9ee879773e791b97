// Package apptest starts whole weir servers in-process for black-box tests:
// a real listener on loopback, a real data directory and a real database
// (SQLite, or PostgreSQL in a fresh schema when WEIR_TEST_DB=postgres).
package apptest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// Server is a running weir main service.
type Server struct {
	App *app.App
	URL string // http://127.0.0.1:port
	Cfg config.Config
	// Proxy is the configuration of a proxy (nil for the main service).
	Proxy *config.Proxy
	Logs  *Logs
	t     testing.TB
	done  chan error
	stop  func()
}

// Logs collects the server's JSON log lines.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Config returns a test configuration: a fresh data directory, port 0, a
// fixed node name, senders not authenticated, and the database chosen by
// WEIR_TEST_DB.
func Config(t testing.TB) config.Config {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Data = t.TempDir()
	cfg.Node = "test-node"
	cfg.Log.Level = "debug"
	// Most suites test receipt, not authentication: they post without
	// credentials. Authentication tests turn it back on.
	cfg.Receive.AuthenticationRequired = false
	if os.Getenv("WEIR_TEST_DB") == "postgres" {
		cfg.DB = metatest.PostgresDSN(t)
	}
	return cfg
}

// Start starts a server with Config(t) changed by mutate (may be nil).
func Start(t testing.TB, mutate func(*config.Config)) *Server {
	t.Helper()
	cfg := Config(t)
	if mutate != nil {
		mutate(&cfg)
	}
	return StartConfig(t, cfg)
}

// StartConfig starts a server with exactly cfg; it stops at test cleanup.
func StartConfig(t testing.TB, cfg config.Config) *Server {
	t.Helper()
	logs := &Logs{}
	a, err := app.New(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("start weir: %v", err)
	}
	return run(t, a, cfg, nil, logs)
}

// ProxyConfig returns a test proxy configuration: Config(t)'s settings
// (fresh data directory, port 0, database, senders not authenticated), a
// fixed proxy id, and an HTTP destination for each forward URL with quick
// retries (tests wait for them).
func ProxyConfig(t testing.TB, proxyID string, forward ...string) config.Proxy {
	cfg := config.DefaultProxy()
	cfg.Config = Config(t)
	cfg.Node = ""
	cfg.ProxyID = proxyID
	for _, u := range forward {
		cfg.AddForward(u)
	}
	for i := range cfg.ForwardHTTPDestinations {
		q := &cfg.ForwardHTTPDestinations[i].Queue
		q.RetryDelay = config.Duration(100 * time.Millisecond)
		q.MaxRetryDelay = config.Duration(time.Second)
	}
	return cfg
}

// StartProxy starts a proxy with exactly cfg; it stops at test cleanup.
func StartProxy(t testing.TB, cfg config.Proxy) *Server {
	t.Helper()
	logs := &Logs{}
	a, err := app.NewProxy(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("start weir proxy: %v", err)
	}
	return run(t, a, cfg.Config, &cfg, logs)
}

func run(t testing.TB, a *app.App, cfg config.Config, pcfg *config.Proxy, logs *Logs) *Server {
	s := &Server{App: a, URL: "http://" + a.Addr(), Cfg: cfg, Proxy: pcfg, Logs: logs, t: t, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-s.done; err != nil {
				t.Errorf("stop weir: %v", err)
			}
		}
	}
	s.stop = stop
	t.Cleanup(stop)
	return s
}

// Stop stops the server (also done at cleanup).
func (s *Server) Stop() { s.stop() }

// Restart stops the server and starts a new one on the same data and
// database (on a new port).
func (s *Server) Restart() *Server {
	s.t.Helper()
	s.Stop()
	if s.Proxy != nil {
		return StartProxy(s.t, *s.Proxy)
	}
	return StartConfig(s.t, s.Cfg)
}

// CreateFeed creates a feed with the given status ("" = RECEIVE) and default type.
func (s *Server) CreateFeed(name string, status feed.Status, streamType string) {
	s.t.Helper()
	f := feed.Feed{Name: name, Status: status, StreamType: streamType}.WithDefaults()
	if err := s.App.Repo().CreateFeed(context.Background(), f); err != nil {
		s.t.Fatalf("create feed %s: %v", name, err)
	}
}

// Sync waits until the rows of every post the server answered are in its
// database (with store.commit: log they follow the answer): a test that
// reads the repository directly sees what it posted, as an API call does.
func (s *Server) Sync() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		err := s.App.Store().Sync(ctx)
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrBehind) || ctx.Err() != nil {
			s.t.Fatalf("wait for the rows of answered posts: %v", err)
		}
		// Their transaction fails for now (an outage a test made): it is
		// tried again as posts come, or within seconds.
		time.Sleep(20 * time.Millisecond)
	}
}

// Streams lists every stream, by id (after Sync).
func (s *Server) Streams() []meta.Stream {
	s.t.Helper()
	s.Sync()
	st, err := s.App.Repo().ListStreams(context.Background(), meta.StreamFilter{})
	if err != nil {
		s.t.Fatalf("list streams: %v", err)
	}
	return st
}

// Read returns the bytes of one channel of one part (0-based) of a stream.
func (s *Server) Read(id int64, ch streamfile.Channel, part int) []byte {
	s.t.Helper()
	s.Sync()
	r, err := s.App.Store().Open(context.Background(), id)
	if err != nil {
		s.t.Fatalf("open stream %d: %v", id, err)
	}
	defer r.Close()
	sec, err := r.Section(ch, part)
	if err != nil {
		s.t.Fatalf("stream %d %s part %d: %v", id, ch, part, err)
	}
	b, err := io.ReadAll(sec)
	if err != nil {
		s.t.Fatalf("read stream %d %s part %d: %v", id, ch, part, err)
	}
	return b
}

// WaitFor polls cond until it is true or a generous deadline passes; for
// effects that are asynchronous by design, never for speed.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
