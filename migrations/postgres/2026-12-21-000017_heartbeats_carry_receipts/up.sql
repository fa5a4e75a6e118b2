-- The receipt moves into the heartbeat's own row: gateway_heartbeats carries what gateway_live_agents held
-- (received_at, received_minute, inserted_minute, the three capability columns, and its cluster_id as
-- received_cluster_id: the receipt's is the newest receipt's, the heartbeat's the last written heartbeat's) and
-- gateway_live_agents is dropped.
-- In cluster mode each heartbeat then writes one row instead of two (a second arbiter probe, row lock, HOT update
-- and WAL record per heartbeat before: docs/benchmarks.md, issue 18). The contract's three columns are unchanged.
--
-- An agent is live while received_minute IS NOT NULL. Eviction sets the receipt (and the capability columns) to
-- NULL instead of deleting: heartbeat rows are kept (DESIGN §8). received_minute changes at most once a minute per
-- agent and inserted_minute only when an agent becomes live again, so only those two are named in the indexes; the
-- columns every heartbeat moves (last_seen_at, received_at, the cluster ids) are in no index key or predicate, so those updates
-- stay HOT. Evicted rows leave the partial indexes, as a deleted row left the old table's: the listing, the count,
-- the pass and the examination never read them. inserted_minute now means "became live in" (PostgreSQL's clock):
-- the receipt's upsert writes it when it inserts a row or makes an evicted one live again, so a re-live with an
-- old receipt lands in gateway_heartbeats_inserted_late exactly as an insert did. Its default stays 0, for rows a
-- heartbeat alone inserts (not live; a single instance's every new agent): a default computed from now() would be
-- evaluated, in numeric arithmetic, for each of them.
--
-- A live row without a heartbeat row: a receipt is written before its heartbeat's own group (the flush takes every
-- kept receipt), so a heartbeat whose group failed, or an instance stopped between the two, leaves one; capability
-- entries only update live rows and never create one. Such an agent keeps its liveness: its heartbeat row is
-- made with the receipt's cluster and instant, which is what the receipt's write does now for an agent without a
-- row until its heartbeat's group writes the heartbeat itself.
--
-- ROLLING UPGRADES ARE NOT POSSIBLE ACROSS THIS MIGRATION: an instance of an older build writes receipts into
-- gateway_live_agents, which no longer exists, and fails every cluster-mode heartbeat. Stop every instance, then
-- start the new build (the first one runs this migration at start, under the migration advisory lock).
-- docs/operations.md says so.
ALTER TABLE gateway_heartbeats
    ADD COLUMN received_at TIMESTAMP,
    ADD COLUMN received_cluster_id TEXT,
    ADD COLUMN received_minute BIGINT,
    ADD COLUMN inserted_minute BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN agent_type TEXT,
    ADD COLUMN capability_version TEXT,
    ADD COLUMN capabilities_updated_at TIMESTAMP;
INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at)
    SELECT agent_id, cluster_id, received_at FROM gateway_live_agents
    ON CONFLICT (agent_id) DO NOTHING;
UPDATE gateway_heartbeats AS h SET
    received_at = l.received_at,
    received_cluster_id = l.cluster_id,
    received_minute = l.received_minute,
    inserted_minute = l.inserted_minute,
    agent_type = l.agent_type,
    capability_version = l.capability_version,
    capabilities_updated_at = l.capabilities_updated_at
    FROM gateway_live_agents AS l WHERE l.agent_id = h.agent_id;
CREATE INDEX gateway_heartbeats_received_minute ON gateway_heartbeats (received_minute)
    WHERE received_minute IS NOT NULL;
CREATE INDEX gateway_heartbeats_inserted_late ON gateway_heartbeats (received_minute)
    WHERE inserted_minute > received_minute;
CREATE INDEX gateway_heartbeats_live ON gateway_heartbeats (agent_id) WHERE received_minute IS NOT NULL;
-- gateway_live_agents' thresholds (migration 2026-12-21-000012): the pass's walk of the minute index visits the
-- heap for every dead entry until vacuum removes it.
ALTER TABLE gateway_heartbeats SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.01
);
DROP TABLE gateway_live_agents;
