-- How far each node's store log has been recorded here. The store writes
-- every post it packs as a record of its rows and bytes in the node's
-- open pack (internal/store/logrec.go) and may answer the post before its
-- rows are inserted (store.commit: log); each transaction that inserts
-- rows moves the node's mark to the end of the last record it covers, so
-- that a start after a crash inserts the rows of the records past the
-- mark, following the packs that came after this one (each names the one
-- before it), and no others.
CREATE TABLE store_marks (
    node     TEXT   NOT NULL PRIMARY KEY,
    pack     TEXT   NOT NULL,
    pack_end BIGINT NOT NULL
);
