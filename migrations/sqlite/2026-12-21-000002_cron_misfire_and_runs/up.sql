-- Issue 19 items 4 and 5 (docs/scheduler.md "Misfires" and "Runs").
--
-- What a recurring job does about instants it missed (`fire_once`, `skip`, `fire_all`), and how late a one-time
-- reminder may be published and still be delivered (NULL: any). Checked by the gateway, not by the table: the
-- values are the API's, and a CHECK here would also have to be dropped before the column on the way down.
ALTER TABLE cron_jobs ADD COLUMN misfire_policy TEXT NOT NULL DEFAULT 'fire_once';
ALTER TABLE cron_jobs ADD COLUMN max_lateness_ms BIGINT;

-- A job's fired runs are its mailbox entries: this index finds them (newest first) for GET
-- /gateway/cron/jobs/{id}/runs, also after the job is deleted. It is a b-tree write per fire (measured in
-- docs/benchmarks.md); the agent's index cannot answer for a job whose row, and so whose agent, is gone.
CREATE INDEX agent_mailbox_job_seq ON agent_mailbox (job_id, seq);

-- Instants the scheduler did not fire (`skipped_misfire`, `skipped_late`): written only when that happens, kept
-- out of agent_mailbox so that no stream, replay, count or quota sees them, pruned with the mailbox by age in the
-- order recorded (`seq`, the rowid, as the mailbox's). `fire_id` is the one the instant would have fired with:
-- unique, so a refire after a crash records nothing new.
CREATE TABLE cron_job_skips (
    seq INTEGER PRIMARY KEY NOT NULL,
    fire_id TEXT NOT NULL UNIQUE,
    job_id BIGINT NOT NULL,
    agent_id TEXT NOT NULL,
    scheduled_for DATETIME NOT NULL,
    skipped_at DATETIME NOT NULL,
    outcome TEXT NOT NULL
);
CREATE INDEX cron_job_skips_job_seq ON cron_job_skips (job_id, seq);
