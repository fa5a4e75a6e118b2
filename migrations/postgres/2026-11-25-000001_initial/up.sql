-- The four tables of the contract (docs/architecture.md), as migrations/sqlite creates them: the same tables,
-- columns and indexes, in PostgreSQL's native types. Later migrations only add.
--
-- Instants are `TIMESTAMP` (without time zone) holding UTC at microsecond precision, exactly what SQLite's
-- DATETIME columns hold (gateway_store::timestamp): one schema description and one conversion for both
-- backends. Ids are BIGSERIAL: like SQLite's AUTOINCREMENT, a sequence never hands out an id twice, even
-- after the row holding it was deleted.
CREATE TABLE gateway_heartbeats (
    agent_id TEXT PRIMARY KEY NOT NULL,
    cluster_id TEXT NOT NULL,
    last_seen_at TIMESTAMP NOT NULL
);

CREATE TABLE cron_jobs (
    id BIGSERIAL PRIMARY KEY NOT NULL,
    agent_id TEXT NOT NULL,
    schedule TEXT,
    next_fire_at TIMESTAMP NOT NULL,
    payload TEXT NOT NULL,
    is_one_time BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE webhook_configs (
    id BIGSERIAL PRIMARY KEY NOT NULL,
    source_identifier TEXT NOT NULL,
    event_type TEXT NOT NULL,
    agent_intent TEXT NOT NULL,
    target_session TEXT NOT NULL,
    target_url TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    UNIQUE (source_identifier, event_type)
);

CREATE TABLE webhook_deliveries (
    id BIGSERIAL PRIMARY KEY NOT NULL,
    webhook_id BIGINT NOT NULL REFERENCES webhook_configs(id),
    session_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    target_url TEXT NOT NULL,
    signature TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempt_count INTEGER NOT NULL DEFAULT 0,
    last_attempted_at TIMESTAMP,
    next_retry_at TIMESTAMP,
    created_at TIMESTAMP NOT NULL,
    error_detail TEXT
);

-- `id` last: SQLite ends every index with the rowid, which is what lets the poll's "due rows of one status by
-- (next_retry_at, id)" walk the index without a sort; PostgreSQL needs it spelled out.
CREATE INDEX webhook_deliveries_status_next_retry_at ON webhook_deliveries (status, next_retry_at, id);
