-- pgbench script: one group of 32 agents (a random one of grp's 3,125) as the arrays the gateway binds, and nothing else.
\set off random(0, 99999)
SELECT array_agg('agent-' || ((:off + g * 3125) % 100000) ORDER BY 'agent-' || ((:off + g * 3125) % 100000)) AS ids, array_fill('c'::text, ARRAY[32]) AS cl, array_fill(localtimestamp(6), ARRAY[32]) AS ats, array_fill(floor(extract(epoch from now())/60)::bigint, ARRAY[32]) AS mins FROM generate_series(0, 31) g \gset
