-- Pack files a compaction of packs (the purge of deleted streams, see
-- internal/store/compact.go) may leave on disk: the new pack it is
-- writing, until the transaction that repoints the rows to it, and then
-- the old pack, until its file is removed. Each is removed, once no row
-- names it, by the next start or purge of its node, and its row then
-- goes: a crash at any point leaves no pack file that nothing removes.
CREATE TABLE pack_removals (
    pack      TEXT   NOT NULL PRIMARY KEY,
    node      TEXT   NOT NULL,
    create_ms BIGINT NOT NULL
);
CREATE INDEX pack_removals_node ON pack_removals (node);
