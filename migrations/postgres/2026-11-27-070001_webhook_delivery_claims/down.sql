DROP INDEX webhook_deliveries_claimed_until;
ALTER TABLE webhook_deliveries DROP COLUMN claimed_until;
