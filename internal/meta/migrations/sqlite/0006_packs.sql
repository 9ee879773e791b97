-- Small posts are stored together: one pack file per group commit holds
-- the stream files of every small post in it, back to back, so that a
-- batch of posts costs one file fsync instead of one each. pack is the
-- pack file (relative to the store root, '' for a stream with a file of
-- its own) and pack_offset where the stream's bytes start in it
-- (file_size is their length).
ALTER TABLE streams ADD COLUMN pack TEXT NOT NULL DEFAULT '';
ALTER TABLE streams ADD COLUMN pack_offset INTEGER NOT NULL DEFAULT 0;
CREATE INDEX streams_pack ON streams (pack) WHERE pack <> '';
