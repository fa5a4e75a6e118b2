-- The minute (PostgreSQL's clock) in which each row of gateway_live_agents was inserted, and an index of the rows
-- inserted in a later minute than their receipt's. The leader's eviction pass keeps, between passes, the earliest
-- receipt of each minute up to a bound (an examination outside the pass, gateway-store's liveness.rs); a row that
-- reaches those minutes after the examination can only be an insert of an old receipt (an update never moves a
-- receipt back), and every such insert lands in this index, so a pass reads these few rows instead of the minutes'.
-- Existing rows keep 0: they were all there before any examination. Only inserts evaluate the default; receipts
-- that update a row leave the column as it is, so it changes nothing for HOT updates (received_minute, the other
-- column the predicate reads, is indexed already).
ALTER TABLE gateway_live_agents ADD COLUMN inserted_minute BIGINT NOT NULL DEFAULT 0;
ALTER TABLE gateway_live_agents ALTER COLUMN inserted_minute SET DEFAULT floor(extract(epoch FROM now()) / 60)::bigint;
CREATE INDEX gateway_live_agents_inserted_late ON gateway_live_agents (received_minute)
    WHERE inserted_minute > received_minute;
