#!/usr/bin/env bash
# What the machine did during one benchmark run: the disks' writes and cache flushes with their mean time (from
# /proc/diskstats), the CPU split with steal (/proc/stat) and I/O pressure, beside the run's jobs/s. A PostgreSQL
# run waits for a flush at each commit, so its rate follows the flush's latency on a shared host (docs/benchmarks.md,
# s31-c); this says which kind of run it was.
#
# Usage (run it under the machine's benchmark lock): benches/load/disk_stats.sh LABEL COMMAND...
#   e.g. BENCH_DATABASE=postgres benches/load/disk_stats.sh pg target/release/deps/cron-<hash> --bench throughput
# Prints one line; the command's own output goes to ${DISK_STATS_LOGS:-/tmp}/LABEL.<time>.log.
set -eu
label=$1
shift
snapshot() {
  # Whole disks only (vda, sda, nvme0n1): writes, ms writing, flushes, ms flushing; then the CPU line.
  awk '$3 ~ /^(vd[a-z]+|sd[a-z]+|nvme[0-9]+n[0-9]+)$/ {w+=$8; wt+=$11; f+=$19; ft+=$20} END {print w, wt, f, ft}' /proc/diskstats
  awk '/^cpu / {print $2+$3, $4, $5, $6, $9}' /proc/stat
}
sync
before=$(snapshot)
started=$(date +%s.%N)
load_before=$(cut -d' ' -f1 /proc/loadavg)
log=${DISK_STATS_LOGS:-/tmp}/$label.$(date -u +%H%M%S).log
"$@" >"$log" 2>&1
ended=$(date +%s.%N)
after=$(snapshot)
load_after=$(cut -d' ' -f1 /proc/loadavg)
rate=$(grep -m1 'scheduled + fired' "$log" | awk '{print $6}' || true)
python3 - "$label" "${rate:-?}" "$started" "$ended" "$load_before" "$load_after" "$before" "$after" <<'PY'
import sys, time
label, rate, started, ended, load_before, load_after, before, after = sys.argv[1:]
a = [list(map(int, line.split())) for line in before.splitlines()]
b = [list(map(int, line.split())) for line in after.splitlines()]
writes, write_ms, flushes, flush_ms = (b[0][i] - a[0][i] for i in range(4))
cpu = [y - x for x, y in zip(a[1], b[1])]
total = max(sum(cpu), 1)
share = lambda i: 100 * cpu[i] / total
print(f"{time.strftime('%H:%M:%S', time.gmtime(float(ended)))} {label} rate={rate} wall={float(ended) - float(started):.1f}s "
      f"load={load_before}-{load_after} writes={writes} ({write_ms / max(writes, 1):.3f} ms each) flushes={flushes} "
      f"({flush_ms / max(flushes, 1):.3f} ms each) cpu: user {share(0):.0f} % system {share(1):.0f} % idle {share(2):.0f} % "
      f"iowait {share(3):.0f} % steal {share(4):.1f} %")
PY
