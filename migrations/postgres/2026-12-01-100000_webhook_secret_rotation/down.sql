ALTER TABLE webhook_configs DROP COLUMN secret_rotated_at;
ALTER TABLE webhook_configs DROP COLUMN previous_secret;
