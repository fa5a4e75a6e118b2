-- Agent credentials; migrations/sqlite's migration of the same name says what the rows hold.
CREATE TABLE agent_credentials (
    credential_id TEXT PRIMARY KEY NOT NULL,
    agent_id TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    revoked_at TIMESTAMP
);
CREATE INDEX agent_credentials_agent_id ON agent_credentials (agent_id, credential_id);
