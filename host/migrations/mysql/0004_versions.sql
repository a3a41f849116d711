-- Rolling upgrades (0.2). Both tables are new: 0.1.0 never reads them.

-- The chitin version and wire protocol each registration runs, written at
-- registration. A registration without a row is a 0.1.0 node.
CREATE TABLE chitin_node_versions (
    node_id      CHAR(36)     NOT NULL PRIMARY KEY,
    version      VARCHAR(64)  NOT NULL,
    protocol     BIGINT       NOT NULL,
    recorded_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The finalized cluster version (a release line, `0.2`): gates of releases
-- up to it are on. No row: 0.1, a cluster 0.1.0 made.
CREATE TABLE chitin_cluster_version (
    id            SMALLINT     NOT NULL PRIMARY KEY CHECK (id = 1),
    version       VARCHAR(64)  NOT NULL,
    finalized_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
