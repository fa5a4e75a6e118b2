-- Issue 18: migrations/sqlite's migration of the same name says why. The upsert's conflict target names the same
-- predicate (crates/gateway-store/src/webhook/postgres.rs), which PostgreSQL needs to infer a partial index.
DROP INDEX webhook_deliveries_idempotency_key;
CREATE UNIQUE INDEX webhook_deliveries_idempotency_key ON webhook_deliveries (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX webhook_events_idempotency_key;
CREATE UNIQUE INDEX webhook_events_idempotency_key ON webhook_events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
