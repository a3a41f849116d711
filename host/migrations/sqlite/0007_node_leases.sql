-- Expand step (additive): node-level leases (0.2, gate `node-leases`).
-- See the PostgreSQL migration of the same number for the model; times are
-- INTEGER milliseconds as everywhere in this dialect.
ALTER TABLE chitin_nodes ADD COLUMN liveness_epoch INTEGER NOT NULL DEFAULT 1;
ALTER TABLE chitin_nodes ADD COLUMN lease_expires_at INTEGER NULL;
ALTER TABLE chitin_shard_leases ADD COLUMN liveness_epoch INTEGER NULL;
