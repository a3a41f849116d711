-- A shard that was split: its range belongs to its children from then on,
-- and its lease is never granted again. Written in the transaction that
-- clears the parent's lease (epoch + 1) and grants the children.
CREATE TABLE chitin_shard_retirements (
    shard_id     text        PRIMARY KEY,
    -- The parent's epoch after retirement (no token below it passes the fence).
    epoch        bigint      NOT NULL,
    -- The node that retired it and holds the children's first leases.
    holder       uuid        NOT NULL,
    holder_name  text        NOT NULL,
    -- The children's shard ids, comma-joined.
    children     text        NOT NULL,
    retired_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
