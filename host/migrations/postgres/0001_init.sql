-- chitin durable store, PostgreSQL >= 14.
-- Times are timestamptz from the database clock (clock_timestamp()); never a node's clock.

-- One row per node incarnation: every start registers anew and gets a fresh UUID.
CREATE TABLE chitin_nodes (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text        NOT NULL,
    address     text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('joining', 'active', 'leaving', 'down')),
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen   timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- At most one registration per name that is not `down` (stale ones are marked down first).
CREATE UNIQUE INDEX chitin_nodes_name_not_down ON chitin_nodes (name) WHERE state <> 'down';

-- What the cluster was started with; every node must agree.
CREATE TABLE chitin_cluster_meta (
    id                 smallint    PRIMARY KEY CHECK (id = 1),
    shard_count        bigint      NOT NULL,
    lease_ttl_ms       bigint      NOT NULL,
    renew_interval_ms  bigint      NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per shard, never deleted (the epoch must never go back).
CREATE TABLE chitin_shard_leases (
    shard_id     text        PRIMARY KEY,
    holder       uuid        NULL,
    holder_name  text        NULL,
    epoch        bigint      NOT NULL DEFAULT 0,
    expires_at   timestamptz NULL,
    CHECK ((holder IS NULL) = (expires_at IS NULL))
);

-- Every epoch ever granted: evidence that each commit's epoch was current.
CREATE TABLE chitin_lease_history (
    shard_id     text        NOT NULL,
    epoch        bigint      NOT NULL,
    holder       uuid        NOT NULL,
    holder_name  text        NOT NULL,
    via          text        NOT NULL CHECK (via IN ('acquire', 'handover')),
    acquired_at  timestamptz NOT NULL,
    PRIMARY KEY (shard_id, epoch)
);

-- The reference journal: per-stream gapless sequence numbers.
CREATE TABLE chitin_journal_streams (
    stream    text   PRIMARY KEY,
    last_seq  bigint NOT NULL
);

CREATE TABLE chitin_journal (
    stream        text        NOT NULL,
    seq           bigint      NOT NULL,
    request_id    text        NOT NULL,
    payload       bytea       NOT NULL,
    shard_id      text        NOT NULL,
    epoch         bigint      NOT NULL,
    committed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (stream, seq),
    CONSTRAINT chitin_journal_request UNIQUE (stream, request_id)
);
CREATE INDEX chitin_journal_shard_epoch ON chitin_journal (shard_id, epoch);
