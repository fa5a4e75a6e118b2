ALTER TABLE cron_jobs DROP COLUMN timezone;
