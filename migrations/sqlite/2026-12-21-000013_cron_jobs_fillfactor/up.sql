-- Mirrors the PostgreSQL migration of the same name, which leaves room on cron_jobs' pages so that a claim stays
-- on its row's page; SQLite rewrites a row in place, so there is nothing to change here.
SELECT 1;
