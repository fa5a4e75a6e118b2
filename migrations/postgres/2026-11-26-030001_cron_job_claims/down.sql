DROP INDEX cron_jobs_next_fire_at;
ALTER TABLE cron_jobs DROP COLUMN claim_token;
ALTER TABLE cron_jobs DROP COLUMN claimed_until;
ALTER TABLE cron_jobs DROP COLUMN claimed_by;
