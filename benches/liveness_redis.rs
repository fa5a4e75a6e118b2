//! Shared liveness in Redis, measured before it is built: what candidate (a) of the several-instances liveness
//! design would cost (docs/benchmarks.md, "Liveness store, measured").
//!
//! Candidate (a): every heartbeat, on whichever instance, does `ZADD gateway:live <receipt ms> <agent>`
//! (pipelined per group of heartbeats, as the heartbeat group commit groups them), and the leader evicts with a
//! Lua script: `ZRANGEBYSCORE gateway:live -inf <cutoff> LIMIT 0 n`, `ZREM` them, return them.
//!
//! Run: `cargo bench -p gateway-benches --bench liveness-redis` (or `just bench liveness-redis`). It starts a
//! throwaway `redis-server` (gateway-testkit), or uses `LIVENESS_REDIS_URL` if set. Sizes:
//! `LIVENESS_REDIS_AGENTS` (100000), `LIVENESS_REDIS_HEARTBEATS` (200000 per group size).
//!
//! 1. Heartbeats: for groups of 1, 64 and 512, HEARTBEATS heartbeats over AGENTS agents (each agent's member
//!    written once, then updated) as pipelines of one `ZADD` per heartbeat, and, for comparison, as one variadic
//!    `ZADD` per group. Reports heartbeats/s from one client connection and Redis's own CPU per heartbeat (from
//!    `INFO cpu`), which is what bounds a shared Redis.
//! 2. Memory: `MEMORY USAGE gateway:live SAMPLES 0` with AGENTS members, and `used_memory` before and after.
//! 3. Eviction: AGENTS silent agents evicted by the script in batches of 1,000 and of 10,000, removing with
//!    `ZREM` (in slices of 1,000) or `ZREMRANGEBYRANK`: total time, the longest single call (Redis runs a script alone: nothing else is served meanwhile), Redis CPU.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // A benchmark reports on stdout and aborts on setup errors.

use std::time::{Duration, Instant};

use gateway_testkit::redis::RedisServer;
use gateway_testkit::{env_size, millis, rate};
use redis::{Connection, Script};

const KEY: &str = "gateway:live";

/// The leader's eviction: the silent ones, at most n per call, removed and returned in one atomic step. `ZREM`
/// in slices: Lua's `unpack` refuses more than about 8,000 values (LUAI_MAXCSTACK).
const EVICT_ZREM: &str = r"
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for first = 1, #silent, 1000 do
  redis.call('ZREM', KEYS[1], unpack(silent, first, math.min(first + 999, #silent)))
end
return silent
";

/// The same, removing by rank: the silent ones are the lowest scores, ranks 0 to #silent - 1.
const EVICT_BY_RANK: &str = r"
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #silent > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #silent - 1)
end
return silent
";

/// An id of a realistic length (agents name themselves like "researcher-alpha-9"): 24 bytes.
fn agent(n: usize) -> String {
    format!("researcher-alpha-{n:07}")
}

/// Redis's CPU time so far (user + system), from `INFO cpu`.
fn redis_cpu(connection: &mut Connection) -> Duration {
    let info: String = redis::cmd("INFO").arg("cpu").query(connection).unwrap();
    let field = |name: &str| -> f64 {
        info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok()).unwrap_or(0.0)
    };
    Duration::from_secs_f64(field("used_cpu_user") + field("used_cpu_sys"))
}

fn used_memory(connection: &mut Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(connection).unwrap();
    info.lines().find_map(|line| line.strip_prefix("used_memory:")?.trim().parse().ok()).unwrap_or(0)
}

fn per(duration: Duration, count: usize) -> String {
    format!("{:.2} µs", duration.as_secs_f64() * 1e6 / count as f64)
}

fn heartbeats(connection: &mut Connection, agents: usize, total: usize, group: usize, variadic: bool) {
    let _: () = redis::cmd("DEL").arg(KEY).query(connection).unwrap();
    let start_ms: u64 = 1_771_761_600_000;
    let cpu_before = redis_cpu(connection);
    let started = Instant::now();
    let mut sent = 0;
    while sent < total {
        let size = group.min(total - sent);
        let mut pipeline = redis::pipe();
        if variadic {
            let command = pipeline.cmd("ZADD").arg(KEY);
            for n in sent..sent + size {
                command.arg(start_ms + n as u64).arg(agent(n % agents));
            }
            command.ignore();
        } else {
            for n in sent..sent + size {
                pipeline.cmd("ZADD").arg(KEY).arg(start_ms + n as u64).arg(agent(n % agents)).ignore();
            }
        }
        let () = pipeline.query(connection).unwrap();
        sent += size;
    }
    let elapsed = started.elapsed();
    let cpu = redis_cpu(connection) - cpu_before;
    println!(
        "| {group} | {} | {:.0} | {} | {} |",
        if variadic { "one variadic ZADD per group" } else { "one ZADD per heartbeat, pipelined" },
        rate(total, elapsed),
        per(elapsed, total),
        per(cpu, total),
    );
}

fn fill(connection: &mut Connection, agents: usize) {
    let _: () = redis::cmd("DEL").arg(KEY).query(connection).unwrap();
    for chunk in (0..agents).collect::<Vec<_>>().chunks(512) {
        let command = &mut redis::cmd("ZADD");
        command.arg(KEY);
        for n in chunk {
            command.arg(1_771_761_600_000u64 + *n as u64).arg(agent(*n));
        }
        let () = command.query(connection).unwrap();
    }
}

fn evict(connection: &mut Connection, agents: usize, batch: usize, by_rank: bool) {
    fill(connection, agents);
    let script = Script::new(if by_rank { EVICT_BY_RANK } else { EVICT_ZREM });
    // Load it first, so the first call is not also the one that compiles it.
    let _: String = script.prepare_invoke().load(connection).unwrap();
    let cutoff = 1_771_761_600_000u64 + agents as u64;
    let cpu_before = redis_cpu(connection);
    let started = Instant::now();
    let (mut evicted, mut calls, mut longest) = (0, 0, Duration::ZERO);
    loop {
        let call = Instant::now();
        let silent: Vec<String> = script.key(KEY).arg(cutoff).arg(batch).invoke(connection).unwrap();
        longest = longest.max(call.elapsed());
        calls += 1;
        evicted += silent.len();
        if silent.len() < batch {
            break;
        }
    }
    let elapsed = started.elapsed();
    let cpu = redis_cpu(connection) - cpu_before;
    assert_eq!(evicted, agents);
    let left: usize = redis::cmd("ZCARD").arg(KEY).query(connection).unwrap();
    assert_eq!(left, 0);
    println!(
        "| {batch} | {} | {calls} | {} | {} | {} | {} |",
        if by_rank { "ZREMRANGEBYRANK" } else { "ZREM" },
        millis(elapsed),
        millis(longest),
        millis(cpu),
        per(cpu, agents)
    );
}

fn main() {
    let agents = env_size("LIVENESS_REDIS_AGENTS", 100_000);
    let total = env_size("LIVENESS_REDIS_HEARTBEATS", 200_000);
    let (_server, url) = match std::env::var("LIVENESS_REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let Some(server) = RedisServer::start_or_skip("liveness-redis") else { return };
            let url = server.url();
            (Some(server), url)
        }
    };
    let mut connection = redis::Client::open(url).unwrap().get_connection().unwrap();
    let version: String = redis::cmd("INFO").arg("server").query(&mut connection).unwrap();
    let version = version.lines().find_map(|line| line.strip_prefix("redis_version:")).unwrap_or("?").trim().to_owned();
    println!("Redis {version}, {agents} agents (ids of {} bytes), {total} heartbeats per row", agent(0).len());

    println!("\n| group | commands | heartbeats/s (one connection) | wall per heartbeat | Redis CPU per heartbeat |");
    println!("| --- | --- | --- | --- | --- |");
    for group in [1, 64, 512] {
        heartbeats(&mut connection, agents, total, group, false);
    }
    for group in [64, 512] {
        heartbeats(&mut connection, agents, total, group, true);
    }

    let before = used_memory(&mut connection);
    let _: () = redis::cmd("DEL").arg(KEY).query(&mut connection).unwrap();
    let empty = used_memory(&mut connection);
    fill(&mut connection, agents);
    let usage: u64 = redis::cmd("MEMORY").arg("USAGE").arg(KEY).arg("SAMPLES").arg(0).query(&mut connection).unwrap();
    let filled = used_memory(&mut connection);
    let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(KEY).query(&mut connection).unwrap();
    println!(
        "\nmemory of {agents} members: MEMORY USAGE {usage} bytes ({:.1} bytes per member, encoding {encoding}); \
         used_memory grew {} bytes (from {empty}; {before} before the key was dropped)",
        usage as f64 / agents as f64,
        filled.saturating_sub(empty),
    );

    println!("\n| batch (LIMIT n) | removal | script calls | total | longest call | Redis CPU | Redis CPU per agent |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for batch in [1_000, 10_000] {
        for by_rank in [false, true] {
            evict(&mut connection, agents, batch, by_rank);
        }
    }
}
