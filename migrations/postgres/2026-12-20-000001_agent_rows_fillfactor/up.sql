-- Every heartbeat rewrites its agent's row in gateway_heartbeats (and, in cluster mode, in gateway_live_agents).
-- With full pages the new version lands on another page and every index of the table gets an entry for it; with
-- room left on each page PostgreSQL writes it beside the old one, and for gateway_heartbeats, whose only index is
-- the key the update does not change, without touching the index at all (a HOT update). Applies to pages written
-- from now on. PostgreSQL only: SQLite rewrites a row in place.
ALTER TABLE gateway_heartbeats SET (fillfactor = 70);
ALTER TABLE gateway_live_agents SET (fillfactor = 70);
