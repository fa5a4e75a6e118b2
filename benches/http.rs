//! Load generator for the agent-facing HTTP path: `POST /gateway/heartbeat` and `POST /gateway/messages` against
//! the release gateway binary, and the same generator against a bare hyper server that does the least a JSON
//! endpoint can (reads the body, checks it is JSON without building it, answers 200: see `bare_server`; this
//! machine's HTTP ceiling), in one run. `HTTP_BENCH_WRK=1` measures issue 18's way instead: wrk with
//! benches/load/heartbeat.lua and messages.lua against the bare server and one gateway in turn (`wrk_rounds`). Heartbeats go to two gateways in turn,
//! `HTTP_BENCH_AUTH_ROUNDS` (3) pairs: one with `--agent-auth off`, one with `--agent-auth required` where each
//! agent sends its own token (one credential issued per agent before the run), and a third measurement sends the
//! same tokens to the gateway with auth off (what the larger request head costs, apart from checking it). Every
//! server is a separate
//! process. The gateways run with `--agent-rate-limit-per-minute 0`: the generator sends each agent several
//! messages a second, far over the default limit, and what is measured is the work per request, not the limit's
//! refusals.
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
    if std::env::var_os(format!("{ENV_PREFIX}_WRK")).is_some() {
        wrk_rounds(&settings, &pinning, &gateway_binary);
        return;
    }

    let mut bare = pinning.command(&std::env::current_exe().unwrap());
    let bare = Server::spawn("bare hyper server", bare.arg(BARE_SERVER_ARG), "listening on ");
    let ceiling = drive(&settings, &bare, "/", None);
    drop(bare);
    let ceiling = Target { name: "bare hyper (200, body read)", measured: ceiling };
    ceiling.report(None);

    // Both gateways run from here on (pinned alike; the idle one costs nothing measurable), so that heartbeats
    // with and without agent auth can be measured in turns: a neighbour's burst of work then lands on one pair,
    // not on every measurement of one side.
    let dir = tempfile::tempdir().unwrap();
    let open = start_gateway(&pinning, &gateway_binary, &dir, "open", "off");
    let guarded = start_gateway(&pinning, &gateway_binary, &dir, "auth", "required");
    let issuing = std::time::Instant::now();
    let tokens = issue_tokens(&guarded, settings.agents);
    // The same on the open gateway (which ignores them), so that both hold the same data and went through the
    // same work before the measurements: only the flag differs.
    let open_tokens = issue_tokens(&open, settings.agents);
    println!("issued {} agent credentials in {:.1} s", tokens.len(), issuing.elapsed().as_secs_f64());

    // For comparison: the same HTTP and JSON work without the database (a DecisionLog is validated and
    // published, nothing is written).
    let messages =
        Target { name: "POST /gateway/messages", measured: drive(&settings, &open, "/gateway/messages", None) };
    messages.report(Some(&ceiling));
    let rounds = gateway_testkit::env_size(&format!("{ENV_PREFIX}_AUTH_ROUNDS"), 3).max(1);
    let mut pairs = Vec::new();
    for _ in 0..rounds {
        let heartbeat =
            Target { name: "POST /gateway/heartbeat", measured: drive(&settings, &open, "/gateway/heartbeat", None) };
        heartbeat.report(Some(&ceiling));
        let authenticated = Target {
            name: "POST /gateway/heartbeat, agent auth on",
            measured: drive(&settings, &guarded, "/gateway/heartbeat", Some(std::sync::Arc::clone(&tokens))),
        };
        authenticated.report(Some(&ceiling));
        // The same requests, tokens and all, to the gateway that ignores them: what the larger request head
        // costs by itself, apart from checking the token.
        let headed = Target {
            name: "POST /gateway/heartbeat, auth off, tokens sent",
            measured: drive(&settings, &open, "/gateway/heartbeat", Some(std::sync::Arc::clone(&open_tokens))),
        };
        headed.report(Some(&ceiling));
        pairs.push((heartbeat, authenticated, headed));
    }
    drop((open, guarded));

    println!();
    println!("| target | req/s | p50 | p99 | of the ceiling | server CPU busy | server CPU per request |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!("{}", ceiling.row(&ceiling));
    println!("{}", messages.row(&ceiling));
    for (heartbeat, authenticated, headed) in &pairs {
        println!("{}", heartbeat.row(&ceiling));
        println!("{}", authenticated.row(&ceiling));
        println!("{}", headed.row(&ceiling));
    }
    let ratios = |of: fn(&(Target, Target, Target)) -> &Target| {
        let mut ratios: Vec<f64> = pairs
            .iter()
            .map(|round| 100.0 * of(round).measured.requests_per_second() / round.0.measured.requests_per_second())
            .collect();
        let shown: Vec<String> = ratios.iter().map(|ratio| format!("{ratio:.0} %")).collect();
        ratios.sort_by(f64::total_cmp);
        format!("{} (median {:.0} %)", shown.join(", "), ratios[ratios.len() / 2])
    };
    println!(
        "heartbeats with agent auth on, of those with it off, by round: {}; target >= 90 %",
        ratios(|round| &round.1)
    );
    println!("heartbeats to auth off carrying the tokens, of those without: {}", ratios(|round| &round.2));
    println!("(heartbeats: target >= 60 % of the ceiling)");
    println!(
        "(a ceiling whose server CPU is not near 100 % busy was limited by the load generator: compare the CPU per \
         request too)"
    );
}

/// The operator token of the benchmark's gateways.
const ADMIN_TOKEN: &str = "bench-operator-token-0000";

/// A gateway on a fresh SQLite file `<name>.db` in `dir`, with `--agent-auth <agent_auth>` and no rate limit.
fn start_gateway(
    pinning: &Pinning,
    binary: &std::path::Path,
    dir: &tempfile::TempDir,
    name: &str,
    agent_auth: &str,
) -> Server {
    let database = format!("sqlite://{}", dir.path().join(format!("{name}.db")).display());
    let mut gateway = pinning.command(binary);
    gateway.args(["--listen", "127.0.0.1:0", "--database-url", &database, "--admin-token", ADMIN_TOKEN]);
    gateway.args(["--agent-auth", agent_auth, "--agent-rate-limit-per-minute", "0"]);
    Server::spawn(
        &format!("gateway (--agent-auth {agent_auth})"),
        gateway.env("RUST_LOG", "warn"),
        "gateway listening on http://",
    )
}

/// One credential for each of the agents `agent-0` … `agent-<agents - 1>` the generator sends for: their tokens,
/// in agent order.
fn issue_tokens(gateway: &Server, agents: u64) -> std::sync::Arc<Vec<String>> {
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    let tokens = (0..agents)
        .map(|n| {
            let url = format!("http://{}/gateway/agents/agent-{n}/credentials", gateway.address);
            let mut response =
                agent.post(&url).header("authorization", format!("Bearer {ADMIN_TOKEN}")).send("").unwrap();
            assert_eq!(response.status(), 201, "issuing a credential");
            let body: serde_json::Value = serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
            body["token"].as_str().unwrap().to_owned()
        })
        .collect();
    std::sync::Arc::new(tokens)
}

/// One server, every connection to it, its CPU time watched; each request with its agent's token if `tokens`.
fn drive(
    settings: &Settings,
    server: &Server,
    path: &'static str,
    tokens: Option<std::sync::Arc<Vec<String>>>,
) -> Measured {
    let load =
        Load { path, servers: &[server.address], spread: Spread::Sticky, watched: &[server.watched("server")], tokens };
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

/// `HTTP_BENCH_WRK=1`: issue 18's method. The bare server and one gateway (SQLite, agent auth off) run side by
/// side on the servers' CPUs; wrk (one thread per generator CPU, `HTTP_BENCH_CONNECTIONS`) sends
/// `benches/load/heartbeat.lua` (`HTTP_BENCH_AGENTS` distinct agents) and `benches/load/messages.lua` to each in
/// turn, `HTTP_BENCH_ROUNDS` (3) rounds, each run after its own warm-up. Each gateway figure is set beside the bare
/// server's with the same body, measured just before it: by requests/s and by server CPU per request.
fn wrk_rounds(settings: &Settings, pinning: &Pinning, gateway_binary: &std::path::Path) {
    if std::process::Command::new("wrk").arg("--version").output().is_err() {
        println!("http (wrk): skipped (wrk not found: Debian package `wrk`)");
        return;
    }
    let mut bare = pinning.command(&std::env::current_exe().unwrap());
    let bare = Server::spawn("bare hyper server", bare.arg(BARE_SERVER_ARG), "listening on ");
    let dir = tempfile::tempdir().unwrap();
    let gateway = start_gateway(pinning, gateway_binary, &dir, "open", "off");
    let rounds = gateway_testkit::env_size(&format!("{ENV_PREFIX}_ROUNDS"), 3).max(1);
    let scripts = [
        ("POST /gateway/heartbeat", concat!(env!("CARGO_MANIFEST_DIR"), "/load/heartbeat.lua")),
        ("POST /gateway/messages", concat!(env!("CARGO_MANIFEST_DIR"), "/load/messages.lua")),
    ];
    let mut rows = Vec::new();
    for round in 1..=rounds {
        for (name, script) in scripts {
            let ceiling = wrk(settings, script, &bare);
            let measured = wrk(settings, script, &gateway);
            let row = format!(
                "| {round} | {name} | {:.0} ({}, {}) | {:.0} ({}, {}) | **{:.2}** | {:.2} | {} / {} |",
                ceiling.rate,
                ceiling.busy(),
                ceiling.per_request(),
                measured.rate,
                measured.busy(),
                measured.per_request(),
                measured.rate / ceiling.rate,
                ceiling.cpu_per_request() / measured.cpu_per_request(),
                measured.p50,
                measured.p99,
            );
            println!("{row}");
            if !measured.failures.is_empty() || !ceiling.failures.is_empty() {
                println!("  failures: bare {}, gateway {}", ceiling.failures, measured.failures);
            }
            rows.push(row);
        }
    }
    println!();
    println!(
        "| round | body | bare req/s (server CPU busy, per request) | gateway req/s (busy, per request) | of the bare \
         server | by CPU per request | gateway p50 / p99 |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for row in rows {
        println!("{row}");
    }
    println!("(targets, issue 18: heartbeats >= 0.75 of the bare server, DecisionLogs >= 0.9)");
}

/// What one wrk run against one server measured.
struct WrkRun {
    /// 2xx answers per second.
    rate: f64,
    answered: u64,
    p50: String,
    p99: String,
    /// Non-2xx answers and socket errors as wrk reports them; empty when there were none.
    failures: String,
    /// The server's CPU time over the run.
    cpu: Option<std::time::Duration>,
    elapsed: std::time::Duration,
}

impl WrkRun {
    fn cpu_per_request(&self) -> f64 {
        self.cpu.map_or(f64::NAN, |cpu| cpu.as_secs_f64() / self.answered as f64)
    }

    fn per_request(&self) -> String {
        format!("{:.2} µs", self.cpu_per_request() * 1e6)
    }

    fn busy(&self) -> String {
        self.cpu
            .map_or("-".to_owned(), |cpu| format!("{:.0} %", 100.0 * cpu.as_secs_f64() / self.elapsed.as_secs_f64()))
    }
}

/// wrk with `script` against `server`: a warm-up run, then the measured one, the server's CPU time read around
/// it. This process runs on the generator's CPUs, and wrk inherits them.
fn wrk(settings: &Settings, script: &str, server: &Server) -> WrkRun {
    let (address, pid) = (server.address, server.child.id());
    http_load::wrk(settings, script, address, settings.warmup);
    let before = http_load::tree_cpu_time(pid);
    let started = std::time::Instant::now();
    let report = http_load::wrk(settings, script, address, settings.duration);
    let elapsed = started.elapsed();
    let cpu = http_load::tree_cpu_time(pid).zip(before).map(|(after, before)| after.saturating_sub(before));
    let non_2xx = report.non_2xx;
    let mut failures = if non_2xx > 0 { format!("{non_2xx} non-2xx") } else { String::new() };
    if let Some(errors) = &report.socket_errors {
        failures.push_str(&format!(" socket errors: {errors}"));
    }
    let answered = report.requests.saturating_sub(non_2xx);
    WrkRun {
        // wrk's own rate is over its own measured time; the answered share of it counts.
        rate: report.rate * answered as f64 / report.requests.max(1) as f64,
        answered,
        p50: report.p50,
        p99: report.p99,
        failures,
        cpu,
        elapsed,
    }
}

/// The ceiling: the least a JSON endpoint can do, on hyper's HTTP/1 server. One current-thread runtime (the
/// least scheduling a server can have: no work stealing, no cross-thread wake-ups), the gateway's allocator
/// (mimalloc, this executable's) and connection settings (`writev(false)`, `TCP_NODELAY`); per request it reads
/// the whole body, checks that it is one JSON value without building a tree (`serde::de::IgnoredAny`: every byte
/// is parsed, strings unescaped into nothing, no allocation per value) and answers 200 with an empty body — 400
/// with an empty body when it is not JSON. It does not look at the path, the method or any header, and writes no
/// headers of its own; hyper adds `content-length` and `date`, as it does for the gateway.
fn bare_server() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
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
                    let body = request.into_body().collect().await.map(http_body_util::Collected::to_bytes);
                    let status = match body {
                        Ok(body) if is_json(&body) => hyper::StatusCode::OK,
                        _ => hyper::StatusCode::BAD_REQUEST,
                    };
                    let mut response = hyper::Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = status;
                    Ok::<_, Infallible>(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .writev(false)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

/// Whether `body` is one JSON value (and nothing after it), parsed without building it.
fn is_json(body: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
}
