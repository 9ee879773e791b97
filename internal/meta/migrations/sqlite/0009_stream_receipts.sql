-- Receipt ids that earlier hops (proxies) gave the data a stream holds,
-- taken from its parts' ReceiptIdPath, so that the receipt id a sender got
-- from a proxy finds the stream on the main service (the "Receipt Id" field
-- of stream queries). A stream's own receipt id stays in streams.receipt_id.
CREATE TABLE stream_receipts (
    receipt_id TEXT    NOT NULL,
    stream_id  INTEGER NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
    PRIMARY KEY (receipt_id, stream_id)
) WITHOUT ROWID;
-- For the cascade: deleting a stream looks its receipts up by stream.
CREATE INDEX stream_receipts_stream ON stream_receipts (stream_id);
