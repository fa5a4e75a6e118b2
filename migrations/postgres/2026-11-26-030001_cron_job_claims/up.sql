-- Claims of one instant of one cron job (gateway-cron); migrations/sqlite's migration of the same name says how
-- they work.
ALTER TABLE cron_jobs ADD COLUMN claimed_by TEXT;
ALTER TABLE cron_jobs ADD COLUMN claimed_until TIMESTAMP;
ALTER TABLE cron_jobs ADD COLUMN claim_token BIGINT;

-- The scheduler's window query ("due before T, by (next_fire_at, id), at most N") walks this index in order. `id`
-- last, as SQLite ends every index with the rowid: without it PostgreSQL would sort the ties.
CREATE INDEX cron_jobs_next_fire_at ON cron_jobs (next_fire_at, id);
