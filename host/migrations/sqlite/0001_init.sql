-- chitin durable store, SQLite (standalone mode only; cluster mode refuses SQLite).
-- Times are INTEGER milliseconds since the Unix epoch, from SQLite's clock
-- (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)).

CREATE TABLE chitin_nodes (
    id          TEXT    NOT NULL PRIMARY KEY,
    name        TEXT    NOT NULL,
    address     TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('joining', 'active', 'leaving', 'down')),
    started_at  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL
);
CREATE UNIQUE INDEX chitin_nodes_name_not_down ON chitin_nodes (name) WHERE state <> 'down';

CREATE TABLE chitin_cluster_meta (
    id                 INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    shard_count        INTEGER NOT NULL,
    lease_ttl_ms       INTEGER NOT NULL,
    renew_interval_ms  INTEGER NOT NULL,
    created_at         INTEGER NOT NULL
);

CREATE TABLE chitin_shard_leases (
    shard_id     TEXT    NOT NULL PRIMARY KEY,
    holder       TEXT    NULL,
    holder_name  TEXT    NULL,
    epoch        INTEGER NOT NULL DEFAULT 0,
    expires_at   INTEGER NULL,
    CHECK ((holder IS NULL) = (expires_at IS NULL))
);

CREATE TABLE chitin_lease_history (
    shard_id     TEXT    NOT NULL,
    epoch        INTEGER NOT NULL,
    holder       TEXT    NOT NULL,
    holder_name  TEXT    NOT NULL,
    via          TEXT    NOT NULL CHECK (via IN ('acquire', 'handover')),
    acquired_at  INTEGER NOT NULL,
    PRIMARY KEY (shard_id, epoch)
);

CREATE TABLE chitin_journal_streams (
    stream    TEXT    NOT NULL PRIMARY KEY,
    last_seq  INTEGER NOT NULL
);

CREATE TABLE chitin_journal (
    stream        TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    request_id    TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    shard_id      TEXT    NOT NULL,
    epoch         INTEGER NOT NULL,
    committed_at  INTEGER NOT NULL,
    PRIMARY KEY (stream, seq),
    UNIQUE (stream, request_id)
);
CREATE INDEX chitin_journal_shard_epoch ON chitin_journal (shard_id, epoch);
