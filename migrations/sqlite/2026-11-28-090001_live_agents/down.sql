DROP TABLE gateway_live_agents;
