-- PostgreSQL 15 cannot turn a column back into a generated one: the column and its index are made again, as
-- 2026-12-21-000011 made them.
DROP INDEX gateway_live_agents_received_minute;
ALTER TABLE gateway_live_agents DROP COLUMN received_minute;
ALTER TABLE gateway_live_agents
    ADD COLUMN received_minute BIGINT NOT NULL
    GENERATED ALWAYS AS (floor(extract(epoch FROM received_at) / 60)::bigint) STORED;
CREATE INDEX gateway_live_agents_received_minute ON gateway_live_agents (received_minute);
