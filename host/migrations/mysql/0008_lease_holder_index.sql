-- Expand step (additive, no gate): a lease round reads a node's own leases
-- (`WHERE holder = …`) and the few rows it could act on, by index, instead
-- of the whole lease table; releasing a node's leases finds them the same way.
CREATE INDEX chitin_shard_leases_holder ON chitin_shard_leases (holder);
