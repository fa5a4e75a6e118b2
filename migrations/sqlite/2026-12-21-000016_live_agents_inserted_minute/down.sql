ALTER TABLE gateway_live_agents DROP COLUMN inserted_minute;
