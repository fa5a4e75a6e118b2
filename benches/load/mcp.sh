#!/usr/bin/env bash
# Scheduling through MCP against `POST /gateway/tools/schedule_reminder`, in one run on one gateway (issue 19: MCP
# within 10 % of the HTTP tool). Each request is a new `schedule_reminder` call (a fresh tool_call_id) of one of
# $BENCH_AGENTS agents (1,000); the MCP requests go to sessions initialized before the run, one per agent. The two
# alternate A B B A…, $ROUNDS rounds each (4), so that a neighbour's burst or the database's growth lands on both.
#
# Pinning as in docs/benchmarks.md: the gateway on CPU $SERVER_CPU (0), wrk on CPU $CLIENT_CPU (1). The gateway is
# open on loopback (X-Agent-Id names the agent), without rate limit, so that what is measured is the work per call.
# Usage: benches/load/mcp.sh [duration per run, default 10s]; needs wrk (Debian package `wrk`) and a release build
# (`cargo build --release -p gateway`, or GATEWAY_BIN).
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-10s}
agents=${BENCH_AGENTS:-1000}
rounds=${ROUNDS:-4}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
binary=${GATEWAY_BIN:-target/release/gateway}
dir=$(mktemp -d)
taskset -c "$server_cpu" "$binary" --listen 127.0.0.1:0 --database-url "sqlite://$dir/bench.db" \
  --admin-token bench-operator-token-0000 --agent-auth off --agent-rate-limit-per-minute 0 \
  --max-pending-reminders-per-agent 1000000 >"$dir/out" 2>"$dir/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do grep -q listening "$dir/out" && break; sleep 0.1; done
base=$(sed -n 's/^gateway listening on //p' "$dir/out")
echo "# MCP tools/call against POST /gateway/tools/schedule_reminder"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (+ working tree)'), binary $binary"
echo "gateway on CPU $server_cpu, wrk on CPU $client_cpu; $agents agents; wrk -t1 -c32 -d$duration per run"
echo "load before: $(uptime | sed 's/.*load average/load average/')"
# One session per agent, initialized (and its `notifications/initialized` sent) before the runs.
: >"$dir/sessions"
for n in $(seq 0 $((agents - 1))); do
  session=$(curl -s -D - -o /dev/null -H 'content-type: application/json' -H "x-agent-id: bench-$n" \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' \
    "$base/mcp" | tr -d '\r' | sed -n 's/^mcp-session-id: //Ip')
  curl -s -o /dev/null -H 'content-type: application/json' -H "x-agent-id: bench-$n" -H "mcp-session-id: $session" \
    -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$base/mcp"
  echo "bench-$n $session" >>"$dir/sessions"
done
last_rps=0
run() {
  local name=$1 script=$2 round=$3 out
  out=$(MCP_SESSIONS="$dir/sessions" BENCH_AGENTS=$agents BENCH_ROUND="$round" \
    taskset -c "$client_cpu" wrk -t1 -c32 -d"$duration" --latency -s "benches/load/$script" "$base")
  last_rps=$(echo "$out" | sed -n 's/^Requests\/sec: *//p')
  local p50 p99 refused
  p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  refused=$(echo "$out" | sed -n 's/^refused: //p')
  echo "| $name | $round | $last_rps | $p50 | $p99 | $refused |"
}
echo "| path | round | req/s | p50 | p99 | refused |"
echo "| --- | --- | --- | --- | --- | --- |"
http_total=0
mcp_total=0
http() {
  run "POST /gateway/tools/schedule_reminder" tool_http.lua "$1"
  http_total=$(echo "$http_total + $last_rps" | bc -l)
}
mcp() {
  run "POST /mcp tools/call schedule_reminder" tool_mcp.lua "$1"
  mcp_total=$(echo "$mcp_total + $last_rps" | bc -l)
}
# A B B A: each run writes ~30,000 rows, and a store that slows as it grows must not favour whichever goes first.
for round in $(seq 1 "$rounds"); do
  if ((round % 2)); then http "$round"; mcp "$round"; else mcp "$round"; http "$round"; fi
done
echo "load after: $(uptime | sed 's/.*load average/load average/')"
printf "MCP / HTTP tool, mean of %d rounds each: %.0f / %.0f req/s = %.1f %%\n" "$rounds" \
  "$(echo "$mcp_total / $rounds" | bc -l)" "$(echo "$http_total / $rounds" | bc -l)" \
  "$(echo "100 * $mcp_total / $http_total" | bc -l)"
