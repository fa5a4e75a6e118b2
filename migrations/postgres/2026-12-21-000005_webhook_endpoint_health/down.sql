DROP INDEX webhook_deliveries_dead_at;
DROP INDEX webhook_delivery_attempts_started_at;
ALTER TABLE webhook_configs DROP COLUMN last_success_at;
ALTER TABLE webhook_configs DROP COLUMN consecutive_failures;
ALTER TABLE webhook_configs DROP COLUMN disabled_reason;
ALTER TABLE webhook_configs DROP COLUMN enabled;
