-- The eviction pass finds its candidates through the minute of each receipt instead of the receipt itself. Every
-- heartbeat moves an agent's received_at; while it was indexed, every one of those updates wrote a new entry into
-- both indexes of the table (no HOT update possible). An agent heartbeating more often than once a minute now
-- leaves its indexed minute unchanged in most updates, so PostgreSQL writes the new row version beside the old one
-- without touching an index (the table keeps fillfactor 70 for that room). The pass still decides on the exact
-- received_at (`received_minute <= the cutoff's minute AND received_at < cutoff`): the minute only narrows the
-- rows it reads. 60 is RECEIPT_MINUTE_SECONDS in gateway-store's liveness.rs.
ALTER TABLE gateway_live_agents
    ADD COLUMN received_minute BIGINT NOT NULL
    GENERATED ALWAYS AS (floor(extract(epoch FROM received_at) / 60)::bigint) STORED;
CREATE INDEX gateway_live_agents_received_minute ON gateway_live_agents (received_minute);
DROP INDEX gateway_live_agents_received_at;
