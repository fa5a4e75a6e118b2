//! Memory of event streams: the release gateway binary with `streams` open agent streams, all on one topic (the
//! worst case: every stream wants every event), half of them read by a client and half never read, while
//! `events` reminders of about `event_kib` KiB each fire on that topic. Reports the gateway's resident memory
//! (VmRSS, sampled every 50 ms, and VmHWM) with the streams open and idle, at its peak, and after; and what the
//! readers received. docs/benchmarks.md, "Event stream memory", has the numbers and the bound they are checked
//! against.
//!
//! Run: `cargo build --release -p gateway && cargo bench -p gateway-benches --bench streams [-- STREAMS EVENTS
//! EVENT_KIB]` (defaults 1024 8 1000). The gateway is `$GATEWAY_BIN`, else `gateway` in the release directory
//! this benchmark was built into: set it to compare two builds in one session. `STREAMS_BENCH_GATEWAY_ARGS` adds
//! flags to the gateway's (a payload limit large enough for the events, where there is one). Streams come from 127.0.0.1,
//! 127.0.0.2, … (32 from each, the per-address cap). A gateway above `MEMORY_CEILING` is killed and reported
//! as such, so that a build without the bound cannot exhaust a shared machine.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark: it reports on stdout and fails loudly")]

#[path = "http_load.rs"]
mod http_load;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const TOKEN: &str = "streams-benchmark-operator-token";
const AGENT: &str = "bench-agent";
const STREAMS_PER_ADDRESS: usize = 32;
/// Past this resident size the gateway is stopped: the run says so instead of swapping a shared machine.
const MEMORY_CEILING_KIB: u64 = 8 * 1024 * 1024;
/// How long the readers may take to receive every event.
const PATIENCE: Duration = Duration::from_secs(120);

fn main() {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|arg| arg.parse().ok()).collect();
    let streams = numbers.first().copied().unwrap_or(1024);
    let events = numbers.get(1).copied().unwrap_or(8);
    let event_kib = numbers.get(2).copied().unwrap_or(1000);
    let binary = http_load::gateway_binary();
    println!("gateway binary: {} ({})", binary.display(), http_load::age(&binary));
    println!("load: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
    println!(
        "streams: {streams} on agent:{AGENT}:scheduled ({} read, {} never read)",
        streams / 2,
        streams - streams / 2
    );
    println!("events: {events} reminders of {event_kib} KiB of payload");

    let dir = tempfile::tempdir().unwrap();
    let mut gateway = Command::new(&binary)
        .args(["--listen", "127.0.0.1:0", "--admin-token", TOKEN, "--log-format", "text"])
        // Reminder payloads as large as the benchmark's events (the default limit is 64 KiB; the most is 1 MiB).
        .arg("--reminder-payload-max-bytes")
        .arg((event_kib * 1024).clamp(65_536, 1_048_576).to_string())
        .arg("--database-url")
        .arg(format!("sqlite://{}", dir.path().join("gateway.db").display()))
        .args(std::env::var("STREAMS_BENCH_GATEWAY_ARGS").unwrap_or_default().split_whitespace())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(gateway.stdout.take().unwrap()).read_line(&mut banner).unwrap();
    let address: SocketAddr = banner.trim().rsplit("http://").next().unwrap().parse().unwrap();
    let pid = gateway.id();

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let received = Arc::new(Counters::default());
    let (stalled, readers) = runtime.block_on(open_streams(address, streams, &received));
    std::thread::sleep(Duration::from_secs(1));
    let idle = memory(pid);
    println!("idle, {} streams open: VmRSS {} KiB, VmHWM {} KiB", stalled.len() + readers, idle.rss, idle.hwm);

    let started = Instant::now();
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        while started.elapsed() < PATIENCE + Duration::from_secs(10) {
            let now = memory(pid).rss;
            peak = peak.max(now);
            if now > MEMORY_CEILING_KIB || now == 0 {
                return (peak, now != 0);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (peak, false)
    });
    let blob = "x".repeat(event_kib * 1024 - 512);
    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    for n in 0..events {
        let log = json!({
            "meta": {"trace_id": format!("bench-{n}"), "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": AGENT, "agent_type": "bench", "capability_version": "1"},
            "action": {"status": "pending", "tool_call": "schedule_reminder",
                       "tool_input": {"delay_ms": 1, "payload": {"blob": blob}}},
        });
        let response = agent
            .post(&format!("http://{address}/gateway/messages"))
            .header("content-type", "application/json")
            .send(serde_json::to_vec(&log).unwrap())
            .unwrap();
        assert_eq!(response.status().as_u16(), 202, "the reminder log was refused");
    }
    let expected = u64::try_from(events).unwrap() * u64::try_from(readers).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let accounted = || received.events.load(Ordering::Relaxed) + received.missed.load(Ordering::Relaxed);
    while accounted() < expected && Instant::now() < deadline && memory(pid).rss != 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let delivered_in = started.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let after = memory(pid);
    let _ = gateway.kill();
    let (peak, over_ceiling) = sampler.join().unwrap();
    let _ = gateway.wait();
    drop(stalled);

    println!(
        "readers received {} of {expected} events, and were told of {} skipped, in {:.1} s",
        received.events.load(Ordering::Relaxed),
        received.missed.load(Ordering::Relaxed),
        delivered_in.as_secs_f64()
    );
    if over_ceiling {
        println!("the gateway passed {} MiB and was stopped", MEMORY_CEILING_KIB / 1024);
    }
    println!("peak VmRSS {peak} KiB (+{} KiB over idle)", peak.saturating_sub(idle.rss));
    println!(
        "after: VmRSS {} KiB, VmHWM {} KiB (+{} KiB over idle)",
        after.rss,
        after.hwm,
        after.hwm.saturating_sub(idle.rss)
    );
    println!("one copy of every event: {} KiB", events * event_kib);
}

#[derive(Debug, Default)]
struct Counters {
    events: AtomicU64,
    /// Events the lagged notices said were skipped.
    missed: AtomicU64,
}

/// Opens `streams` streams, half of them read (counted into `received`), and returns the unread ones and the
/// number read.
async fn open_streams(address: SocketAddr, streams: usize, received: &Arc<Counters>) -> (Vec<TcpStream>, usize) {
    let mut stalled = Vec::new();
    let mut readers = 0;
    for n in 0..streams {
        let last_octet = u8::try_from(1 + n / STREAMS_PER_ADDRESS).unwrap();
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind((Ipv4Addr::new(127, 0, 0, last_octet), 0).into()).unwrap();
        let mut stream = socket.connect(address).await.unwrap();
        let request =
            format!("GET /gateway/events?topic=agent%3A{AGENT}%3Ascheduled HTTP/1.1\r\nhost: {address}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(stream.read_u8().await.unwrap());
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "stream {n}: {}", String::from_utf8_lossy(&head));
        if n % 2 == 0 {
            readers += 1;
            tokio::spawn(read_events(stream, Arc::clone(received)));
        } else {
            stalled.push(stream);
        }
    }
    (stalled, readers)
}

/// Reads a stream to its end, counting reminder events and the events lagged notices say were skipped. Each
/// read keeps the last bytes of the one before, so that a marker split by a read is found; a marker is counted
/// by the read in which it ends.
async fn read_events(mut stream: TcpStream, received: Arc<Counters>) {
    const REMINDER: &[u8] = b"\nevent: reminder\n";
    const LAGGED: &[u8] = b"event: lagged\ndata: {\"missed\":";
    const CARRIED: usize = 64;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut carried = 0;
    loop {
        let read = match stream.read(&mut buffer[carried..]).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let filled = carried + read;
        let window = &buffer[..filled];
        let ends_here = |end: usize| end > carried;
        let mut events = 0;
        let mut missed = 0;
        for start in 0..filled {
            let rest = &window[start..];
            if rest.starts_with(REMINDER) && ends_here(start + REMINDER.len()) {
                events += 1;
            } else if rest.starts_with(LAGGED)
                && let Some(close) = rest[LAGGED.len()..].iter().position(|byte| *byte == b'}')
                && ends_here(start + LAGGED.len() + close + 1)
            {
                let digits = std::str::from_utf8(&rest[LAGGED.len()..LAGGED.len() + close]).unwrap_or("0");
                missed += digits.parse::<u64>().unwrap_or(0);
            }
        }
        received.events.fetch_add(events, Ordering::Relaxed);
        received.missed.fetch_add(missed, Ordering::Relaxed);
        carried = CARRIED.min(filled);
        buffer.copy_within(filled - carried..filled, 0);
    }
}

struct Memory {
    rss: u64,
    hwm: u64,
}

/// VmRSS and VmHWM of `pid` in KiB; zeros once it is gone.
fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Memory { rss: field("VmRSS:"), hwm: field("VmHWM:") }
}
