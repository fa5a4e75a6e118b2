-- The storage quota per agent (--agent-storage-quota-bytes, docs/architecture.md "Storage per agent"): before a
-- reminder is accepted or a tool answer recorded, the agent's stored bytes are summed from its rows. Each table that
-- holds an agent's JSON gets that JSON's length in bytes as a generated column (computed by SQLite itself, so no
-- writer can get it wrong; VIRTUAL: computed on reading, kept in the index below), and the agent's index carries it
-- at its end, so the sum reads the index alone, never a row.
--
-- length(CAST(… AS BLOB)): bytes, where length() of TEXT counts characters.
ALTER TABLE tool_calls ADD COLUMN result_bytes INTEGER GENERATED ALWAYS AS (length(CAST(result AS BLOB))) VIRTUAL;
CREATE INDEX tool_calls_agent_bytes ON tool_calls (agent_id, result_bytes);

ALTER TABLE cron_jobs ADD COLUMN payload_bytes INTEGER GENERATED ALWAYS AS (length(CAST(payload AS BLOB))) VIRTUAL;
-- The same index as before (an agent's pending reminders, soonest first, ties by id: the rowid, which SQLite put
-- last by itself and which must now be named to stay before the bytes) with the bytes at its end.
DROP INDEX cron_jobs_agent_id_one_time;
CREATE INDEX cron_jobs_agent_id_one_time ON cron_jobs (agent_id, is_one_time, next_fire_at, id, payload_bytes);

ALTER TABLE agent_mailbox ADD COLUMN payload_bytes INTEGER GENERATED ALWAYS AS (length(CAST(payload AS BLOB))) VIRTUAL;
DROP INDEX agent_mailbox_agent_seq;
CREATE INDEX agent_mailbox_agent_seq ON agent_mailbox (agent_id, seq, received_at, payload_bytes);
