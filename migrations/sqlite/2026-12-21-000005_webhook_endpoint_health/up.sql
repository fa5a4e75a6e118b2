-- Issue 20: an endpoint's health. A config is disabled by hand ('manual') or after too many failed attempts in a
-- row ('failing', --webhook-disable-after-failures); its deliveries are then held: their next_retry_at is NULL, so
-- the due index never reaches them and neither the poll nor the due-backlog count walks over a week of them.
-- consecutive_failures is counted in the transaction that records the attempt; a success resets it.
ALTER TABLE webhook_configs ADD COLUMN enabled BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE webhook_configs ADD COLUMN disabled_reason TEXT;
ALTER TABLE webhook_configs ADD COLUMN consecutive_failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhook_configs ADD COLUMN last_success_at DATETIME;
-- stats_24h: the attempts of the last 24 hours are one range of this index, whatever the history's size.
CREATE INDEX webhook_delivery_attempts_started_at ON webhook_delivery_attempts (started_at);
-- stats_24h's dead letters: the deliveries that died in the window, one range of this partial index (status leads, so
-- the planner prefers it over (status, next_retry_at) for status = 'dead').
CREATE INDEX webhook_deliveries_dead_at ON webhook_deliveries (status, last_attempted_at) WHERE status = 'dead';
