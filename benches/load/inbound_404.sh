#!/usr/bin/env bash
# CPU per 404 of an inbound webhook to an unknown id (issue 16): the gateway pinned to CPU 0, wrk to CPU 1, 8
# connections for 10 s after a 2 s warm-up; the gateway's user+system time from /proc divided by the requests.
# Usage: benches/load/inbound_404.sh [gateway binary, default target/release/gateway] [body bytes, default small]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/gateway}
body=${2:-}
dir=$(mktemp -d)
taskset -c 0 "$bin" --listen 127.0.0.1:0 --database-url "sqlite://$dir/bench.db" \
  --admin-token bench-operator-token-0000 >"$dir/out" 2>"$dir/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do grep -q listening "$dir/out" && break; sleep 0.1; done
base=$(sed -n 's/^gateway listening on //p' "$dir/out")
url="$base/gateway/webhooks/999"
BODY_BYTES=$body taskset -c 1 wrk -t1 -c8 -d2s -s benches/load/inbound_unknown.lua "$url" >/dev/null 2>&1
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
out=$(BODY_BYTES=$body taskset -c 1 wrk -t1 -c8 -d10s --latency -s benches/load/inbound_unknown.lua "$url" 2>&1)
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
requests=$(echo "$out" | awk '/requests in/ {print $1}')
ticks=$(( (u1 - u0) + (s1 - s0) ))
hz=$(getconf CLK_TCK)
echo "requests=$requests gateway_cpu_us_per_request=$(echo "scale=1; $ticks * 1000000 / $hz / $requests" | bc)"
echo "$out" | grep -E "Requests/sec|50%|99%|Socket errors"
