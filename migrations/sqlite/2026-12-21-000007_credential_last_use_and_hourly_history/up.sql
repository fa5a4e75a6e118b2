-- Issue 20, item 5. When a credential was last used: written by each instance's credential cache at most once per
-- its record interval, one statement per pass for every credential used since (never per request), and only ever
-- moved forwards. Nothing queries by it.
ALTER TABLE agent_credentials ADD COLUMN last_used_at DATETIME;

-- The last hours of the gateway's own activity, per hour, for the console's charts (GET /gateway/history): one row
-- per (hour, series, subject), subject_id 0 for the whole gateway or a webhook config's id. Counters are added to by
-- every instance (flushed every few seconds), gauges and maxima only raised. Rows older than 48 hours are deleted,
-- so the table holds at most 48 hours x the series x (1 + the configs with deliveries in them) rows.
CREATE TABLE gateway_history (
    hour_start DATETIME NOT NULL,
    series TEXT NOT NULL,
    subject_id BIGINT NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (hour_start, series, subject_id)
);
