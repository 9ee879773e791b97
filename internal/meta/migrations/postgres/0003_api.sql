-- Optimistic locking for full-object updates: PUT must name the version it
-- read, and a stale version is refused instead of silently overwritten.
ALTER TABLE feeds ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE users ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

-- Accepted-then-poll operations (import, export, bulk work, later processing
-- and search). Stored so that they survive a restart and any node can
-- report them; node is the node running it, lease_ms when its claim lapses.
CREATE TABLE operations (
    id         TEXT    COLLATE "C" NOT NULL PRIMARY KEY,
    kind       TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    owner      TEXT    NOT NULL DEFAULT '',
    request    TEXT    NOT NULL DEFAULT '{}',
    result     TEXT    NOT NULL DEFAULT '{}',
    error      TEXT    NOT NULL DEFAULT '',
    done       BIGINT  NOT NULL DEFAULT 0,
    total      BIGINT  NOT NULL DEFAULT 0,
    node       TEXT    NOT NULL DEFAULT '',
    lease_ms   BIGINT  NOT NULL DEFAULT 0,
    create_ms  BIGINT  NOT NULL,
    update_ms  BIGINT  NOT NULL,
    finish_ms  BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX operations_state ON operations (state, create_ms);
CREATE INDEX operations_owner ON operations (owner, create_ms);
