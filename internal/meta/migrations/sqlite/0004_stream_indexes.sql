-- Indexes for the stream finder's sorts and filters (POST /api/streams/find)
-- and for bulk status changes.
CREATE INDEX streams_effective_ms ON streams (effective_ms);
CREATE INDEX streams_type ON streams (type);
CREATE INDEX streams_status_ms ON streams (status, status_ms);
