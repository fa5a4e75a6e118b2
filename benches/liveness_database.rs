//! Shared liveness in the database, as built (`gateway_store::SharedLiveness`): what it adds to a heartbeat, and
//! what the leader's eviction pass and a page of `GET /gateway/agents` cost with a 100,000-agent fleet
//! (docs/benchmarks.md, "Liveness store, measured"; the Redis candidate is the liveness-redis bench).
//!
//! Run: `cargo bench -p gateway-benches --bench liveness-database`, and with `BENCH_DATABASE=postgres` on a
//! throwaway PostgreSQL server (commits flushed to disk). Sizes: `LIVENESS_DB_AGENTS` (100000),
//! `LIVENESS_DB_HEARTBEATS` (100000 per group size).
//!
//! 1. Heartbeats, for groups of 1, 64 and 512 (what the heartbeat group commit makes of 1, ~64 and many concurrent
//!    heartbeats): HEARTBEATS heartbeats over AGENTS agents, each group written as the gateway writes it —
//!    `upsert_heartbeats` alone (one instance without a shared map: the baseline, measured in the same run), and
//!    `record` on the shared map, then its `upsert_heartbeats`, which writes the rows and the receipts in one
//!    transaction (each instance with `--redis-url`).
//! 2. The eviction pass with AGENTS live agents and none silent (every pass but a few), then with all of them
//!    silent (one pass evicts the fleet).
//! 3. A page of 100 live agents with their capability entries, as `GET /gateway/agents` reads it.
//! 4. After all AGENTS are evicted, one in 1,000 live again: `GET /gateway/agents`'s pages of 100 from the start to
//!    the end, each reading at most `MAX_ROWS_READ` (10,000) rows since migration 2026-12-21-000018 (no index of
//!    the live rows alone): how many pages, and what one costs.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // A benchmark reports on stdout and aborts on setup errors.

#[path = "database.rs"]
mod database;

use std::time::Instant;

use gateway_core::{
    AgentId, CapabilityEntry, CapabilityMap, ClusterId, FencingToken, HeartbeatRecord, HeartbeatStore, LivenessMap,
};
use gateway_store::{DieselStore, SharedLiveness};
use gateway_testkit::{Sample, env_size, millis, rate};
use time::OffsetDateTime;

use crate::database::Backend;

const GROUPS: [usize; 3] = [1, 64, 512];

fn agent(n: usize) -> AgentId {
    AgentId::new(format!("researcher-alpha-{n:07}")).unwrap()
}

fn main() {
    let agents = env_size("LIVENESS_DB_AGENTS", 100_000);
    let heartbeats = env_size("LIVENESS_DB_HEARTBEATS", 100_000);
    let backend = Backend::from_env("liveness-database");
    println!(
        "shared liveness in the database ({}): {agents} agents, {heartbeats} heartbeats per group size",
        backend.name()
    );
    let cluster = ClusterId::new("mesh-04").unwrap();
    let ids: Vec<AgentId> = (0..agents).map(agent).collect();

    println!("\n1. heartbeats (wall time of the writer; per heartbeat)");
    for group in GROUPS {
        let mut line = format!("   group of {group:>3}:");
        for shared in [false, true] {
            let database = backend.fresh(&format!("heartbeats-{group}-{shared}"));
            let store = DieselStore::open(&database.url).unwrap();
            let map = SharedLiveness::new(store.clone(), agents * 2);
            let started = Instant::now();
            let mut written = 0;
            while written < heartbeats {
                let now = OffsetDateTime::now_utc();
                let records: Vec<HeartbeatRecord> = (written..(written + group).min(heartbeats))
                    .map(|n| HeartbeatRecord {
                        agent_id: ids[n % agents].clone(),
                        cluster_id: cluster.clone(),
                        last_seen_at: now,
                    })
                    .collect();
                if shared {
                    // As the manager does with a shared map: receipts kept, then rows and receipts in one commit.
                    for record in &records {
                        map.record(&record.agent_id, &record.cluster_id, now).unwrap();
                    }
                    map.upsert_heartbeats(&records).unwrap();
                    map.flush().unwrap();
                } else {
                    store.upsert_heartbeats(&records).unwrap();
                }
                written += records.len();
            }
            let elapsed = started.elapsed();
            let label = if shared { "row + shared map" } else { "row only (baseline)" };
            line += &format!(
                "  {label} {:>9.0}/s ({:.1} µs)",
                rate(heartbeats, elapsed),
                elapsed.as_secs_f64() * 1e6 / heartbeats as f64
            );
        }
        println!("{line}");
    }

    println!("\n2. the eviction pass with {agents} live agents");
    let database = backend.fresh("eviction");
    let store = DieselStore::open(&database.url).unwrap();
    let map = SharedLiveness::new(store, agents * 2);
    let start = OffsetDateTime::now_utc();
    for chunk in ids.chunks(512) {
        for id in chunk {
            map.record(id, &cluster, start).unwrap();
        }
        map.flush().unwrap();
    }
    let threshold = time::Duration::seconds(90);
    let none_silent: Sample<_> = (0..50)
        .map(|_| {
            let began = Instant::now();
            let evicted = map.evict_silent(start + time::Duration::seconds(30), threshold, FencingToken(1)).unwrap();
            assert!(evicted.is_empty());
            began.elapsed()
        })
        .collect();
    println!(
        "   none silent (50 passes): p50 {} p99 {} max {}",
        millis(none_silent.percentile(50.0).unwrap()),
        millis(none_silent.percentile(99.0).unwrap()),
        millis(none_silent.max().unwrap())
    );

    println!("\n3. a page of 100 live agents with capability entries");
    for id in ids.iter().take(1000) {
        let entry =
            CapabilityEntry { agent_type: "planner".into(), capability_version: "2.1".into(), updated_at: start };
        map.register(id, entry);
    }
    map.flush().unwrap();
    let pages: Sample<_> = (0..200)
        .map(|page| {
            let after = agent(page * 400);
            let began = Instant::now();
            let live = map.live_agents(Some(&after), 100, 10_000).unwrap().entries;
            let ids: Vec<AgentId> = live.iter().map(|entry| entry.agent_id.clone()).collect();
            let entries = map.get_many(&ids).unwrap();
            assert_eq!(entries.len(), live.len());
            began.elapsed()
        })
        .collect();
    println!(
        "   200 pages: p50 {} p99 {} max {}",
        millis(pages.percentile(50.0).unwrap()),
        millis(pages.percentile(99.0).unwrap()),
        millis(pages.max().unwrap())
    );

    let began = Instant::now();
    let evicted = map.evict_silent(start + time::Duration::seconds(91), threshold, FencingToken(1)).unwrap();
    let took = began.elapsed();
    assert_eq!(evicted.len(), agents);
    println!("\n   all {agents} silent: one pass evicts them in {}", millis(took));

    let walk = 10 * 1000;
    println!(
        "\n4. pages of 100 (reading at most {walk} rows each) among {agents} evicted agents, one in 1,000 live again"
    );
    let again = start + time::Duration::seconds(100);
    for id in ids.iter().step_by(1000) {
        map.record(id, &cluster, again).unwrap();
    }
    map.flush().unwrap();
    for round in 0..3 {
        let (mut after, mut listed, mut times) = (None::<AgentId>, 0, Vec::new());
        loop {
            let began = Instant::now();
            let page = map.live_agents(after.as_ref(), 100, walk).unwrap();
            let ids: Vec<AgentId> = page.entries.iter().map(|entry| entry.agent_id.clone()).collect();
            map.get_many(&ids).unwrap();
            times.push(began.elapsed());
            listed += page.entries.len();
            match page.next_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(listed, agents.div_ceil(1000));
        let pages = times.len();
        let total: std::time::Duration = times.iter().sum();
        let times: Sample<_> = times.into_iter().collect();
        println!(
            "   round {round}: {listed} agents in {pages} pages, {} in all; a page p50 {} max {}",
            millis(total),
            millis(times.percentile(50.0).unwrap()),
            millis(times.max().unwrap())
        );
    }
}
