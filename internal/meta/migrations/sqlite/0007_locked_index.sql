-- Only restart recovery looks streams up by (status, node), and only for
-- LOCKED ones: a partial index holds just the streams being written (none,
-- in the steady state, since small posts are inserted complete), instead
-- of an entry for every stream that each insert and status change must
-- maintain. Queries by status alone use streams_status_ms.
DROP INDEX IF EXISTS streams_status_node;
CREATE INDEX streams_locked ON streams (node, id) WHERE status = 'LOCKED';
