-- The data directory whose files the rows name (see checkDataDir in internal/app;
-- on SQLite, whose database is in the data directory, it stays empty):
-- one row, the id written in the directory's data-id file when the first
-- server started on this database. Every server on the database must use
-- that directory (a filesystem they share); one started on another is
-- refused, since it could read none of the others' streams.
CREATE TABLE data_directory (
    id        INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    data_id   TEXT    NOT NULL,
    create_ms BIGINT  NOT NULL
);
