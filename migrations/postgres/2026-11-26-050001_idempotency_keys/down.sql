DROP INDEX cron_jobs_idempotency_key;
ALTER TABLE cron_jobs DROP COLUMN idempotency_key;
DROP INDEX webhook_deliveries_idempotency_key;
ALTER TABLE webhook_deliveries DROP COLUMN idempotency_key;
