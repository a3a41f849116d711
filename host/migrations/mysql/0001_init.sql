-- chitin durable store, MySQL >= 8.0 / MariaDB >= 10.6.
-- Times are DATETIME(6) in UTC from the database clock (UTC_TIMESTAMP(6)); never a node's clock.
-- Identifiers compare byte for byte (utf8mb4_bin).

-- One row per node incarnation: every start registers anew and gets a fresh UUID (UUID()).
CREATE TABLE chitin_nodes (
    id          CHAR(36)     NOT NULL PRIMARY KEY,
    name        VARCHAR(255) NOT NULL,
    address     VARCHAR(255) NOT NULL,
    state       VARCHAR(16)  NOT NULL CHECK (state IN ('joining', 'active', 'leaving', 'down')),
    started_at  DATETIME(6)  NOT NULL,
    last_seen   DATETIME(6)  NOT NULL,
    -- At most one registration per name that is not `down` (NULLs do not collide).
    name_not_down VARCHAR(255) GENERATED ALWAYS AS (CASE WHEN state <> 'down' THEN name END) STORED,
    UNIQUE KEY chitin_nodes_name_not_down (name_not_down),
    KEY chitin_nodes_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE chitin_cluster_meta (
    id                 SMALLINT    NOT NULL PRIMARY KEY CHECK (id = 1),
    shard_count        BIGINT      NOT NULL,
    lease_ttl_ms       BIGINT      NOT NULL,
    renew_interval_ms  BIGINT      NOT NULL,
    created_at         DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per shard, never deleted (the epoch must never go back).
CREATE TABLE chitin_shard_leases (
    shard_id     VARCHAR(255) NOT NULL PRIMARY KEY,
    holder       CHAR(36)     NULL,
    holder_name  VARCHAR(255) NULL,
    epoch        BIGINT       NOT NULL DEFAULT 0,
    expires_at   DATETIME(6)  NULL,
    CHECK ((holder IS NULL) = (expires_at IS NULL))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE chitin_lease_history (
    shard_id     VARCHAR(255) NOT NULL,
    epoch        BIGINT       NOT NULL,
    holder       CHAR(36)     NOT NULL,
    holder_name  VARCHAR(255) NOT NULL,
    via          VARCHAR(16)  NOT NULL CHECK (via IN ('acquire', 'handover')),
    acquired_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (shard_id, epoch)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE chitin_journal_streams (
    stream    VARCHAR(255) NOT NULL PRIMARY KEY,
    last_seq  BIGINT       NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE chitin_journal (
    stream        VARCHAR(255) NOT NULL,
    seq           BIGINT       NOT NULL,
    request_id    VARCHAR(255) NOT NULL,
    payload       LONGBLOB     NOT NULL,
    shard_id      VARCHAR(255) NOT NULL,
    epoch         BIGINT       NOT NULL,
    committed_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (stream, seq),
    UNIQUE KEY chitin_journal_request (stream, request_id),
    KEY chitin_journal_shard_epoch (shard_id, epoch)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
