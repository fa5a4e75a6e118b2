#!/bin/bash
# PostgreSQL CPU per 32-row heartbeat statement (and its durable commit): the two-table statement cluster mode sent
# before migration 2026-12-21-000017 (gateway-store's RowsAndReceipts over gateway_heartbeats and gateway_live_agents),
# one row per agent carrying both the heartbeat and the receipt (close to RowsWithReceipts, sent since), and the
# heartbeat rows alone (docs/benchmarks.md, s28-p and s29-r). Its tables are its own copies. Against a running
# PostgreSQL you may write to (a throwaway one: it creates tables t_hb, t_la, t_one, grp in database postgres):
#
#   PGHOST=127.0.0.1 PGPORT=<port> PGUSER=postgres POSTMASTER_PID=<pid> \
#     flock /tmp/heavy.lock benches/load/pg_receipts.sh [seconds per run, 8] [rounds, 4]
#
# Pins PostgreSQL (the postmaster and its children) to CPU 0 and pgbench to CPU 1, one client, prepared statements,
# and reads PostgreSQL's CPU from /proc around the middle of each run: the figure is CPU per transaction, of which
# arrays_only is pgbench's own query, to be subtracted. Needs pgbench and psql; Linux.
set -euo pipefail
here=$(cd "$(dirname "$0")/pg_receipts" && pwd)
seconds=${1:-8}
rounds=${2:-4}
: "${POSTMASTER_PID:?pid of the postmaster, the first line of postmaster.pid}"
psql -q -v ON_ERROR_STOP=1 -f "$here/setup.sql" postgres
psql -q -c "VACUUM ANALYZE" postgres
pin() { for pid in $POSTMASTER_PID $(pgrep -P "$POSTMASTER_PID"); do taskset -pc 0 "$pid" >/dev/null 2>&1 || true; done; }
cpu_ticks() {
  local total=0 pid fields
  for pid in $POSTMASTER_PID $(pgrep -P "$POSTMASTER_PID"); do
    fields=($(cut -d' ' -f14,15 "/proc/$pid/stat" 2>/dev/null || echo "0 0"))
    total=$((total + fields[0] + fields[1]))
  done
  echo "$total"
}
uptime
for round in $(seq "$rounds"); do
  for script in arrays_only rows_alone two_rows one_row; do
    pin
    out=$(mktemp)
    taskset -c 1 pgbench -n -M prepared -c 1 -T "$seconds" -f "$here/$script.sql" postgres >"$out" 2>&1 &
    bench=$!
    sleep 1
    pin
    before=$(cpu_ticks)
    sleep $((seconds - 2))
    after=$(cpu_ticks)
    wait "$bench"
    tps=$(awk '/^tps/ {print $3}' "$out")
    rm -f "$out"
    awk -v s="$script" -v r="$round" -v tps="$tps" -v ticks=$((after - before)) -v secs=$((seconds - 2)) \
      -v hz="$(getconf CLK_TCK)" 'BEGIN {
        printf "round %d %-12s %8.0f tx/s  PostgreSQL CPU %6.1f us per transaction\n", r, s, tps, ticks / hz * 1e6 / (tps * secs)
      }'
  done
done
uptime
