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
//! three above. The generator is http_load.rs, shared with cluster_ingest.rs. Results: docs/benchmarks.md.
// A benchmark reports on stdout and may panic on a broken setup.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

#[path = "http_load.rs"]
mod http_load;

use std::convert::Infallible;
use std::io::Write;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use http_load::{Load, Measured, Pinning, Server, Settings, Spread, age, allowed_cpus, gateway_binary};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const BARE_SERVER_ARG: &str = "--bare-server";
/// The prefix of this benchmark's environment variables.
const ENV_PREFIX: &str = "HTTP_BENCH";

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
    let pinning = Pinning::from_env(ENV_PREFIX);
    let generator_cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let settings = Settings::from_env(ENV_PREFIX, generator_cpus);
    println!("# HTTP load: {}", settings.describe());
    println!("gateway binary: {} ({})", gateway_binary.display(), age(&gateway_binary));
    println!("{}", pinning.describe(ENV_PREFIX));
    println!("load generator: pid {}, CPUs {}", std::process::id(), allowed_cpus("self"));

    let mut bare = pinning.command(&std::env::current_exe().unwrap());
    let bare = Server::spawn("bare hyper server", bare.arg(BARE_SERVER_ARG), "listening on ");
    let ceiling = drive(&settings, &bare, "/");
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
        Target { name: "POST /gateway/heartbeat", measured: drive(&settings, &gateway, "/gateway/heartbeat") };
    heartbeat.report(Some(&ceiling));
    // For comparison: the same HTTP and JSON work without the database (a DecisionLog is validated and
    // published, nothing is written).
    let messages = Target { name: "POST /gateway/messages", measured: drive(&settings, &gateway, "/gateway/messages") };
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

/// One server, every connection to it, its CPU time watched.
fn drive(settings: &Settings, server: &Server, path: &'static str) -> Measured {
    let load = Load { path, servers: &[server.address], spread: Spread::Sticky, watched: &[server.watched("server")] };
    settings.drive(&load)
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
