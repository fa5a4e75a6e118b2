-- Issue 20: an event published to every config subscribed to its type (POST /gateway/webhook-events). The row keeps
-- the ids of the deliveries it made (a JSON array, in config id order) so that a retry with the same
-- Idempotency-Key answers exactly what the first request did, even after retention removed some deliveries;
-- request_digest tells a retry from a different request reusing the key.
CREATE TABLE webhook_events (
    id BIGSERIAL PRIMARY KEY NOT NULL,
    event_type TEXT NOT NULL,
    source_identifier TEXT,
    request_digest TEXT NOT NULL,
    idempotency_key TEXT,
    delivery_ids TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX webhook_events_idempotency_key ON webhook_events (idempotency_key);
-- The fan-out reads the configs of one event type (and the wildcard's) without a scan of every config.
CREATE INDEX webhook_configs_event_type ON webhook_configs (event_type);
