DROP TABLE gateway_leader_epoch;
