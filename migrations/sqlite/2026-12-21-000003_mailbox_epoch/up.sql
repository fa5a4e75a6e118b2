-- Issue 19: the leadership term (fencing epoch) a fire was published under, which its `reminder` event carries
-- (`epoch`) so that an agent can tell a deposed leader's fire from the current one's. Kept with the fire so that a
-- replay from the mailbox and GET /gateway/agents/{id}/reminders show the event as it went out: one shape. Fires
-- recorded before this migration read 0 (no term recorded).
ALTER TABLE agent_mailbox ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
