DROP INDEX cron_job_skips_job_seq;
DROP TABLE cron_job_skips;
DROP INDEX agent_mailbox_job_seq;
ALTER TABLE cron_jobs DROP COLUMN max_lateness_ms;
ALTER TABLE cron_jobs DROP COLUMN misfire_policy;
