-- Expand step (additive): node-level leases (0.2, gate `node-leases`).
-- See the PostgreSQL migration of the same number for the model. The fence
-- reads the node row in a subquery of its locking read, which InnoDB does
-- not lock: writers of different shards never queue behind the heartbeat.
ALTER TABLE chitin_nodes ADD COLUMN liveness_epoch BIGINT NOT NULL DEFAULT 1;
ALTER TABLE chitin_nodes ADD COLUMN lease_expires_at DATETIME(6) NULL;
ALTER TABLE chitin_shard_leases ADD COLUMN liveness_epoch BIGINT NULL;
