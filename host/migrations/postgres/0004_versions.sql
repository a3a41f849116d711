-- Rolling upgrades (0.2). Both tables are new: 0.1.0 never reads them.

-- The chitin version and wire protocol each registration runs, written at
-- registration. A registration without a row is a 0.1.0 node.
CREATE TABLE chitin_node_versions (
    node_id      uuid        PRIMARY KEY,
    version      text        NOT NULL,
    protocol     bigint      NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The finalized cluster version (a release line, `0.2`): gates of releases
-- up to it are on. No row: 0.1, a cluster 0.1.0 made.
CREATE TABLE chitin_cluster_version (
    id            smallint    PRIMARY KEY CHECK (id = 1),
    version       text        NOT NULL,
    finalized_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
