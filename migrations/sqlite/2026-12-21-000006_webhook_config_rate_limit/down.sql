ALTER TABLE webhook_configs DROP COLUMN rate_limit_per_second;
