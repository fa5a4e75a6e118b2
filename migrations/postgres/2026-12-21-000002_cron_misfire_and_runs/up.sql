-- Issue 19 items 4 and 5; migrations/sqlite's migration of the same name says what each column, index and table
-- is for.
ALTER TABLE cron_jobs ADD COLUMN misfire_policy TEXT NOT NULL DEFAULT 'fire_once';
ALTER TABLE cron_jobs ADD COLUMN max_lateness_ms BIGINT;

CREATE INDEX agent_mailbox_job_seq ON agent_mailbox (job_id, seq);

CREATE TABLE cron_job_skips (
    seq BIGSERIAL PRIMARY KEY NOT NULL,
    fire_id TEXT NOT NULL UNIQUE,
    job_id BIGINT NOT NULL,
    agent_id TEXT NOT NULL,
    scheduled_for TIMESTAMP NOT NULL,
    skipped_at TIMESTAMP NOT NULL,
    outcome TEXT NOT NULL
);
CREATE INDEX cron_job_skips_job_seq ON cron_job_skips (job_id, seq);
