-- Issue 20, item 5: a credential's last use and the hourly history of the gateway's own activity;
-- migrations/sqlite's migration of the same name says why.
ALTER TABLE agent_credentials ADD COLUMN last_used_at TIMESTAMP;

CREATE TABLE gateway_history (
    hour_start TIMESTAMP NOT NULL,
    series TEXT NOT NULL,
    subject_id BIGINT NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (hour_start, series, subject_id)
);
