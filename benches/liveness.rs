//! The liveness map at its scale target: memory with 1,000,000 tracked agents, and the time of one eviction sweep
//! over them.
//!
//! Run: `cargo bench -p gateway-benches --bench liveness` (release profile, or `just bench liveness`). For a quick
//! look: `LIVENESS_BENCH_AGENTS=100000 cargo bench -p gateway-benches --bench liveness`. Results:
//! docs/benchmarks.md.
//!
//! The real `HeartbeatManager` on a `ManualClock`, fed through `accept` (what `POST /gateway/heartbeat` calls
//! once the body is parsed) from `LIVENESS_BENCH_CONCURRENCY` tasks (default 64, like 64 connections). Its ports
//! keep nothing per agent (a store that drops the rows, a publisher that counts, gateway-core's capability map,
//! empty because no DecisionLog is sent), so the RSS growth is the manager's map and what the allocator keeps.
//!
//! 1. Record N distinct agents: time, VmRSS before and after.
//! 2. Sweep with nobody silent (clock moved less than the threshold): the cost of walking the map, 7 times,
//!    then once more with the lock probe below.
//!    Then pages of `GET /gateway/agents` (the default page size) over the full map, with the same probe.
//! 3. Sweep with everybody silent (clock past the threshold): every agent evicted with one `agent_evicted`
//!    publish each; this empties the map, so before each of 3 rounds the agents are recorded again (through
//!    `record_heartbeat`, the map half of `accept`, to keep the run near a minute).
//! 4. One more such round with the gateway's log formatter on (text, info level) writing to /dev/null: every
//!    eviction is also an info line, which rounds 1-3 skip because no subscriber is installed there.
//!
//! During that last quiet sweep and every evicting one, a probe thread keeps asking the manager for `tracked_count()`, which takes the same map
//! lock a heartbeat takes: its longest wait is how long heartbeats stall behind the sweep.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // A benchmark reports on stdout and aborts on setup errors.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway_core::{
    AgentId, ClusterId, Event, EventPublisher, FencingToken, HeartbeatRecord, HeartbeatStore, InMemoryCapabilityMap,
    InMemoryLiveness, ManualClock, PublishError, SingleProcessLeadership, StoreError, Topic,
};
use gateway_heartbeat::{EVICTION_THRESHOLD, HeartbeatConfig, HeartbeatManager, HeartbeatPing, HeartbeatPorts};
use gateway_testkit::{Sample, env_size};
use time::OffsetDateTime;
use tracing::Level;

const QUIET_SWEEPS: usize = 7;
const EVICTING_ROUNDS: usize = 3;
/// `GET /gateway/agents`' default page size (gateway-api `agents::DEFAULT_PAGE`).
const LISTING_PAGE: usize = 100;
/// A few clusters, as a real deployment has: every agent holds its own copy of its cluster id.
const CLUSTERS: [&str; 4] = ["cluster-eu-west-1", "cluster-us-east-1", "cluster-us-west-2", "cluster-ap-south-1"];

/// Accepts every upsert and keeps nothing, so the process's memory is the manager's.
#[derive(Debug, Default)]
struct DiscardingStore {
    rows: AtomicU64,
    commits: AtomicU64,
}

impl HeartbeatStore for DiscardingStore {
    fn upsert_heartbeats(&self, records: &[HeartbeatRecord]) -> Result<(), StoreError> {
        self.rows.fetch_add(records.len() as u64, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn heartbeat(&self, _agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError> {
        Ok(None)
    }
}

/// Counts `agent_evicted` events; the in-process bus also drops events for a topic nobody follows.
#[derive(Debug, Default)]
struct CountingPublisher {
    evictions: AtomicU64,
}

impl EventPublisher for CountingPublisher {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        if *topic == Topic::Agents && event.event_type() == "agent_evicted" {
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// `(VmRSS, VmHWM)` of this process in KiB.
fn memory_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux only)");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /proc/self/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn ping(n: usize) -> HeartbeatPing {
    HeartbeatPing {
        agent_id: AgentId::new(format!("agent-{n:07}")).unwrap(),
        cluster_id: ClusterId::new(CLUSTERS[n % CLUSTERS.len()]).unwrap(),
        timestamp: None,
    }
}

/// Sends one heartbeat for each of `agents` distinct agents from `concurrency` tasks; returns the wall time.
async fn record_all(manager: &HeartbeatManager, agents: usize, concurrency: usize) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|first| {
            let manager = manager.clone();
            tokio::spawn(async move {
                for n in (first..agents).step_by(concurrency) {
                    manager.accept(ping(n)).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(manager.tracked_count(), agents, "every agent tracked");
    elapsed
}

/// Refills the map through `record_heartbeat` alone: the same map inserts as `accept` without the store round
/// trip, so the later rounds fit in the run time.
fn rerecord(manager: &HeartbeatManager, agents: usize) -> Duration {
    let started = Instant::now();
    for n in 0..agents {
        let HeartbeatPing { agent_id, cluster_id, .. } = ping(n);
        manager.record_heartbeat(agent_id, cluster_id).unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(manager.tracked_count(), agents, "every agent tracked");
    elapsed
}

/// How long heartbeats wait for the map while `sweep` runs: the longest `tracked_count()` (same lock) seen by a
/// thread polling it every 50 µs meanwhile.
fn with_lock_probe<T>(manager: &HeartbeatManager, sweep: impl FnOnce() -> T) -> (T, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (manager, stop) = (manager.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                std::hint::black_box(manager.tracked_count());
                longest = longest.max(asked.elapsed());
                std::thread::sleep(Duration::from_micros(50));
            }
            longest
        })
    };
    // Let the probe take its first sample before the sweep starts.
    std::thread::sleep(Duration::from_millis(5));
    let outcome = sweep();
    stop.store(true, Ordering::Relaxed);
    (outcome, probe.join().unwrap())
}

fn to_time(duration: Duration) -> time::Duration {
    time::Duration::try_from(duration).unwrap()
}

fn summary(samples: Vec<Duration>) -> String {
    let sample = Sample::new(samples);
    let ms = |duration: Option<Duration>| ms(duration.unwrap_or_default());
    format!(
        "min {:.2} ms, median {:.2} ms, max {:.2} ms ({} runs)",
        ms(sample.min()),
        ms(sample.percentile(50.0)),
        ms(sample.max()),
        sample.len()
    )
}

fn main() {
    // `cargo test --benches` runs bench targets without `--bench`: nothing to measure then.
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    let agents = env_size("LIVENESS_BENCH_AGENTS", 1_000_000);
    let concurrency = env_size("LIVENESS_BENCH_CONCURRENCY", 64).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    let start: OffsetDateTime = time::macros::datetime!(2026-02-22 12:00:00 UTC);
    let clock = ManualClock::new(start);
    let store = Arc::new(DiscardingStore::default());
    let capabilities = Arc::new(InMemoryCapabilityMap::new(agents));
    let publisher = Arc::new(CountingPublisher::default());
    let config = HeartbeatConfig { max_tracked_agents: agents, ..HeartbeatConfig::default() };
    let ports = HeartbeatPorts {
        liveness: Arc::new(InMemoryLiveness::new(agents)),
        store: store.clone(),
        capabilities: capabilities.clone(),
        publisher: publisher.clone(),
        clock: Arc::new(clock.clone()),
        leadership: Arc::new(SingleProcessLeadership),
    };
    let manager = HeartbeatManager::new(ports, config);
    // Heartbeats are accepted while the loop runs. The loop itself is not spawned: its real-time tick would
    // sweep in the middle of a measurement, so the sweeps below are called directly.
    let _running = manager.health().start();

    println!("liveness benchmark: {agents} agents, {concurrency} concurrent senders, threshold {EVICTION_THRESHOLD:?}");
    println!(
        "sizes: AgentId {} B, ClusterId {} B, OffsetDateTime {} B (the map's key + value are these plus padding; each id \
         is also its own heap allocation)",
        size_of::<AgentId>(),
        size_of::<ClusterId>(),
        size_of::<OffsetDateTime>()
    );

    // 1. Record.
    let (rss_before, _) = memory_kib();
    let recording = runtime.block_on(record_all(&manager, agents, concurrency));
    let (rss_after, hwm_after) = memory_kib();
    let commits = store.commits.load(Ordering::Relaxed);
    println!();
    println!(
        "record {agents} agents through accept(): {:.0} ms ({:.0} heartbeats/s; {} rows in {commits} store calls)",
        ms(recording),
        agents as f64 / recording.as_secs_f64(),
        store.rows.load(Ordering::Relaxed)
    );
    println!(
        "RSS before {:.1} MiB, after {:.1} MiB: the map adds {:.1} MiB ({:.0} bytes per agent); peak so far {:.1} MiB",
        mib(rss_before),
        mib(rss_after),
        mib(rss_after.saturating_sub(rss_before)),
        rss_after.saturating_sub(rss_before) as f64 * 1024.0 / agents as f64,
        mib(hwm_after)
    );
    assert!(capabilities.is_empty(), "no DecisionLogs were sent, so the capability map holds nothing");

    // 2. Sweeps that evict nobody: the walk alone.
    clock.advance(to_time(EVICTION_THRESHOLD) - time::Duration::seconds(30));
    let quiet: Vec<Duration> = (0..QUIET_SWEEPS)
        .map(|_| {
            let started = Instant::now();
            let evicted = runtime.block_on(manager.check(FencingToken(1))).unwrap();
            let elapsed = started.elapsed();
            assert!(evicted.is_empty(), "nobody is silent yet");
            elapsed
        })
        .collect();
    let (kept, stalled) = with_lock_probe(&manager, || runtime.block_on(manager.check(FencingToken(1))).unwrap());
    assert!(kept.is_empty());
    assert_eq!(manager.tracked_count(), agents);
    println!();
    println!("sweep, nobody silent ({agents} kept): {}", summary(quiet));
    println!("  one more with the probe: heartbeats waited up to {:.2} ms for the map", ms(stalled));

    // 2b. Pages of `GET /gateway/agents` over the full map, the first and the second in turn.
    let first = runtime.block_on(manager.live_agents(None, LISTING_PAGE, usize::MAX)).unwrap();
    let second = first.next_after.clone();
    let pages: Vec<Duration> = (0..QUIET_SWEEPS)
        .map(|round| {
            let after = if round % 2 == 0 { None } else { second.clone() };
            let started = Instant::now();
            let page = runtime.block_on(manager.live_agents(after, LISTING_PAGE, usize::MAX)).unwrap();
            let elapsed = started.elapsed();
            assert_eq!(page.agents.len(), LISTING_PAGE, "a full page");
            elapsed
        })
        .collect();
    let (_, stalled) =
        with_lock_probe(&manager, || runtime.block_on(manager.live_agents(None, LISTING_PAGE, usize::MAX)).unwrap());
    println!("a listing page of {LISTING_PAGE} ({agents} live): {}", summary(pages));
    println!("  one more with the probe: heartbeats waited up to {:.2} ms for the map", ms(stalled));

    // 3. Sweeps that evict everybody; each empties the map, so record again before the next.
    println!();
    let mut sweeps = Vec::new();
    let mut ticks = Vec::new();
    for round in 1..=EVICTING_ROUNDS {
        if round > 1 {
            let recording = rerecord(&manager, agents);
            println!("  round {round}: {agents} agents recorded again (map only) in {:.0} ms", ms(recording));
        }
        let (swept, tick) = evict_everybody(&runtime, &manager, &clock, &publisher, agents, round);
        sweeps.push(swept);
        ticks.push(tick);
    }
    println!("sweep, everybody silent: check() {}", summary(sweeps));
    println!("sweep, everybody silent, list freed: {}", summary(ticks));

    // 4. The same with the per-eviction info line formatted and written, as the gateway logs by default.
    println!();
    let recording = rerecord(&manager, agents);
    println!("  logged round: {agents} agents recorded again (map only) in {:.0} ms", ms(recording));
    let log_sink = File::create("/dev/null").unwrap();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(Level::INFO)
        .with_ansi(false)
        .with_writer(Mutex::new(log_sink))
        .finish();
    let (swept, tick) = tracing::subscriber::with_default(subscriber, || {
        evict_everybody(&runtime, &manager, &clock, &publisher, agents, EVICTING_ROUNDS + 1)
    });
    println!(
        "sweep, everybody silent, each eviction logged (text, to /dev/null): check() {:.0} ms, list freed {:.0} ms",
        ms(swept),
        ms(tick)
    );
}

/// Moves the clock past the threshold and sweeps: every agent evicted. Returns the time of `check()` and of
/// `check()` plus freeing the list it returns (the loop drops it right away: part of one tick's cost).
fn evict_everybody(
    runtime: &tokio::runtime::Runtime,
    manager: &HeartbeatManager,
    clock: &ManualClock,
    publisher: &CountingPublisher,
    agents: usize,
    round: usize,
) -> (Duration, Duration) {
    clock.advance(to_time(EVICTION_THRESHOLD) + time::Duration::seconds(1));
    let published_before = publisher.evictions.load(Ordering::Relaxed);
    let ((swept, tick, count), stalled) = with_lock_probe(manager, || {
        let started = Instant::now();
        let evicted = runtime.block_on(manager.check(FencingToken(1))).unwrap();
        let swept = started.elapsed();
        let count = evicted.len();
        drop(evicted);
        (swept, started.elapsed(), count)
    });
    let published = publisher.evictions.load(Ordering::Relaxed) - published_before;
    assert_eq!(count, agents, "everybody evicted");
    assert_eq!(published, agents as u64, "one agent_evicted each");
    assert_eq!(manager.tracked_count(), 0);
    let (rss, hwm) = memory_kib();
    println!(
        "  round {round}: evicted all {count} ({published} agent_evicted published): check() {:.0} ms, with the \
         returned list freed {:.0} ms; heartbeats waited up to {:.0} ms for the map; RSS now {:.1} MiB, peak {:.1} MiB",
        ms(swept),
        ms(tick),
        ms(stalled),
        mib(rss),
        mib(hwm)
    );
    (swept, tick)
}
