#!/usr/bin/env python3
# The slowest 1 % of a million run's steady heartbeats (cluster-ingest million with MILLION_DUMP_DIR=<dir>, and
# PostgreSQL logging into <dir>/pg/pg.log with log_line_prefix='%m [%p] '): how much of the time each kind of
# background work logged by the gateways covers and how many slow requests overlap it, then the slow requests
# grouped into episodes (gaps < 100 ms), largest first, each with the gateways' and PostgreSQL's log lines of that
# moment. Usage: million_slow.py <dir> [episodes shown]. docs/benchmarks.md, s32-m.
import sys, json, csv, datetime, re, collections
d = sys.argv[1]
base = int(open(f"{d}/base_unix_us").read())
def ts(s):
    # RFC3339 -> unix us
    s = s.replace('Z', '+00:00')
    m = re.match(r'(.*\.\d{6})\d*(.*)', s)
    if m: s = m.group(1) + m.group(2)
    return int(datetime.datetime.fromisoformat(s).timestamp() * 1e6) - base
events = []  # (begin_us, end_us, kind, detail)
for inst in ("gw-a", "gw-b"):
    for line in open(f"{d}/{inst}.log"):
        try: j = json.loads(line)
        except Exception: continue
        f = j.get("fields", j)
        msg = f.get("message", "")
        end = ts(j["timestamp"])
        dur = None
        for key in ("total_ms", "examine_ms", "count_ms", "rewalk_ms"):
            if key in f: dur = f[key]; k = key; break
        if msg == "evict silent agents" or dur is None: continue
        events.append((end - int(dur * 1000), end, f"{inst}:{msg}", dur))
pg = []
try:
    for line in open(f"{d}/pg/pg.log"):
        m = re.match(r'(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (\w+) \[(\d+)\] (.*)', line)
        if not m: continue
        t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
        at = int(t.timestamp() * 1e6) - base
        text = m.group(4).strip()
        dm = re.search(r'duration: ([\d.]+) ms', text)
        dur = float(dm.group(1)) if dm else 0.0
        pg.append((at - int(dur * 1000), at, text[:160], dur))
except FileNotFoundError: pass
shots = []
with open(f"{d}/steady.csv") as fh:
    r = csv.reader(fh); next(r)
    for row in r:
        shots.append(tuple(int(x) for x in row))
lat = sorted(s[1] for s in shots if s[3])
p99 = lat[int(len(lat) * 0.99)]
print(f"{len(shots)} steady shots; p50 {lat[len(lat)//2]/1000:.2f} p99 {p99/1000:.2f} ms max {lat[-1]/1000:.2f}")
first = min(s[0] for s in shots); last = max(s[0] for s in shots)
kinds = collections.Counter(e[2] for e in events if first <= e[1] <= last + 10**6)
print("events in steady:", dict(kinds))
def overlaps(s, e, slack=0):
    return s[0] <= e[1] + slack and s[0] + s[1] >= e[0] - slack
slow = [s for s in shots if s[1] >= p99]
# per kind: share of slow shots overlapping, share of all shots overlapping
for kind in sorted(kinds):
    evs = [e for e in events if e[2] == kind and first <= e[1] <= last + 10**6]
    evs.sort()
    def count(ss):
        n = 0; j = 0
        for s in ss:
            if any(overlaps(s, e) for e in evs): n += 1
        return n
    # cheap: time covered
    covered = sum(e[1] - e[0] for e in evs)
    print(f"  {kind}: {len(evs)} events, p50 {sorted(e[3] for e in evs)[len(evs)//2]:.1f} ms, max {max(e[3] for e in evs):.1f}, "
          f"covers {100*covered/(last-first):.2f} % of time; slow (>=p99) overlapping: {count(slow)} of {len(slow)}")
# episodes of slow shots
slow.sort()
eps = []
for s in slow:
    if eps and s[0] - eps[-1][-1][0] < 100_000: eps[-1].append(s)
    else: eps.append([s])
eps.sort(key=lambda e: -len(e))
print(f"{len(eps)} episodes of slow shots (>= p99 {p99/1000:.2f} ms), largest first:")
for ep in eps[:int(sys.argv[2]) if len(sys.argv) > 2 else 25]:
    b = ep[0][0]; e = max(s[0] + s[1] for s in ep)
    inst = collections.Counter(s[4] for s in ep)
    late = max(s[2] for s in ep)
    print(f"- {b/1e6:8.3f}-{e/1e6:8.3f} s: {len(ep)} slow, max {max(s[1] for s in ep)/1000:.1f} ms, instances {dict(inst)}, max late {late/1000:.1f} ms")
    for ev in events:
        if ev[0] <= e + 20_000 and ev[1] >= b - 20_000:
            print(f"     {ev[2]} {ev[0]/1e6:.3f}-{ev[1]/1e6:.3f} ({ev[3]:.1f} ms)")
    for ev in pg:
        if ev[0] <= e + 20_000 and ev[1] >= b - 200_000:
            print(f"     pg {ev[0]/1e6:.3f}-{ev[1]/1e6:.3f}: {ev[2]}")
