-- Expand step (additive): the database-wide handoff budget.
-- Every handover locks this one row, then counts the handovers of the last
-- round in the history; at most `leases.max_handoffs_per_round` pass in any
-- window of one renew interval, whichever nodes plan them.
CREATE TABLE chitin_handoff_budget (
    id  SMALLINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO chitin_handoff_budget (id) VALUES (1);
CREATE INDEX chitin_lease_history_handovers ON chitin_lease_history (via, acquired_at);
