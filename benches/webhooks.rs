//! The webhook router's benchmark.
//!
//! Run: `cargo bench -p gateway-benches --bench webhooks` (release profile, or `just bench webhooks`). Sizes can
//! be lowered for a quick look:
//! `WEBHOOK_BENCH_DELIVERED=100000 WEBHOOK_BENCH_DELIVERIES=1000 cargo bench -p gateway-benches --bench webhooks`.
//! Environment: `WEBHOOK_BENCH_DELIVERED` (1,000,000), `WEBHOOK_BENCH_DUE` (10,000), `WEBHOOK_BENCH_DELIVERIES`
//! (5,000), `WEBHOOK_BENCH_LATENCY_RUNS` (1,000), `WEBHOOK_BENCH_CAP` (256), `WEBHOOK_BENCH_MAX_PER_SECOND`
//! (100,000, the highest the gateway takes: the outbound rate limit lifted), `WEBHOOK_BENCH_CLIENTS` (8),
//! `WEBHOOK_BENCH_CONFIGS` (1: how many configs part 2's deliveries go to, client thread `k` to the `k`th in turn),
//! `WEBHOOK_BENCH_SKIP_QUERY` (set: parts 2 and 3 only), `BENCH_DATABASE=postgres` (every part on a throwaway
//! PostgreSQL server instead of SQLite), `WEBHOOK_BENCH_STATEMENTS` (set, on PostgreSQL: part 2's and the ceiling's
//! statements from `pg_stat_statements`, when the server has it loaded). Results: docs/benchmarks.md.
//!
//! 1. Due-row query: `WebhookStore::due_deliveries` (what each poll cycle runs) on SQLite with 1,000,000
//!    delivered rows and 10,000 due ones, p50/p99 over 2,000 runs, for the default window (50 rows) and the
//!    largest (1,000).
//! 2. End to end, the real gateway in this process with the per-cycle cap and the outbound rate lifted:
//!    deliveries enqueued over HTTP by 8 client threads until a local receiver has them all; deliveries per
//!    second.
//!    Also the enqueue-to-receipt latency of those deliveries, and the process's CPU time per delivery; on
//!    PostgreSQL, the server's CPU time per delivery (its processes' from /proc, as `cluster-ingest` reads them)
//!    and its write transactions per delivery (transaction ids taken).
//!
//! 2c. The ceiling (`WEBHOOK_BENCH_CEILING=0` skips it): the statements the gateway sends for a delivery inserted
//!    claimed — insert groups to their configs (`insert_deliveries_to_configs`, the secret read by the insert), then
//!    their attempts' record group with endpoint health (`record_attempts_counting`, the first record writing the
//!    signature) — in the gateway's group sizes, issued by a minimal loop over one `DieselStore` pool (the
//!    gateway's: 10 connections) on a fresh database of the same server. `WEBHOOK_BENCH_CEILING_WRITERS` (8) threads
//!    each insert groups of `WEBHOOK_BENCH_CEILING_GROUP` (7: the gateway's insert groups under part 2's 8 clients,
//!    lingering, 6.0 traced; 3.7–3.9 before they lingered) until they hold `WEBHOOK_BENCH_CEILING_RECORD_GROUP`
//!    (14: its record groups, 14 traced; 6.6–8.9 before they lingered)
//!    deliveries, record those as one group, and go on until `WEBHOOK_BENCH_DELIVERIES` are recorded. Writer `w`
//!    writes to config `w mod WEBHOOK_BENCH_CEILING_CONFIGS` (as many as writers: a record group locks its configs
//!    until it commits, so writers sharing one config wait for each other, and with one config the ceiling is the
//!    queue on its row, not the server). No HTTP, signing, dispatch or receiver: what is left is the database's
//!    part. Printed with part 2's figure as a fraction of it both ways: by deliveries/s, and by PostgreSQL's CPU per
//!    delivery (the ceiling's over the gateway's: what the gateway's statements and groups cost the database
//!    against the least they could, whatever else shares the machine's two cores).
//!
//! 2b. Enqueue-to-receipt latency at a steady rate (`WEBHOOK_BENCH_PACED_RATE`, 2,500/s, for 4 s), open loop.
//! 3. Enqueue-to-receipt latency: deliveries enqueued one at a time; from sending the POST to the receiver
//!    reading the request, p50/p99.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // A benchmark reports on stdout and aborts on setup errors.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use diesel::prelude::*;
use gateway::Gateway;
use gateway::config::{AdminToken, Config};
use gateway_core::{
    AttemptRecord, DeliveryAttempt, DeliveryStatus, DeliveryUpdate, NewDelivery, NewWebhookConfig, WebhookConfig,
    WebhookSecret, WebhookStore,
};
use gateway_store::DieselStore;
use gateway_store::schema::webhook_deliveries;
use gateway_store::timestamp::to_db;
use gateway_testkit::{Receiver, Reply, Sample, env_size, millis, process_cpu_time, rate};
use time::{OffsetDateTime, PrimitiveDateTime};
use tokio_util::sync::CancellationToken;

#[path = "database.rs"]
mod database;
#[path = "http_load.rs"]
mod http_load;

/// The PostgreSQL server's side of a measured stretch of part 2 or of the ceiling.
struct ServerMark {
    /// The CPU time of the postmaster and everything it started (every backend, the WAL writer, the checkpointer).
    cpu: Option<Duration>,
    /// The next transaction id the server will assign: write transactions take one each (read-only ones none), and
    /// `pg_stat_database.xact_commit` would not do, as an idle backend reports its counts up to 10 s late.
    next_transaction: Option<i64>,
}

/// What the server had spent by now; `None` on SQLite.
fn server_mark(backend: &database::Backend) -> Option<ServerMark> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        count: i64,
    }
    let database::Backend::Postgres(server) = backend else { return None };
    let cpu = server.postmaster_pid().and_then(http_load::tree_cpu_time);
    let next_transaction = PgConnection::establish(&server.url("postgres")).ok().and_then(|mut admin| {
        diesel::sql_query("SELECT txid_snapshot_xmax(txid_current_snapshot()) AS count")
            .get_result::<Count>(&mut admin)
            .ok()
            .map(|row| row.count)
    });
    Some(ServerMark { cpu, next_transaction })
}

/// The server's CPU per delivery (µs) and write transactions per delivery between two marks.
struct ServerUse {
    cpu_per_delivery: Option<f64>,
    writes_per_delivery: Option<f64>,
}

fn server_use(before: Option<&ServerMark>, after: Option<&ServerMark>, deliveries: usize) -> Option<ServerUse> {
    let (before, after) = (before?, after?);
    let per_delivery = |total: f64| total / deliveries as f64;
    Some(ServerUse {
        cpu_per_delivery: after
            .cpu
            .zip(before.cpu)
            .map(|(end, start)| per_delivery(end.saturating_sub(start).as_secs_f64() * 1e6)),
        writes_per_delivery: after
            .next_transaction
            .zip(before.next_transaction)
            .map(|(end, start)| per_delivery((end - start) as f64)),
    })
}

impl ServerUse {
    fn describe(&self) -> String {
        let show =
            |value: Option<f64>, digits: usize| value.map_or("?".to_owned(), |value| format!("{value:.digits$}"));
        format!(
            "PostgreSQL CPU {} µs per delivery, {} write transactions per delivery",
            show(self.cpu_per_delivery, 1),
            show(self.writes_per_delivery, 3)
        )
    }
}

/// The CPU time of this process's threads named `tokio-rt-worker` (the gateway's runtime: its workers and its
/// blocking pool, where the store calls run), from /proc; the rest of the process is the clients and the receiver.
fn runtime_cpu_time() -> Option<Duration> {
    let mut ticks = 0_u64;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let name = task.file_name();
        let Some(tid) = name.to_str() else { continue };
        let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
        if comm.trim_end().starts_with("tokio-r") {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
            let fields: Vec<u64> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().map(|field| field.parse().unwrap_or(0)).collect())
                .unwrap_or_default();
            ticks += fields.get(11..=12).map_or(0, |times| times.iter().sum());
        }
    }
    // Clock ticks are 1/100 s on Linux (USER_HZ).
    Some(Duration::from_millis(ticks.checked_mul(10)?))
}

/// The name of the database a PostgreSQL URL names.
fn database_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// `pg_stat_statements`, when the server has it loaded and `WEBHOOK_BENCH_STATEMENTS` is set: `reset` empties it,
/// `report` prints the statements of `database` that took the most time, per delivery.
struct Statements {
    url: String,
}

impl Statements {
    fn new(backend: &database::Backend) -> Option<Self> {
        let database::Backend::Postgres(server) = backend else { return None };
        std::env::var_os("WEBHOOK_BENCH_STATEMENTS")?;
        let url = server.url("postgres");
        let mut admin = PgConnection::establish(&url).ok()?;
        if let Err(error) = diesel::sql_query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(&mut admin) {
            println!("  (no statements: {error})");
            return None;
        }
        Some(Self { url })
    }

    fn reset(&self) {
        let mut admin = PgConnection::establish(&self.url).unwrap();
        if let Err(error) = diesel::sql_query("SELECT pg_stat_statements_reset()").execute(&mut admin) {
            println!("  (no statements: {error}; the server needs shared_preload_libraries=pg_stat_statements)");
        }
    }

    fn report(&self, database: &str, deliveries: usize) {
        #[derive(QueryableByName)]
        struct Line {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            calls: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            rows: i64,
            #[diesel(sql_type = diesel::sql_types::Double)]
            mean_ms: f64,
            #[diesel(sql_type = diesel::sql_types::Double)]
            total_ms: f64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            wal_bytes: i64,
            #[diesel(sql_type = diesel::sql_types::Text)]
            query: String,
        }
        let mut admin = PgConnection::establish(&self.url).unwrap();
        let lines = diesel::sql_query(
            "SELECT calls, rows, mean_exec_time + mean_plan_time AS mean_ms, total_exec_time + total_plan_time              AS total_ms, wal_bytes::bigint AS wal_bytes, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query              FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)              ORDER BY total_exec_time + total_plan_time DESC",
        )
        .bind::<diesel::sql_types::Text, _>(database)
        .load::<Line>(&mut admin);
        let lines = match lines {
            Ok(lines) => lines,
            Err(error) => {
                println!("  (no statements: {error})");
                return;
            }
        };
        let per_delivery = |value: f64| value / deliveries as f64;
        let calls: i64 = lines.iter().map(|line| line.calls).sum();
        let wal: i64 = lines.iter().map(|line| line.wal_bytes).sum();
        println!(
            "  statements: {:.3} per delivery, {:.0} WAL bytes per delivery, {:.1} µs of execution per delivery",
            per_delivery(calls as f64),
            per_delivery(wal as f64),
            per_delivery(lines.iter().map(|line| line.total_ms).sum::<f64>() * 1e3)
        );
        for line in lines.iter().take(10) {
            println!(
                "    {:>7.3} per delivery  {:>6.2} rows/call  {:>7.3} ms/call  {:>6.0} WAL B/delivery  {}",
                per_delivery(line.calls as f64),
                line.rows as f64 / line.calls.max(1) as f64,
                line.mean_ms,
                per_delivery(line.wal_bytes as f64),
                line.query
            );
        }
    }
}

const TOKEN: &str = "webhook-benchmark-operator-token";

/// The gateway runs in this process, so it gets the allocator the gateway binary ships with (bin/gateway's
/// main.rs); glibc's would add its own arena trimming to what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Insertable)]
#[diesel(table_name = webhook_deliveries)]
struct Row<'a> {
    webhook_id: i64,
    session_id: &'a str,
    payload: &'a str,
    target_url: &'a str,
    signature: &'a str,
    status: &'a str,
    attempt_count: i32,
    last_attempted_at: Option<PrimitiveDateTime>,
    next_retry_at: Option<PrimitiveDateTime>,
    created_at: PrimitiveDateTime,
}

fn fill(database: &database::BenchDatabase, webhook_id: i64, delivered: usize, due: usize, now: OffsetDateTime) {
    let signature = "sha256=0000000000000000000000000000000000000000000000000000000000000000";
    let started = Instant::now();
    let rows: Vec<Row<'_>> = (0..delivered + due)
        .map(|index| {
            let is_due = index >= delivered;
            let created = now - time::Duration::hours(48) + time::Duration::milliseconds(index as i64);
            Row {
                webhook_id,
                session_id: if index % 2 == 0 { "bench-a" } else { "bench-b" },
                payload: r#"{"bench":true}"#,
                target_url: if index % 3 == 0 { "https://a.example/hook" } else { "https://b.example/hook" },
                signature,
                status: match (is_due, index % 2) {
                    (false, _) => "delivered",
                    (true, 0) => "failed",
                    (true, _) => "pending",
                },
                attempt_count: i32::from(!is_due || index % 2 == 0),
                last_attempted_at: (!is_due).then(|| to_db(created)),
                // Due rows: spread over the last hour.
                next_retry_at: is_due.then(|| {
                    to_db(
                        now - time::Duration::seconds(3600)
                            + time::Duration::milliseconds((index - delivered) as i64 * 300),
                    )
                }),
                created_at: to_db(created),
            }
        })
        .collect();
    // The same inserts on either connection, 1,000 rows a statement, in one transaction.
    macro_rules! insert_all {
        ($connection:expr) => {
            $connection
                .transaction::<_, diesel::result::Error, _>(|connection| {
                    for chunk in rows.chunks(1000) {
                        diesel::insert_into(webhook_deliveries::table).values(chunk).execute(connection)?;
                    }
                    Ok(())
                })
                .unwrap()
        };
    }
    match (&database.sqlite_path, &database.postgres_url) {
        (Some(path), _) => insert_all!(SqliteConnection::establish(path.to_str().unwrap()).unwrap()),
        (None, Some(url)) => insert_all!(PgConnection::establish(url).unwrap()),
        (None, None) => unreachable!("a database is one or the other"),
    }
    println!("  filled {delivered} delivered + {due} due rows in {:.1} s", started.elapsed().as_secs_f64());
}

#[derive(QueryableByName)]
struct PlanLine {
    #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
    plan: String,
}

/// A config for the store-level parts, every field but its target, secret and source (unique with the event
/// type) "bench".
fn bench_config(
    store: &DieselStore,
    source_identifier: &str,
    target_url: &str,
    secret: &str,
    now: OffsetDateTime,
) -> WebhookConfig {
    store
        .create_config(&NewWebhookConfig {
            source_identifier: source_identifier.into(),
            event_type: "bench".into(),
            agent_intent: "bench".into(),
            target_session: "bench".into(),
            target_url: target_url.into(),
            secret: WebhookSecret::new(secret),
            created_at: now,
            inbound_secret: None,
            inbound_require_timestamp: false,
            rate_limit_per_second: None,
        })
        .unwrap()
}

fn due_row_query(backend: &database::Backend) {
    let delivered = env_size("WEBHOOK_BENCH_DELIVERED", 1_000_000);
    let due = env_size("WEBHOOK_BENCH_DUE", 10_000);
    println!("1. due-row query, {delivered} delivered + {due} due rows, {}", backend.name());
    let database = backend.fresh("webhook_due_rows");
    let store = DieselStore::open(&database.url).unwrap();
    let now = OffsetDateTime::now_utc();
    let config = bench_config(&store, "bench", "https://a.example/hook", "bench", now);
    fill(&database, config.id, delivered, due, now);
    // What a long-running database has: fresh planner statistics, and the bulk load checkpointed out of the
    // write-ahead log into the database file (SQLite), or vacuumed (PostgreSQL: the visibility map set, as
    // autovacuum leaves it).
    if let Some(path) = &database.sqlite_path {
        let mut connection = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
        diesel::sql_query("ANALYZE").execute(&mut connection).unwrap();
        diesel::sql_query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut connection).unwrap();
    }
    if let Some(url) = &database.postgres_url {
        let mut connection = PgConnection::establish(url).unwrap();
        diesel::sql_query("VACUUM ANALYZE").execute(&mut connection).unwrap();
        for status in ["pending", "failed"] {
            let plan: Vec<String> = diesel::sql_query(format!(
                "EXPLAIN SELECT id, target_url, next_retry_at FROM webhook_deliveries WHERE status = '{status}' \
                 AND next_retry_at <= now() ORDER BY next_retry_at, id LIMIT 50"
            ))
            .load::<PlanLine>(&mut connection)
            .unwrap()
            .into_iter()
            .map(|line| line.plan)
            .collect();
            println!("  plan ({status}): {}", plan.join(" / "));
        }
    }
    for window in [gateway_webhooks::router::candidate_window(gateway_webhooks::DEFAULT_MAX_PER_CYCLE), 1000] {
        for _ in 0..200 {
            store.due_deliveries(now, window).unwrap();
        }
        let runs = 2000;
        let mut timings = Vec::with_capacity(runs);
        for _ in 0..runs {
            let started = Instant::now();
            let rows = store.due_deliveries(now, window).unwrap();
            timings.push(started.elapsed());
            assert_eq!(rows.len(), window.min(due));
        }
        let sample = Sample::new(timings);
        println!(
            "  window {window:>4}: p50 {}  p99 {}  ({} runs)",
            millis(sample.percentile(50.0).unwrap_or_default()),
            millis(sample.percentile(99.0).unwrap_or_default()),
            sample.len()
        );
    }
}

/// How long the receiver may take to see every delivery.
const DELIVERY_PATIENCE: Duration = Duration::from_secs(600);

/// Waits until the receiver has `count` requests and returns when each `{"seq": n}` payload arrived; every
/// delivery is expected exactly once (the receiver answers 204, so nothing is retried).
fn arrival_times(receiver: &Receiver, count: usize) -> HashMap<u64, Instant> {
    let requests = receiver.wait_for(count, DELIVERY_PATIENCE).unwrap();
    let mut arrivals = HashMap::with_capacity(requests.len());
    for request in &requests {
        let payload: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let seq = payload["seq"].as_u64().expect("a benchmark payload has a seq");
        arrivals.entry(seq).or_insert(request.at);
    }
    assert_eq!(arrivals.len(), requests.len(), "some deliveries arrived more than once");
    arrivals
}

/// A client with time limits on the connection and the response but none on name resolution: with one, ureq
/// resolves every request's address (an IP literal here) on a thread of its own, and the load generator would
/// spend the machine's CPU starting threads.
fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .build()
        .new_agent()
}

fn enqueue(agent: &ureq::Agent, base: &str, webhook_id: i64, seq: u64) {
    let body = format!(r#"{{"webhook_id":{webhook_id},"session_id":"bench","payload":{{"seq":{seq}}}}}"#);
    let response = agent
        .post(format!("{base}/gateway/deliveries"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .content_type("application/json")
        .send(body)
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
}

fn end_to_end(backend: &database::Backend) {
    let deliveries = env_size("WEBHOOK_BENCH_DELIVERIES", 5_000);
    let latency_runs = env_size("WEBHOOK_BENCH_LATENCY_RUNS", 1_000);
    let cap = env_size("WEBHOOK_BENCH_CAP", 256);
    let bench_database = backend.fresh("webhook_end_to_end");
    let database = bench_database.url_text();
    let cap_text = cap.to_string();
    // The gateway's default outbound rate (a few per second) would make this a measurement of the limiter.
    let rate_text =
        env_size("WEBHOOK_BENCH_MAX_PER_SECOND", gateway::config::WEBHOOK_MAX_PER_SECOND_CEILING).to_string();
    let config = Config::try_parse_from([
        "gateway",
        "--database-url",
        &database,
        "--admin-token",
        TOKEN,
        "--webhook-allow-private-targets",
        "--webhook-max-per-cycle",
        &cap_text,
        "--webhook-max-per-second",
        &rate_text,
    ])
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let shutdown = CancellationToken::new();
    let base = runtime.block_on(async {
        let gateway = Gateway::start(&config, &AdminToken::new(TOKEN.to_owned()), shutdown.clone()).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(gateway.serve(listener));
        format!("http://{address}")
    });

    let receiver = Receiver::start(Reply::Status(204)).unwrap();
    let agent = client();
    let mut response = agent
        .post(format!("{base}/gateway/webhook-configs"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .content_type("application/json")
        .send(format!(
            r#"{{"source_identifier":"bench","event_type":"bench","agent_intent":"bench","target_session":"bench",
                "target_url":"http://{}/hook","secret":"bench-secret"}}"#,
            receiver.address()
        ))
        .unwrap();
    let created: serde_json::Value = serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
    let webhook_id = created["id"].as_i64().unwrap();
    // More configs, alike but for their ids, when part 2 is to spread its deliveries over several.
    let configs = env_size("WEBHOOK_BENCH_CONFIGS", 1).max(1);
    let mut webhook_ids = vec![webhook_id];
    for index in 1..configs {
        let mut response = agent
            .post(format!("{base}/gateway/webhook-configs"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .content_type("application/json")
            .send(format!(
                r#"{{"source_identifier":"bench-{index}","event_type":"bench","agent_intent":"bench","target_session":"bench",
                    "target_url":"http://{}/hook","secret":"bench-secret"}}"#,
                receiver.address()
            ))
            .unwrap();
        let created: serde_json::Value = serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
        webhook_ids.push(created["id"].as_i64().unwrap());
    }

    let clients = env_size("WEBHOOK_BENCH_CLIENTS", 8);
    let gateway_database = bench_database.postgres_url.as_deref().map(database_name).unwrap_or_default().to_owned();
    let statements = Statements::new(backend);
    if let Some(statements) = &statements {
        statements.reset();
    }
    let server_before = server_mark(backend);
    let cpu_before = process_cpu_time();
    let runtime_before = runtime_cpu_time();
    println!(
        "2. end to end through the gateway, cap {cap} per cycle and in flight, at most {rate_text}/s, {clients} client threads, {configs} config(s)"
    );
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|worker| {
            let base = base.clone();
            let webhook_id = webhook_ids[worker % configs];
            thread::spawn(move || {
                let agent = client();
                let mut sent = Vec::new();
                for seq in (worker..deliveries).step_by(clients) {
                    sent.push((seq as u64, Instant::now()));
                    enqueue(&agent, &base, webhook_id, seq as u64);
                }
                sent
            })
        })
        .collect();
    let mut sent_at = HashMap::new();
    for worker in workers {
        sent_at.extend(worker.join().unwrap());
    }
    let enqueued = started.elapsed();
    let arrivals = arrival_times(&receiver, deliveries);
    let server_after = server_mark(backend);
    let runtime_after = runtime_cpu_time();
    let last = arrivals.values().max().copied().unwrap_or(started);
    let elapsed = last.duration_since(started);
    println!(
        "  {deliveries} deliveries: enqueued in {:.2} s ({:.0}/s), all received after {:.2} s: {:.0} deliveries/s",
        enqueued.as_secs_f64(),
        rate(deliveries, enqueued),
        elapsed.as_secs_f64(),
        rate(deliveries, elapsed)
    );
    let under_load = Sample::new(arrivals.iter().map(|(seq, at)| at.duration_since(sent_at[seq])).collect());
    let percentile = |percent| millis(under_load.percentile(percent).unwrap_or_default());
    println!("  enqueue-to-receipt under this load: p50 {}  p99 {}", percentile(50.0), percentile(99.0));
    if let (Some(before), Some(after)) = (cpu_before, process_cpu_time()) {
        // Clients, gateway and receiver together: the whole process is the 2-core machine's load.
        let per_delivery = (after - before).as_secs_f64() * 1e6 / deliveries as f64;
        println!("  CPU (clients + gateway + receiver): {per_delivery:.0} µs per delivery");
        if let (Some(start), Some(end)) = (runtime_before, runtime_after) {
            let runtime = end.saturating_sub(start).as_secs_f64() * 1e6 / deliveries as f64;
            println!(
                "    of which the gateway's runtime threads {runtime:.0} µs, the clients and receiver {:.0} µs",
                per_delivery - runtime
            );
        }
    }
    // Inserted claimed, two commits per delivery (insert, record); unclaimed, a claim commit more.
    let mut metrics =
        agent.get(format!("{base}/metrics")).header("authorization", format!("Bearer {TOKEN}")).call().unwrap();
    let metrics = metrics.body_mut().read_to_string().unwrap();
    let enqueued = |path: &str| {
        let prefix = format!("gateway_webhook_enqueued_total{{path=\"{path}\"}} ");
        metrics.lines().find_map(|line| line.strip_prefix(prefix.as_str())).unwrap_or("?").to_owned()
    };
    println!("  written claimed: {}, unclaimed: {}", enqueued("claimed"), enqueued("unclaimed"));
    let gateway_server = server_use(server_before.as_ref(), server_after.as_ref(), deliveries);
    if let Some(used) = &gateway_server {
        println!("  {}", used.describe());
    }
    if let Some(statements) = &statements {
        statements.report(&gateway_database, deliveries);
    }
    if std::env::var("WEBHOOK_BENCH_CEILING").as_deref() != Ok("0") {
        ceiling(backend, deliveries, rate(deliveries, elapsed), gateway_server.as_ref(), statements.as_ref());
    }

    let paced_rate = env_size("WEBHOOK_BENCH_PACED_RATE", 2_500);
    let paced = paced_rate * 4; // four seconds of it
    println!(
        "2b. enqueue-to-receipt latency at a steady {paced_rate} deliveries/s ({paced} deliveries, {clients} clients)"
    );
    receiver.clear();
    let offset = deliveries as u64;
    // Open loop: each delivery has its own send time, and its latency counts from then, so a stall delays (and
    // is charged to) every delivery behind it rather than hiding in a slower send rate.
    let interval = Duration::from_secs_f64(clients as f64 / paced_rate as f64);
    let start_at = Instant::now() + Duration::from_millis(50);
    let workers: Vec<_> = (0..clients)
        .map(|worker| {
            let base = base.clone();
            thread::spawn(move || {
                let agent = client();
                let mut planned = Vec::new();
                for (turn, seq) in (worker..paced).step_by(clients).enumerate() {
                    let due = start_at + interval.mul_f64(turn as f64 + worker as f64 / clients as f64);
                    thread::sleep(due.saturating_duration_since(Instant::now()));
                    planned.push((offset + seq as u64, due));
                    enqueue(&agent, &base, webhook_id, offset + seq as u64);
                }
                planned
            })
        })
        .collect();
    let mut planned_at = HashMap::new();
    for worker in workers {
        planned_at.extend(worker.join().unwrap());
    }
    let arrivals = arrival_times(&receiver, paced);
    let steady = Sample::new(arrivals.iter().map(|(seq, at)| at.duration_since(planned_at[seq])).collect());
    let percentile = |percent| millis(steady.percentile(percent).unwrap_or_default());
    println!("  p50 {}  p99 {}  max {}", percentile(50.0), percentile(99.0), percentile(100.0));

    println!("3. enqueue-to-receipt latency, {latency_runs} deliveries enqueued one at a time");
    receiver.clear();
    let offset = (deliveries + paced) as u64;
    let mut sent = Vec::with_capacity(latency_runs);
    for index in 0..latency_runs as u64 {
        sent.push(Instant::now());
        enqueue(&agent, &base, webhook_id, offset + index);
        // Unloaded: the next one goes once this one has arrived.
        receiver.wait_for_count(index as usize + 1, DELIVERY_PATIENCE).unwrap();
    }
    let arrivals = arrival_times(&receiver, latency_runs);
    let latencies =
        sent.iter().enumerate().map(|(index, at)| arrivals[&(offset + index as u64)].duration_since(*at)).collect();
    let sample = Sample::new(latencies);
    let percentile = |percent| millis(sample.percentile(percent).unwrap_or_default());
    println!("  p50 {}  p99 {}", percentile(50.0), percentile(99.0));

    shutdown.cancel();
    runtime.shutdown_timeout(Duration::from_secs(5));
}

/// Part 2c (see the module's documentation): the ceiling, and part 2's figures (`gateway_rate`, `gateway_server`)
/// as fractions of it.
fn ceiling(
    backend: &database::Backend,
    deliveries: usize,
    gateway_rate: f64,
    gateway_server: Option<&ServerUse>,
    statements: Option<&Statements>,
) {
    let group = env_size("WEBHOOK_BENCH_CEILING_GROUP", 7).max(1);
    let inserts_per_record = env_size("WEBHOOK_BENCH_CEILING_RECORD_GROUP", 14).div_ceil(group).max(1);
    let record_group = group * inserts_per_record;
    let writers = env_size("WEBHOOK_BENCH_CEILING_WRITERS", 8).max(1);
    let config_count = env_size("WEBHOOK_BENCH_CEILING_CONFIGS", writers).max(1);
    let bench_database = backend.fresh("webhook_ceiling");
    let ceiling_database = bench_database.postgres_url.as_deref().map(database_name).unwrap_or_default().to_owned();
    let store = DieselStore::open(&bench_database.url).unwrap();
    let now = OffsetDateTime::now_utc();
    let configs: Vec<WebhookConfig> = (0..config_count)
        .map(|index| bench_config(&store, &format!("bench-{index}"), "http://127.0.0.1:9/hook", "bench-secret", now))
        .collect();
    let records_per_writer = deliveries.div_ceil(record_group * writers);
    let signature = "sha256=0000000000000000000000000000000000000000000000000000000000000000";
    // One record group of `writer`: its insert groups, then their attempts recorded together.
    let write_round = |writer: usize, round: usize| {
        let webhook_id = configs[writer % config_count].id;
        let now = OffsetDateTime::now_utc();
        let mut records: Vec<AttemptRecord> = Vec::with_capacity(record_group);
        for insert in 0..inserts_per_record {
            let drafts: Vec<NewDelivery> = (0..group)
                .map(|offset| NewDelivery {
                    webhook_id,
                    session_id: "bench".into(),
                    payload: format!(
                        r#"{{"seq":{}}}"#,
                        ((writer * records_per_writer + round) * inserts_per_record + insert) * group + offset
                    ),
                    target_url: String::new(),
                    signature: String::new(),
                    created_at: now,
                    next_retry_at: now + time::Duration::seconds(30),
                    idempotency_key: None,
                    claimed: true,
                })
                .collect();
            records.extend(store.insert_deliveries_to_configs(&drafts).unwrap().into_iter().map(|row| {
                let (row, _secret) = row.unwrap();
                AttemptRecord {
                    webhook_id: row.webhook_id,
                    attempt: DeliveryAttempt {
                        delivery_id: row.id,
                        attempt_number: 1,
                        started_at: now,
                        duration_ms: 1,
                        status_code: Some(204),
                        error_class: None,
                        error_detail: None,
                    },
                    lease: row.next_retry_at.unwrap(),
                    update: DeliveryUpdate {
                        status: DeliveryStatus::Delivered,
                        attempt_count: 1,
                        last_attempted_at: now,
                        next_retry_at: None,
                        error_detail: None,
                        // The row was inserted unsigned: its first attempt records the signature it sent, as the
                        // gateway's does.
                        signature: Some(signature.into()),
                    },
                }
            }));
        }
        let recorded = store.record_attempts_counting(&records, 100).unwrap();
        assert!(recorded.iter().all(|recorded| recorded.applied));
    };
    if let Some(statements) = statements {
        statements.reset();
    }
    let server_before = server_mark(backend);
    let started = Instant::now();
    thread::scope(|scope| {
        for writer in 0..writers {
            let write_round = &write_round;
            scope.spawn(move || {
                for round in 0..records_per_writer {
                    write_round(writer, round);
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let server_after = server_mark(backend);
    let written = records_per_writer * record_group * writers;
    let ceiling_rate = rate(written, elapsed);
    println!(
        "2c. ceiling: {written} deliveries inserted claimed and recorded by {writers} writers over {config_count} \
         config(s), insert groups of {group}, record groups of {record_group}: {ceiling_rate:.0} deliveries/s; the \
         gateway (part 2) at {:.2} of it",
        gateway_rate / ceiling_rate
    );
    if let Some(used) = server_use(server_before.as_ref(), server_after.as_ref(), written) {
        let by_cpu = used
            .cpu_per_delivery
            .zip(gateway_server.and_then(|gateway| gateway.cpu_per_delivery))
            .map_or("?".to_owned(), |(ceiling, gateway)| format!("{:.2}", ceiling / gateway));
        println!("  {}; the gateway at {by_cpu} of it by PostgreSQL CPU per delivery", used.describe());
    }
    if let Some(statements) = statements {
        statements.report(&ceiling_database, written);
    }
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench`-less arguments; only run when benchmarking.
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    // WEBHOOK_BENCH_SKIP_QUERY=1 runs only the end-to-end parts (2 and 3).
    let backend = database::Backend::from_env("webhook bench");
    if std::env::var_os("WEBHOOK_BENCH_SKIP_QUERY").is_none() {
        due_row_query(&backend);
    }
    end_to_end(&backend);
}
