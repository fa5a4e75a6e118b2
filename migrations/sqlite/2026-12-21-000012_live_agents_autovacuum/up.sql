-- Mirrors the PostgreSQL migration of the same name, which sets gateway_live_agents' autovacuum thresholds; SQLite
-- has no autovacuum of dead rows (it reuses freed pages itself), so there is nothing to change here.
SELECT 1;
