-- Claims of one instant of one cron job (gateway-cron). A claim is held by `claimed_by` until `claimed_until`
-- under leadership term `claim_token`; the row keeps its `next_fire_at` (the claimed instant) until the fire is
-- completed, so a claimer that dies after publishing leaves a row that is claimed and fired again, with the
-- same fire_id, once the lease has run out.
ALTER TABLE cron_jobs ADD COLUMN claimed_by TEXT;
ALTER TABLE cron_jobs ADD COLUMN claimed_until DATETIME;
ALTER TABLE cron_jobs ADD COLUMN claim_token BIGINT;

-- The scheduler's window query ("due before T, earliest first, at most N") walks this index, so a million
-- pending rows cost a bounded range scan rather than a table scan.
CREATE INDEX cron_jobs_next_fire_at ON cron_jobs (next_fire_at);
