//! The `million` mode of the cluster-ingest bench (issue 18 item 3): a million agents live on two gateways in
//! cluster mode (release binary, one durable throwaway PostgreSQL, one throwaway Redis), and what it costs them:
//! each instance's RSS, the leader's eviction pass with nobody silent, heartbeat latency under a steady load inside
//! and outside those passes, one pass that evicts a tenth of the fleet at once while the load goes on, and the
//! sizes of `gateway_heartbeats` (and of `gateway_live_agents`, for a build before the receipts moved into the
//! heartbeat rows) on disk.
//!
//! Run: `cargo bench -p gateway-benches --bench cluster-ingest -- million`. Sizes and timings (environment):
//! `MILLION_AGENTS` (1,000,000; the gateways' cap is twice it, at most the gateway's ceiling of 10,000,000, so keep it
//! a little under ten million: at the cap an agent new to an instance costs a lookup in the database), `MILLION_SILENT`
//! (a tenth of them), `MILLION_THRESHOLD_S` (150: the gateways' `--heartbeat-eviction-threshold-s`; at ten million on
//! this box, 840 with `MILLION_RATE=18000`: see benchmarks.md, s34-t), `MILLION_CHECK_MS` (10,000:
//! `--heartbeat-check-interval-ms`), `MILLION_RATE` (the steady load's heartbeats/s over both instances; default 0.6 of
//! the rate the fill reached), `MILLION_CONNECTIONS` (64), `MILLION_SETTLE_S` (10: load after the crowd's pass),
//! `MILLION_PG_NAPTIME_S` (unset: the server's 60 s autovacuum naptime), `MILLION_DUMP_DIR` (unset: a directory to
//! write every steady request's timing and the gateways' logs into, for a look at which requests were slow and when).
//! Pinning as the other modes (`CLUSTER_BENCH_SERVER_CPUS`, `CLUSTER_BENCH_CLIENT_CPUS`).
//!
//! The run, in the leader's time (its passes tick every check interval from its start):
//! 1. right after one of the leader's passes, the SILENT agents heartbeat once each (agent `i` to instance `i % 2`),
//!    then the others do; the silent ones never again. Filling the silent ones must take less than a check
//!    interval: then they all cross the threshold between two passes, and one pass evicts them all.
//! 2. a steady open-loop load (each request has its send time; a request late on its schedule is sent at once)
//!    cycles through the other agents, each cycle sending every agent to the instance it did not use last time (so
//!    each instance comes to know the whole fleet, as behind a load balancer that spreads requests); the threshold
//!    must exceed one cycle, else the kept agents go silent too — why it cannot be shortened much below
//!    (fleet / sustainable rate).
//! 3. the load goes on until SETTLE seconds after the pass that evicts the silent ones.
//!
//! Passes are timed from the gateways' own view: the `eviction pass` debug line (`evicted`, `store_ms`, `total_ms`,
//! and its timestamp) that the `gateway_agent_eviction_pass_duration_seconds` histogram also counts. A request is
//! "during a pass" when its flight overlaps one.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use diesel::{Connection as _, PgConnection, QueryableByName, RunQueryDsl as _};
use gateway_testkit::postgres::TempPostgres;
use gateway_testkit::redis::RedisServer;
use gateway_testkit::{Sample, env_size};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::http_load::{Pinning, Server, answer, tree_cpu_time};
use crate::{ADMIN_TOKEN, get, machine_state, print_log_summary, wait_ready};

/// The gateway's largest `--max-tracked-agents` (bin/gateway's `MAX_TRACKED_AGENTS_CEILING`).
const MAX_TRACKED_AGENTS_CEILING: u64 = 10_000_000;

struct Config {
    agents: u64,
    silent: u64,
    threshold: Duration,
    check: Duration,
    rate: Option<f64>,
    connections: u64,
    settle: Duration,
}

impl Config {
    fn from_env() -> Self {
        let agents = env_size("MILLION_AGENTS", 1_000_000) as u64;
        Self {
            agents,
            silent: env_size("MILLION_SILENT", (agents / 10) as usize) as u64,
            threshold: Duration::from_secs(env_size("MILLION_THRESHOLD_S", 150) as u64),
            check: Duration::from_millis(env_size("MILLION_CHECK_MS", 10_000) as u64),
            rate: std::env::var("MILLION_RATE").ok().map(|rate| rate.parse().expect("MILLION_RATE: heartbeats/s")),
            connections: env_size("MILLION_CONNECTIONS", 64).max(2) as u64,
            settle: Duration::from_secs(env_size("MILLION_SETTLE_S", 10) as u64),
        }
    }
}

/// An id of a realistic length (agents name themselves like "researcher-alpha-9"): 24 bytes.
fn agent(n: u64) -> String {
    format!("researcher-alpha-{n:07}")
}

/// One request of the load: when it left (µs since the run's base), how long its answer took, and whether it was
/// a 2xx; `late` is how far behind its schedule it was sent (steady load only).
#[derive(Clone, Copy)]
struct Shot {
    sent_us: u64,
    latency_us: u32,
    late_us: u32,
    ok: bool,
    /// Which instance answered (0: gw-a, 1: gw-b).
    server: u8,
}

#[derive(Clone, Copy)]
enum Plan {
    /// Agents `first..end` once each, as fast as the connections go: agent `first + 2k + s` to instance `s`.
    Fill { first: u64, end: u64 },
    /// Agents `first..end` in cycles at `rate` per second over both instances, until `until`.
    Steady { first: u64, end: u64, rate: f64, until: Instant },
}

/// One leader pass as the gateway logged it.
#[derive(Clone, Copy, Debug)]
struct Pass {
    /// When it began and ended, µs since the run's base.
    began_us: u64,
    ended_us: u64,
    evicted: u64,
    store_ms: f64,
    total_ms: f64,
}

pub fn run(gateway_binary: &Path, pinning: &Pinning, postgres: &TempPostgres, postmaster: u32) {
    let config = Config::from_env();
    println!(
        "\n## A million agents: {} agents ({} of them then silent), two instances, threshold {:?}, check interval \
         {:?}, {} connections",
        config.agents, config.silent, config.threshold, config.check, config.connections
    );
    println!("machine before: {}", machine_state());
    let base = Instant::now();
    let base_wall = SystemTime::now();
    let logs = tempfile::tempdir().unwrap();
    let database = postgres.create_database("million");
    // A server-wide setting (not a table's): how often the autovacuum launcher looks for tables due, which bounds
    // how long the dead index entries of a bulk fill wait for their vacuum. Unset: PostgreSQL's 60 s.
    if let Ok(naptime) = std::env::var("MILLION_PG_NAPTIME_S") {
        let seconds: u32 = naptime.parse().expect("MILLION_PG_NAPTIME_S: seconds");
        let mut admin = PgConnection::establish(database.url()).unwrap();
        diesel::sql_query(format!("ALTER SYSTEM SET autovacuum_naptime = '{seconds}s'")).execute(&mut admin).unwrap();
        diesel::sql_query("SELECT pg_reload_conf()").execute(&mut admin).unwrap();
        println!("PostgreSQL autovacuum_naptime: {seconds} s");
    }
    let redis = RedisServer::start().unwrap();
    let redis_pid = redis.pid().unwrap();
    pinning.pin_started(redis_pid);

    let mut gateways = Vec::new();
    for instance_id in ["gw-a", "gw-b"] {
        let mut command = pinning.command(gateway_binary);
        command.args(["--listen", "127.0.0.1:0", "--database-url", database.url(), "--admin-token", ADMIN_TOKEN]);
        command.args(["--redis-url", &redis.url(), "--instance-id", instance_id]);
        command.args(["--cluster-secret", "the cluster secret of the benchmark runs", "--log-format", "json"]);
        command.args(["--heartbeat-eviction-threshold-s", &config.threshold.as_secs().to_string()]);
        command.args(["--heartbeat-check-interval-ms", &config.check.as_millis().to_string()]);
        // Room above the fleet so that an agent new to one instance (every agent, in the first steady cycle) never
        // meets the cap's round trip to the database; bounded by the gateway's ceiling, which a fleet of ten million
        // reaches: past 5,000,000 agents the room shrinks, and at 10,000,000 the run is at the cap.
        command.args(["--max-tracked-agents", &(config.agents * 2).min(MAX_TRACKED_AGENTS_CEILING).to_string()]);
        let log = logs.path().join(format!("{instance_id}.log"));
        // Every pass's line; the info lines of evictions are what an operator's default `info` writes too.
        command
            .env("RUST_LOG", "warn,gateway_heartbeat=debug,gateway_store::liveness=debug")
            .stderr(File::create(&log).unwrap());
        let gateway = Server::spawn(&format!("gateway {instance_id}"), &mut command, "gateway listening on http://");
        wait_ready(&gateway);
        gateways.push((instance_id, gateway, log));
    }
    let leader = wait_for_leader(&gateways);
    let (leader_id, _, leader_log) = &gateways[leader];
    println!("leader: {leader_id}");
    let servers = [gateways[0].1.address, gateways[1].1.address];
    let pids = [gateways[0].1.child.id(), gateways[1].1.child.id()];
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    // 1. Right after a pass: the silent ones, then the rest. A started instance passes no judgement before it has
    // listened for one threshold (gateway-heartbeat's `hearing`), so the first pass comes a threshold after the start.
    let seen = passes(leader_log, base_wall).len();
    let deadline = Instant::now() + config.threshold + config.check * 3;
    while passes(leader_log, base_wall).len() <= seen {
        assert!(Instant::now() < deadline, "the leader logged no eviction pass within a threshold and three checks");
        std::thread::sleep(Duration::from_millis(10));
    }
    let aligned = Instant::now();
    let (silent_shots, silent_took) =
        runtime.block_on(drive(servers, config.connections, Plan::Fill { first: 0, end: config.silent }, base));
    println!(
        "fill, silent ones: {} heartbeats in {:.2} s ({:.0}/s, {} failed){}",
        silent_shots.len(),
        silent_took.as_secs_f64(),
        silent_shots.len() as f64 / silent_took.as_secs_f64(),
        failed(&silent_shots),
        if silent_took + Duration::from_millis(500) < config.check {
            ""
        } else {
            " — longer than a check interval less 0.5 s: their eviction may take two passes"
        }
    );
    let (kept_shots, kept_took) = runtime.block_on(drive(
        servers,
        config.connections,
        Plan::Fill { first: config.silent, end: config.agents },
        base,
    ));
    let fill_rate = kept_shots.len() as f64 / kept_took.as_secs_f64();
    let fill_latency = latencies(kept_shots.iter());
    println!(
        "fill, the others: {} heartbeats in {:.2} s ({fill_rate:.0}/s, {} failed; p50 {} p99 {})",
        kept_shots.len(),
        kept_took.as_secs_f64(),
        failed(&kept_shots),
        ms(fill_latency.percentile(50.0)),
        ms(fill_latency.percentile(99.0)),
    );
    let filled_us = micros(base.elapsed());
    println!("after the fill: {}", memory(&gateways));
    let mut admin = PgConnection::establish(database.url()).unwrap();
    println!("after the fill: {}", sizes(&mut admin));
    println!("after the fill: PostgreSQL checkpoints: {}", checkpoints(&mut admin));
    explain_eviction(&mut admin);

    // 2. and 3. The steady load until the crowd's pass is over and SETTLE more.
    let kept = config.agents - config.silent;
    let rate = config.rate.unwrap_or((fill_rate * 0.6).round());
    let cycle = Duration::from_secs_f64(kept as f64 / rate);
    println!(
        "steady load: {rate:.0} heartbeats/s over {kept} agents (a cycle of {:.1} s; threshold {:?}){}",
        cycle.as_secs_f64(),
        config.threshold,
        if cycle + Duration::from_secs(5) < config.threshold { "" } else { " — NOT within the threshold" }
    );
    let until = aligned + config.threshold + config.check + config.settle;
    let cpu_before: Vec<Option<Duration>> =
        [pids[0], pids[1], postmaster, redis_pid].iter().map(|pid| tree_cpu_time(*pid)).collect();
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = Arc::clone(&sampling);
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while sampling.load(Ordering::Relaxed) {
                samples.push((micros(base.elapsed()), pids.map(rss_kib)));
                std::thread::sleep(Duration::from_millis(500));
            }
            samples
        })
    };
    let steady_began_us = micros(base.elapsed());
    let (steady, steady_took) = runtime.block_on(drive(
        servers,
        config.connections,
        Plan::Steady { first: config.silent, end: config.agents, rate, until },
        base,
    ));
    sampling.store(false, Ordering::Relaxed);
    let rss_samples = sampler.join().unwrap();
    let cpu: Vec<Option<Duration>> = [pids[0], pids[1], postmaster, redis_pid]
        .iter()
        .zip(&cpu_before)
        .map(|(pid, before)| tree_cpu_time(*pid).zip(*before).map(|(after, before)| after.saturating_sub(before)))
        .collect();
    println!(
        "steady load: {} heartbeats in {:.1} s ({:.0}/s, {} failed); sent behind schedule: p99 {} max {}",
        steady.len(),
        steady_took.as_secs_f64(),
        steady.len() as f64 / steady_took.as_secs_f64(),
        failed(&steady),
        ms(Sample::new(steady.iter().map(|shot| Duration::from_micros(shot.late_us.into())).collect())
            .percentile(99.0)),
        ms(steady.iter().map(|shot| Duration::from_micros(shot.late_us.into())).max()),
    );
    let per_request = |used: Option<Duration>| {
        used.map_or("-".to_owned(), |used| {
            format!(
                "{:.0} % of a CPU, {:.1} µs per heartbeat",
                100.0 * used.as_secs_f64() / steady_took.as_secs_f64(),
                used.as_secs_f64() * 1e6 / steady.len().max(1) as f64
            )
        })
    };
    println!(
        "  CPU over the steady load: gw-a {}; gw-b {}; PostgreSQL {}; Redis {}",
        per_request(cpu[0]),
        per_request(cpu[1]),
        per_request(cpu[2]),
        per_request(cpu[3])
    );
    println!("at the end: {}", memory(&gateways));
    println!("at the end: {}", sizes(&mut admin));

    // The passes as the leader saw them.
    let all_passes = passes(leader_log, base_wall);
    println!("\nleader's passes since the fill ended (s since start, agents evicted, store ms, total ms):");
    for pass in all_passes.iter().filter(|pass| pass.ended_us >= filled_us) {
        println!(
            "  {:>7.2} s  {:>7}  {:>9.2}  {:>9.2}",
            pass.began_us as f64 / 1e6,
            pass.evicted,
            pass.store_ms,
            pass.total_ms
        );
    }
    println!("the leader's store side of those passes (s since start, flush ms, transaction or read-only probe ms):");
    for (at, flush_ms, transaction_ms) in store_passes(leader_log, base_wall).iter().filter(|line| line.0 >= filled_us)
    {
        println!("  {:>7.2} s  {flush_ms:>9.2}  {transaction_ms:>9.2}", *at as f64 / 1e6);
    }
    println!("PostgreSQL checkpoints: {}", checkpoints(&mut admin));
    let quiet: Vec<Pass> =
        all_passes.iter().copied().filter(|pass| pass.evicted == 0 && pass.began_us >= filled_us).collect();
    let crowd: Vec<Pass> = all_passes.iter().copied().filter(|pass| pass.evicted > 0).collect();
    let quiet_totals = Sample::new(quiet.iter().map(|pass| Duration::from_secs_f64(pass.total_ms / 1e3)).collect());
    println!(
        "passes with nobody silent, {} live: {} passes, total p50 {} max {}; {} of them under 50 ms (goal: all)",
        config.agents,
        quiet.len(),
        ms(quiet_totals.percentile(50.0)),
        ms(quiet_totals.max()),
        quiet.iter().filter(|pass| pass.total_ms < 50.0).count(),
    );
    let examinations = examinations(leader_log);
    let examine_ms = Sample::new(examinations.iter().map(|ms| Duration::from_secs_f64(ms / 1e3)).collect());
    println!(
        "the leader's examinations of the minutes behind the cutoff (off the passes, every 5 s): {}, p50 {} max {}",
        examinations.len(),
        ms(examine_ms.percentile(50.0)),
        ms(examine_ms.max()),
    );
    for (instance_id, _, log) in &gateways {
        let counts = counts(log);
        let count_ms = Sample::new(counts.iter().map(|ms| Duration::from_secs_f64(ms / 1e3)).collect());
        println!(
            "{instance_id}'s counts of the live agents over the whole run: {}, p50 {} max {} ({:.0} ms in all)",
            counts.len(),
            ms(count_ms.percentile(50.0)),
            ms(count_ms.max()),
            counts.iter().sum::<f64>(),
        );
    }
    let evicted: u64 = crowd.iter().map(|pass| pass.evicted).sum();
    println!(
        "passes that evicted: {} ({} agents in all; expected {}): {}",
        crowd.len(),
        evicted,
        config.silent,
        crowd
            .iter()
            .map(|pass| format!("{} agents in {:.0} ms (store {:.0} ms)", pass.evicted, pass.total_ms, pass.store_ms))
            .collect::<Vec<_>>()
            .join("; ")
    );

    // Heartbeat latency of the steady load, by what the leader was doing.
    let overlaps = |shot: &Shot, pass: &Pass| {
        shot.sent_us <= pass.ended_us && shot.sent_us + u64::from(shot.latency_us) >= pass.began_us
    };
    let crowd_end = crowd.iter().map(|pass| pass.ended_us).max();
    let mut groups: Vec<(&str, Vec<&Shot>)> = vec![
        ("steady, 1M live, outside passes (before the crowd's pass)", Vec::new()),
        ("steady, during passes with nobody silent", Vec::new()),
        ("steady, during the pass that evicts the silent ones", Vec::new()),
        ("steady, after that pass", Vec::new()),
    ];
    for shot in &steady {
        let group = if crowd.iter().any(|pass| overlaps(shot, pass)) {
            2
        } else if quiet.iter().any(|pass| overlaps(shot, pass)) {
            1
        } else if crowd_end.is_some_and(|end| shot.sent_us > end) {
            3
        } else {
            0
        };
        groups[group].1.push(shot);
    }
    // Latency counts from the send; a request sent late (its connection still waiting for the answer before) also
    // waited for its schedule, which the last column adds.
    println!("\n| heartbeats | count | failed | p50 | p99 | max | p99 from its schedule |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (name, shots) in &groups {
        let sample = latencies(shots.iter().copied());
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} |",
            shots.len(),
            shots.iter().filter(|shot| !shot.ok).count(),
            ms(sample.percentile(50.0)),
            ms(sample.percentile(99.0)),
            ms(sample.max()),
            ms(from_schedule(shots.iter().copied()).percentile(99.0)),
        );
    }
    let whole = latencies(steady.iter());
    println!(
        "| steady, all | {} | {} | {} | {} | {} | {} |",
        steady.len(),
        failed(&steady),
        ms(whole.percentile(50.0)),
        ms(whole.percentile(99.0)),
        ms(whole.max()),
        ms(from_schedule(steady.iter()).percentile(99.0)),
    );

    let before_crowd: Vec<&(u64, [u64; 2])> = rss_samples
        .iter()
        .filter(|(at, _)| *at >= steady_began_us && crowd.first().is_none_or(|pass| *at < pass.began_us))
        .collect();
    for (index, (instance_id, _, _)) in gateways.iter().enumerate() {
        let peak = before_crowd.iter().map(|(_, rss)| rss[index]).max().unwrap_or(0);
        let last = before_crowd.last().map_or(0, |(_, rss)| rss[index]);
        let overall = rss_samples.iter().map(|(_, rss)| rss[index]).max().unwrap_or(0);
        println!(
            "RSS {instance_id}: {:.1} MB just before the crowd's pass, peak {:.1} MB over the steady load before it, \
             peak {:.1} MB over the whole steady load (goal < 400 MB)",
            mib(last),
            mib(peak),
            mib(overall)
        );
    }
    println!("machine after: {}", machine_state());
    if let Ok(dump) = std::env::var("MILLION_DUMP_DIR") {
        dump_run(Path::new(&dump), &steady, base_wall, &gateways);
    }
    let log_paths: Vec<(String, PathBuf)> =
        gateways.iter().map(|(instance_id, _, log)| ((*instance_id).to_owned(), log.clone())).collect();
    drop(gateways);
    for (instance_id, log) in &log_paths {
        print_log_summary(instance_id, log);
    }
    drop(redis);
}

/// For a look at which requests were slow and what the gateways were doing then (`MILLION_DUMP_DIR`): every steady
/// request as `sent_us,latency_us,late_us,ok,instance` (µs since the run's base), the base as Unix µs, and each
/// gateway's JSON log.
fn dump_run(dir: &Path, steady: &[Shot], base_wall: SystemTime, gateways: &[(&str, Server, PathBuf)]) {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).unwrap();
    let mut shots = std::io::BufWriter::new(File::create(dir.join("steady.csv")).unwrap());
    writeln!(shots, "sent_us,latency_us,late_us,ok,instance").unwrap();
    for shot in steady {
        writeln!(shots, "{},{},{},{},{}", shot.sent_us, shot.latency_us, shot.late_us, u8::from(shot.ok), shot.server)
            .unwrap();
    }
    shots.flush().unwrap();
    let base = base_wall.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    std::fs::write(dir.join("base_unix_us"), micros(base).to_string()).unwrap();
    for (instance_id, _, log) in gateways {
        std::fs::copy(log, dir.join(format!("{instance_id}.log"))).unwrap();
    }
    println!("steady requests and the gateways' logs written to {}", dir.display());
}

fn wait_for_leader(gateways: &[(&str, Server, PathBuf)]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (index, (_, gateway, _)) in gateways.iter().enumerate() {
            let (status, body) = get(gateway, "/gateway/cluster");
            if status == 200 && body["role"].as_str() == Some("leader") {
                return index;
            }
        }
        assert!(Instant::now() < deadline, "no instance became leader within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lines of a JSON log whose message is `message`, parsed (a line that does not parse is left out).
fn log_events(log: &Path, message: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let quoted = format!("\"{message}\"");
    text.lines().filter(|line| line.contains(&quoted)).filter_map(|line| serde_json::from_str(line).ok()).collect()
}

/// When a log line was written, as time since `base_wall`.
fn logged_at(line: &Value, base_wall: SystemTime) -> Option<Duration> {
    let at = time::OffsetDateTime::parse(line["timestamp"].as_str()?, &time::format_description::well_known::Rfc3339)
        .ok()?;
    Some(SystemTime::from(at).duration_since(base_wall).unwrap_or_default())
}

/// The `eviction pass` lines of a JSON log, in µs since `base_wall`.
fn passes(log: &Path, base_wall: SystemTime) -> Vec<Pass> {
    log_events(log, "eviction pass")
        .iter()
        .filter_map(|line| {
            let ended = logged_at(line, base_wall)?;
            let total_ms = line["total_ms"].as_f64()?;
            let began = ended.saturating_sub(Duration::from_secs_f64(total_ms / 1e3));
            Some(Pass {
                began_us: micros(began),
                ended_us: micros(ended),
                evicted: line["evicted"].as_u64()?,
                store_ms: line["store_ms"].as_f64()?,
                total_ms,
            })
        })
        .collect()
}

/// The `evict silent agents` lines of a JSON log: when each ended (µs since `base_wall`), its flush and its
/// transaction in ms.
fn store_passes(log: &Path, base_wall: SystemTime) -> Vec<(u64, f64, f64)> {
    log_events(log, "evict silent agents")
        .iter()
        .filter_map(|line| {
            let ended = logged_at(line, base_wall)?;
            // `probe_ms`: a pass that found nobody silent in its read-only probe and opened no transaction.
            let store_ms = line["transaction_ms"].as_f64().or_else(|| line["probe_ms"].as_f64())?;
            Some((micros(ended), line["flush_ms"].as_f64()?, store_ms))
        })
        .collect()
}

/// The `examine_ms` of each `minutes behind the cutoff examined` line of a JSON log (gateway-store's examination,
/// which lets a pass skip the minutes it read).
fn examinations(log: &Path) -> Vec<f64> {
    log_events(log, "minutes behind the cutoff examined")
        .iter()
        .filter_map(|line| line["examine_ms"].as_f64())
        .collect()
}

/// The `count_ms` of each `live agents counted` line of a JSON log (gateway-store's count of the cluster's live
/// agents: every 5 s on each instance before migration 2026-12-21-000020, once per 5 s for the cluster since).
fn counts(log: &Path) -> Vec<f64> {
    log_events(log, "live agents counted").iter().filter_map(|line| line["count_ms"].as_f64()).collect()
}

#[derive(QueryableByName)]
struct Checkpoints {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    timed: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    requested: i64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    write_ms: f64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    sync_ms: f64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    buffers: i64,
}

/// Checkpoints since the server started: each flushes the dirty pages, and the first write of each page after
/// one logs the whole page (`full_page_writes`), which is what slows commits right after a bulk load.
fn checkpoints(admin: &mut PgConnection) -> String {
    let _ = diesel::sql_query("SELECT pg_stat_clear_snapshot()").execute(admin);
    let found: Checkpoints = diesel::sql_query(
        "SELECT checkpoints_timed AS timed, checkpoints_req AS requested, checkpoint_write_time AS write_ms, \
             checkpoint_sync_time AS sync_ms, buffers_checkpoint AS buffers FROM pg_stat_bgwriter",
    )
    .get_result(admin)
    .unwrap();
    format!(
        "{} timed, {} requested (WAL size), {} buffers written, write {:.0} ms, sync {:.0} ms",
        found.timed, found.requested, found.buffers, found.write_ms, found.sync_ms
    )
}

/// Sends the plan's heartbeats over `connections` keep-alive connections, half to each instance; returns every
/// request and how long the whole took.
async fn drive(servers: [SocketAddr; 2], connections: u64, plan: Plan, base: Instant) -> (Vec<Shot>, Duration) {
    let counters = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|connection| {
            let server = usize::try_from(connection % 2).unwrap();
            let counters = Arc::clone(&counters);
            tokio::spawn(connection_loop(servers[server], server, counters, plan, started, base))
        })
        .collect();
    let mut shots = Vec::new();
    for task in tasks {
        shots.extend(task.await.unwrap());
    }
    shots.sort_unstable_by_key(|shot| shot.sent_us);
    (shots, started.elapsed())
}

async fn connection_loop(
    address: SocketAddr,
    server: usize,
    counters: Arc<[AtomicU64; 2]>,
    plan: Plan,
    started: Instant,
    base: Instant,
) -> Vec<Shot> {
    let stream = TcpStream::connect(address).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(driver);
    let host = address.to_string();
    let s = server as u64;
    let mut shots = Vec::new();
    loop {
        let k = counters[server].fetch_add(1, Ordering::Relaxed);
        let (agent_index, due) = match plan {
            Plan::Fill { first, end } => {
                let index = first + 2 * k + s;
                if index >= end {
                    return shots;
                }
                (index, None)
            }
            Plan::Steady { first, end, rate, until } => {
                let due = started + Duration::from_secs_f64((2 * k + s) as f64 / rate);
                if due >= until {
                    return shots;
                }
                let kept = end - first;
                // Cycle c sends agent j to the instance of parity (j's fill parity + c + 1): the other one each time.
                let cycle = 2 * k / kept;
                let mut j = (2 * k) % kept + (s + cycle + 1) % 2;
                if j >= kept {
                    j -= kept;
                }
                tokio::time::sleep_until(due.into()).await;
                (first + j, Some(due))
            }
        };
        let body = format!(
            r#"{{"type":"heartbeat","agent_id":"{}","cluster_id":"cluster-{}","timestamp":"2026-02-22T12:00:00Z"}}"#,
            agent(agent_index),
            agent_index % 8
        );
        let request = hyper::Request::post("/gateway/heartbeat")
            .header(hyper::header::HOST, &host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let sent = Instant::now();
        let status = answer(&mut sender, request).await;
        let ok = status.is_some_and(|status| status.is_success());
        shots.push(Shot {
            sent_us: micros(sent.duration_since(base)),
            latency_us: u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX),
            late_us: due.map_or(0, |due| u32::try_from(sent.duration_since(due).as_micros()).unwrap_or(u32::MAX)),
            ok,
            server: u8::from(server == 1),
        });
        if !ok && sender.ready().await.is_err() {
            return shots;
        }
    }
}

fn latencies<'a>(shots: impl Iterator<Item = &'a Shot>) -> Sample<Duration> {
    Sample::new(shots.filter(|shot| shot.ok).map(|shot| Duration::from_micros(shot.latency_us.into())).collect())
}

fn from_schedule<'a>(shots: impl Iterator<Item = &'a Shot>) -> Sample<Duration> {
    Sample::new(
        shots
            .filter(|shot| shot.ok)
            .map(|shot| Duration::from_micros(u64::from(shot.latency_us) + u64::from(shot.late_us)))
            .collect(),
    )
}

fn failed(shots: &[Shot]) -> usize {
    shots.iter().filter(|shot| !shot.ok).count()
}

fn ms(latency: Option<Duration>) -> String {
    latency.map_or("-".to_owned(), |latency| format!("{:.2} ms", latency.as_secs_f64() * 1e3))
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS:")
}

fn status_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| line.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn memory(gateways: &[(&str, Server, PathBuf)]) -> String {
    gateways
        .iter()
        .map(|(instance_id, gateway, _)| {
            let pid = gateway.child.id();
            format!(
                "{instance_id} RSS {:.1} MB (peak {:.1} MB)",
                mib(status_field(pid, "VmRSS:")),
                mib(status_field(pid, "VmHWM:"))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(QueryableByName)]
struct Sizes {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    live_rows: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    live_bytes: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    live_index_bytes: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    heartbeat_rows: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    heartbeat_bytes: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    heartbeat_index_bytes: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    live_autovacuums: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    live_updates: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    live_hot_updates: i64,
}

/// The table that holds the receipts: `gateway_live_agents` before migration 2026-12-21-000017, the heartbeat rows
/// since (live while `received_minute` is not NULL). Asked of the database, so that one harness measures either build.
fn receipts_table(admin: &mut PgConnection) -> (&'static str, &'static str) {
    #[derive(QueryableByName)]
    struct Old {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        old: bool,
    }
    let old: Old =
        diesel::sql_query("SELECT to_regclass('gateway_live_agents') IS NOT NULL AS old").get_result(admin).unwrap();
    if old.old { ("gateway_live_agents", "true") } else { ("gateway_heartbeats", "received_minute IS NOT NULL") }
}

/// Rows and `pg_total_relation_size` (table, indexes, TOAST) of the tables a heartbeat writes.
fn sizes(admin: &mut PgConnection) -> String {
    let (table, live) = receipts_table(admin);
    let sizes: Sizes = diesel::sql_query(format!(
        "SELECT (SELECT count(*) FROM {table} WHERE {live}) AS live_rows, \
             pg_total_relation_size('{table}') AS live_bytes, \
             pg_indexes_size('{table}') AS live_index_bytes, \
             (SELECT count(*) FROM gateway_heartbeats) AS heartbeat_rows, \
             pg_total_relation_size('gateway_heartbeats') AS heartbeat_bytes, \
             pg_indexes_size('gateway_heartbeats') AS heartbeat_index_bytes, \
             (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = '{table}') \
                 AS live_autovacuums, \
             (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = '{table}') AS live_updates, \
             (SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = '{table}') \
                 AS live_hot_updates",
    ))
    .get_result(admin)
    .unwrap();
    let mb = |bytes: i64| bytes as f64 / 1_048_576.0;
    format!(
        "receipts in {table}: {} live rows, {:.1} MB on disk (indexes {:.1} MB, {} autovacuums so far, updates so far \
         {} of which HOT {:.0} %); gateway_heartbeats {} rows, {:.1} MB (indexes {:.1} MB)",
        sizes.live_rows,
        mb(sizes.live_bytes),
        mb(sizes.live_index_bytes),
        sizes.live_autovacuums,
        sizes.live_updates,
        100.0 * sizes.live_hot_updates as f64 / sizes.live_updates.max(1) as f64,
        sizes.heartbeat_rows,
        mb(sizes.heartbeat_bytes),
        mb(sizes.heartbeat_index_bytes)
    )
}

/// The plan of the eviction pass's select with nobody silent (run, locking nothing: no row matches).
fn explain_eviction(admin: &mut PgConnection) {
    #[derive(QueryableByName)]
    struct Line {
        #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
        line: String,
    }
    let (table, _) = receipts_table(admin);
    let plan: Vec<Line> = diesel::sql_query(format!(
        "EXPLAIN (ANALYZE, BUFFERS) SELECT agent_id FROM {table} \
         WHERE received_minute <= floor(extract(epoch FROM (now() AT TIME ZONE 'UTC') - interval '1 day') / 60)::bigint \
         AND received_at < (now() AT TIME ZONE 'UTC') - interval '1 day' ORDER BY received_minute LIMIT 1",
    ))
    .load(admin)
    .unwrap();
    println!("the eviction pass's probe with nobody silent, EXPLAIN (ANALYZE, BUFFERS):");
    for line in plan {
        println!("    {}", line.line);
    }
    // A gateway from before migration 2026-12-21-000016 has no such column: said, and the run goes on.
    let Ok(plan) = diesel::sql_query(format!(
        "EXPLAIN (ANALYZE, BUFFERS) SELECT agent_id FROM {table} \
         WHERE inserted_minute > received_minute AND received_minute <= 0 AND received_at < '1970-01-01' \
         ORDER BY received_minute LIMIT 1",
    ))
    .load::<Line>(admin) else {
        println!("no read of the rows inserted late to explain: this gateway's schema has no inserted_minute");
        return;
    };
    println!("the pass's read of the rows inserted late (all a pass reads once the leader examined), EXPLAIN:");
    for line in plan {
        println!("    {}", line.line);
    }
}
