-- Nothing to do: migrations/sqlite's migration of the same name makes SQLite's received_minute the plain column the
-- gateway writes, which PostgreSQL's has been since 2026-12-21-000014. A statement because Diesel refuses an empty
-- one.
SELECT 1;
