-- Expand step (additive): session-bound liveness (0.2). A new table; 0.1.0
-- never reads it.
--
-- Each node holds, for its lifetime, a named lock (GET_LOCK) keyed by its
-- registration on a dedicated connection, and records here, while it holds
-- that lock, which lifetime of the server it took it in. A peer that then
-- takes the lock in that same server lifetime knows the node's session
-- ended: the node is gone, not paused (a paused process keeps its socket).
-- A lock found free after a server restart proves nothing, and the row says
-- so: its server differs until the node takes its lock again.
CREATE TABLE chitin_node_sessions (
    node_id      CHAR(36)     NOT NULL PRIMARY KEY,
    server       VARCHAR(64)  NOT NULL,
    recorded_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
