-- Expand step (additive): node-level leases (0.2, gate `node-leases`).
-- 0.1.0 never reads the new columns, and a row it grants leaves
-- `chitin_shard_leases.liveness_epoch` NULL: a lease whose validity is its
-- own `expires_at`, renewed one row at a time, as before.
--
-- Once the cluster is finalized at 0.2, a grant names the holder's
-- liveness epoch instead, and the lease is valid while the holder's
-- registration is not down, still has that liveness epoch, and its
-- `lease_expires_at` is in the future: one heartbeat per node and round
-- renews every shard it holds. Such a row's own `expires_at` is set to the
-- grant's instant (the old fence, which reads only `expires_at`, refuses
-- it: an application still on the old fencing statement fails safe).
-- Taking over a dead node is one bump of its liveness epoch plus the
-- grants.
ALTER TABLE chitin_nodes ADD COLUMN liveness_epoch bigint NOT NULL DEFAULT 1;
ALTER TABLE chitin_nodes ADD COLUMN lease_expires_at timestamptz NULL;
ALTER TABLE chitin_shard_leases ADD COLUMN liveness_epoch bigint NULL;
