-- The store's log (internal/store/logrec.go): every post the store packs
-- is written as a record of its rows and bytes in the node's open pack,
-- and may be answered before its rows are inserted (store.commit: log).
--
-- store_log_packs lists each node's packs in the order they were opened,
-- each recorded before any of its records is answered, with where the
-- log ended in the pack before it (records past that end there are a
-- failed write's). store_marks says how far each node's log is recorded
-- here: each transaction that inserts rows moves it to the end of the last
-- record it covers. A start after a crash inserts the rows of the records
-- past the mark, in the packs listed from the mark's on, and no others.
CREATE TABLE store_log_packs (
    node     TEXT   NOT NULL,
    seq      BIGINT NOT NULL,
    pack     TEXT   NOT NULL,
    prev_end BIGINT NOT NULL,
    PRIMARY KEY (node, seq)
);
CREATE TABLE store_marks (
    node     TEXT   NOT NULL PRIMARY KEY,
    seq      BIGINT NOT NULL,
    pack     TEXT   NOT NULL,
    pack_end BIGINT NOT NULL
);
