-- Expand step (additive): session-bound liveness (0.2). SQLite runs
-- standalone only, with no peers to take over: the table exists so that
-- every dialect has the same schema, and stays empty.
CREATE TABLE chitin_node_sessions (
    node_id      TEXT    NOT NULL PRIMARY KEY,
    server       TEXT    NOT NULL,
    recorded_at  INTEGER NOT NULL
);
