-- received_minute becomes a plain column the gateway writes with received_at, as on PostgreSQL (receipt_minute in
-- gateway-store's liveness.rs), instead of the VIRTUAL column of migration 2026-12-21-000017. Generated, it cost
-- every heartbeat row ~1,650 instructions even on a single instance, where the receipt columns stay NULL: SQLite
-- applies the table's affinity to an upserted row once more around computing it, and evaluates strftime() on the NULL
-- receipt (docs/benchmarks.md, s33-h and s34-h). Every writer of received_at now writes or clears this column in
-- the same statement.
--
-- SQLite refuses to drop an indexed column, so the index goes first and comes back on the new column. Dropping a
-- VIRTUAL column rewrites no row; the fill below writes the live rows once, with the expression the generated column
-- had (equal to receipt_minute for every instant after 1970, where integer division and rounding down agree).
-- An older build of the gateway would leave the column stale: open this file with this build or a later one only.
DROP INDEX gateway_heartbeats_received_minute;
ALTER TABLE gateway_heartbeats DROP COLUMN received_minute;
ALTER TABLE gateway_heartbeats ADD COLUMN received_minute INTEGER;
UPDATE gateway_heartbeats SET received_minute = CAST(strftime('%s', received_at) AS INTEGER) / 60
    WHERE received_at IS NOT NULL;
CREATE INDEX gateway_heartbeats_received_minute ON gateway_heartbeats (received_minute);
