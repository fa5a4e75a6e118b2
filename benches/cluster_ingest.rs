//! Heartbeat ingest with one and two instances: `POST /gateway/heartbeat` against the release gateway binary in
//! four setups, one after the other in one run, with the same load generator (http_load.rs, shared with http.rs):
//!
//! 1. one gateway on SQLite (the baseline),
//! 2. one gateway on PostgreSQL without Redis (a single instance: liveness in its memory),
//! 3. one gateway on PostgreSQL with Redis (cluster mode, alone: leadership, the event bridge, and every
//!    heartbeat's receipt written into its own `gateway_heartbeats` row, in the same statement),
//! 4. two gateways on PostgreSQL with Redis, the generator's connections spread over both (round robin), the
//!    same number of connections in all.
//!
//! PostgreSQL is a throwaway server with production durability (every commit flushed:
//! gateway_testkit::postgres::durable_server), a fresh database per setup; Redis a throwaway `redis-server`, a
//! fresh one per setup (no lease or epoch carries over). After each setup the benchmark lists the live agents on
//! each instance (`GET /gateway/agents`, every page), asks each for its role (`GET /gateway/cluster`), counts
//! PostgreSQL's WAL flushes and deadlocks, and prints the warnings the gateways logged.
//!
//! Run: `cargo build --release -p gateway && cargo bench -p gateway-benches --bench cluster-ingest` (or
//! `just bench cluster-ingest`); with `-- million`, the million-agent mode instead (cluster_million.rs). Needs PostgreSQL's server binaries and `redis-server`; without them it says so in
//! one line and measures nothing.
//!
//! Pinning: the gateways, PostgreSQL (the postmaster and every process it starts) and Redis run on
//! `$CLUSTER_BENCH_SERVER_CPUS` (default `1`), the generator on `$CLUSTER_BENCH_CLIENT_CPUS` (default `0`);
//! `CLUSTER_BENCH_UNPINNED=1` lets the scheduler place everything. With two instances on one server CPU the second
//! instance adds no CPU: what the comparison shows is whether coordinating them costs throughput.
//!
//! Environment: `CLUSTER_BENCH_CONNECTIONS` (64), `CLUSTER_BENCH_SECONDS` (10), `CLUSTER_BENCH_WARMUP_SECONDS` (2),
//! `CLUSTER_BENCH_AGENTS` (10,000), `CLUSTER_BENCH_CLIENT_THREADS` (one per generator CPU), the pinning above, and
//! `CLUSTER_BENCH_SPREAD`: with two instances, `fleet` (default: every agent heartbeats to both instances, the
//! second one's connections half the fleet ahead), `sticky` (each agent always to the same instance) or
//! `lockstep` (both instances get the same agents at about the same moment). Results: docs/benchmarks.md.
//!
//! `CLUSTER_BENCH_TABLE=1` runs issue 18's table instead (ingest_table.rs, `just bench-table`): the three
//! one-instance setups driven by wrk, each PostgreSQL figure beside its ceiling.
// A benchmark reports on stdout and may panic on a broken setup.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

#[path = "cluster_million.rs"]
mod cluster_million;
#[path = "http_load.rs"]
mod http_load;
#[path = "ingest_table.rs"]
mod table;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use diesel::{Connection as _, PgConnection, QueryableByName, RunQueryDsl as _};
use gateway_testkit::postgres::{TempDatabase, TempPostgres};
use gateway_testkit::redis::RedisServer;
use http_load::{Load, Measured, Pinning, Server, Settings, Spread, Watched, age, gateway_binary};
use serde_json::Value;

/// The prefix of this benchmark's environment variables.
const ENV_PREFIX: &str = "CLUSTER_BENCH";
const ADMIN_TOKEN: &str = "bench-operator-token-0000";
/// How long a started gateway may take to answer `/readyz` with 200.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Warnings of a gateway's log printed after a setup (all of them are counted).
const LOG_LINES_SHOWN: usize = 5;
/// Other processes named after each run, the busiest first.
const OTHERS_SHOWN: usize = 4;

/// The generator's allocator is the gateway's, as in http.rs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // `cargo test --benches` runs bench targets without `--bench`: nothing to measure then.
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    let million = std::env::args().any(|argument| argument == "million");
    let gateway_binary = gateway_binary();
    // Before any thread exists: threads inherit the CPUs of the thread that starts them.
    let pinning = Pinning::from_env(ENV_PREFIX);
    let generator_cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let settings = Settings::from_env(ENV_PREFIX, generator_cpus);
    let spread_variable = format!("{ENV_PREFIX}_SPREAD");
    let spread = std::env::var(&spread_variable).map_or(Spread::Fleet, |name| {
        Spread::parse(&name).unwrap_or_else(|| panic!("{spread_variable}={name}: expected fleet, sticky or lockstep"))
    });
    println!("# Heartbeat ingest, one and two instances: {}", settings.describe());
    println!("gateway binary: {} ({})", gateway_binary.display(), age(&gateway_binary));
    println!("{}", pinning.describe(ENV_PREFIX));
    println!("load generator: pid {}, CPUs {}", std::process::id(), http_load::allowed_cpus("self"));
    println!("two instances: connections round robin, agents spread `{}` ({spread_variable})", spread.name());

    if RedisServer::start_or_skip("cluster-ingest").is_none() {
        return;
    }
    let Some(postgres) = gateway_testkit::postgres::durable_server("cluster-ingest") else { return };
    let postmaster = postgres.postmaster_pid().expect("PostgreSQL runs: its postmaster.pid is there");
    pinning.pin_started(postmaster);
    println!("PostgreSQL: postmaster pid {postmaster}, CPUs {}", http_load::allowed_cpus(&postmaster.to_string()));
    if million {
        cluster_million::run(&gateway_binary, &pinning, &postgres, postmaster);
        return;
    }

    let bench = Bench { gateway_binary, pinning, settings, spread, postgres, postmaster };
    if std::env::var_os(format!("{ENV_PREFIX}_TABLE")).is_some() {
        bench.table();
        return;
    }
    let setups = [
        Setup { name: "SQLite", database: Database::Sqlite, redis: false, instances: 1 },
        Setup { name: "PostgreSQL", database: Database::Postgres, redis: false, instances: 1 },
        Setup { name: "PostgreSQL + Redis", database: Database::Postgres, redis: true, instances: 1 },
        Setup { name: "PostgreSQL + Redis", database: Database::Postgres, redis: true, instances: 2 },
    ];
    let results: Vec<Outcome> = setups.iter().map(|setup| bench.run(setup)).collect();

    println!();
    println!(
        "| setup | instances | req/s | p50 | p99 | failures | gateway CPU busy | gateway CPU per request | \
         PostgreSQL + Redis CPU per request | all server CPU per request | WAL flushes per 1,000 heartbeats | \
         live agents listed |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for outcome in &results {
        println!("{}", outcome.row());
    }
    let rate = |index: usize| results[index].measured.requests_per_second();
    println!(
        "(two instances / one, both PostgreSQL + Redis: {:.2}; two instances / PostgreSQL alone: {:.2}; \
         PostgreSQL + Redis alone / PostgreSQL alone: {:.2})",
        rate(3) / rate(2),
        rate(3) / rate(1),
        rate(2) / rate(1),
    );
}

struct Bench {
    gateway_binary: PathBuf,
    pinning: Pinning,
    settings: Settings,
    spread: Spread,
    postgres: TempPostgres,
    postmaster: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Database {
    Sqlite,
    Postgres,
}

/// A setup's servers, running.
struct Started {
    title: String,
    _logs: tempfile::TempDir,
    _sqlite_dir: tempfile::TempDir,
    postgres_database: Option<TempDatabase>,
    redis: Option<RedisServer>,
    /// Instance id, server, log file.
    gateways: Vec<(String, Server, PathBuf)>,
    watched: Vec<Watched>,
    /// `pg_stat_wal.wal_sync` and the database's committed transactions when the setup started.
    wal_before: Option<i64>,
    commits_before: Option<i64>,
}

struct Setup {
    name: &'static str,
    database: Database,
    redis: bool,
    instances: usize,
}

/// What one setup measured, for the table.
struct Outcome {
    setup: String,
    instances: usize,
    measured: Measured,
    /// WAL flushes (`pg_stat_wal.wal_sync`) over the whole setup, warm-up and start included.
    wal_flushes: Option<i64>,
    /// 2xx answers over the whole setup, warm-up included: the heartbeats those flushes wrote.
    answered: u64,
    /// Live agents each instance listed after the run.
    listed: Vec<usize>,
}

impl Outcome {
    fn row(&self) -> String {
        let measured = &self.measured;
        let flushes = self
            .wal_flushes
            .map_or("-".to_owned(), |flushes| format!("{:.1}", 1000.0 * flushes as f64 / self.answered.max(1) as f64));
        let listed: Vec<String> = self.listed.iter().map(usize::to_string).collect();
        format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {flushes} | {} |",
            self.setup,
            self.instances,
            measured.requests_per_second(),
            measured.percentile_ms(50.0),
            measured.percentile_ms(99.0),
            measured.failures.describe(),
            measured.busy_of("gateway"),
            measured.per_request_of("gateway"),
            if self.wal_flushes.is_some() { per_request_of_others(measured) } else { "-".to_owned() },
            measured.server_cpu_per_request(),
            listed.join(" / "),
        )
    }
}

/// The CPU per request of PostgreSQL and Redis together.
fn per_request_of_others(measured: &Measured) -> String {
    let others = [measured.cpu_of("postgres"), measured.cpu_of("redis")];
    let used: Duration = others.iter().flatten().sum();
    match measured.latencies.len() {
        0 => "-".to_owned(),
        requests => format!("{:.1} µs", used.as_secs_f64() * 1e6 / requests as f64),
    }
}

impl Bench {
    /// Starts a setup's servers: a fresh database (and Redis), its gateways, each ready.
    fn start(&self, setup: &Setup) -> Started {
        let title =
            format!("{}, {} instance{}", setup.name, setup.instances, if setup.instances > 1 { "s" } else { "" });
        println!();
        println!("## {title}");
        println!("machine before: {}", machine_state());
        let logs = tempfile::tempdir().unwrap();
        let sqlite_dir = tempfile::tempdir().unwrap();
        let postgres_database = (setup.database == Database::Postgres)
            .then(|| self.postgres.create_database(&title.replace([' ', ',', '+'], "_")));
        let database_url = match &postgres_database {
            Some(database) => database.url().to_owned(),
            None => format!("sqlite://{}", sqlite_dir.path().join("bench.db").display()),
        };
        let redis = setup.redis.then(|| {
            let redis = RedisServer::start().unwrap();
            let pid = redis.pid().unwrap();
            self.pinning.pin_started(pid);
            println!("redis-server: pid {pid}, CPUs {}", http_load::allowed_cpus(&pid.to_string()));
            redis
        });
        let wal_before = postgres_database.as_ref().map(|_| self.wal_flushes());
        let commits_before = postgres_database.as_ref().map(|database| self.commits(database.name()));

        let mut watched = Vec::new();
        let mut gateways = Vec::new();
        for instance in 0..setup.instances {
            let instance_id = format!("gw-{}", char::from(b'a' + u8::try_from(instance).unwrap()));
            let mut command = self.pinning.command(&self.gateway_binary);
            command.args(["--listen", "127.0.0.1:0", "--database-url", &database_url, "--admin-token", ADMIN_TOKEN]);
            if let Some(redis) = &redis {
                command.args(["--redis-url", &redis.url(), "--instance-id", &instance_id]);
                command.args(["--cluster-secret", "the cluster secret of the benchmark runs"]);
            }
            let log = logs.path().join(format!("{instance_id}.log"));
            command.env("RUST_LOG", "warn").stderr(File::create(&log).unwrap());
            // One after the other: the first one migrates the database.
            let gateway =
                Server::spawn(&format!("gateway {instance_id}"), &mut command, "gateway listening on http://");
            wait_ready(&gateway);
            watched.push(gateway.watched(format!("gateway {instance_id}")));
            gateways.push((instance_id, gateway, log));
        }
        if postgres_database.is_some() {
            watched.push(Watched { name: "postgres".to_owned(), pid: self.postmaster });
        }
        if let Some(pid) = redis.as_ref().and_then(RedisServer::pid) {
            watched.push(Watched { name: "redis".to_owned(), pid });
        }
        Started {
            title,
            _logs: logs,
            _sqlite_dir: sqlite_dir,
            postgres_database,
            redis,
            gateways,
            watched,
            wal_before,
            commits_before,
        }
    }

    fn run(&self, setup: &Setup) -> Outcome {
        let Started {
            title,
            _logs,
            _sqlite_dir,
            postgres_database,
            redis,
            gateways,
            watched,
            wal_before,
            commits_before: _,
        } = self.start(setup);
        let servers: Vec<_> = gateways.iter().map(|(_, gateway, _)| gateway.address).collect();
        let load = Load {
            path: "/gateway/heartbeat",
            servers: &servers,
            spread: self.spread,
            watched: &watched,
            tokens: None,
        };

        let window = Window::open(self.postmaster);
        let measured = self.settings.drive(&load);
        let window = window.close();
        println!("{title}: {}", measured.summary());
        if servers.len() > 1 {
            let shares: Vec<String> = measured.per_server.iter().map(u64::to_string).collect();
            println!("  2xx per instance: {}", shares.join(" / "));
        }
        println!("  {}", window.describe());
        println!("machine after: {}", machine_state());

        let mut listed = Vec::new();
        for (instance_id, gateway, _) in &gateways {
            let live = count_live_agents(gateway);
            println!("  {instance_id}: {live} live agents listed; cluster: {}", cluster_view(gateway));
            listed.push(live);
        }
        let answered = measured.answered_total;
        let logs_read: Vec<(String, PathBuf)> =
            gateways.iter().map(|(instance_id, _, log)| (instance_id.clone(), log.clone())).collect();
        // Stopped before the statistics are read: a backend flushes its counts when its connection ends.
        drop(gateways);
        for (instance_id, log) in &logs_read {
            print_log_summary(instance_id, log);
        }
        let wal_flushes = wal_before.map(|before| {
            // Statistics reach the shared counters within a second of the backends' exit.
            std::thread::sleep(Duration::from_millis(1500));
            self.wal_flushes() - before
        });
        if let Some(database) = &postgres_database {
            println!("  PostgreSQL: {} deadlocks in this database", self.deadlocks(database.name()));
        }
        drop(redis);
        Outcome { setup: setup.name.to_owned(), instances: setup.instances, measured, wal_flushes, answered, listed }
    }

    fn admin(&self) -> PgConnection {
        PgConnection::establish(&self.postgres.url("postgres")).unwrap()
    }

    /// WAL flushes to disk since the server started (`pg_stat_wal.wal_sync`): one per commit that had to wait for
    /// its own, fewer when commits share one.
    fn wal_flushes(&self) -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            count: i64,
        }
        let mut admin = self.admin();
        // The server's own statistics, not ones this connection might still hold.
        diesel::sql_query("SELECT pg_stat_clear_snapshot()").execute(&mut admin).unwrap();
        diesel::sql_query("SELECT wal_sync AS count FROM pg_stat_wal").get_result::<Count>(&mut admin).unwrap().count
    }

    /// Transactions committed in `database` so far (each statement outside a transaction counts as one).
    fn commits(&self, database: &str) -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            count: i64,
        }
        let mut admin = self.admin();
        diesel::sql_query("SELECT pg_stat_clear_snapshot()").execute(&mut admin).unwrap();
        diesel::sql_query("SELECT xact_commit AS count FROM pg_stat_database WHERE datname = $1")
            .bind::<diesel::sql_types::Text, _>(database)
            .get_result::<Count>(&mut admin)
            .unwrap()
            .count
    }

    fn deadlocks(&self, database: &str) -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            count: i64,
        }
        diesel::sql_query("SELECT deadlocks AS count FROM pg_stat_database WHERE datname = $1")
            .bind::<diesel::sql_types::Text, _>(database)
            .get_result::<Count>(&mut self.admin())
            .unwrap()
            .count
    }
}

/// An HTTP client for the few operator requests around a run.
fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent()
}

fn get(gateway: &Server, path: &str) -> (u16, Value) {
    let mut response = client()
        .get(format!("http://{}{path}", gateway.address))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn wait_ready(gateway: &Server) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let (status, body) = get(gateway, "/readyz");
        if status == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "the gateway at {} is not ready: {body}", gateway.address);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every page of `GET /gateway/agents`, counted.
fn count_live_agents(gateway: &Server) -> usize {
    let mut count = 0;
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(after) => format!("/gateway/agents?limit=1000&after={after}"),
            None => "/gateway/agents?limit=1000".to_owned(),
        };
        let (status, body) = get(gateway, &path);
        assert_eq!(status, 200, "{path}: {body}");
        count += body["agents"].as_array().map_or(0, Vec::len);
        match body["next_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return count,
        }
    }
}

/// `role, leader <instance> (epoch N)` from `GET /gateway/cluster`.
fn cluster_view(gateway: &Server) -> String {
    let (status, body) = get(gateway, "/gateway/cluster");
    if status != 200 {
        return format!("{status} {body}");
    }
    let leader = &body["leader"];
    format!(
        "role {}, leader {} (epoch {}), redis {}",
        body["role"].as_str().unwrap_or("?"),
        leader["instance_id"].as_str().unwrap_or("none"),
        leader["epoch"],
        body["redis"].as_str().unwrap_or("?"),
    )
}

/// Counts the warning and error lines a gateway logged and prints the first few.
fn print_log_summary(instance_id: &str, log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|line| line.contains("WARN") || line.contains("ERROR")).collect();
    println!("  {instance_id}: {} warning or error lines logged", lines.len());
    for line in lines.iter().take(LOG_LINES_SHOWN) {
        println!("    {line}");
    }
}

/// The load average and how many compiler processes run (other engineers share this machine).
fn machine_state() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let mut compilers = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if matches!(comm.trim(), "rustc" | "cc1" | "cc1plus" | "ld" | "clippy-driver" | "rust-lld") {
            compilers += 1;
        }
    }
    format!("load average {}; compiler processes running: {compilers}", load.join(" "))
}

/// The machine's CPUs over one run: how busy each was, and who besides this benchmark kept them busy (other
/// engineers' builds and tests share the machine).
struct Window {
    started: Instant,
    cpus: Vec<CpuTicks>,
    processes: HashMap<u32, (String, u64)>,
    postmaster: u32,
}

/// One CPU's line of /proc/stat.
struct CpuTicks {
    name: String,
    busy: u64,
    /// Interrupts and softirqs: no process is charged for them (this benchmark's loopback traffic is among them).
    interrupts: u64,
    total: u64,
}

struct ClosedWindow {
    elapsed: Duration,
    /// Each CPU's name and busy share.
    busy: Vec<(String, f64)>,
    /// CPU time of the whole machine, of interrupts, and of this benchmark's processes (the generator, its
    /// children, PostgreSQL).
    machine: Duration,
    interrupts: Duration,
    ours: Duration,
    /// The busiest other processes: name, pid, CPU time.
    others: Vec<(String, u32, Duration)>,
}

impl Window {
    fn open(postmaster: u32) -> Self {
        Self { started: Instant::now(), cpus: cpu_ticks(), processes: process_ticks(), postmaster }
    }

    fn close(self) -> ClosedWindow {
        let (cpus, processes) = (cpu_ticks(), process_ticks());
        let elapsed = self.started.elapsed();
        let (mut machine, mut interrupts) = (0, 0);
        let busy = cpus
            .iter()
            .zip(&self.cpus)
            .map(|(after, before)| {
                let (busy, total) = (after.busy.saturating_sub(before.busy), after.total.saturating_sub(before.total));
                machine += busy;
                interrupts += after.interrupts.saturating_sub(before.interrupts);
                (after.name.clone(), busy as f64 / total.max(1) as f64)
            })
            .collect();
        let ours: HashSet<u32> = http_load::process_tree(std::process::id())
            .into_iter()
            .chain(http_load::process_tree(self.postmaster))
            .collect();
        let (mut ours_ticks, mut others) = (0, Vec::new());
        for (pid, (name, after)) in processes {
            // A process that started during the run counts from zero.
            let used = after.saturating_sub(self.processes.get(&pid).map_or(0, |(_, before)| *before));
            if ours.contains(&pid) {
                ours_ticks += used;
            } else if used > 0 {
                others.push((name, pid, ticks(used)));
            }
        }
        others.sort_by_key(|other| std::cmp::Reverse(other.2));
        let (machine, interrupts, ours) = (ticks(machine), ticks(interrupts), ticks(ours_ticks));
        ClosedWindow { elapsed, busy, machine, interrupts, ours, others }
    }
}

impl ClosedWindow {
    fn describe(&self) -> String {
        let share = |used: Duration| format!("{:.0} %", 100.0 * used.as_secs_f64() / self.elapsed.as_secs_f64());
        let busy: Vec<String> = self.busy.iter().map(|(name, busy)| format!("{name} {:.0} %", 100.0 * busy)).collect();
        let busiest: Vec<String> = self
            .others
            .iter()
            .take(OTHERS_SHOWN)
            .map(|(name, pid, used)| format!("{name} ({pid}) {}", share(*used)))
            .collect();
        format!(
            "over the run ({:.1} s, warm-up included): busy {}; this benchmark's processes {}, interrupts {}, other \
             processes {} of a CPU (busiest: {})",
            self.elapsed.as_secs_f64(),
            busy.join(", "),
            share(self.ours),
            share(self.interrupts),
            share(self.machine.saturating_sub(self.ours).saturating_sub(self.interrupts)),
            if busiest.is_empty() { "none".to_owned() } else { busiest.join(", ") },
        )
    }
}

fn ticks(ticks: u64) -> Duration {
    // USER_HZ: 100 on Linux.
    Duration::from_millis(ticks.saturating_mul(10))
}

/// Each CPU's line of /proc/stat.
fn cpu_ticks() -> Vec<CpuTicks> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .filter(|line| line.starts_with("cpu") && !line.starts_with("cpu "))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?.to_owned();
            let ticks: Vec<u64> = fields.map(|field| field.parse().unwrap_or(0)).collect();
            // user nice system idle iowait irq softirq steal; guest time is already in user.
            let idle = ticks.get(3)? + ticks.get(4)?;
            let interrupts = ticks.get(5)? + ticks.get(6)?;
            let total: u64 = ticks.iter().take(8).sum();
            Some(CpuTicks { name, busy: total - idle, interrupts, total })
        })
        .collect()
}

/// Every process's name and CPU ticks (user + system) so far.
fn process_ticks() -> HashMap<u32, (String, u64)> {
    let mut processes = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default().trim().to_owned();
        if let Some(fields) = http_load::stat_fields(&pid.to_string()) {
            processes.insert(pid, (name, fields.get(11..=12).map_or(0, |used| used.iter().sum())));
        }
    }
    processes
}
