-- Issue 7: a delivery attempt's claim, visible as a claim. While an attempt is in flight `next_retry_at` holds
-- the end of its lease, which looks like any scheduled retry; `claimed_until` (the same instant) is set by the
-- claim and cleared when the outcome is recorded or "Retry now" resets the row, so a gateway starting on a
-- database that only it may use (SQLite's lock) can tell an interrupted attempt and make the row due at once.
ALTER TABLE webhook_deliveries ADD COLUMN claimed_until DATETIME;

-- Only rows with an attempt in flight are in this index (a handful at any time), so start-up finds them without
-- reading the table and its payloads, and every other row costs nothing.
CREATE INDEX webhook_deliveries_claimed_until ON webhook_deliveries (claimed_until) WHERE claimed_until IS NOT NULL;
