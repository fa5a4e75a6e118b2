-- Paused cron jobs (docs/scheduler.md, "Paused jobs"): the row stays, with its next_fire_at, but is neither due
-- nor claimable until resumed.
ALTER TABLE cron_jobs ADD COLUMN paused BOOLEAN NOT NULL DEFAULT FALSE;

-- The scheduler's window query now asks for unpaused rows due before T, earliest first: the flag leads the index,
-- so the query is still one range scan in index order, and paused rows (however overdue) are never walked.
DROP INDEX cron_jobs_next_fire_at;
CREATE INDEX cron_jobs_due ON cron_jobs (paused, next_fire_at);
