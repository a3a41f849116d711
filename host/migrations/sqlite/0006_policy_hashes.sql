-- Expand step (additive): the same policies everywhere (0.2). SQLite runs
-- standalone only, with one node: the tables exist so that every dialect
-- has the same schema.
CREATE TABLE chitin_node_policies (
    node_id      TEXT    NOT NULL,
    slot         TEXT    NOT NULL,
    sha256       TEXT    NOT NULL,
    allow_mismatch INTEGER NOT NULL DEFAULT 0,
    recorded_at  INTEGER NOT NULL,
    PRIMARY KEY (node_id, slot)
);

CREATE TABLE chitin_cluster_policies (
    slot         TEXT    NOT NULL PRIMARY KEY,
    sha256       TEXT    NOT NULL,
    recorded_by  TEXT    NOT NULL,
    recorded_at  INTEGER NOT NULL
);
