-- The IANA time zone of a recurring job; migrations/sqlite's migration of the same name says why. A constant
-- default: PostgreSQL adds the column without rewriting the table.
ALTER TABLE cron_jobs ADD COLUMN timezone TEXT NOT NULL DEFAULT 'UTC';
