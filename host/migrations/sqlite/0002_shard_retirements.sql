-- A shard that was split: its range belongs to its children from then on,
-- and its lease is never granted again. Written in the transaction that
-- clears the parent's lease (epoch + 1) and grants the children.
CREATE TABLE chitin_shard_retirements (
    shard_id     TEXT    NOT NULL PRIMARY KEY,
    -- The parent's epoch after retirement (no token below it passes the fence).
    epoch        INTEGER NOT NULL,
    -- The node that retired it and holds the children's first leases.
    holder       TEXT    NOT NULL,
    holder_name  TEXT    NOT NULL,
    -- The children's shard ids, comma-joined.
    children     TEXT    NOT NULL,
    retired_at   INTEGER NOT NULL
);
