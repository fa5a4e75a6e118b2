DROP TABLE gateway_history;
ALTER TABLE agent_credentials DROP COLUMN last_used_at;
