CREATE INDEX gateway_live_agents_received_at ON gateway_live_agents (received_at);
DROP INDEX gateway_live_agents_received_minute;
ALTER TABLE gateway_live_agents DROP COLUMN received_minute;
