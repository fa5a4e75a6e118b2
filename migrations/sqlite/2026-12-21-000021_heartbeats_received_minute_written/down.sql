DROP INDEX gateway_heartbeats_received_minute;
ALTER TABLE gateway_heartbeats DROP COLUMN received_minute;
ALTER TABLE gateway_heartbeats ADD COLUMN received_minute INTEGER
    GENERATED ALWAYS AS (CAST(strftime('%s', received_at) AS INTEGER) / 60) VIRTUAL;
CREATE INDEX gateway_heartbeats_received_minute ON gateway_heartbeats (received_minute);
