//! Load generator for the agent-facing HTTP path: `POST /gateway/heartbeat` and `POST /gateway/messages` against
//! the release gateway binary, and the same generator against a bare hyper server that reads each request and
//! answers 200 (this machine's HTTP ceiling), in one run. Both servers are separate processes.
//!
//! Run: `cargo build --release -p gateway && cargo bench -p gateway-benches --bench http` (or `just bench http`).
//! The gateway is `$GATEWAY_BIN`, else `gateway` in the release directory this benchmark was built into.
//!
//! Pinning: each server runs under `taskset -c $HTTP_BENCH_SERVER_CPUS` (default `1`), and the generator moves
//! itself onto `$HTTP_BENCH_CLIENT_CPUS` (default `0`) with `taskset -a -p` before it starts any thread, so the
//! two never compete for a core and the three measurements share the machine the same way. Both take taskset's
//! CPU lists (`2-3`, `0,2`). `HTTP_BENCH_UNPINNED=1` runs both unpinned; so does a machine without taskset.
//!
//! Environment: `HTTP_BENCH_CONNECTIONS` (64), `HTTP_BENCH_SECONDS` (10), `HTTP_BENCH_WARMUP_SECONDS` (2),
//! `HTTP_BENCH_AGENTS` (10,000 distinct agent ids), `HTTP_BENCH_CLIENT_THREADS` (one per generator CPU), and the
//! three above. Results: docs/benchmarks.md.
// A benchmark reports on stdout and may panic on a broken setup.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use gateway_testkit::{Sample, cpu_time_of, env_size};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const BARE_SERVER_ARG: &str = "--bare-server";

/// The gateway binary's allocator, for the bare server too (it is this executable, started again): the ceiling
/// should differ from the gateway only by the gateway's work per request. (The load generator gets it as well.)
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if std::env::args().any(|argument| argument == BARE_SERVER_ARG) {
        bare_server();
        return;
    }
    // `cargo test --benches` runs bench targets without `--bench`: nothing to measure then.
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    let gateway_binary = gateway_binary();
    // Before any thread exists: threads inherit the CPUs of the thread that starts them.
    let pinning = Pinning::from_env();
    let generator_cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let settings = Settings {
        connections: env_size("HTTP_BENCH_CONNECTIONS", 64) as u64,
        duration: Duration::from_secs(env_size("HTTP_BENCH_SECONDS", 10) as u64),
        warmup: Duration::from_secs(env_size("HTTP_BENCH_WARMUP_SECONDS", 2) as u64),
        agents: env_size("HTTP_BENCH_AGENTS", 10_000).max(1) as u64,
        client_threads: env_size("HTTP_BENCH_CLIENT_THREADS", generator_cpus).max(1),
    };
    println!(
        "# HTTP load: {} keep-alive connections, client threads: {}, {:?} measured after {:?} warm-up",
        settings.connections, settings.client_threads, settings.duration, settings.warmup,
    );
    println!("gateway binary: {} ({})", gateway_binary.display(), age(&gateway_binary));
    println!("{}", pinning.describe());
    println!("load generator: pid {}, CPUs {}", std::process::id(), allowed_cpus("self"));

    let mut bare = pinning.command(&std::env::current_exe().unwrap());
    let bare = Server::spawn("bare hyper server", bare.arg(BARE_SERVER_ARG), "listening on ");
    let ceiling = settings.drive(&bare, "/");
    drop(bare);
    let ceiling = Target { name: "bare hyper (200, body read)", measured: ceiling };
    ceiling.report(None);

    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("bench.db").display());
    let mut gateway = pinning.command(&gateway_binary);
    gateway.args([
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &database,
        "--admin-token",
        "bench-operator-token-0000",
    ]);
    let gateway = Server::spawn("gateway", gateway.env("RUST_LOG", "warn"), "gateway listening on http://");
    let heartbeat =
        Target { name: "POST /gateway/heartbeat", measured: settings.drive(&gateway, "/gateway/heartbeat") };
    heartbeat.report(Some(&ceiling));
    // For comparison: the same HTTP and JSON work without the database (a DecisionLog is validated and
    // published, nothing is written).
    let messages = Target { name: "POST /gateway/messages", measured: settings.drive(&gateway, "/gateway/messages") };
    drop(gateway);
    messages.report(Some(&ceiling));

    println!();
    println!("| target | req/s | p50 | p99 | of the ceiling | server CPU busy | server CPU per request |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for target in [&ceiling, &heartbeat, &messages] {
        println!("{}", target.row(&ceiling));
    }
    println!("(heartbeats: target >= 60 % of the ceiling)");
    println!(
        "(a ceiling whose server CPU is not near 100 % busy was limited by the load generator: compare the CPU per \
         request too)"
    );
}

/// The gateway binary: `$GATEWAY_BIN`, else `gateway` beside the `deps/` directory this benchmark runs from
/// (`<target dir>/release/`). Cargo cannot build another package's binary for a benchmark, hence the lookup.
fn gateway_binary() -> PathBuf {
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
fn age(path: &Path) -> String {
    let modified = std::fs::metadata(path).and_then(|metadata| metadata.modified());
    match modified.ok().and_then(|modified| SystemTime::now().duration_since(modified).ok()) {
        Some(age) if age < Duration::from_secs(120) => format!("built {} s ago", age.as_secs()),
        Some(age) => format!("built {} min ago", age.as_secs() / 60),
        None => "build time unknown".to_owned(),
    }
}

/// Where the servers and the generator run.
enum Pinning {
    Pinned {
        server_cpus: String,
        client_cpus: String,
    },
    /// Why not, as the report's line.
    Unpinned(String),
}

impl Pinning {
    /// Pins this process to the generator's CPUs, having checked that taskset takes the servers' CPUs too; falls
    /// back to running everything unpinned, with the reason.
    fn from_env() -> Self {
        if std::env::var_os("HTTP_BENCH_UNPINNED").is_some() {
            return Self::Unpinned("HTTP_BENCH_UNPINNED is set; running unpinned".to_owned());
        }
        let cpus = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let server_cpus = cpus("HTTP_BENCH_SERVER_CPUS", "1");
        let client_cpus = cpus("HTTP_BENCH_CLIENT_CPUS", "0");
        let check = taskset(&["-c", &server_cpus, "true"]);
        let pin = || taskset(&["-a", "-p", "-c", &client_cpus, &std::process::id().to_string()]);
        match check.and_then(|()| pin()) {
            Ok(()) => Self::Pinned { server_cpus, client_cpus },
            Err(reason) => Self::Unpinned(reason),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Pinned { server_cpus, client_cpus } => format!(
                "pinned: servers under `taskset -c {server_cpus}`, load generator on CPUs {client_cpus} \
                 (HTTP_BENCH_SERVER_CPUS / HTTP_BENCH_CLIENT_CPUS)"
            ),
            Self::Unpinned(reason) => reason.clone(),
        }
    }

    /// A command that runs `program` on the servers' CPUs.
    fn command(&self, program: &Path) -> Command {
        match self {
            Self::Pinned { server_cpus, .. } => {
                let mut command = Command::new("taskset");
                command.arg("-c").arg(server_cpus).arg(program);
                command
            }
            Self::Unpinned(_) => Command::new(program),
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
fn allowed_cpus(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| line.strip_prefix("Cpus_allowed_list:")).map(|cpus| cpus.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// One measured target and its line in the report.
struct Target {
    name: &'static str,
    measured: Measured,
}

impl Target {
    fn ratio(&self, ceiling: &Self) -> String {
        format!("{:.0} %", 100.0 * self.measured.requests_per_second() / ceiling.measured.requests_per_second())
    }

    fn report(&self, ceiling: Option<&Self>) {
        let ratio = ceiling
            .map_or_else(|| "the ceiling".to_owned(), |ceiling| format!("{} of the ceiling", self.ratio(ceiling)));
        println!("{:<32} {}; {ratio}", format!("{}:", self.name), self.measured.summary());
    }

    fn row(&self, ceiling: &Self) -> String {
        let measured = &self.measured;
        format!(
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            self.name,
            measured.requests_per_second(),
            measured.percentile_ms(50.0),
            measured.percentile_ms(99.0),
            self.ratio(ceiling),
            measured.server_busy(),
            measured.server_cpu_per_request(),
        )
    }
}

struct Settings {
    connections: u64,
    duration: Duration,
    warmup: Duration,
    agents: u64,
    client_threads: usize,
}

impl Settings {
    /// Each connection sends one request at a time, in a loop, for the warm-up and then the measured period;
    /// every connection walks its own share of the agent ids.
    fn drive(&self, server: &Server, path: &'static str) -> Measured {
        let (address, pid) = (server.address, server.child.id().to_string());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.client_threads)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let start = Instant::now() + Duration::from_millis(200);
            let measure_from = start + self.warmup;
            let stop = measure_from + self.duration;
            let tasks: Vec<_> = (0..self.connections)
                .map(|connection| {
                    let agents = self.agents;
                    let connections = self.connections;
                    tokio::spawn(async move {
                        connection_loop(address, path, connection, connections, agents, measure_from, stop).await
                    })
                })
                .collect();
            // The server's CPU time over exactly the measured period.
            let server_cpu = tokio::spawn(async move {
                tokio::time::sleep_until(measure_from.into()).await;
                let before = cpu_time_of(&pid);
                tokio::time::sleep_until(stop.into()).await;
                Some(cpu_time_of(&pid)? - before?)
            });
            let (mut latencies, mut errors) = (Vec::new(), 0);
            for task in tasks {
                let (more, failed) = task.await.unwrap();
                latencies.extend(more);
                errors += failed;
            }
            let server_cpu = server_cpu.await.unwrap();
            Measured { latencies: Sample::new(latencies), errors, elapsed: self.duration, server_cpu }
        })
    }
}

async fn connection_loop(
    address: SocketAddr,
    path: &'static str,
    connection: u64,
    connections: u64,
    agents: u64,
    measure_from: Instant,
    stop: Instant,
) -> (Vec<Duration>, u64) {
    let stream = TcpStream::connect(address).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(driver);
    let host = address.to_string();
    let (mut latencies, mut errors) = (Vec::new(), 0);
    let mut agent = connection % agents;
    loop {
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
        agent = (agent + connections) % agents;
        let request = hyper::Request::post(path)
            .header(hyper::header::HOST, &host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let sent = Instant::now();
        if sent >= stop {
            return (latencies, errors);
        }
        let ok = match sender.send_request(request).await {
            Ok(response) => {
                let status = response.status();
                response.into_body().collect().await.is_ok() && status.is_success()
            }
            Err(_) => false,
        };
        if sent >= measure_from {
            if ok {
                latencies.push(sent.elapsed());
            } else {
                errors += 1;
            }
        }
        if !ok && sender.ready().await.is_err() {
            return (latencies, errors);
        }
    }
}

struct Measured {
    latencies: Sample<Duration>,
    errors: u64,
    elapsed: Duration,
    /// CPU time the server process used during the measured period (`None` without /proc).
    server_cpu: Option<Duration>,
}

impl Measured {
    fn requests_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_ms(&self, percent: f64) -> String {
        self.latencies
            .percentile(percent)
            .map_or("-".to_owned(), |latency| format!("{:.2} ms", latency.as_secs_f64() * 1e3))
    }

    fn summary(&self) -> String {
        format!(
            "{:>8.0} req/s  p50 {}  p99 {}  ({} requests, {} errors; server CPU {} busy, {} per request)",
            self.requests_per_second(),
            self.percentile_ms(50.0),
            self.percentile_ms(99.0),
            self.latencies.len(),
            self.errors,
            self.server_busy(),
            self.server_cpu_per_request(),
        )
    }

    /// The server's CPU time as a share of one CPU over the measured period.
    fn server_busy(&self) -> String {
        self.server_cpu
            .map_or("-".to_owned(), |cpu| format!("{:.0} %", 100.0 * cpu.as_secs_f64() / self.elapsed.as_secs_f64()))
    }

    fn server_cpu_per_request(&self) -> String {
        match (self.server_cpu, self.latencies.len()) {
            (Some(cpu), requests) if requests > 0 => format!("{:.1} µs", cpu.as_secs_f64() * 1e6 / requests as f64),
            _ => "-".to_owned(),
        }
    }
}

/// A server process that prints its address on stdout and is killed when dropped.
struct Server {
    child: Child,
    address: SocketAddr,
}

impl Server {
    /// Starts `command` and waits for the line `prefix<address>`; prints the CPUs the server may use.
    fn spawn(name: &str, command: &mut Command, prefix: &str) -> Self {
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
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ceiling: hyper's HTTP/1 server on the same kind of runtime as the gateway's, reading each request body
/// and answering 200 with an empty body.
fn bare_server() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on {}", listener.local_addr().unwrap()).unwrap();
        stdout.flush().unwrap();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: hyper::Request<Incoming>| async move {
                    let _ = request.into_body().collect().await;
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::new())))
                });
                // The gateway's own connection settings (bin/gateway/src/http/mod.rs), so the comparison is of the
                // work done per request, not of how bytes are written.
                let _ = hyper::server::conn::http1::Builder::new()
                    .writev(false)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}
