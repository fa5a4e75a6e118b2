-- Mirrors the PostgreSQL migration of the same name: the cluster's count of live agents, taken by one instance and
-- read by the others. counted_ms is the database's clock (milliseconds since the epoch, from julianday('now') here),
-- NULL before the first count. One row.
CREATE TABLE gateway_live_count (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    live BIGINT NOT NULL,
    counted_ms BIGINT
);
INSERT INTO gateway_live_count (id, live, counted_ms) VALUES (1, 0, NULL);
