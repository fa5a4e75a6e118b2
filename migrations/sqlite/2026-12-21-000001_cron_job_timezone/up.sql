-- The IANA time zone a recurring job's schedule is read in (docs/scheduler.md, "Time zones"). Every row written
-- before zones existed was evaluated in UTC, and so is every row written without one: the default says so.
-- Not indexed: the scheduler reads it with the row it claims, never searches by it.
ALTER TABLE cron_jobs ADD COLUMN timezone TEXT NOT NULL DEFAULT 'UTC';
