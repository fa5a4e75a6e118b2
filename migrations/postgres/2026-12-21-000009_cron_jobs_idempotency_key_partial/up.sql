-- Most cron jobs carry no idempotency key, yet each wrote a NULL entry into the key's unique index at insert and
-- removed it at delete: one b-tree write each way per job for nothing (NULLs never conflict). Only keyed rows are
-- indexed now; the inserts' ON CONFLICT target names the same predicate, which a partial index requires.
DROP INDEX cron_jobs_idempotency_key;
CREATE UNIQUE INDEX cron_jobs_idempotency_key ON cron_jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
