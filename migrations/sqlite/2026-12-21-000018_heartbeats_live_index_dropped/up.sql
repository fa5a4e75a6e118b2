-- Mirrors the PostgreSQL migration of the same name, which drops the partial index of live agent ids. SQLite never
-- had one (its listing walked the primary key and filtered; it now stops after the same fixed number of rows):
-- nothing to change.
SELECT 1;
