-- A delivery attempt's claim, visible as a claim (migrations/sqlite's migration of the same name says why). On a
-- shared database nothing releases claims at start, other live instances hold them; the column is kept so that
-- both backends have the same columns and every write is the same statement.
ALTER TABLE webhook_deliveries ADD COLUMN claimed_until TIMESTAMP;

CREATE INDEX webhook_deliveries_claimed_until ON webhook_deliveries (claimed_until) WHERE claimed_until IS NOT NULL;
