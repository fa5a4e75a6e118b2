-- The liveness map several instances share: one row per live agent, with the gateway's receipt time of its latest
-- heartbeat (whichever instance received it) and the identity of its latest DecisionLog. Eviction deletes the row;
-- gateway_heartbeats keeps its own. The index serves the leader's eviction pass (oldest receipts first).
CREATE TABLE gateway_live_agents (
    agent_id TEXT PRIMARY KEY NOT NULL,
    cluster_id TEXT NOT NULL,
    received_at DATETIME NOT NULL,
    agent_type TEXT,
    capability_version TEXT,
    capabilities_updated_at DATETIME
);
CREATE INDEX gateway_live_agents_received_at ON gateway_live_agents (received_at);
