package meta

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/meta/metatest"
)

// TestNodeLockHeldWhileTakenAgain: from the check that finds the lock's
// session ended until the lock is taken again, Held reports the lock lost
// (purge and compaction wait), though Err stays nil within the release
// wait (posts go on). Here another session holds the lock from the moment
// the server's session ends for a while, within a release wait made long:
// Held says so the whole time while Err is nil, and both are nil again
// once the lock is the repository's again. Held used to be Err,
// nil during the retake, so that a purge could run as the node while
// another session held its lock.
func TestNodeLockHeldWhileTakenAgain(t *testing.T) {
	dsn := metatest.PostgresDSN(t) // skips without WEIR_TEST_POSTGRES_DSN
	ctx := context.Background()
	r, err := Open(ctx, dsn, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := r.LockNode(ctx, "held-node", NodeLockOptions{
		CheckInterval: 20 * time.Millisecond, ReleaseWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := l.Held(); err != nil {
		t.Fatalf("Held just after LockNode: %v", err)
	}

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	holder := func() int {
		var pid int
		err := db.QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = $1::int4::oid AND objid = `+nodeLockHash+`::oid AND objsubid = 2`,
			nodeLockKey, "held-node").Scan(&pid)
		if errors.Is(err, sql.ErrNoRows) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	first := holder()
	if first == 0 {
		t.Fatal("nobody holds the node lock after LockNode")
	}
	// Another session queues for the lock, then the repository's session
	// is terminated: the other gets the lock before the repository can
	// take it again.
	other, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var otherPID int
	if err := other.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID); err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		_, err := other.ExecContext(ctx, `SELECT pg_advisory_lock($1, `+nodeLockHash+`)`, nodeLockKey, "held-node")
		granted <- err
	}()
	waitFor(t, "the other session queued for the lock", func() bool {
		var waiting bool
		if err := db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`,
			otherPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	if _, err := db.Exec(`SELECT pg_terminate_backend($1)`, first); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the other session's lock: %v", err)
	}
	waitFor(t, "Held to report the lock lost", func() bool { return l.Held() != nil })
	// For a while the other session holds it: Held says so at every look,
	// while Err is nil (within the release wait posts go on).
	for range 20 {
		if err := l.Held(); !errors.Is(err, ErrNodeLockLost) {
			t.Fatalf("Held while another session holds the lock: %v", err)
		}
		if err := l.Err(); err != nil {
			t.Fatalf("Err within the release wait: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := other.ExecContext(ctx, `SELECT pg_advisory_unlock($1, `+nodeLockHash+`)`, nodeLockKey, "held-node"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lock taken again", func() bool { return l.Held() == nil })
	if err := l.Err(); err != nil {
		t.Errorf("Err once the lock is taken again: %v", err)
	}
	if pid := holder(); pid == 0 || pid == first || pid == otherPID {
		t.Errorf("the node lock is held by session %d, want a new one of the repository's", pid)
	}
}

// TestNodeLockHeldSQLite: on SQLite (the data directory's lock is the
// node's) and on a nil NodeLock, Held is always nil.
func TestNodeLockHeldSQLite(t *testing.T) {
	ctx := context.Background()
	r, err := Open(ctx, "", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := r.LockNode(ctx, "n", NodeLockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Held() != nil || l.Err() != nil {
		t.Fatalf("SQLite node lock: Held %v, Err %v", l.Held(), l.Err())
	}
	var none *NodeLock
	if none.Held() != nil || none.Err() != nil {
		t.Fatal("a nil NodeLock reports an error")
	}
}

// waitFor polls cond up to a deadline generous enough for a slow, shared
// machine; never a measure of speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
