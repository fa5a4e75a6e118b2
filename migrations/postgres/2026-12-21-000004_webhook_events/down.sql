DROP INDEX webhook_configs_event_type;
DROP TABLE webhook_events;
