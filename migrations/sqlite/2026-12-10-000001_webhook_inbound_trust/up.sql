-- Inbound trust (DESIGN.md §14, docs/webhooks.md). An inbound secret apart from the outbound one, so that a receiver
-- of outbound deliveries cannot post them back in; its previous value kept for the rotation grace, like
-- previous_secret; and whether inbound requests must carry a Standard Webhooks signature with a fresh timestamp.
ALTER TABLE webhook_configs ADD COLUMN inbound_secret TEXT;
ALTER TABLE webhook_configs ADD COLUMN previous_inbound_secret TEXT;
ALTER TABLE webhook_configs ADD COLUMN inbound_secret_rotated_at DATETIME;
ALTER TABLE webhook_configs ADD COLUMN inbound_require_timestamp BOOLEAN NOT NULL DEFAULT FALSE;

-- Receipts of accepted inbound webhooks, for replay detection: one row per key (a hash of the Standard Webhooks
-- webhook-id, or of the verified X-Observatory-Signature digest) per config, with the delivery it created. The
-- unique index is what makes two concurrent identical requests one delivery; rows older than the replay window
-- (24 h) no longer count and are pruned by received_at.
CREATE TABLE webhook_inbound_receipts (
    id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    webhook_id INTEGER NOT NULL REFERENCES webhook_configs(id),
    receipt_key TEXT NOT NULL,
    delivery_id INTEGER NOT NULL,
    received_at DATETIME NOT NULL,
    UNIQUE (webhook_id, receipt_key)
);
CREATE INDEX webhook_inbound_receipts_received_at ON webhook_inbound_receipts (received_at);
