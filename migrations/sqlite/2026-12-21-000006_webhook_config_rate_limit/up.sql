-- Issue 20 item 3: an endpoint's own outbound rate (attempt starts per second, inside the global
-- --webhook-max-per-second cap); NULL: only the global cap. The API bounds it; the check keeps a row written by
-- other means from holding a value the dispatcher would take as no limit or as a wait forever.
ALTER TABLE webhook_configs ADD COLUMN rate_limit_per_second INTEGER CHECK (rate_limit_per_second > 0);
