#!/usr/bin/env python3
# A million run's steady heartbeats (MILLION_DUMP_DIR=<dir>, PostgreSQL logging into <dir>/pg/pg.log with
# log_min_duration_statement and log_line_prefix='%m [%p] '), split by whether each overlapped one of the
# background reads PostgreSQL logged (the count of live agents, the examination): p99 of each part, and per
# nobody-silent pass its heartbeats' p99 and how many overlapped one. Usage: million_background.py <dir>.
# docs/benchmarks.md, s32-m.
import sys, csv, json, datetime, re, bisect
d = sys.argv[1]
base = int(open(f"{d}/base_unix_us").read())
def ts(s):
    s = s.replace('Z', '+00:00'); m = re.match(r'(.*\.\d{6})\d*(.*)', s)
    if m: s = m.group(1) + m.group(2)
    return int(datetime.datetime.fromisoformat(s).timestamp() * 1e6) - base
# background reads from the PG log (works for any build): count and examination statements
win = []
for line in open(f"{d}/pg/pg.log"):
    m = re.match(r'(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC \[(\d+)\] LOG:  duration: ([\d.]+) ms  \S+ [^:]*: (.*)', line)
    if not m: continue
    if not ('COUNT(*) FROM "gateway_heartbeats"' in m.group(4) or 'min(received_at) AS earliest' in m.group(4)): continue
    t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
    end = int(t.timestamp() * 1e6) - base; dur = float(m.group(3))
    win.append((end - int(dur * 1000), end))
win.sort()
passes = []
for inst in ("gw-a", "gw-b"):
    for line in open(f"{d}/{inst}.log"):
        if '"eviction pass"' not in line: continue
        j = json.loads(line); f = j.get("fields", j)
        if f.get("evicted", 0) != 0: continue
        end = ts(j["timestamp"]); passes.append((end - int(f["total_ms"] * 1000), end))
starts = [w[0] for w in win]
def in_bg(s0, s1):
    i = bisect.bisect_right(starts, s1)
    return any(w[1] >= s0 for w in win[max(0, i - 3):i])
shots = []
with open(f"{d}/steady.csv") as fh:
    r = csv.reader(fh); next(r)
    for row in r: shots.append(tuple(int(x) for x in row))
def p(v, q): v = sorted(v); return v[min(len(v) - 1, int(len(v) * q))] / 1000 if v else float('nan')
bg = [s[1] for s in shots if in_bg(s[0], s[0] + s[1])]
nbg = [s[1] for s in shots if not in_bg(s[0], s[0] + s[1])]
print(f"{len(win)} background reads (count/examination) logged >=15 ms, covering {sum(b-a for a,b in win)/1e6:.1f} s")
print(f"shots overlapping them: {len(bg)} p99 {p(bg,.99):.2f}; the others {len(nbg)} p99 {p(nbg,.99):.2f}")
dp = [s for s in shots if any(s[0] <= b and s[0] + s[1] >= a for a, b in passes)]
print(f"during nobody-silent passes: {len(dp)}, p99 {p([s[1] for s in dp],.99):.2f}; of them overlapping a background read: {sum(1 for s in dp if in_bg(s[0], s[0]+s[1]))}")
print("per pass: (start s, n, p99 ms, overlapping bg)")
for a, b in sorted(passes):
    ss = [s for s in shots if s[0] <= b and s[0] + s[1] >= a]
    if ss: print(f"  {a/1e6:7.2f} {len(ss):4d} {p([s[1] for s in ss],.99):6.2f} {sum(1 for s in ss if in_bg(s[0], s[0]+s[1]))}")
