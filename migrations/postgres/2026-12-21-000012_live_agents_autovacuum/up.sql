-- Vacuum gateway_live_agents after 1 % of its rows changed instead of PostgreSQL's default 20 %. Every receipt that
-- moves an agent into a new minute leaves a dead entry in the received_minute index, and every eviction leaves its
-- deleted rows' entries; the eviction pass's probe walks that index from the oldest minute and visits the heap for
-- each dead entry until vacuum removes it (115-152 ms per pass at a million agents, against a goal of 50 ms). The
-- table is one small row per live agent, so vacuuming it often costs little; both thresholds, since a bulk of new
-- agents (inserts) is followed by each one's first move to a new minute (updates).
ALTER TABLE gateway_live_agents SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.01
);
