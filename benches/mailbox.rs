//! The reminder mailbox: an agent whose reminders fired while it had no stream connects, and its stream replays
//! them. Measured against the release gateway binary: from sending the stream's request to reading the last
//! replayed event (target: 10,000 fires in under 1 s), first for the fires nobody received (no `Last-Event-ID`),
//! then for everything retained (`Last-Event-ID` naming no fire), several times.
//!
//! Run: `cargo build --release -p gateway && cargo bench -p gateway-benches --bench mailbox` (or
//! `just bench mailbox`). `BENCH_DATABASE=postgres` runs the gateway on a throwaway PostgreSQL server instead of
//! SQLite. Environment: `MAILBOX_BENCH_FIRES` (10,000), `MAILBOX_BENCH_RUNS` (5 replays of everything retained),
//! `MAILBOX_BENCH_SCHEDULERS` (8 concurrent clients scheduling the reminders). Results: docs/benchmarks.md.
// A benchmark reports on stdout and may panic on a broken setup.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

#[path = "database.rs"]
mod database;
#[path = "http_load.rs"]
mod http_load;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use database::Backend;
use gateway_testkit::env_size;
use http_load::{Server, age, gateway_binary};
use serde_json::json;

const TOKEN: &str = "bench-operator-token-0000";
const AGENT: &str = "bench-agent";

fn main() {
    // `cargo test --benches` runs bench targets without `--bench`: nothing to measure then.
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    let fires = env_size("MAILBOX_BENCH_FIRES", 10_000);
    let runs = env_size("MAILBOX_BENCH_RUNS", 5);
    let schedulers = env_size("MAILBOX_BENCH_SCHEDULERS", 8).max(1);
    let backend = Backend::from_env("mailbox");
    let database = backend.fresh("mailbox_replay");
    let gateway_binary = gateway_binary();
    println!("# mailbox replay: {fires} fires of one agent, {}", backend.name());
    println!("gateway binary: {} ({})", gateway_binary.display(), age(&gateway_binary));
    let mut command = std::process::Command::new(&gateway_binary);
    command
        .args(["--listen", "127.0.0.1:0", "--database-url", &database.url_text(), "--admin-token", TOKEN])
        .env("RUST_LOG", "warn");
    let gateway = Server::spawn("gateway", &mut command, "gateway listening on http://");
    let base = format!("http://{}", gateway.address);
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();

    let started = Instant::now();
    schedule(&agent, &base, fires, schedulers);
    let scheduled = started.elapsed();
    wait_until_fired(&agent, &base);
    println!(
        "scheduled {fires} reminders in {scheduled:.2?} ({schedulers} clients); all fired and recorded {:.2?} after the \
         first was sent",
        started.elapsed()
    );

    println!();
    println!("| replay | events | first event | last event | events/s |");
    println!("| --- | --- | --- | --- | --- |");
    report("unreceived (no Last-Event-ID)", &replay(&base, None, fires));
    for _ in 0..runs {
        report("everything retained (unknown Last-Event-ID)", &replay(&base, Some("0:1970-01-01T00:00:00Z"), fires));
    }
    drop(gateway);
}

/// Posts `count` DecisionLogs that each schedule a reminder 1 ms out for [`AGENT`], from `clients` threads.
fn schedule(agent: &ureq::Agent, base: &str, count: usize, clients: usize) {
    std::thread::scope(|scope| {
        for client in 0..clients {
            scope.spawn(move || {
                for n in (client..count).step_by(clients) {
                    let log = json!({
                        "meta": {"trace_id": format!("bench-{n}"), "timestamp": "2026-02-22T12:00:00Z"},
                        "identity": {"agent_id": AGENT, "agent_type": "bench", "capability_version": "1.0"},
                        "action": {"status": "pending", "tool_call": "schedule_reminder",
                                   "tool_input": {"delay_ms": 1, "payload": {"n": n}}}
                    });
                    let response = agent
                        .post(format!("{base}/gateway/messages"))
                        .content_type("application/json")
                        .send(log.to_string())
                        .unwrap();
                    assert_eq!(response.status().as_u16(), 202);
                }
            });
        }
    });
}

/// Waits until no job is left: every reminder has fired, and its fire is in the mailbox (the same transaction).
fn wait_until_fired(agent: &ureq::Agent, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut response = agent
            .get(format!("{base}/gateway/cron/jobs?limit=1"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap();
        let body: serde_json::Value = serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
        if body["jobs"].as_array().is_some_and(Vec::is_empty) {
            return;
        }
        assert!(Instant::now() < deadline, "the reminders did not all fire");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Replayed {
    events: usize,
    first: Duration,
    last: Duration,
}

/// Opens the agent's stream (with `last_event_id`) and reads until `expected` reminders arrived, each once;
/// times are from sending the request.
fn replay(base: &str, last_event_id: Option<&str>, expected: usize) -> Replayed {
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    let mut request = agent.get(format!("{base}/gateway/events?topic=agent%3A{AGENT}%3Ascheduled"));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let started = Instant::now();
    let response = request.call().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut lines = BufReader::new(response.into_body().into_reader()).lines();
    let mut ids = HashSet::with_capacity(expected);
    let mut first = None;
    while ids.len() < expected {
        let line = lines.next().expect("the stream ended").unwrap();
        if let Some(id) = line.strip_prefix("id: ") {
            first.get_or_insert_with(|| started.elapsed());
            assert!(ids.insert(id.to_owned()), "{id} sent twice");
        }
    }
    Replayed { events: ids.len(), first: first.unwrap_or_default(), last: started.elapsed() }
}

fn report(what: &str, replayed: &Replayed) {
    let rate = replayed.events as f64 / replayed.last.as_secs_f64();
    println!(
        "| {what} | {} | {:.1} ms | {:.1} ms | {rate:.0} |",
        replayed.events,
        replayed.first.as_secs_f64() * 1e3,
        replayed.last.as_secs_f64() * 1e3
    );
}
