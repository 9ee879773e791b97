-- Feeds: one row per named destination. Times are epoch milliseconds.
CREATE TABLE feeds (
    name             TEXT    NOT NULL PRIMARY KEY,
    status           TEXT    NOT NULL,
    stream_type      TEXT    NOT NULL DEFAULT '',
    encoding         TEXT    NOT NULL DEFAULT '',
    context_encoding TEXT    NOT NULL DEFAULT '',
    classification   TEXT    NOT NULL DEFAULT '',
    description      TEXT    NOT NULL DEFAULT '',
    create_ms        INTEGER NOT NULL,
    update_ms        INTEGER NOT NULL
);

-- Streams: one row per post. AUTOINCREMENT (rather than plain rowid reuse)
-- guarantees an id is never handed out twice, even after the highest row is
-- physically deleted, so consumers paging by id can never see a reused id.
CREATE TABLE streams (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    feed         TEXT    NOT NULL,
    type         TEXT    NOT NULL DEFAULT '',
    status       TEXT    NOT NULL CHECK (status IN ('LOCKED', 'UNLOCKED', 'DELETED')),
    create_ms    INTEGER NOT NULL,
    effective_ms INTEGER NOT NULL DEFAULT 0,
    status_ms    INTEGER NOT NULL,
    node         TEXT    NOT NULL DEFAULT '',
    receipt_id   TEXT    NOT NULL DEFAULT '',
    parts        INTEGER NOT NULL DEFAULT 0,
    raw_size     INTEGER NOT NULL DEFAULT 0,
    file_size    INTEGER NOT NULL DEFAULT 0,
    attributes   TEXT    NOT NULL DEFAULT '{}'
);

CREATE INDEX streams_feed_id ON streams (feed, id);
CREATE INDEX streams_status_node ON streams (status, node);
CREATE INDEX streams_receipt_id ON streams (receipt_id);
CREATE INDEX streams_create_ms ON streams (create_ms);
