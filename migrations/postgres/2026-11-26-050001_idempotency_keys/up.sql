-- `Idempotency-Key` of the creating request. Unique where present (NULLs never collide, on PostgreSQL as on
-- SQLite), so a retried create finds the first one's row instead of making a second.
ALTER TABLE webhook_deliveries ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX webhook_deliveries_idempotency_key ON webhook_deliveries (idempotency_key);
ALTER TABLE cron_jobs ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX cron_jobs_idempotency_key ON cron_jobs (idempotency_key);
