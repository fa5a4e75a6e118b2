-- The reminder mailbox (docs/scheduler.md, "The mailbox"): every fire the scheduler published, recorded for its
-- agent in the transaction that completes the fire, so that an agent offline at the time gets it when it
-- connects. `seq` numbers the entries in firing order (AUTOINCREMENT: never reused, so a cursor never points at a
-- later entry after pruning); `fire_id` is the event's id, unique, which makes a refire after a crash record
-- nothing new; `received_at` is set once a stream has handed the entry to a client.
CREATE TABLE agent_mailbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    fire_id TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL,
    job_id BIGINT NOT NULL,
    payload TEXT NOT NULL,
    scheduled_for DATETIME NOT NULL,
    fired_at DATETIME NOT NULL,
    received_at DATETIME
);

-- An agent's entries in firing order (a replay after Last-Event-ID, GET /gateway/agents/{id}/reminders).
CREATE INDEX agent_mailbox_agent_seq ON agent_mailbox (agent_id, seq);
-- The entries nobody received, which every stream of an agent replays when it connects: partial, so that an agent
-- with days of received entries does not walk them all to find the few it missed.
CREATE INDEX agent_mailbox_unreceived ON agent_mailbox (agent_id, seq) WHERE received_at IS NULL;
-- Retention: the oldest entries first.
CREATE INDEX agent_mailbox_fired_at ON agent_mailbox (fired_at);
