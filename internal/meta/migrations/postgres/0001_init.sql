-- Feeds: one row per named destination. Times are epoch milliseconds.
-- COLLATE "C" makes ORDER BY name byte-wise, as it is on SQLite, instead of
-- depending on the database's locale.
CREATE TABLE feeds (
    name             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    status           TEXT   NOT NULL,
    stream_type      TEXT   NOT NULL DEFAULT '',
    encoding         TEXT   NOT NULL DEFAULT '',
    context_encoding TEXT   NOT NULL DEFAULT '',
    classification   TEXT   NOT NULL DEFAULT '',
    description      TEXT   NOT NULL DEFAULT '',
    create_ms        BIGINT NOT NULL,
    update_ms        BIGINT NOT NULL
);

-- Streams: one row per post. The identity sequence is global and never
-- reuses a value, so consumers paging by id can never see a reused id.
CREATE TABLE streams (
    id           BIGSERIAL PRIMARY KEY,
    feed         TEXT    NOT NULL,
    type         TEXT    NOT NULL DEFAULT '',
    status       TEXT    NOT NULL CHECK (status IN ('LOCKED', 'UNLOCKED', 'DELETED')),
    create_ms    BIGINT  NOT NULL,
    effective_ms BIGINT  NOT NULL DEFAULT 0,
    status_ms    BIGINT  NOT NULL,
    node         TEXT    NOT NULL DEFAULT '',
    receipt_id   TEXT    NOT NULL DEFAULT '',
    parts        INTEGER NOT NULL DEFAULT 0,
    raw_size     BIGINT  NOT NULL DEFAULT 0,
    file_size    BIGINT  NOT NULL DEFAULT 0,
    attributes   TEXT    NOT NULL DEFAULT '{}'
);

CREATE INDEX streams_feed_id ON streams (feed, id);
CREATE INDEX streams_status_node ON streams (status, node);
CREATE INDEX streams_receipt_id ON streams (receipt_id);
CREATE INDEX streams_create_ms ON streams (create_ms);
