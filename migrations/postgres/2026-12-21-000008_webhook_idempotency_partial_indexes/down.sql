DROP INDEX webhook_events_idempotency_key;
CREATE UNIQUE INDEX webhook_events_idempotency_key ON webhook_events (idempotency_key);
DROP INDEX webhook_deliveries_idempotency_key;
CREATE UNIQUE INDEX webhook_deliveries_idempotency_key ON webhook_deliveries (idempotency_key);
