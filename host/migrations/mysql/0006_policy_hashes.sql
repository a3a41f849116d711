-- Expand step (additive): the same policies everywhere (0.2). New tables;
-- 0.1.0 never reads them.
--
-- What each registration runs in each policy slot (the SHA-256 of its
-- component), written at start and on every reload, with whether it runs
-- regardless (`policies.allow_mismatch`): peers hand leases only to nodes
-- that match or are allowed.
CREATE TABLE chitin_node_policies (
    node_id      CHAR(36)     NOT NULL,
    slot         VARCHAR(64)  NOT NULL,
    sha256       CHAR(64)     NOT NULL,
    allow_mismatch BOOLEAN      NOT NULL DEFAULT FALSE,
    recorded_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (node_id, slot)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- What the cluster runs in each slot: the first node to start records it;
-- `chitin policy reload --adopt` replaces it. A node whose component differs
-- takes no leases (unless `policies.allow_mismatch`).
CREATE TABLE chitin_cluster_policies (
    slot         VARCHAR(64)  NOT NULL PRIMARY KEY,
    sha256       CHAR(64)     NOT NULL,
    recorded_by  VARCHAR(255) NOT NULL,
    recorded_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
