CREATE TABLE gateway_live_agents (
    agent_id TEXT PRIMARY KEY NOT NULL,
    cluster_id TEXT NOT NULL,
    received_at DATETIME NOT NULL,
    agent_type TEXT,
    capability_version TEXT,
    capabilities_updated_at DATETIME,
    received_minute INTEGER GENERATED ALWAYS AS (CAST(strftime('%s', received_at) AS INTEGER) / 60) VIRTUAL,
    inserted_minute BIGINT NOT NULL DEFAULT 0
);
INSERT INTO gateway_live_agents
    (agent_id, cluster_id, received_at, agent_type, capability_version, capabilities_updated_at, inserted_minute)
    SELECT agent_id, received_cluster_id, received_at, agent_type, capability_version, capabilities_updated_at, inserted_minute
    FROM gateway_heartbeats WHERE received_at IS NOT NULL;
CREATE INDEX gateway_live_agents_received_minute ON gateway_live_agents (received_minute);
DROP INDEX gateway_heartbeats_received_minute;
ALTER TABLE gateway_heartbeats DROP COLUMN received_minute;
ALTER TABLE gateway_heartbeats DROP COLUMN received_at;
ALTER TABLE gateway_heartbeats DROP COLUMN received_cluster_id;
ALTER TABLE gateway_heartbeats DROP COLUMN inserted_minute;
ALTER TABLE gateway_heartbeats DROP COLUMN agent_type;
ALTER TABLE gateway_heartbeats DROP COLUMN capability_version;
ALTER TABLE gateway_heartbeats DROP COLUMN capabilities_updated_at;
