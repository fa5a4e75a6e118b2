ALTER TABLE agent_mailbox DROP COLUMN epoch;
