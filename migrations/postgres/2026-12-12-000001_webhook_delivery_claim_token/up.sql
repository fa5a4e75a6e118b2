-- The leadership token of a poll's claim of a delivery (migrations/sqlite's migration of the same name says why).
ALTER TABLE webhook_deliveries ADD COLUMN claim_token BIGINT;
