//! The heartbeat group's SQLite store call alone, in a loop: groups of 32 updates over 10,000 agents whose rows
//! exist (a steady run's groups), timed, and countable by callgrind without the HTTP side (docs/benchmarks.md,
//! s32-h). Run: `cargo build --release -p gateway-store --example hb_store_loop`, then
//! `target/release/examples/hb_store_loop <empty dir> [groups]`, or under
//! `valgrind --tool=callgrind --toggle-collect='hb_store_loop::steady'`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore};
use gateway_store::{DatabaseUrl, DieselStore};

fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let groups: usize = std::env::args().nth(2).map_or(2000, |n| n.parse().unwrap());
    let url = DatabaseUrl::parse(&format!("sqlite://{dir}/loop.db")).unwrap();
    let store = DieselStore::open(&url).unwrap();
    let at = time::macros::datetime!(2026-02-22 12:00:00 UTC);
    let record = |n: usize| HeartbeatRecord {
        agent_id: AgentId::new(format!("agent-{n}")).unwrap(),
        cluster_id: ClusterId::new("bench".to_owned()).unwrap(),
        last_seen_at: at,
    };
    // Every agent's row exists first, as in a steady run: then each group's rows are updates.
    for chunk in (0..10_000).collect::<Vec<_>>().chunks(500) {
        store.upsert_heartbeats(&chunk.iter().map(|&n| record(n)).collect::<Vec<_>>()).unwrap();
    }
    let all: Vec<Vec<HeartbeatRecord>> =
        (0..groups).map(|g| (0..32).map(|i| record((g + i * 313) % 10_000)).collect()).collect();
    let started = std::time::Instant::now();
    steady(&store, &all);
    let took = started.elapsed();
    println!("{groups} groups of 32: {:.3} µs a row", took.as_secs_f64() * 1e6 / (groups * 32) as f64);
}

#[inline(never)]
fn steady(store: &DieselStore, groups: &[Vec<HeartbeatRecord>]) {
    for group in groups {
        store.upsert_heartbeats(group).unwrap();
    }
}
