-- gateway_live_agents as migrations 090001 to 000016 left it, holding the live rows' receipts again.
CREATE TABLE gateway_live_agents (
    agent_id TEXT PRIMARY KEY NOT NULL,
    cluster_id TEXT NOT NULL,
    received_at TIMESTAMP NOT NULL,
    agent_type TEXT,
    capability_version TEXT,
    capabilities_updated_at TIMESTAMP,
    received_minute BIGINT NOT NULL DEFAULT 0,
    inserted_minute BIGINT NOT NULL DEFAULT floor(extract(epoch FROM now()) / 60)::bigint
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);
INSERT INTO gateway_live_agents
    SELECT agent_id, received_cluster_id, received_at, agent_type, capability_version, capabilities_updated_at,
        received_minute, inserted_minute
    FROM gateway_heartbeats WHERE received_minute IS NOT NULL;
CREATE INDEX gateway_live_agents_received_minute ON gateway_live_agents (received_minute);
CREATE INDEX gateway_live_agents_inserted_late ON gateway_live_agents (received_minute)
    WHERE inserted_minute > received_minute;
ALTER TABLE gateway_heartbeats RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor);
DROP INDEX gateway_heartbeats_live;
DROP INDEX gateway_heartbeats_inserted_late;
DROP INDEX gateway_heartbeats_received_minute;
ALTER TABLE gateway_heartbeats
    DROP COLUMN received_at,
    DROP COLUMN received_cluster_id,
    DROP COLUMN received_minute,
    DROP COLUMN inserted_minute,
    DROP COLUMN agent_type,
    DROP COLUMN capability_version,
    DROP COLUMN capabilities_updated_at;
