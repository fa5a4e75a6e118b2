-- Mirrors the PostgreSQL migration of the same name, which makes received_minute a column the gateway writes with
-- each receipt. SQLite keeps its VIRTUAL generated column and its write path does not name the column: the change
-- was measured on PostgreSQL's cluster-mode path only, and SQLite cannot drop a column's expression in place.
SELECT 1;
