DROP INDEX webhook_deliveries_status_next_retry_at;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_configs;
DROP TABLE cron_jobs;
DROP TABLE gateway_heartbeats;
