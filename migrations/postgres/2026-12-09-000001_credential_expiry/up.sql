-- Agent tokens may expire; migrations/sqlite's migration of the same name says why.
ALTER TABLE agent_credentials ADD COLUMN expires_at TIMESTAMP;
