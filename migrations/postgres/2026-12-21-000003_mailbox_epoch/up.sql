-- The leadership term a fire was published under (migrations/sqlite's migration of the same name says why).
-- A constant default: PostgreSQL 11+ adds the column without rewriting the table.
ALTER TABLE agent_mailbox ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
