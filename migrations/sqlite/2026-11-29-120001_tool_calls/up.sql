-- The answers of agents' synchronous tool calls (POST /gateway/tools/{tool_name}), kept so that a retried call (same
-- agent, same tool_call_id) gets the first call's answer instead of being done again; `params_hash` tells a retry
-- from another call that reuses the id. Pruned after --retention-days, oldest first (the index).
CREATE TABLE tool_calls (
    agent_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    params_hash TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at DATETIME NOT NULL,
    PRIMARY KEY (agent_id, tool_call_id)
);
CREATE INDEX tool_calls_created_at ON tool_calls (created_at);

-- An agent's pending reminders (its one-time jobs): counted before each new one is scheduled (the per-agent cap),
-- from the index alone, and listed soonest first by list_reminders.
CREATE INDEX cron_jobs_agent_id_one_time ON cron_jobs (agent_id, is_one_time, next_fire_at);
