-- Mirrors the PostgreSQL migration: the eviction pass finds its candidates through the minute of each receipt (an
-- index that most heartbeats leave unchanged on PostgreSQL, where that spares an index write per heartbeat) and
-- decides on the exact received_at. SQLite adds a generated column only as VIRTUAL; its index stores the value.
-- 60 is RECEIPT_MINUTE_SECONDS in gateway-store's liveness.rs.
ALTER TABLE gateway_live_agents
    ADD COLUMN received_minute INTEGER
    GENERATED ALWAYS AS (CAST(strftime('%s', received_at) AS INTEGER) / 60) VIRTUAL;
CREATE INDEX gateway_live_agents_received_minute ON gateway_live_agents (received_minute);
DROP INDEX gateway_live_agents_received_at;
