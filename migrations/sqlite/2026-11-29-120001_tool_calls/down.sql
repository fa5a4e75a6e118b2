DROP INDEX cron_jobs_agent_id_one_time;
DROP TABLE tool_calls;
