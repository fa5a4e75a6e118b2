-- Issue 18: most deliveries and events carry no idempotency key, yet the full unique indexes gave every one of them
-- a NULL entry, written on each insert and removed on each prune. Partial, they hold only the keyed rows; a lookup
-- by `idempotency_key = ?` implies `IS NOT NULL` and still uses them. An upsert against them must name the same
-- predicate (`ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL`).
DROP INDEX webhook_deliveries_idempotency_key;
CREATE UNIQUE INDEX webhook_deliveries_idempotency_key ON webhook_deliveries (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX webhook_events_idempotency_key;
CREATE UNIQUE INDEX webhook_events_idempotency_key ON webhook_events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
