-- wrk script: heartbeats from 10 000 distinct agents, round-robin per thread.
local counter = 0
request = function()
  counter = counter + 1
  local body = string.format(
    '{"type":"heartbeat","agent_id":"agent-%d","cluster_id":"bench","timestamp":"2026-02-22T12:00:00Z"}',
    counter % 10000)
  return wrk.format("POST", "/gateway/heartbeat", {["content-type"] = "application/json"}, body)
end
