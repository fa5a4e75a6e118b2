//! Load generator for the agent-facing HTTP path: `POST /gateway/heartbeat` against the release gateway binary,
//! and the same generator against a bare hyper server that reads each request and answers 200 (this machine's
//! HTTP ceiling), in one run. Both servers are separate processes, so client and server share the cores the same
//! way in both measurements.
//!
//! `cargo bench -p gateway --bench http`; environment: `HTTP_BENCH_CONNECTIONS` (64), `HTTP_BENCH_SECONDS` (10),
//! `HTTP_BENCH_WARMUP_SECONDS` (2), `HTTP_BENCH_AGENTS` (10,000 distinct agent ids), `HTTP_BENCH_CLIENT_THREADS`
//! (2). Results: docs/benchmarks.md.
// A benchmark reports on stdout and may panic on a broken setup.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const BARE_SERVER_ARG: &str = "--bare-server";

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn main() {
    if std::env::args().any(|argument| argument == BARE_SERVER_ARG) {
        bare_server();
        return;
    }
    // `cargo test --benches` runs bench targets without `--bench`: nothing to measure then.
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    let settings = Settings {
        connections: env_number("HTTP_BENCH_CONNECTIONS", 64),
        duration: Duration::from_secs(env_number("HTTP_BENCH_SECONDS", 10)),
        warmup: Duration::from_secs(env_number("HTTP_BENCH_WARMUP_SECONDS", 2)),
        agents: env_number("HTTP_BENCH_AGENTS", 10_000).max(1),
        client_threads: env_number("HTTP_BENCH_CLIENT_THREADS", 2).max(1),
    };
    println!(
        "# HTTP load: {} keep-alive connections, {} client threads, {:?} measured after {:?} warm-up, {} cores",
        settings.connections,
        settings.client_threads,
        settings.duration,
        settings.warmup,
        std::thread::available_parallelism().map_or(0, usize::from)
    );

    let bare = Server::spawn(Command::new(std::env::current_exe().unwrap()).arg(BARE_SERVER_ARG), "listening on ");
    let ceiling = settings.drive(bare.address, "/");
    drop(bare);
    println!("bare hyper (200, body read):      {}", ceiling.summary());

    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("bench.db").display());
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_gateway"));
    gateway.args([
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &database,
        "--admin-token",
        "bench-operator-token-0000",
    ]);
    let gateway = Server::spawn(gateway.env("RUST_LOG", "warn"), "gateway listening on http://");
    let heartbeat = settings.drive(gateway.address, "/gateway/heartbeat");
    println!("gateway POST /gateway/heartbeat:  {}", heartbeat.summary());
    // For comparison: the same HTTP and JSON work without the database (a DecisionLog is validated and
    // published, nothing is written).
    let messages = settings.drive(gateway.address, "/gateway/messages");
    drop(gateway);
    println!("gateway POST /gateway/messages:   {}", messages.summary());
    let ceiling_rate = ceiling.requests_per_second();
    println!("heartbeat / ceiling: {:.0} % (target >= 60 %)", 100.0 * heartbeat.requests_per_second() / ceiling_rate);
    println!("messages / ceiling:  {:.0} %", 100.0 * messages.requests_per_second() / ceiling_rate);
}

struct Settings {
    connections: u64,
    duration: Duration,
    warmup: Duration,
    agents: u64,
    client_threads: u64,
}

impl Settings {
    /// Each connection sends one request at a time, in a loop, for the warm-up and then the measured period;
    /// every connection walks its own share of the agent ids.
    fn drive(&self, address: SocketAddr, path: &'static str) -> Measured {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::try_from(self.client_threads).unwrap())
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
            let mut measured = Measured { latencies_us: Vec::new(), errors: 0, elapsed: self.duration };
            for task in tasks {
                let (latencies, errors) = task.await.unwrap();
                measured.latencies_us.extend(latencies);
                measured.errors += errors;
            }
            measured.latencies_us.sort_unstable();
            measured
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
) -> (Vec<u64>, u64) {
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
                latencies.push(u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX));
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
    latencies_us: Vec<u64>,
    errors: u64,
    elapsed: Duration,
}

impl Measured {
    fn requests_per_second(&self) -> f64 {
        self.latencies_us.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest rank over the sorted latencies.
    fn percentile_ms(&self, percent: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let rank = ((percent / 100.0) * self.latencies_us.len() as f64).ceil() as usize;
        self.latencies_us[rank.clamp(1, self.latencies_us.len()) - 1] as f64 / 1_000.0
    }

    fn summary(&self) -> String {
        format!(
            "{:>8.0} req/s  p50 {:.2} ms  p99 {:.2} ms  ({} requests, {} errors)",
            self.requests_per_second(),
            self.percentile_ms(50.0),
            self.percentile_ms(99.0),
            self.latencies_us.len(),
            self.errors
        )
    }
}

/// A server process that prints its address on stdout and is killed when dropped.
struct Server {
    child: Child,
    address: SocketAddr,
}

impl Server {
    fn spawn(command: &mut Command, prefix: &str) -> Self {
        let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let address = loop {
            let line = lines.next().expect("the server exited before listening").unwrap();
            if let Some(address) = line.strip_prefix(prefix) {
                break address.parse().unwrap();
            }
        };
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
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
}
