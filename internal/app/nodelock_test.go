package app_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// TestNodeNameInUseOnPostgres: a second server with the same node name on
// the same PostgreSQL database, but a data directory the data directory's
// lock cannot see it in (here one of its own; in production a shared
// filesystem whose locks do not reach across hosts), is refused at start,
// for its node name (the node lock is taken before the data directory is
// checked). It used to start, and its crash recovery deleted the first
// server's posts in flight (LOCKED rows), failing them, and the two gave
// the same receipt ids.
// Another node name starts beside it, and the name is free again once the
// first server stops.
func TestNodeNameInUseOnPostgres(t *testing.T) {
	cfg, first := startOnPostgres(t, "NODE-FEED", nil)

	second := cfg
	second.Data = t.TempDir()
	second.NodeLockStartWait = 200 * time.Millisecond
	log := slog.New(slog.DiscardHandler)
	if a, err := app.New(context.Background(), second, log); err == nil {
		_ = a.Shutdown(0)
		t.Fatal("a second server as node test-node on the same database started")
	} else if !strings.Contains(err.Error(), `node "test-node" is in use by another weir server`) ||
		!strings.Contains(err.Error(), "--node") {
		t.Fatalf("second server as the same node: %v", err)
	}

	// Another node on the same database (and data directory) starts.
	other := cfg
	other.Node = "other-node"
	apptest.StartConfig(t, other).Stop()

	// The first server is unharmed.
	req, _ := http.NewRequest("POST", first.URL+"/datafeed", strings.NewReader("still here\n"))
	req.Header.Set("Feed", "NODE-FEED")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "_S_test-node\n") {
		t.Fatalf("post to the first server: %d %q", resp.StatusCode, body)
	}

	// Once the first has stopped the node is free; its session's lock
	// goes a moment later, which the default wait at start covers.
	first.Stop()
	apptest.StartConfig(t, cfg).Stop()
}

// startOnPostgres starts a server on PostgreSQL (a schema of the test's
// own; the test is skipped without WEIR_TEST_POSTGRES_DSN), with a feed,
// and returns it with its configuration.
func startOnPostgres(t *testing.T, feed string, mutate func(*config.Config)) (config.Config, *apptest.Server) {
	t.Helper()
	cfg := apptest.Config(t)
	if cfg.DB == "" {
		cfg.DB = metatest.PostgresDSN(t)
	}
	if mutate != nil {
		mutate(&cfg)
	}
	s := apptest.StartConfig(t, cfg)
	s.CreateFeed(feed, "", "")
	return cfg, s
}

// lockWatch looks at the node lock of a server's PostgreSQL schema from a
// session of its own.
type lockWatch struct {
	t    testing.TB
	db   *sql.DB
	node string
}

func newLockWatch(t testing.TB, dsn, node string) *lockWatch {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &lockWatch{t: t, db: db, node: node}
}

// nodeLockKeys are the advisory lock's keys as meta.Repo.LockNode takes
// them: the search path's schema (the test's) and the node name.
const nodeLockKeys = `$1::int4, hashtext(coalesce(current_schema(), '') || '/' || $2)`

// holder is the pid of the session holding the node lock (the server's
// or another), 0 if none.
func (w *lockWatch) holder() int {
	w.t.Helper()
	var pid int
	err := w.db.QueryRow(`SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()
		AND l.classid = $1::int4::oid AND l.objid = hashtext(coalesce(current_schema(), '') || '/' || $2)::oid
		AND l.objsubid = 2`, 0x77656973, w.node).Scan(&pid)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		w.t.Fatalf("find the node lock's session: %v", err)
	}
	return pid
}

// kill ends a session, as an operator's pg_terminate_backend, a database
// restart or a cut connection would.
func (w *lockWatch) kill(pid int) {
	w.t.Helper()
	var ok bool
	if err := w.db.QueryRow(`SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		w.t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
	}
}

// poll waits for cond, up to a deadline generous enough for a slow,
// shared machine; never a measure of speed.
func pollLong(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeLockServer starts a server on PostgreSQL that checks its node lock
// often, with a feed to post to, posts once to it, and returns the pid of
// the session that holds the lock.
func nodeLockServer(t *testing.T, mutate ...func(*config.Config)) (*apptest.Server, *lockWatch, int) {
	cfg, s := startOnPostgres(t, "NODE-FEED", func(c *config.Config) {
		c.NodeLockCheckInterval = 50 * time.Millisecond
		for _, m := range mutate {
			m(c)
		}
	})
	post(t, s, []byte("before\n"), "Feed", "NODE-FEED").ok(t)
	w := newLockWatch(t, cfg.DB, cfg.Node)
	pid := w.holder()
	if pid == 0 {
		t.Fatal("the server holds no node lock")
	}
	return s, w, pid
}

func readyz(t testing.TB, s *apptest.Server) *resp {
	t.Helper()
	return send(t, s, http.MethodGet, "/readyz", nil)
}

// logCount counts the server's log lines containing s.
func logCount(srv *apptest.Server, s string) int {
	return strings.Count(srv.Logs.String(), s)
}

const (
	logLost   = "lost the node's lock in the PostgreSQL database"
	logOther  = "another session took this node's lock"
	logRegain = "took the node's lock in the PostgreSQL database again"
)

// TestNodeLockTakenAgainAfterSessionEnds: the session holding the node
// lock is terminated (as by pg_terminate_backend, a database restart or a
// cut connection), which releases the lock. The server notices, takes the
// lock again on a new session and goes on receiving. It used to go on
// without the lock, so that a second server could start as the same node.
func TestNodeLockTakenAgainAfterSessionEnds(t *testing.T) {
	s, w, first := nodeLockServer(t)
	// Posts go on while the lock is lost and taken again: as nobody else
	// holds it, it is taken again at once, and none is refused for the
	// moment that takes (the server used to refuse posts from noticing the
	// loss until it had the lock again, which failed a test now and then).
	refusals := postThroughout(t, s)
	w.kill(first)
	var again int
	pollLong(t, "the node lock taken on a new session", func() bool {
		again = w.holder()
		return again != 0 && again != first
	})
	pollLong(t, "the regain logged", func() bool { return logCount(s, logRegain) == 1 })
	if r := refusals(); r != "" {
		t.Errorf("a post was refused while the lock was taken again at once: %s", r)
	}
	id := post(t, s, []byte("after\n"), "Feed", "NODE-FEED").ok(t)
	if !strings.HasSuffix(id, "_S_test-node") {
		t.Errorf("receipt id %q", id)
	}
	if r := readyz(t, s); r.code != http.StatusOK {
		t.Errorf("/readyz: %d %q", r.code, r.body)
	}
	if got := w.holder(); got != again {
		t.Errorf("the node lock moved from session %d to %d", again, got)
	}
	// One line when it is lost, one when it is taken again.
	pollLong(t, "the node lock's log lines", func() bool { return logCount(s, logRegain) == 1 })
	if n, m := logCount(s, logLost), logCount(s, logOther); n != 1 || m != 0 {
		t.Errorf("logged the loss %d times and another holder %d times, want 1 and 0:\n%s", n, m, s.Logs)
	}
}

// postThroughout posts to NODE-FEED from two clients until the returned
// func is called, which returns the first refusal, if any.
func postThroughout(t *testing.T, s *apptest.Server) func() string {
	stop := make(chan struct{})
	refused := make(chan string, 1)
	var posting sync.WaitGroup
	for range 2 {
		posting.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := post(t, s, []byte("during\n"), "Feed", "NODE-FEED"); r.code != http.StatusOK {
					select {
					case refused <- fmt.Sprintf("%d %s", r.code, r.header.Get("Service-Error")):
					default:
					}
				}
			}
		})
	}
	return func() string {
		close(stop)
		posting.Wait()
		select {
		case r := <-refused:
			return r
		default:
			return ""
		}
	}
}

// TestNodeLockReleasedLateAfterSessionEnds: a terminated backend tells
// its client before it releases its session's locks, so the server can
// find its node's lock still held, by its own session, when it takes it
// again at once. Here another session holds it for a moment instead: the
// server takes it once it is free, without refusing a post or blaming
// another server (it used to do both at the first try).
func TestNodeLockReleasedLateAfterSessionEnds(t *testing.T) {
	// A release wait far longer than the other session's hold, so that a
	// stalled machine cannot make the hold outlast it.
	s, w, first := nodeLockServer(t, func(c *config.Config) { c.NodeLockReleaseWait = 20 * time.Second })
	refusals := postThroughout(t, s)
	other, _ := w.takeOnKill(first)
	time.Sleep(200 * time.Millisecond) // a few of the server's checks
	var unlocked bool
	if err := other.QueryRowContext(context.Background(), `SELECT pg_advisory_unlock(`+nodeLockKeys+`)`,
		0x77656973, "test-node").Scan(&unlocked); err != nil || !unlocked {
		t.Fatalf("release the other session's lock: %v %v", unlocked, err)
	}
	pollLong(t, "the regain logged", func() bool { return logCount(s, logRegain) == 1 })
	if r := refusals(); r != "" {
		t.Errorf("a post was refused while the lock was being released: %s", r)
	}
	if n := logCount(s, logOther); n != 0 {
		t.Errorf("blamed another server %d times for a lock released within %v:\n%s", n, 200*time.Millisecond, s.Logs)
	}
	if got := w.holder(); got == 0 || got == first {
		t.Errorf("the node lock is held by session %d, want a new one of the server's", got)
	}
}

// TestNodeLockHeldByAnotherAfterSessionEnds: when the lock's session ends
// and another session takes the lock first (a second server starting as
// the same node), the server refuses posts with 503 and Retry-After, is
// not ready, and logs an error once; when the other releases the lock, the
// server takes it and receives again by itself.
func TestNodeLockHeldByAnotherAfterSessionEnds(t *testing.T) {
	s, w, first := nodeLockServer(t)

	// Another session queues for the lock, so that it gets it the moment
	// the server's session ends, before the server can take it again.
	other, otherPID := w.takeOnKill(first)
	ctx := context.Background()
	if got := w.holder(); got != otherPID {
		t.Fatalf("the node lock is held by %d, want the other session %d", got, otherPID)
	}

	var r *resp
	pollLong(t, "posts refused as another server holds the lock", func() bool {
		r = post(t, s, []byte("refused\n"), "Feed", "NODE-FEED")
		return strings.Contains(r.header.Get("Service-Error"), "another session holds it")
	})
	r.fails(t, http.StatusServiceUnavailable, 503, "Feed: NODE-FEED", `node "test-node"`, "the node lock is lost")
	if ra := r.header.Get("Retry-After"); ra == "" {
		t.Error("no Retry-After")
	}
	if rd := readyz(t, s); rd.code != http.StatusServiceUnavailable || !strings.Contains(rd.body, "the node lock is lost") {
		t.Errorf("/readyz while another holds the lock: %d %q", rd.code, rd.body)
	}
	pollLong(t, "the other holder's error logged", func() bool { return logCount(s, logOther) == 1 })
	// Several more checks find the lock held: still one line each.
	time.Sleep(500 * time.Millisecond)
	if n, m := logCount(s, logLost), logCount(s, logOther); n != 1 || m != 1 {
		t.Errorf("logged the loss %d times and another holder %d times, want 1 each", n, m)
	}
	if !strings.Contains(s.Logs.String(), `"level":"ERROR","msg":"`+logOther) {
		t.Errorf("the other holder is not logged as an error:\n%s", s.Logs)
	}
	post(t, s, []byte("refused\n"), "Feed", "NODE-FEED").fails(t, http.StatusServiceUnavailable, 503, "the node lock is lost")

	var unlocked bool
	if err := other.QueryRowContext(ctx, `SELECT pg_advisory_unlock(`+nodeLockKeys+`)`, 0x77656973, "test-node").Scan(&unlocked); err != nil || !unlocked {
		t.Fatalf("release the other session's lock: %v %v", unlocked, err)
	}
	pollLong(t, "posts accepted again", func() bool {
		return post(t, s, []byte("after\n"), "Feed", "NODE-FEED").code == http.StatusOK
	})
	post(t, s, []byte("after\n"), "Feed", "NODE-FEED").ok(t)
	if got := w.holder(); got == 0 || got == first || got == otherPID {
		t.Errorf("the node lock is held by session %d, want a new one of the server's", got)
	}
	if rd := readyz(t, s); rd.code != http.StatusOK {
		t.Errorf("/readyz: %d %q", rd.code, rd.body)
	}
	pollLong(t, "the regain logged", func() bool { return logCount(s, logRegain) == 1 })
	if n, m := logCount(s, logLost), logCount(s, logOther); n != 1 || m != 1 {
		t.Errorf("logged the loss %d times and another holder %d times, want 1 each:\n%s", n, m, s.Logs)
	}
}

// TestNodeLockWaitedForAtStart: a server starting as a node whose lock
// another session holds waits for it, as a supervisor restarting a
// killed server needs: PostgreSQL ends the killed server's session, and
// releases its lock, only a moment later.
func TestNodeLockWaitedForAtStart(t *testing.T) {
	cfg := apptest.Config(t)
	if cfg.DB == "" {
		cfg.DB = metatest.PostgresDSN(t) // skips without WEIR_TEST_POSTGRES_DSN
	}
	w := newLockWatch(t, cfg.DB, cfg.Node)
	ctx := context.Background()
	other, err := w.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, `SELECT pg_advisory_lock(`+nodeLockKeys+`)`, 0x77656973, cfg.Node); err != nil {
		t.Fatal(err)
	}

	cfg.NodeLockStartWait = time.Minute
	logs := &apptest.Logs{}
	started := make(chan error, 1)
	var a *app.App
	go func() {
		var err error
		a, err = app.New(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil)))
		started <- err
	}()
	pollLong(t, "the server waiting for the node lock", func() bool {
		return strings.Contains(logs.String(), "another session holds this node's lock; waiting for it")
	})
	select {
	case err := <-started:
		t.Fatalf("the server did not wait for the node lock: %v", err)
	default:
	}
	if _, err := other.ExecContext(ctx, `SELECT pg_advisory_unlock(`+nodeLockKeys+`)`, 0x77656973, cfg.Node); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("the server did not start once the lock was free: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not start within 20s of the lock being free")
	}
	defer a.Shutdown(0)
	pollLong(t, "the server holding the node lock", func() bool { return w.holder() != 0 })
}

// TestPurgeWaitsForNodeLock: a server that has lost its node lock to
// another session (most likely another server started as the same node)
// removes none of the node's deleted streams until it holds the lock again:
// the rows may be the other server's now, their files on its disk, which
// removing the rows would leave named by no row.
func TestPurgeWaitsForNodeLock(t *testing.T) {
	cfg := apptest.Config(t)
	if cfg.DB == "" {
		cfg.DB = metatest.PostgresDSN(t) // skips without WEIR_TEST_POSTGRES_DSN
	}
	cfg.NodeLockCheckInterval = 50 * time.Millisecond
	pgConfig(&cfg)
	s := apptest.StartConfig(t, cfg)
	s.CreateFeed("NODE-FEED", "", "")
	w := newLockWatch(t, cfg.DB, cfg.Node)
	admin := user(t, s, "pgadmin", []string{access.Administrator}, nil)
	st := streamByReceipt(t, s, post(t, s, pgBig(1), "Feed", "NODE-FEED").ok(t))
	path := s.App.Store().Path(st)
	admin.do("DELETE", fmt.Sprintf("/streams/%d", st.ID), "").want(t, "delete", 200, nil)

	// Another session takes the lock the moment the server's ends.
	other, _ := w.takeOnKill(w.holder())
	ctx := context.Background()
	pollLong(t, "the server noticing the other holder", func() bool { return logCount(s, logOther) == 1 })

	pgAge(t, s.Cfg, st.ID)
	time.Sleep(500 * time.Millisecond) // 25 purge intervals
	if pgGone(t, s, st.ID) || !pgExists(t, path) {
		t.Fatal("a server without its node lock removed a deleted stream of the node")
	}

	var unlocked bool
	if err := other.QueryRowContext(ctx, `SELECT pg_advisory_unlock(`+nodeLockKeys+`)`, 0x77656973, cfg.Node).Scan(&unlocked); err != nil || !unlocked {
		t.Fatalf("release the other session's lock: %v %v", unlocked, err)
	}
	pollLong(t, "the stream purged once the lock is held again", func() bool { return pgGone(t, s, st.ID) && !pgExists(t, path) })
}

// takeOnKill queues another session for the node lock, ends the server's
// session (pid) and returns the other session, which then holds the lock
// (before the server can take it again), and its pid. It is closed at
// cleanup.
func (w *lockWatch) takeOnKill(pid int) (*sql.Conn, int) {
	w.t.Helper()
	ctx := context.Background()
	other, err := w.db.Conn(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = other.Close() })
	var otherPID int
	if err := other.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID); err != nil {
		w.t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		_, err := other.ExecContext(ctx, `SELECT pg_advisory_lock(`+nodeLockKeys+`)`, 0x77656973, w.node)
		granted <- err
	}()
	pollLong(w.t, "the other session waiting for the lock", func() bool {
		var waiting bool
		if err := w.db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`,
			otherPID).Scan(&waiting); err != nil {
			w.t.Fatal(err)
		}
		return waiting
	})
	w.kill(pid)
	select {
	case err := <-granted:
		if err != nil {
			w.t.Fatalf("the other session's lock: %v", err)
		}
	case <-time.After(20 * time.Second):
		w.t.Fatal("the other session did not get the lock")
	}
	return other, otherPID
}
