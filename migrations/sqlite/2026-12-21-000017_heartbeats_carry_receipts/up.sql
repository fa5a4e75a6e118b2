-- Mirrors the PostgreSQL migration of the same name (read its comment): gateway_heartbeats carries each live
-- agent's receipt and capability columns, an agent is live while received_minute IS NOT NULL, eviction clears the
-- receipt, and gateway_live_agents is dropped. A live row without a heartbeat row gets one made from its receipt.
-- As on SQLite before, received_minute is a VIRTUAL column computed from received_at (NULL with it), and
-- inserted_minute is kept but unused (SQLite's pass reads the minutes themselves every time). One plain index on
-- the minute: SQLite updates index entries in place, so nothing needs the partial ones PostgreSQL has.
-- Instances of an older build cannot run beside this schema: stop them all, then start the new build.
ALTER TABLE gateway_heartbeats ADD COLUMN received_at DATETIME;
ALTER TABLE gateway_heartbeats ADD COLUMN received_cluster_id TEXT;
ALTER TABLE gateway_heartbeats ADD COLUMN received_minute INTEGER
    GENERATED ALWAYS AS (CAST(strftime('%s', received_at) AS INTEGER) / 60) VIRTUAL;
ALTER TABLE gateway_heartbeats ADD COLUMN inserted_minute BIGINT NOT NULL DEFAULT 0;
ALTER TABLE gateway_heartbeats ADD COLUMN agent_type TEXT;
ALTER TABLE gateway_heartbeats ADD COLUMN capability_version TEXT;
ALTER TABLE gateway_heartbeats ADD COLUMN capabilities_updated_at DATETIME;
INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at)
    SELECT agent_id, cluster_id, received_at FROM gateway_live_agents WHERE true
    ON CONFLICT (agent_id) DO NOTHING;
UPDATE gateway_heartbeats SET
    (received_at, received_cluster_id, inserted_minute, agent_type, capability_version, capabilities_updated_at) = (
        SELECT l.received_at, l.cluster_id, l.inserted_minute, l.agent_type, l.capability_version, l.capabilities_updated_at
        FROM gateway_live_agents AS l WHERE l.agent_id = gateway_heartbeats.agent_id
    )
    WHERE agent_id IN (SELECT agent_id FROM gateway_live_agents);
CREATE INDEX gateway_heartbeats_received_minute ON gateway_heartbeats (received_minute);
DROP TABLE gateway_live_agents;
