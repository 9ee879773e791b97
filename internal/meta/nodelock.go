package meta

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// nodeLockKey is the first key of the node locks' PostgreSQL advisory
// locks ("weis"), beside the migrations' "weir".
const nodeLockKey = 0x77656973

// nodeLockHash is the second key: the schema and the node name ($2).
const nodeLockHash = `hashtext(coalesce(current_schema(), '') || '/' || $2)`

// DefaultNodeLockCheckInterval is how often a server checks that it
// still holds its node's lock, and while it does not, tries to take it
// again.
const DefaultNodeLockCheckInterval = 2 * time.Second

// nodeLockMinTimeout bounds a check or an attempt to take the lock: one
// that gets no answer within it (a connection cut off without a reset)
// counts as failed.
const nodeLockMinTimeout = 5 * time.Second

// NodeLockOptions tune a NodeLock.
type NodeLockOptions struct {
	// CheckInterval is how often the lock is checked and, while it is
	// lost, taken again; 0 means DefaultNodeLockCheckInterval.
	CheckInterval time.Duration
	// StartWait is how long LockNode waits for a lock another session
	// holds; 0 means DefaultNodeLockStartWait, negative not at all.
	StartWait time.Duration
	// ReleaseWait is how long a lock just lost and held by another session
	// is tried again before that session is blamed (and posts refused); 0
	// means defaultNodeLockReleaseWait. Tests lengthen it to look at the
	// lock while it is being taken again.
	ReleaseWait time.Duration
}

// DefaultNodeLockStartWait is how long a starting server waits for its
// node's lock. A server that was just killed (or crashed) holds it until
// PostgreSQL notices that its connection closed, which takes a moment; a
// supervisor that restarts it at once must not be refused for that.
const DefaultNodeLockStartWait = 10 * time.Second

// nodeLockRetry is how often a starting server tries the lock again.
const nodeLockRetry = 100 * time.Millisecond

// NodeLock is a server's lock on its node in the database (see
// Repo.LockNode). Its methods are safe for concurrent use, and on a nil
// NodeLock (nothing locked: read-only storage).
type NodeLock struct {
	r        *Repo
	node     string
	interval time.Duration
	timeout  time.Duration
	release  time.Duration // NodeLockOptions.ReleaseWait
	// lost is nil while the lock is held, else why posts must not be
	// received as the node.
	lost atomic.Pointer[error]
	// retaking is true from the check that finds the lock lost until it is
	// taken again: posts go on meanwhile (Err is nil), but nothing else
	// may act as the node (Held).
	retaking atomic.Bool
	conn     *sql.Conn // the lock's session; only watch uses it until it returns
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
}

// ErrNodeLockLost is wrapped by NodeLock.Err while the lock is not held.
var ErrNodeLockLost = errors.New("the node lock is lost")

// LockNode makes sure that no other server works on this database as the
// same node: crash recovery at start deletes the node's LOCKED streams,
// which would be another server's posts in flight, and the two would give
// the same receipt ids. On PostgreSQL it takes a session advisory lock on a
// connection of its own (outside the pool's working set), keyed by the
// schema and the node name, and fails when another session holds it
// still after StartWait. On SQLite the database is in the data directory, which the server
// has locked for the node already, and the NodeLock holds nothing.
//
// A session can end while the server runs (its backend terminated, the
// database restarted, the connection cut), and its lock with it. So the
// lock is checked every CheckInterval on its connection; once lost, it is
// taken again at once on a new connection, and Held reports an error until
// it is. Posts go on while it is taken (Err stays nil: they were received
// without the lock since the session ended anyway); only if it cannot be
// taken (the database away, or another session holding it) does Err say
// so, and the server refuses posts and is not ready, until a later
// attempt, one each interval, takes it. One warning is logged when it is
// lost, one error if another session turns out to hold it, and one info
// line when it is taken again. Release ends the session.
func (r *Repo) LockNode(ctx context.Context, node string, opt NodeLockOptions) (*NodeLock, error) {
	l := &NodeLock{r: r, node: node, interval: opt.CheckInterval, release: opt.ReleaseWait}
	if r.engine != enginePostgres {
		return l, nil
	}
	if l.interval <= 0 {
		l.interval = DefaultNodeLockCheckInterval
	}
	l.timeout = max(l.interval, nodeLockMinTimeout)
	if l.release <= 0 {
		l.release = defaultNodeLockReleaseWait
	}
	r.db.SetMaxOpenConns(17) // the pool's 16, and this one
	r.db.SetMaxIdleConns(17)
	wait := opt.StartWait
	if wait == 0 {
		wait = DefaultNodeLockStartWait
	}
	deadline := time.Now().Add(wait)
	var conn *sql.Conn
	for logged := false; ; {
		c, got, err := l.take(ctx)
		if err != nil {
			return nil, fmt.Errorf("lock node %q: %w", node, err)
		}
		if got {
			conn = c
			break
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("node %q is in use by another weir server on this PostgreSQL database: "+
				"every server needs a node name of its own (--node or node:)", node)
		}
		if !logged {
			logged = true
			r.logger.Info("another session holds this node's lock; waiting for it (a server of this node that has just stopped "+
				"or crashed holds it until PostgreSQL notices)", "node", node, "wait", wait.String())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock node %q: %w", node, context.Cause(ctx))
		case <-time.After(nodeLockRetry):
		}
	}
	l.conn = conn
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.done = make(chan struct{})
	go l.watch()
	return l, nil
}

// Err is nil while the lock is held (always on SQLite), else an error
// wrapping ErrNodeLockLost that says why the server must not receive as
// its node now.
func (l *NodeLock) Err() error {
	if l == nil {
		return nil
	}
	if p := l.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// Held is nil unless the last check found the lock lost (always nil on
// SQLite): besides Err's errors, it reports one while a lock just lost is
// being taken again. Between the session's end and the check that finds
// it (CheckInterval, or the check's timeout), it is nil all the same. What may only be done as the node and can wait (removing
// deleted streams, compacting packs) checks Held; receiving checks Err.
func (l *NodeLock) Held() error {
	if err := l.Err(); err != nil {
		return err
	}
	if l != nil && l.retaking.Load() {
		return fmt.Errorf("node %q: %w (its PostgreSQL session ended) and is being taken again", l.node, ErrNodeLockLost)
	}
	return nil
}

// Release stops watching the lock and ends its session, which releases it.
func (l *NodeLock) Release() {
	if l == nil || l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
	if l.conn != nil {
		dropConn(l.conn)
		l.conn = nil
	}
}

// take tries to take the lock on a new session. got is false when another
// session holds it.
func (l *NodeLock) take(ctx context.Context) (conn *sql.Conn, got bool, err error) {
	if conn, err = l.r.db.Conn(ctx); err != nil {
		return nil, false, err
	}
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, `+nodeLockHash+`)`,
		nodeLockKey, l.node).Scan(&got); err != nil {
		// Also ends a session that took the lock but could not say so.
		dropConn(conn)
		return nil, false, err
	}
	if !got {
		dropConn(conn)
		return nil, false, nil
	}
	return conn, true, nil
}

// check reports whether the lock's session is alive and holds the lock.
func (l *NodeLock) check(ctx context.Context) error {
	var held bool
	if err := l.conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
		AND classid = $1::int4::oid AND objid = `+nodeLockHash+`::oid AND objsubid = 2)`,
		nodeLockKey, l.node).Scan(&held); err != nil {
		return err
	}
	if !held {
		return errors.New("its session no longer holds it")
	}
	return nil
}

// watch checks the lock every interval until Release, and while it is
// lost takes it again.
func (l *NodeLock) watch() {
	defer close(l.done)
	log := l.r.logger.With("node", l.node)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	var lostAt time.Time
	othersReported := false
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		if l.conn != nil {
			ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
			err := l.check(ctx)
			cancel()
			if err == nil {
				continue
			}
			if l.ctx.Err() != nil {
				return
			}
			l.retaking.Store(true)
			dropConn(l.conn)
			l.conn = nil
			lostAt = time.Now()
			// Posts are not refused yet: the lock is taken again at once
			// below, and usually got (a database restart or a cut connection
			// ended the session, and nobody else wants the node). Posts
			// received since the session ended were received without the lock
			// anyway; refusing them for the moment taking it needs would only
			// give senders 503s. Refusal starts when it cannot be taken.
			log.Warn("lost the node's lock in the PostgreSQL database (its session ended): taking it again; "+
				"posts are received meanwhile, but refused with 503 (and /readyz not ready) while it cannot be taken, "+
				"and deleted streams are not purged until it is", "err", err)
		}
		conn, got, err := l.takeAgain(lostAt)
		switch {
		case l.ctx.Err() != nil:
			if conn != nil {
				dropConn(conn)
			}
			return
		case err != nil:
			if l.lost.Load() == nil {
				l.setLost(fmt.Errorf("node %q: %w (its PostgreSQL session ended); this server takes it again before it receives more data",
					l.node, ErrNodeLockLost))
			}
			log.Debug("cannot take the node's lock again yet", "err", err)
		case !got:
			l.setLost(fmt.Errorf("node %q: %w and another session holds it now: another weir server may have started "+
				"as the same node on this database", l.node, ErrNodeLockLost))
			if !othersReported {
				othersReported = true
				log.Error("another session took this node's lock in the PostgreSQL database while this server had lost it: "+
					"most likely another weir server started as the same node. Its crash recovery may have failed this "+
					"server's posts in flight, and the two could give the same receipt ids. This server refuses posts (503) "+
					"until the lock is free again; give every server a node name of its own (--node or node:)",
					"lostFor", time.Since(lostAt).Round(time.Millisecond).String())
			}
		default:
			l.conn = conn
			l.lost.Store(nil)
			l.retaking.Store(false)
			othersReported = false
			log.Info("took the node's lock in the PostgreSQL database again: receiving resumes",
				"lostFor", time.Since(lostAt).Round(time.Millisecond).String())
		}
	}
}

// defaultNodeLockReleaseWait is how long a lock just lost is taken again before
// another session is blamed for holding it: pg_terminate_backend (and a
// backend's end in general) tells the client before it releases the
// session's locks, so the server's own dying session can hold the lock for
// a moment after the server sees it gone.
const defaultNodeLockReleaseWait = time.Second

// nodeLockReleaseRetry is how often a lock just lost is tried within
// the release wait.
const nodeLockReleaseRetry = 20 * time.Millisecond

// takeAgain takes the lock on a new session. Within the release wait of
// lostAt, a lock held by another session is tried again every
// nodeLockReleaseRetry, for the one holding it may be the server's own session,
// ending.
func (l *NodeLock) takeAgain(lostAt time.Time) (conn *sql.Conn, got bool, err error) {
	for {
		ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
		conn, got, err = l.take(ctx)
		cancel()
		if err != nil || got || time.Since(lostAt) >= l.release {
			return conn, got, err
		}
		select {
		case <-l.ctx.Done():
			return nil, false, context.Cause(l.ctx)
		case <-time.After(nodeLockReleaseRetry):
		}
	}
}

func (l *NodeLock) setLost(err error) { l.lost.Store(&err) }

// dropConn ends conn's session (and so its locks) instead of returning it
// to the pool still holding them.
func dropConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
