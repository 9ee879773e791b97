-- The proxy's forwarding state. A proxy keeps received posts as streams
-- (the same durable store as the main service); these tables say which
-- aggregate each stream belongs to and where each aggregate still has to go.

-- Aggregates: streams of one feed and type forwarded together as one zip.
-- open = 1 while streams may still be added; closing one queues it for
-- every destination (proxy_forwards) in the same transaction.
CREATE TABLE proxy_aggregates (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    feed      TEXT    NOT NULL,
    type      TEXT    NOT NULL DEFAULT '',
    guid      TEXT    NOT NULL,
    open      INTEGER NOT NULL,
    items     INTEGER NOT NULL DEFAULT 0,
    bytes     INTEGER NOT NULL DEFAULT 0,
    create_ms INTEGER NOT NULL,
    close_ms  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX proxy_aggregates_open ON proxy_aggregates (open, create_ms);

-- Which aggregate a stream is in. A complete stream without a row here is
-- waiting for the aggregator.
CREATE TABLE proxy_items (
    stream_id    INTEGER PRIMARY KEY,
    aggregate_id INTEGER NOT NULL
);
CREATE INDEX proxy_items_aggregate ON proxy_items (aggregate_id, stream_id);

-- One row per aggregate and destination it has not yet reached. QUEUED
-- rows are sent when next_ms has passed (attempts > 0: retrying); FAILED
-- rows are the failure area, kept until an operator replays them. A sent
-- aggregate's row is deleted; an aggregate without rows is removed.
CREATE TABLE proxy_forwards (
    aggregate_id INTEGER NOT NULL,
    destination  TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('QUEUED', 'FAILED')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    first_ms     INTEGER NOT NULL DEFAULT 0,
    last_ms      INTEGER NOT NULL DEFAULT 0,
    next_ms      INTEGER NOT NULL,
    last_status  INTEGER NOT NULL DEFAULT 0,
    error        TEXT    NOT NULL DEFAULT '',
    error_log    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (aggregate_id, destination)
);
CREATE INDEX proxy_forwards_due ON proxy_forwards (destination, state, next_ms);
