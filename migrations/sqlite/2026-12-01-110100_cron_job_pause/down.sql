DROP INDEX cron_jobs_due;
CREATE INDEX cron_jobs_next_fire_at ON cron_jobs (next_fire_at);
ALTER TABLE cron_jobs DROP COLUMN paused;
