-- Mirrors the PostgreSQL migration of the same name (the same column). SQLite cannot give a column added later a
-- default other than a constant, and it has no use for one: its eviction pass reads the minutes themselves every
-- time (an update rewrites SQLite's index entry in place, so nothing dead is left for that read to wade through).
ALTER TABLE gateway_live_agents ADD COLUMN inserted_minute BIGINT NOT NULL DEFAULT 0;
