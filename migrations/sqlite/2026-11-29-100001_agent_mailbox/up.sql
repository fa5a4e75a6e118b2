-- The reminder mailbox (docs/scheduler.md, "The mailbox"): every fire the scheduler published, recorded for its
-- agent in the transaction that completes the fire, so that an agent offline at the time gets it when it
-- connects. `seq` numbers the entries in firing order; `fire_id` is the event's id, unique, which makes a refire
-- after a crash record nothing new; `received_at` is set once a stream has handed the entry to a client.
--
-- `seq` is the rowid without AUTOINCREMENT, which would cost a write to sqlite_sequence per fire: a number is
-- handed out again only after the newest entry was deleted, which pruning does only once every entry is older than
-- the retention, and nothing outside one replay holds a `seq` (clients name entries by `fire_id`).
CREATE TABLE agent_mailbox (
    seq INTEGER PRIMARY KEY NOT NULL,
    fire_id TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL,
    job_id BIGINT NOT NULL,
    payload TEXT NOT NULL,
    scheduled_for DATETIME NOT NULL,
    fired_at DATETIME NOT NULL,
    received_at DATETIME
);

-- An agent's entries in firing order: a replay after Last-Event-ID and GET /gateway/agents/{id}/reminders read a
-- range of it; the replay of what nobody received reads the same range and checks `received_at` in the index
-- itself, touching only the rows it returns. (A second, partial index of the unreceived entries would spare that
-- walk, for a fourth b-tree written at every fire: a tenth of what recording a fire costs.)
CREATE INDEX agent_mailbox_agent_seq ON agent_mailbox (agent_id, seq, received_at);
-- No index on fired_at: pruning takes the oldest entries from the start of the primary key (firing order).
