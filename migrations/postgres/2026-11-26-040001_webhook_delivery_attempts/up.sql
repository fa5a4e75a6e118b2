-- The attempt history the forensic inspector shows, and the indexes its filters need.

CREATE TABLE webhook_delivery_attempts (
    id BIGSERIAL PRIMARY KEY NOT NULL,
    delivery_id BIGINT NOT NULL REFERENCES webhook_deliveries(id),
    attempt_number INTEGER NOT NULL,
    started_at TIMESTAMP NOT NULL,
    duration_ms BIGINT NOT NULL,
    status_code INTEGER,
    error_class TEXT,
    error_detail TEXT
);

CREATE INDEX webhook_delivery_attempts_delivery_id ON webhook_delivery_attempts (delivery_id, id);

-- GET /gateway/deliveries?session_id=…&after_id=…: equality on the session, then keyset order by id.
CREATE INDEX webhook_deliveries_session_id ON webhook_deliveries (session_id, id);
-- GET /gateway/deliveries?from=…&to=…
CREATE INDEX webhook_deliveries_created_at ON webhook_deliveries (created_at);
-- Deleting a config deletes its deliveries; also what the foreign key check looks up (PostgreSQL, like SQLite,
-- does not index a referencing column by itself).
CREATE INDEX webhook_deliveries_webhook_id ON webhook_deliveries (webhook_id);
