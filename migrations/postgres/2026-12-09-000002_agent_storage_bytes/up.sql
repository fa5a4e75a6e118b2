-- The storage quota per agent; migrations/sqlite's migration of the same name says why. STORED (PostgreSQL has no
-- virtual generated columns), and in the agent's index so that the sum is an index-only scan.
ALTER TABLE tool_calls ADD COLUMN result_bytes BIGINT GENERATED ALWAYS AS (octet_length(result)) STORED;
CREATE INDEX tool_calls_agent_bytes ON tool_calls (agent_id, result_bytes);

ALTER TABLE cron_jobs ADD COLUMN payload_bytes BIGINT GENERATED ALWAYS AS (octet_length(payload)) STORED;
DROP INDEX cron_jobs_agent_id_one_time;
CREATE INDEX cron_jobs_agent_id_one_time ON cron_jobs (agent_id, is_one_time, next_fire_at, id, payload_bytes);

ALTER TABLE agent_mailbox ADD COLUMN payload_bytes BIGINT GENERATED ALWAYS AS (octet_length(payload)) STORED;
DROP INDEX agent_mailbox_agent_seq;
CREATE INDEX agent_mailbox_agent_seq ON agent_mailbox (agent_id, seq, received_at, payload_bytes);
