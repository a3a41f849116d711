-- Expand step (additive): the same policies everywhere (0.2). New tables;
-- 0.1.0 never reads them.
--
-- What each registration runs in each policy slot (the SHA-256 of its
-- component), written at start and on every reload, with whether it runs
-- regardless (`policies.allow_mismatch`): peers hand leases only to nodes
-- that match or are allowed.
CREATE TABLE chitin_node_policies (
    node_id      uuid        NOT NULL,
    slot         text        NOT NULL,
    sha256       text        NOT NULL,
    allow_mismatch boolean     NOT NULL DEFAULT false,
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (node_id, slot)
);

-- What the cluster runs in each slot: the first node to start records it;
-- `chitin policy reload --adopt` replaces it. A node whose component differs
-- takes no leases (unless `policies.allow_mismatch`).
CREATE TABLE chitin_cluster_policies (
    slot         text        PRIMARY KEY,
    sha256       text        NOT NULL,
    recorded_by  text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
