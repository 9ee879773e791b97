-- Data receipt rules (receive.receiptCheckMode RECEIPT_POLICY): one row
-- holding the whole rule set as JSON. The API and the admin command replace
-- it as a whole; version goes up on every change, for optimistic locking
-- and so that every node notices a change with one cheap read.
CREATE TABLE receipt_rules (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    rules       TEXT    NOT NULL,
    version     BIGINT  NOT NULL,
    update_ms   BIGINT  NOT NULL,
    update_user TEXT    NOT NULL
);
