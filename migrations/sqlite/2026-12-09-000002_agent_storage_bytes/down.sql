DROP INDEX agent_mailbox_agent_seq;
CREATE INDEX agent_mailbox_agent_seq ON agent_mailbox (agent_id, seq, received_at);
ALTER TABLE agent_mailbox DROP COLUMN payload_bytes;
DROP INDEX cron_jobs_agent_id_one_time;
CREATE INDEX cron_jobs_agent_id_one_time ON cron_jobs (agent_id, is_one_time, next_fire_at);
ALTER TABLE cron_jobs DROP COLUMN payload_bytes;
DROP INDEX tool_calls_agent_bytes;
ALTER TABLE tool_calls DROP COLUMN result_bytes;
