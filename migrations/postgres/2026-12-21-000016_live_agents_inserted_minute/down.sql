DROP INDEX gateway_live_agents_inserted_late;
ALTER TABLE gateway_live_agents DROP COLUMN inserted_minute;
