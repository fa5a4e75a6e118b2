-- Secret rotation (PATCH /gateway/webhook-configs/{id}, docs/webhooks.md): the secret a rotation replaced, kept
-- as the current one is (an HMAC key cannot be stored hashed), and when that rotation happened. Inbound signatures
-- made with the previous secret are accepted until secret_rotated_at plus the grace period; both are NULL until a
-- first rotation.
ALTER TABLE webhook_configs ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_configs ADD COLUMN secret_rotated_at TIMESTAMP;
