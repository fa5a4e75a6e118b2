-- The reminder mailbox; migrations/sqlite's migration of the same name says what each column and index is for.
CREATE TABLE agent_mailbox (
    seq BIGSERIAL PRIMARY KEY NOT NULL,
    fire_id TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL,
    job_id BIGINT NOT NULL,
    payload TEXT NOT NULL,
    scheduled_for TIMESTAMP NOT NULL,
    fired_at TIMESTAMP NOT NULL,
    received_at TIMESTAMP
);

CREATE INDEX agent_mailbox_agent_seq ON agent_mailbox (agent_id, seq, received_at);
