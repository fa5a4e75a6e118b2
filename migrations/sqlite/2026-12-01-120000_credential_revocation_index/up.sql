-- What each gateway's credential cache polls every second: the credentials revoked lately (docs/architecture.md,
-- "Agent credentials"). Only revoked rows are indexed, so the poll's work is the revocations', however many
-- credentials are in use.
CREATE INDEX agent_credentials_revoked_at ON agent_credentials (revoked_at) WHERE revoked_at IS NOT NULL;
