-- Agent credentials (docs/api.md, "Agent credentials"): one row per issued token, holding the SHA-256 of the token,
-- never the token. A revoked credential keeps its row (the operator's list shows when it was revoked); ids are
-- random and never reused. Credential ids begin with their issue time, so the agent index lists oldest first.
CREATE TABLE agent_credentials (
    credential_id TEXT PRIMARY KEY NOT NULL,
    agent_id TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    created_at DATETIME NOT NULL,
    revoked_at DATETIME
);
CREATE INDEX agent_credentials_agent_id ON agent_credentials (agent_id, credential_id);
