-- received_minute becomes a column the gateway writes with each receipt (floor(epoch / 60) of received_at, computed
-- by gateway-store's liveness.rs, the same function the eviction pass computes the cutoff's minute with) instead
-- of a generated one. As a generated column PostgreSQL set up its expression for every statement that writes
-- receipts and evaluated it in numeric arithmetic for every row: 3 % of the CPU that PostgreSQL and the gateway
-- share under cluster-mode heartbeat load (perf, docs/benchmarks.md, issue 18). DROP EXPRESSION keeps every stored
-- value and rewrites nothing.
--
-- The default is for instances of an older build during a rolling upgrade, whose statements do not name the
-- column: a row they insert gets minute 0, and a receipt they write leaves the minute where it was, earlier than
-- the receipt. Both only make the eviction pass read the row as a candidate sooner; it decides on the exact
-- received_at, so nobody is evicted early, and the next receipt from an upgraded instance sets the minute right.
ALTER TABLE gateway_live_agents ALTER COLUMN received_minute DROP EXPRESSION;
ALTER TABLE gateway_live_agents ALTER COLUMN received_minute SET DEFAULT 0;
