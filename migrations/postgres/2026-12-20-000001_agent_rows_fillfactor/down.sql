ALTER TABLE gateway_heartbeats RESET (fillfactor);
ALTER TABLE gateway_live_agents RESET (fillfactor);
