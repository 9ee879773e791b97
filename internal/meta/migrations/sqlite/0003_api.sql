-- Optimistic locking for full-object updates: PUT must name the version it
-- read, and a stale version is refused instead of silently overwritten.
ALTER TABLE feeds ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE users ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

-- Accepted-then-poll operations (import, export, bulk work, later processing
-- and search). Stored so that they survive a restart and any node can
-- report them; node is the node running it, lease_ms when its claim lapses.
CREATE TABLE operations (
    id         TEXT    NOT NULL PRIMARY KEY,
    kind       TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    owner      TEXT    NOT NULL DEFAULT '',
    request    TEXT    NOT NULL DEFAULT '{}',
    result     TEXT    NOT NULL DEFAULT '{}',
    error      TEXT    NOT NULL DEFAULT '',
    done       INTEGER NOT NULL DEFAULT 0,
    total      INTEGER NOT NULL DEFAULT 0,
    node       TEXT    NOT NULL DEFAULT '',
    lease_ms   INTEGER NOT NULL DEFAULT 0,
    create_ms  INTEGER NOT NULL,
    update_ms  INTEGER NOT NULL,
    finish_ms  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX operations_state ON operations (state, create_ms);
CREATE INDEX operations_owner ON operations (owner, create_ms);
