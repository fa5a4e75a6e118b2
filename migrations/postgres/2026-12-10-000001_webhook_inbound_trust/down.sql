DROP TABLE webhook_inbound_receipts;
ALTER TABLE webhook_configs DROP COLUMN inbound_require_timestamp;
ALTER TABLE webhook_configs DROP COLUMN inbound_secret_rotated_at;
ALTER TABLE webhook_configs DROP COLUMN previous_inbound_secret;
ALTER TABLE webhook_configs DROP COLUMN inbound_secret;
