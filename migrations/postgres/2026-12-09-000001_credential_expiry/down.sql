ALTER TABLE agent_credentials DROP COLUMN expires_at;
