-- Posts a trusted forwarder (a proxy) sent with a GUID, by forwarder and
-- GUID: a proxy that loses the answer to a send (killed, cut off) sends
-- the same aggregate again with the same GUID, and is then answered with
-- the receipt id of the copy already stored instead of storing it twice.
-- Rows are pruned after 30 days, long past a proxy's default 7 days of retries.
CREATE TABLE forwarded_posts (
    sender     TEXT   NOT NULL,
    guid       TEXT   NOT NULL,
    receipt_id TEXT   NOT NULL,
    create_ms  BIGINT NOT NULL,
    PRIMARY KEY (sender, guid)
);
CREATE INDEX forwarded_posts_create ON forwarded_posts (create_ms);
