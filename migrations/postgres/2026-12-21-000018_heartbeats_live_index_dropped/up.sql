-- gateway_heartbeats_live (migration 2026-12-21-000017), the live rows' agent ids, served only the listing
-- (GET /gateway/agents). Each agent that becomes live, or is evicted, wrote an entry into it, and it kept a dead
-- entry for every row version until vacuum: one million-agent run without it (docs/benchmarks.md, s29-r and s30-r)
-- spent less PostgreSQL CPU per heartbeat and 248 MB on disk instead of 319. The listing now walks the primary key
-- instead, evicted agents' rows among the live ones, and a page stops after a fixed number of rows (gateway-api's
-- agents::MAX_ROWS_READ) with next_after set, so its cost stays bounded however many evicted rows are kept.
DROP INDEX gateway_heartbeats_live;
