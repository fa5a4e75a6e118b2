CREATE INDEX gateway_heartbeats_live ON gateway_heartbeats (agent_id) WHERE received_minute IS NOT NULL;
