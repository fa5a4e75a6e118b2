DROP TABLE gateway_live_count;
