DROP TABLE agent_mailbox;
