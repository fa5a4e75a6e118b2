-- The cluster's count of live agents (the cap's reference, and the live-agent figures of /metrics, the history and
-- the console), taken once per cluster instead of once per instance. Counting is a read of every live row of
-- gateway_heartbeats (95 ms at a million agents under load, serial; docs/benchmarks.md, s33-n): each instance did it
-- every 5 s, so twelve instances at ten million would have spent more than a core of the primary on it. Now the
-- instance that finds this row older than the interval takes it (FOR UPDATE SKIP LOCKED: a rival counting at that
-- moment is skipped, not waited for), counts and writes the answer here; the others read this row.
--
-- counted_ms is the database's clock (milliseconds since the epoch) when the count's statement began, NULL before
-- the first count: instances compare it with the same clock, so their own clocks' skew does not matter, and each
-- adds what it admitted since. The row is advisory: it is written without waiting for its WAL flush, and a row lost
-- in a crash only makes the next instance count sooner. One row.
CREATE TABLE gateway_live_count (
    id BIGINT PRIMARY KEY NOT NULL CHECK (id = 1),
    live BIGINT NOT NULL,
    counted_ms BIGINT
);
INSERT INTO gateway_live_count (id, live, counted_ms) VALUES (1, 0, NULL);
