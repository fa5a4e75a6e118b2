//! The mailbox feed (docs/architecture.md, "Durable events across instances"): what following the mailbox costs an
//! instance of a cluster that holds 1,000 open agent streams, on PostgreSQL.
//!
//! 1. The feed's query on a mailbox of `MAILBOX_FEED_BENCH_ROWS` entries (100,000, for 1,000 agents), straight on
//!    the store: when nothing is new (what it finds nearly every second), and when a page of 1,000 fires is new (one
//!    fire for each streamed agent at once).
//! 2. The release gateway, with Redis and a cluster secret (so its feed runs), on that database, holding
//!    `MAILBOX_FEED_BENCH_STREAMS` (1,000) open agent streams, idle for `MAILBOX_FEED_BENCH_SECONDS` (30): its CPU
//!    time and the feed's reads (`gateway_mailbox_feed_reads_total`).
//!
//! Run: `cargo build --release -p gateway && cargo bench -p gateway-benches --bench mailbox-feed`. Results:
//! docs/benchmarks.md, "The mailbox feed at 1,000 streams".
#![allow(clippy::unwrap_used, clippy::print_stdout)]

#[path = "http_load.rs"]
mod http_load;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gateway_core::{AgentId, CronJobStore, FencingToken, FiredReminder, MailboxStore};
use gateway_store::{DatabaseUrl, DieselStore};
use gateway_testkit::redis::RedisServer;
use gateway_testkit::{Sample, cpu_time_of, env_size, millis};
use http_load::{Server, age, gateway_binary};
use time::OffsetDateTime;

const TOKEN: &str = "bench-operator-token-0000";
const SECRET: &str = "the cluster secret of the mailbox feed benchmark";

fn main() {
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    let rows = env_size("MAILBOX_FEED_BENCH_ROWS", 100_000);
    let streams = env_size("MAILBOX_FEED_BENCH_STREAMS", 1_000);
    let seconds = env_size("MAILBOX_FEED_BENCH_SECONDS", 30);
    let database = gateway_testkit::postgres::database("mailbox_feed").expect("PostgreSQL server binaries");
    let redis = RedisServer::start().unwrap();
    let url = DatabaseUrl::parse(database.url()).unwrap();
    let store = DieselStore::open(&url).unwrap();
    println!("# mailbox feed: {rows} mailbox entries of {streams} agents, PostgreSQL");

    let at = OffsetDateTime::now_utc() - time::Duration::hours(1);
    let fire = |n: usize| {
        let scheduled_for = at + time::Duration::milliseconds(i64::try_from(n).unwrap());
        let job_id = i64::try_from(n).unwrap() + 1;
        FiredReminder {
            fire_id: gateway_core::ports::mailbox::fire_id(job_id, scheduled_for),
            job_id,
            agent_id: AgentId::new(format!("agent-{}", n % streams)).unwrap(),
            payload: serde_json::json!({"task": "check", "n": n}).as_object().cloned().unwrap(),
            scheduled_for,
            fired_at: scheduled_for,
            epoch: 1,
        }
    };
    let filled = Instant::now();
    for start in (0..rows).step_by(1_000) {
        let group: Vec<FiredReminder> = (start..(start + 1_000).min(rows)).map(fire).collect();
        store.complete_fires("bench", FencingToken(1), &[], &group).unwrap();
    }
    println!("recorded {rows} entries in {:.2?}", filled.elapsed());

    let head = store.mailbox_head().unwrap();
    let time_reads = |after: i64, count: usize| {
        let mut times = Vec::with_capacity(count);
        for _ in 0..count {
            let started = Instant::now();
            let entries = store.mailbox_since(after, &[], 1_000).unwrap();
            times.push(started.elapsed());
            assert_eq!(entries.len(), usize::try_from(head - after).unwrap().min(1_000));
        }
        let sample = Sample::new(times);
        let at = |percent| sample.percentile(percent).map_or_else(|| "-".into(), millis);
        format!("p50 {}, p99 {}, max {} ({count} reads)", at(50.0), at(99.0), at(100.0))
    };
    time_reads(head, 200);
    println!("feed read, nothing new: {}", time_reads(head, 2_000));
    println!("feed read, a page of 1,000 new fires: {}", time_reads(head - 1_000, 200));

    let gateway_binary = gateway_binary();
    println!("gateway binary: {} ({})", gateway_binary.display(), age(&gateway_binary));
    let mut command = std::process::Command::new(&gateway_binary);
    command
        .args(["--listen", "127.0.0.1:0", "--database-url", database.url(), "--admin-token", TOKEN])
        .args(["--redis-url", &redis.url(), "--cluster-secret", SECRET])
        .args(["--agent-streams-per-address", "1024"])
        .env("RUST_LOG", "warn");
    let gateway = Server::spawn("gateway", &mut command, "gateway listening on http://");
    let pid = gateway.child.id().to_string();
    let mut open = Vec::with_capacity(streams);
    for agent in 0..streams {
        let mut connection = TcpStream::connect(gateway.address).unwrap();
        write!(
            connection,
            "GET /gateway/events?topic=agent:agent-{agent}:scheduled HTTP/1.1\r\nhost: {}\r\n\r\n",
            gateway.address
        )
        .unwrap();
        let mut head = [0u8; 12];
        connection.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "stream {agent}");
        open.push(connection);
    }
    println!("{streams} agent streams open");
    // Let the first replays and the catch-ups after connecting (1 s and 15 s) pass.
    std::thread::sleep(Duration::from_secs(20));
    let reads_before = feed_reads(&gateway);
    let cpu_before = cpu_time_of(&pid).unwrap();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(u64::try_from(seconds).unwrap()));
    let cpu = cpu_time_of(&pid).unwrap() - cpu_before;
    let elapsed = started.elapsed();
    let reads = feed_reads(&gateway) - reads_before;
    println!(
        "idle with {streams} streams for {elapsed:.1?}: gateway CPU {cpu:.3?} ({:.2} % of one core), {reads} feed reads \
         ({:.2} a second)",
        cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        f64::from(u32::try_from(reads).unwrap()) / elapsed.as_secs_f64()
    );
    drop(open);
}

/// `gateway_mailbox_feed_reads_total` of the gateway.
fn feed_reads(gateway: &Server) -> u64 {
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    let body = agent
        .get(format!("http://{}/metrics", gateway.address))
        .header("authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    body.lines()
        .find_map(|line| line.strip_prefix("gateway_mailbox_feed_reads_total ")?.parse().ok())
        .expect("gateway_mailbox_feed_reads_total")
}
