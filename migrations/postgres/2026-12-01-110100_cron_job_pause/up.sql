-- Paused cron jobs; migrations/sqlite's migration of the same name says why the index changes.
ALTER TABLE cron_jobs ADD COLUMN paused BOOLEAN NOT NULL DEFAULT FALSE;
DROP INDEX cron_jobs_next_fire_at;
CREATE INDEX cron_jobs_due ON cron_jobs (paused, next_fire_at, id);
