-- Issue 16: the leadership token a poll's claim of a delivery was made under (NULL for an immediate attempt's
-- claim, which any instance makes and which is not the leader's). A new term releases the claims of older terms
-- at once (WebhookStore::release_deposed_claims), so a delivery claimed by a leader that died is attempted again
-- without waiting out its claim. Read only through the partial index on claimed_until: a handful of rows.
ALTER TABLE webhook_deliveries ADD COLUMN claim_token BIGINT;
