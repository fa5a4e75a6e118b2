DROP INDEX agent_credentials_agent_id;
DROP TABLE agent_credentials;
