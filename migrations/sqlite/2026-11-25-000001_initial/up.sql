-- The four tables of the contract (docs/architecture.md). Later migrations only add.
CREATE TABLE gateway_heartbeats (
    agent_id TEXT PRIMARY KEY NOT NULL,
    cluster_id TEXT NOT NULL,
    last_seen_at DATETIME NOT NULL
);

CREATE TABLE cron_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    agent_id TEXT NOT NULL,
    schedule TEXT,
    next_fire_at DATETIME NOT NULL,
    payload TEXT NOT NULL,
    is_one_time BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE webhook_configs (
    id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    source_identifier TEXT NOT NULL,
    event_type TEXT NOT NULL,
    agent_intent TEXT NOT NULL,
    target_session TEXT NOT NULL,
    target_url TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_at DATETIME NOT NULL,
    UNIQUE (source_identifier, event_type)
);

CREATE TABLE webhook_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    webhook_id INTEGER NOT NULL REFERENCES webhook_configs(id),
    session_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    target_url TEXT NOT NULL,
    signature TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempt_count INTEGER NOT NULL DEFAULT 0,
    last_attempted_at DATETIME,
    next_retry_at DATETIME,
    created_at DATETIME NOT NULL,
    error_detail TEXT
);

CREATE INDEX webhook_deliveries_status_next_retry_at ON webhook_deliveries (status, next_retry_at);
