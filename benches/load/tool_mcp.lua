-- wrk script: MCP `tools/call` of `schedule_reminder` on initialized sessions, each request a new call (a fresh
-- tool_call_id). The sessions (one per agent, `<agent_id> <session id>` per line) are in the file $MCP_SESSIONS,
-- made by mcp.sh; answers other than 200 or with `"isError":true` are counted as refused.
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

local counter = 0
-- A global: done() reads it from each thread (thread:get sees globals only).
refused = 0
local sessions = {}
local round = os.getenv("BENCH_ROUND") or "0"

function init(args)
  for line in io.lines(os.getenv("MCP_SESSIONS")) do
    local agent, session = line:match("(%S+) (%S+)")
    table.insert(sessions, { agent, session })
  end
end

function request()
  counter = counter + 1
  local session = sessions[(counter % #sessions) + 1]
  local body = string.format(
    '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"schedule_reminder","arguments":' ..
    '{"delay_ms":3600000,"payload":{"task":"bench"},"tool_call_id":"m-%s-%d-%d"}}}',
    counter, round, tid, counter)
  local headers = {
    ["content-type"] = "application/json",
    ["x-agent-id"] = session[1],
    ["mcp-session-id"] = session[2],
    ["mcp-protocol-version"] = "2025-11-25",
  }
  return wrk.format("POST", "/mcp", headers, body)
end

function response(status, headers, body)
  if status ~= 200 or body:find('"isError":true', 1, true) then refused = refused + 1 end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("refused") end
  io.write(string.format("refused: %d\n", total))
end
