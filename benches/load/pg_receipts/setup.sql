-- Tables for pg_receipts.sh: the heartbeat rows (t_hb) and the receipts (t_la) as the migrations shape
-- gateway_heartbeats and gateway_live_agents on PostgreSQL, and t_one, one row per agent carrying both (the design
-- benchmarks.md's s28-p section measures), each with 100,000 agents; grp: 3,125 groups of 32 agent ids, sorted.
DROP TABLE IF EXISTS t_hb, t_la, t_one, grp;
CREATE TABLE t_hb (agent_id TEXT PRIMARY KEY NOT NULL, cluster_id TEXT NOT NULL, last_seen_at TIMESTAMP NOT NULL)
    WITH (fillfactor = 70);
CREATE TABLE t_la (agent_id TEXT PRIMARY KEY NOT NULL, cluster_id TEXT NOT NULL, received_at TIMESTAMP NOT NULL,
    agent_type TEXT, capability_version TEXT, capabilities_updated_at TIMESTAMP,
    received_minute BIGINT NOT NULL DEFAULT 0,
    inserted_minute BIGINT NOT NULL DEFAULT floor(extract(epoch FROM now()) / 60)::bigint)
    WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);
CREATE INDEX ON t_la (received_minute);
CREATE INDEX ON t_la (received_minute) WHERE inserted_minute > received_minute;
CREATE TABLE t_one (agent_id TEXT PRIMARY KEY NOT NULL, cluster_id TEXT NOT NULL, last_seen_at TIMESTAMP NOT NULL,
    received_at TIMESTAMP, agent_type TEXT, capability_version TEXT, capabilities_updated_at TIMESTAMP,
    received_minute BIGINT NOT NULL DEFAULT 0,
    inserted_minute BIGINT NOT NULL DEFAULT floor(extract(epoch FROM now()) / 60)::bigint)
    WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);
CREATE INDEX ON t_one (received_minute);
CREATE INDEX ON t_one (received_minute) WHERE inserted_minute > received_minute;
INSERT INTO t_hb SELECT 'agent-' || g, 'c', localtimestamp FROM generate_series(0, 99999) g;
INSERT INTO t_la (agent_id, cluster_id, received_at, received_minute)
    SELECT 'agent-' || g, 'c', localtimestamp, floor(extract(epoch FROM now()) / 60)::bigint FROM generate_series(0, 99999) g;
INSERT INTO t_one (agent_id, cluster_id, last_seen_at, received_at, received_minute)
    SELECT 'agent-' || g, 'c', localtimestamp, localtimestamp, floor(extract(epoch FROM now()) / 60)::bigint
    FROM generate_series(0, 99999) g;
CREATE TABLE grp AS SELECT k AS g, array_agg('agent-' || (k + j * 3125) ORDER BY 'agent-' || (k + j * 3125)) AS ids
    FROM generate_series(0, 3124) k, generate_series(0, 31) j GROUP BY k;
ALTER TABLE grp ADD PRIMARY KEY (g);
