DROP INDEX cron_jobs_idempotency_key;
CREATE UNIQUE INDEX cron_jobs_idempotency_key ON cron_jobs (idempotency_key);
