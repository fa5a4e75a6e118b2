-- wrk script: heartbeats from $HEARTBEAT_AGENTS distinct agents (10 000 by default), round-robin per thread.
local agents = tonumber(os.getenv("HEARTBEAT_AGENTS") or "10000")
local counter = 0
request = function()
  counter = counter + 1
  local body = string.format(
    '{"type":"heartbeat","agent_id":"agent-%d","cluster_id":"bench","timestamp":"2026-02-22T12:00:00Z"}',
    counter % agents)
  return wrk.format("POST", "/gateway/heartbeat", {["content-type"] = "application/json"}, body)
end
