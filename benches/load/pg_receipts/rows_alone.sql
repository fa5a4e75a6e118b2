-- pgbench script: arrays_only.sql's query, then the statement (rows_alone) for that group.
\set off random(0, 99999)
SELECT array_agg('agent-' || ((:off + g * 3125) % 100000) ORDER BY 'agent-' || ((:off + g * 3125) % 100000)) AS ids, array_fill('c'::text, ARRAY[32]) AS cl, array_fill(localtimestamp(6), ARRAY[32]) AS ats, array_fill(floor(extract(epoch from now())/60)::bigint, ARRAY[32]) AS mins FROM generate_series(0, 31) g \gset
INSERT INTO t_hb AS gateway_heartbeats (agent_id, cluster_id, last_seen_at) SELECT agent_id, cluster_id, at FROM unnest(:ids::text[], :cl::text[], :ats::timestamp[]) WITH ORDINALITY AS sent (agent_id, cluster_id, at, n) ORDER BY n ON CONFLICT (agent_id) DO UPDATE SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at;
