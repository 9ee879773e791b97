package meta

import (
	"context"
	"database/sql/driver"
	"fmt"
)

// nodeLockKey is the first key of the node locks' PostgreSQL advisory
// locks ("weis"), beside the migrations' "weir".
const nodeLockKey = 0x77656973

// LockNode makes sure that no other server works on this database as the
// same node: crash recovery at start deletes the node's LOCKED streams,
// which would be another server's posts in flight, and the two would give
// the same receipt ids. On PostgreSQL it takes a session advisory lock on a
// connection of its own (outside the pool's working set), keyed by the
// schema and the node name, and fails at once when another session holds
// it; release ends that session. On SQLite the database is in the data
// directory, which the server has locked for the node already.
func (r *Repo) LockNode(ctx context.Context, node string) (release func(), err error) {
	if r.engine != enginePostgres {
		return func() {}, nil
	}
	r.db.SetMaxOpenConns(17) // the pool's 16, and this one
	r.db.SetMaxIdleConns(17)
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock node %q: %w", node, err)
	}
	// Ends the session (and so its lock) instead of returning it to the
	// pool still holding the lock.
	drop := func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}
	var got bool
	if err := conn.QueryRowContext(ctx,
		`SELECT pg_try_advisory_lock($1, hashtext(coalesce(current_schema(), '') || '/' || $2))`,
		nodeLockKey, node).Scan(&got); err != nil {
		drop()
		return nil, fmt.Errorf("lock node %q: %w", node, err)
	}
	if !got {
		drop()
		return nil, fmt.Errorf("node %q is in use by another weir server on this PostgreSQL database: "+
			"every server needs a node name of its own (--node or node:)", node)
	}
	return drop, nil
}
