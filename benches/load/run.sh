#!/usr/bin/env bash
# Load test of the agent-facing endpoints with wrk (Debian package `wrk`) against a release build on a fresh
# SQLite file. Usage: benches/load/run.sh [duration, default 15s]
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-15s}
cargo build --release -q -p gateway
dir=$(mktemp -d)
target/release/gateway --listen 127.0.0.1:0 --database-url "sqlite://$dir/bench.db" \
  --admin-token bench-operator-token-0000 >"$dir/out" 2>"$dir/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do grep -q listening "$dir/out" && break; sleep 0.1; done
base=$(sed -n 's/^gateway listening on //p' "$dir/out")
echo "== POST /gateway/heartbeat (10k agents; 2 threads, 64 connections, $duration)"
wrk -t2 -c64 -d"$duration" --latency -s benches/load/heartbeat.lua "$base" | grep -E "Requests/sec|Latency|50%|99%|Non-2xx|Socket errors"
echo "== POST /gateway/messages (2 threads, 64 connections, $duration)"
wrk -t2 -c64 -d"$duration" --latency -s benches/load/messages.lua "$base" | grep -E "Requests/sec|Latency|50%|99%|Non-2xx|Socket errors"
