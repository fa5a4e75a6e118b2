//! The HTTP load generator of the benchmarks that drive the release gateway binary (http.rs, cluster_ingest.rs):
//! where the binary is, how servers and generator are pinned to CPUs, server processes that print their address,
//! the keep-alive generator for `POST /gateway/heartbeat` and `POST /gateway/messages`, and what it measured
//! (throughput, latency percentiles, failures by kind, the CPU time of the watched server processes).
//!
//! Each benchmark includes this file as a module (`#[path = "http_load.rs"] mod http_load;`) and names its
//! environment variables with its own prefix (`HTTP_BENCH`, `CLUSTER_BENCH`): `<PREFIX>_CONNECTIONS` (64),
//! `<PREFIX>_SECONDS` (10), `<PREFIX>_WARMUP_SECONDS` (2), `<PREFIX>_AGENTS` (10,000 distinct agent ids),
//! `<PREFIX>_CLIENT_THREADS` (one per generator CPU), `<PREFIX>_SERVER_CPUS` (`1`), `<PREFIX>_CLIENT_CPUS` (`0`),
//! `<PREFIX>_UNPINNED`.
#![allow(dead_code, reason = "shared by the benchmarks; not each uses every part")]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
pub use gateway_benches::spread::{Spread, Walk};
use gateway_testkit::{Sample, env_size};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The gateway binary: `$GATEWAY_BIN`, else `gateway` beside the `deps/` directory this benchmark runs from
/// (`<target dir>/release/`). Cargo cannot build another package's binary for a benchmark, hence the lookup.
pub fn gateway_binary() -> PathBuf {
    let path = std::env::var_os("GATEWAY_BIN").map_or_else(
        || {
            let exe = std::env::current_exe().unwrap();
            let release = exe.parent().and_then(Path::parent).unwrap_or(Path::new("target/release"));
            release.join("gateway")
        },
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "no gateway binary at {}: run `cargo build --release -p gateway` first (or set GATEWAY_BIN)",
        path.display()
    );
    path
}

/// How long ago `path` was written: a benchmark of a stale build is a benchmark of old code.
pub fn age(path: &Path) -> String {
    let modified = std::fs::metadata(path).and_then(|metadata| metadata.modified());
    match modified.ok().and_then(|modified| SystemTime::now().duration_since(modified).ok()) {
        Some(age) if age < Duration::from_secs(120) => format!("built {} s ago", age.as_secs()),
        Some(age) => format!("built {} min ago", age.as_secs() / 60),
        None => "build time unknown".to_owned(),
    }
}

/// Where the servers and the generator run.
pub enum Pinning {
    Pinned {
        server_cpus: String,
        client_cpus: String,
    },
    /// Why not, as the report's line.
    Unpinned(String),
}

impl Pinning {
    /// Pins this process to the generator's CPUs (`<PREFIX>_CLIENT_CPUS`), having checked that taskset takes the
    /// servers' CPUs (`<PREFIX>_SERVER_CPUS`) too; falls back to running everything unpinned, with the reason.
    /// Call it before any thread exists: threads inherit the CPUs of the thread that starts them.
    pub fn from_env(prefix: &str) -> Self {
        if std::env::var_os(format!("{prefix}_UNPINNED")).is_some() {
            return Self::Unpinned(format!("{prefix}_UNPINNED is set; running unpinned"));
        }
        let cpus = |name: &str, default: &str| std::env::var(format!("{prefix}_{name}")).unwrap_or(default.to_owned());
        let server_cpus = cpus("SERVER_CPUS", "1");
        let client_cpus = cpus("CLIENT_CPUS", "0");
        let check = taskset(&["-c", &server_cpus, "true"]);
        let pin = || taskset(&["-a", "-p", "-c", &client_cpus, &std::process::id().to_string()]);
        match check.and_then(|()| pin()) {
            Ok(()) => Self::Pinned { server_cpus, client_cpus },
            Err(reason) => Self::Unpinned(reason),
        }
    }

    pub fn describe(&self, prefix: &str) -> String {
        match self {
            Self::Pinned { server_cpus, client_cpus } => format!(
                "pinned: servers on CPUs {server_cpus}, load generator on CPUs {client_cpus} \
                 ({prefix}_SERVER_CPUS / {prefix}_CLIENT_CPUS)"
            ),
            Self::Unpinned(reason) => reason.clone(),
        }
    }

    /// A command that runs `program` on the servers' CPUs.
    pub fn command(&self, program: &Path) -> Command {
        match self {
            Self::Pinned { server_cpus, .. } => {
                let mut command = Command::new("taskset");
                command.arg("-c").arg(server_cpus).arg(program);
                command
            }
            Self::Unpinned(_) => Command::new(program),
        }
    }

    /// Moves a server that something else started (PostgreSQL, Redis), with every thread and every process it has
    /// started, onto the servers' CPUs; processes it starts later inherit them.
    pub fn pin_started(&self, pid: u32) {
        if let Self::Pinned { server_cpus, .. } = self {
            for process in process_tree(pid) {
                // A process may have ended since the tree was read; the others are pinned all the same.
                let _ = taskset(&["-a", "-p", "-c", server_cpus, &process.to_string()]);
            }
        }
    }
}

/// Runs taskset with `args`; the error is one line saying why it could not.
fn taskset(args: &[&str]) -> Result<(), String> {
    match Command::new("taskset").args(args).stdin(Stdio::null()).output() {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason = stderr.lines().next().unwrap_or("no message");
            Err(format!("`taskset {}` failed ({reason}); running unpinned", args.join(" ")))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err("taskset not found (util-linux); running unpinned".to_owned())
        }
        Err(error) => Err(format!("taskset could not start ({error}); running unpinned")),
    }
}

/// The `Cpus_allowed_list` of process `pid` (`self` for this one), as the kernel reports it.
pub fn allowed_cpus(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| line.strip_prefix("Cpus_allowed_list:")).map(|cpus| cpus.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and parentheses): index 1 is the
/// parent's pid, 11..=14 utime, stime, cutime, cstime.
pub fn stat_fields(pid: &str) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state letter (index 0) is not a number; it parses as 0 and is never used.
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(|field| field.parse().unwrap_or(0)).collect())
}

/// `pid` and every live process descended from it.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(process) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if let Some(parent) = stat_fields(&process.to_string()).and_then(|fields| fields.get(1).copied()) {
            children.entry(u32::try_from(parent).unwrap_or(0)).or_default().push(process);
        }
    }
    let mut tree = vec![pid];
    let mut next = 0;
    while let Some(&process) = tree.get(next) {
        tree.extend(children.get(&process).into_iter().flatten());
        next += 1;
    }
    tree
}

/// The CPU time (user + system) of process `pid` and of everything it started: its own, its waited-for children's
/// (which holds processes that ended since an earlier reading), and each live descendant's. PostgreSQL serves each
/// connection in a process of its own, so this is what a whole server costs.
pub fn tree_cpu_time(pid: u32) -> Option<Duration> {
    let mut ticks = 0;
    for (index, process) in process_tree(pid).into_iter().enumerate() {
        match stat_fields(&process.to_string()) {
            Some(fields) => ticks += fields.get(11..=14)?.iter().sum::<u64>(),
            // The root must be there; a descendant may have just ended (its time is in its parent's from now on).
            None if index == 0 => return None,
            None => {}
        }
    }
    // Clock ticks are 1/100 s on Linux (USER_HZ), which is all this needs for runs of seconds.
    Some(Duration::from_millis(ticks.checked_mul(10)?))
}

/// A process whose CPU time the generator reads over the measured period, with its descendants.
#[derive(Clone)]
pub struct Watched {
    /// What the report calls it; benchmarks add up watched processes by the start of their names.
    pub name: String,
    pub pid: u32,
}

/// What one run sends, where, and whose CPU time it reads.
pub struct Load<'a> {
    /// `/gateway/heartbeat` or `/gateway/messages` (any other path gets the heartbeat body).
    pub path: &'static str,
    pub servers: &'a [SocketAddr],
    pub spread: Spread,
    pub watched: &'a [Watched],
    /// With agent auth on: the bearer token of agent `n` at index `n`, sent with each of its requests.
    pub tokens: Option<Arc<Vec<String>>>,
}

/// What wrk (`--latency`) printed for one run.
pub struct WrkReport {
    /// Requests sent, answered or not.
    pub requests: u64,
    pub non_2xx: u64,
    pub socket_errors: Option<String>,
    /// wrk's `Requests/sec`: over wrk's own measured time, every answer counted.
    pub rate: f64,
    pub p50: String,
    pub p99: String,
}

/// Runs wrk with `script` against `address` for `duration`, with `settings`' threads, connections and agent ids
/// (`HEARTBEAT_AGENTS`, read by benches/load/*.lua). wrk inherits this process's CPUs.
pub fn wrk(settings: &Settings, script: &str, address: SocketAddr, duration: Duration) -> WrkReport {
    let output = Command::new("wrk")
        .args(["-t", &settings.client_threads.to_string()])
        .args(["-c", &settings.connections.to_string()])
        .args(["-d", &format!("{}s", duration.as_secs().max(1))])
        .args(["--latency", "-s", script, &format!("http://{address}")])
        .env("HEARTBEAT_AGENTS", settings.agents.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {text}{}", String::from_utf8_lossy(&output.stderr));
    let field = |prefix: &str| {
        text.lines().find_map(|line| line.trim().strip_prefix(prefix).map(|rest| rest.trim().to_owned()))
    };
    WrkReport {
        requests: text
            .lines()
            .find_map(|line| line.trim().split_once(" requests in ").and_then(|(count, _)| count.parse().ok()))
            .unwrap_or(0),
        non_2xx: field("Non-2xx or 3xx responses:").and_then(|count| count.parse().ok()).unwrap_or(0),
        socket_errors: field("Socket errors:"),
        rate: field("Requests/sec:").and_then(|rate| rate.parse().ok()).unwrap_or(0.0),
        p50: field("50%").unwrap_or_default(),
        p99: field("99%").unwrap_or_default(),
    }
}

pub struct Settings {
    pub connections: u64,
    pub duration: Duration,
    pub warmup: Duration,
    pub agents: u64,
    pub client_threads: usize,
}

impl Settings {
    /// The sizes from `<prefix>_CONNECTIONS` and the rest, `generator_cpus` client threads by default.
    pub fn from_env(prefix: &str, generator_cpus: usize) -> Self {
        let size = |name: &str, default: usize| env_size(&format!("{prefix}_{name}"), default);
        Self {
            connections: size("CONNECTIONS", 64).max(1) as u64,
            duration: Duration::from_secs(size("SECONDS", 10) as u64),
            warmup: Duration::from_secs(size("WARMUP_SECONDS", 2) as u64),
            agents: size("AGENTS", 10_000).max(1) as u64,
            client_threads: size("CLIENT_THREADS", generator_cpus).max(1),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} keep-alive connections, {} distinct agents, client threads: {}, {:?} measured after {:?} warm-up",
            self.connections, self.agents, self.client_threads, self.duration, self.warmup
        )
    }

    /// Each connection sends one request at a time, in a loop, for the warm-up and then the measured period.
    pub fn drive(&self, load: &Load<'_>) -> Measured {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.client_threads)
            .enable_all()
            .build()
            .unwrap();
        let servers = load.servers.len() as u64;
        assert!(servers > 0, "a load needs a server");
        runtime.block_on(async {
            let start = Instant::now() + Duration::from_millis(200);
            let measure_from = start + self.warmup;
            let stop = measure_from + self.duration;
            let tasks: Vec<_> = (0..self.connections)
                .map(|connection| {
                    let (server, walk) = load.spread.assign(connection, self.connections, servers, self.agents);
                    let (address, path, tokens) = (load.servers[server], load.path, load.tokens.clone());
                    let task =
                        tokio::spawn(
                            async move { connection_loop(address, path, tokens, walk, measure_from, stop).await },
                        );
                    (server, task)
                })
                .collect();
            // The watched processes' CPU time over exactly the measured period.
            let watched = load.watched.to_vec();
            let cpu = tokio::spawn(async move {
                tokio::time::sleep_until(measure_from.into()).await;
                let before: Vec<_> = watched.iter().map(|process| tree_cpu_time(process.pid)).collect();
                tokio::time::sleep_until(stop.into()).await;
                watched
                    .into_iter()
                    .zip(before)
                    .map(|(process, before)| {
                        let used =
                            tree_cpu_time(process.pid).zip(before).map(|(after, before)| after.saturating_sub(before));
                        (process.name, used)
                    })
                    .collect::<Vec<_>>()
            });
            let mut latencies = Vec::new();
            let mut failures = Failures::default();
            let mut per_server = vec![0; load.servers.len()];
            let mut answered_total = 0;
            for (server, task) in tasks {
                let connection = task.await.unwrap();
                per_server[server] += connection.latencies.len() as u64;
                latencies.extend(connection.latencies);
                failures.add(&connection.failures);
                answered_total += connection.answered;
            }
            let cpu = cpu.await.unwrap();
            let latencies = Sample::new(latencies);
            Measured { latencies, failures, per_server, answered_total, elapsed: self.duration, cpu }
        })
    }
}

/// What one connection measured.
struct ConnectionMeasured {
    latencies: Vec<Duration>,
    failures: Failures,
    /// 2xx answers, warm-up included.
    answered: u64,
}

/// Requests of the measured period that did not get a 2xx, by kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct Failures {
    /// 5xx answers.
    pub server_errors: u64,
    /// Any other answer that is not a 2xx.
    pub other_statuses: u64,
    /// No answer (the connection failed or was closed).
    pub transport: u64,
}

impl Failures {
    fn add(&mut self, other: &Self) {
        self.server_errors += other.server_errors;
        self.other_statuses += other.other_statuses;
        self.transport += other.transport;
    }

    pub fn total(&self) -> u64 {
        self.server_errors + self.other_statuses + self.transport
    }

    /// `0`, or `N (a 5xx, b other, c no answer)`.
    pub fn describe(&self) -> String {
        if self.total() == 0 {
            return "0".to_owned();
        }
        format!(
            "{} ({} 5xx, {} other, {} no answer)",
            self.total(),
            self.server_errors,
            self.other_statuses,
            self.transport
        )
    }
}

async fn connection_loop(
    address: SocketAddr,
    path: &'static str,
    tokens: Option<Arc<Vec<String>>>,
    mut walk: Walk,
    measure_from: Instant,
    stop: Instant,
) -> ConnectionMeasured {
    let stream = TcpStream::connect(address).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(driver);
    let host = address.to_string();
    let mut measured = ConnectionMeasured { latencies: Vec::new(), failures: Failures::default(), answered: 0 };
    loop {
        let agent = walk.next().unwrap_or(0);
        let body = if path == "/gateway/messages" {
            format!(
                r#"{{"meta":{{"trace_id":"t-{agent}","timestamp":"2026-02-22T12:00:00Z"}},"identity":{{"agent_id":"agent-{agent}","agent_type":"researcher","capability_version":"1.4.0"}},"cognition":{{"intent":"summarize","confidence_score":0.8}},"action":{{"status":"success","tool_call":"search","tool_input":{{"q":"rust"}}}},"state_delta":{{"tokens_consumed":512}},"control":{{"is_terminal":false}}}}"#
            )
        } else {
            format!(
                r#"{{"type":"heartbeat","agent_id":"agent-{agent}","cluster_id":"cluster-{}","timestamp":"2026-02-22T12:00:00Z"}}"#,
                agent % 8
            )
        };
        let mut request = hyper::Request::post(path)
            .header(hyper::header::HOST, &host)
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(token) = tokens.as_ref().and_then(|tokens| tokens.get(usize::try_from(agent).unwrap_or(usize::MAX)))
        {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let sent = Instant::now();
        if sent >= stop {
            return measured;
        }
        let status = answer(&mut sender, request).await;
        let ok = status.is_some_and(|status| status.is_success());
        measured.answered += u64::from(ok);
        if sent >= measure_from {
            let failures = &mut measured.failures;
            match status {
                Some(status) if status.is_success() => measured.latencies.push(sent.elapsed()),
                Some(status) if status.is_server_error() => failures.server_errors += 1,
                Some(_) => failures.other_statuses += 1,
                None => failures.transport += 1,
            }
        }
        if !ok && sender.ready().await.is_err() {
            return measured;
        }
    }
}

pub struct Measured {
    pub latencies: Sample<Duration>,
    pub failures: Failures,
    /// 2xx answers of the measured period, per server (in the order of [`Load::servers`]).
    pub per_server: Vec<u64>,
    /// 2xx answers, warm-up included.
    pub answered_total: u64,
    pub elapsed: Duration,
    /// The CPU time each watched process (with its descendants) used during the measured period (`None` without
    /// /proc), in the order of [`Load::watched`].
    pub cpu: Vec<(String, Option<Duration>)>,
}

impl Measured {
    pub fn requests_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    pub fn percentile_ms(&self, percent: f64) -> String {
        self.latencies
            .percentile(percent)
            .map_or("-".to_owned(), |latency| format!("{:.2} ms", latency.as_secs_f64() * 1e3))
    }

    pub fn summary(&self) -> String {
        format!(
            "{:>8.0} req/s  p50 {}  p99 {}  ({} requests, failures: {}; server CPU {} busy, {} per request)",
            self.requests_per_second(),
            self.percentile_ms(50.0),
            self.percentile_ms(99.0),
            self.latencies.len(),
            self.failures.describe(),
            self.server_busy(),
            self.server_cpu_per_request(),
        )
    }

    /// The CPU time of the watched processes whose names start with `prefix` (all of them for `""`).
    pub fn cpu_of(&self, prefix: &str) -> Option<Duration> {
        self.cpu.iter().filter(|(name, _)| name.starts_with(prefix)).map(|(_, used)| *used).sum()
    }

    /// [`Self::cpu_of`] as a share of one CPU over the measured period.
    pub fn busy_of(&self, prefix: &str) -> String {
        self.cpu_of(prefix)
            .map_or("-".to_owned(), |cpu| format!("{:.0} %", 100.0 * cpu.as_secs_f64() / self.elapsed.as_secs_f64()))
    }

    /// [`Self::cpu_of`] per 2xx answer.
    pub fn per_request_of(&self, prefix: &str) -> String {
        match (self.cpu_of(prefix), self.latencies.len()) {
            (Some(cpu), requests) if requests > 0 => format!("{:.1} µs", cpu.as_secs_f64() * 1e6 / requests as f64),
            _ => "-".to_owned(),
        }
    }

    /// Every watched process's CPU time as a share of one CPU over the measured period.
    pub fn server_busy(&self) -> String {
        self.busy_of("")
    }

    pub fn server_cpu_per_request(&self) -> String {
        self.per_request_of("")
    }
}

/// A server process that prints its address on stdout and is killed when dropped.
pub struct Server {
    pub child: Child,
    pub address: SocketAddr,
}

impl Server {
    /// Starts `command` and waits for the line `prefix<address>`; prints the CPUs the server may use.
    pub fn spawn(name: &str, command: &mut Command, prefix: &str) -> Self {
        let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let address = loop {
            let line = lines.next().unwrap_or_else(|| panic!("the {name} exited before listening")).unwrap();
            if let Some(address) = line.strip_prefix(prefix) {
                break address.parse().unwrap();
            }
        };
        // Listening means taskset has long since handed over to the server: same pid, CPUs set.
        println!("{name}: pid {}, CPUs {}", child.id(), allowed_cpus(&child.id().to_string()));
        Self { child, address }
    }

    pub fn watched(&self, name: impl Into<String>) -> Watched {
        Watched { name: name.into(), pid: self.child.id() }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `request` and reads its whole answer: its status, or `None` when the request or the body failed.
pub async fn answer(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    request: hyper::Request<Full<Bytes>>,
) -> Option<hyper::StatusCode> {
    match sender.send_request(request).await {
        Ok(response) => {
            let status = response.status();
            response.into_body().collect().await.is_ok().then_some(status)
        }
        Err(_) => None,
    }
}
