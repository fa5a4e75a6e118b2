-- wrk script: `POST /gateway/tools/schedule_reminder`, each request a new call (a fresh tool_call_id) of one of
-- BENCH_AGENTS agents in turn (X-Agent-Id is not needed here: the body names the agent). Used by mcp.sh beside
-- tool_mcp.lua; answers other than 200 are counted as refused.
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

local counter = 0
-- A global: done() reads it from each thread (thread:get sees globals only).
refused = 0
local agents = tonumber(os.getenv("BENCH_AGENTS") or "1000")
local round = os.getenv("BENCH_ROUND") or "0"
local headers = { ["content-type"] = "application/json" }

function request()
  counter = counter + 1
  local body = string.format(
    '{"agent_id":"bench-%d","tool_call_id":"h-%s-%d-%d","params":{"delay_ms":3600000,"payload":{"task":"bench"}}}',
    counter % agents, round, tid, counter)
  return wrk.format("POST", "/gateway/tools/schedule_reminder", headers, body)
end

function response(status, headers, body)
  if status ~= 200 then refused = refused + 1 end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("refused") end
  io.write(string.format("refused: %d\n", total))
end
