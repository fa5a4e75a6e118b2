//! `CRON_BENCH_ACCOUNT` (PostgreSQL): what explains one throughput run's rate, read over exactly its measured
//! stretch — the CPU time of this process and of the server's process tree, the machine's CPU split (steal
//! included) and its disks' writes and cache flushes from `/proc`, the server's WAL, checkpoints, commits and
//! autovacuums, its statements' calls (group sizes, with `pg_stat_statements` loaded), and what its backends were
//! waiting on, sampled every `CRON_BENCH_ACCOUNT_SAMPLE_MS` (5) from `pg_stat_activity` on a connection of its own.
//! Server counters that backends report lazily (WAL, commits) are read 11 s after the stretch, once every idle
//! backend has flushed them (PostgreSQL 15 does at most every 10 s when idle), and the WAL position at its end.
//! For `track_wal_io_timing`'s flush times start the server with `TESTKIT_POSTGRES_OPTIONS="-c
//! track_wal_io_timing=on"`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::sql_types::Text;
use diesel::{Connection, QueryableByName, RunQueryDsl};

#[derive(QueryableByName)]
struct Line {
    #[diesel(sql_type = Text)]
    line: String,
}

pub struct Account {
    url: String,
    postmaster: Option<u32>,
    started: Instant,
    machine: Machine,
    own_cpu: Duration,
    server_cpu: Duration,
    lsn: String,
    server: Vec<(String, f64)>,
    stop: Arc<AtomicBool>,
    waits: Arc<Mutex<(u64, BTreeMap<String, u64>)>>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

/// `/proc/stat`'s CPU line (user+nice, system, idle, iowait, irq+softirq, steal, in ticks) and every whole disk's
/// writes, write ms, flushes and flush ms from `/proc/diskstats`.
#[derive(Clone, Copy, Default)]
struct Machine {
    cpu: [u64; 6],
    disk: [u64; 4],
    io_full_us: u64,
}

fn machine() -> Machine {
    let mut machine = Machine::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/stat")
        && let Some(line) = stat.lines().find(|line| line.starts_with("cpu "))
    {
        let field: Vec<u64> = line.split_whitespace().skip(1).map(|field| field.parse().unwrap_or(0)).collect();
        let at = |index: usize| field.get(index).copied().unwrap_or(0);
        machine.cpu = [at(0) + at(1), at(2), at(3), at(4), at(5) + at(6), at(7)];
    }
    for line in std::fs::read_to_string("/proc/diskstats").unwrap_or_default().lines() {
        let field: Vec<&str> = line.split_whitespace().collect();
        let Some(name) = field.get(2) else { continue };
        // Whole disks only (vda, sda, nvme0n1), not their partitions.
        let whole = (name.starts_with("vd") || name.starts_with("sd")) && !name.ends_with(|c: char| c.is_ascii_digit())
            || name.starts_with("nvme") && !name.contains('p');
        if !whole {
            continue;
        }
        let at = |index: usize| field.get(index).and_then(|field| field.parse::<u64>().ok()).unwrap_or(0);
        for (slot, index) in [7, 10, 18, 19].into_iter().enumerate() {
            machine.disk[slot] += at(index);
        }
    }
    if let Ok(pressure) = std::fs::read_to_string("/proc/pressure/io")
        && let Some(total) =
            pressure.lines().find(|line| line.starts_with("full")).and_then(|line| line.rsplit_once("total="))
    {
        machine.io_full_us = total.1.trim().parse().unwrap_or(0);
    }
    machine
}

fn query(connection: &mut diesel::PgConnection, sql: &str) -> Vec<String> {
    diesel::sql_query(sql)
        .load::<Line>(connection)
        .map(|lines| lines.into_iter().map(|line| line.line).collect())
        .unwrap_or_else(|error| vec![format!("({error})")])
}

const SERVER: &str = "SELECT 'wal_records=' || wal_records || ' wal_fpi=' || wal_fpi || ' wal_bytes=' || wal_bytes \
    || ' wal_write=' || wal_write || ' wal_sync=' || wal_sync || ' wal_write_ms=' || wal_write_time \
    || ' wal_sync_ms=' || wal_sync_time || ' wal_buffers_full=' || wal_buffers_full \
    || ' checkpoints=' || (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) \
    || ' buffers_checkpoint=' || (SELECT buffers_checkpoint FROM pg_stat_bgwriter) \
    || ' buffers_backend=' || (SELECT buffers_backend FROM pg_stat_bgwriter) \
    || ' commits=' || (SELECT sum(xact_commit) FROM pg_stat_database) \
    || ' autovacuums=' || (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables) \
    AS line FROM pg_stat_wal";

fn numbers(line: &str) -> Vec<(String, f64)> {
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.parse().unwrap_or(f64::NAN)))
        .collect()
}

impl Account {
    pub fn start(url: Option<&str>, postmaster: Option<u32>) -> Option<Self> {
        std::env::var_os("CRON_BENCH_ACCOUNT")?;
        let url = url?.to_owned();
        let mut connection = diesel::PgConnection::establish(&url).ok()?;
        // Only where the server loaded it (`-c shared_preload_libraries=pg_stat_statements`); otherwise its lines say so.
        let _ = query(&mut connection, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        let _ = query(&mut connection, "SELECT 'x' AS line FROM (SELECT pg_stat_statements_reset()) AS reset");
        let server = numbers(query(&mut connection, SERVER).first().map_or("", String::as_str));
        let lsn = query(&mut connection, "SELECT pg_current_wal_lsn()::text AS line").concat();
        let stop = Arc::new(AtomicBool::new(false));
        let waits = Arc::new(Mutex::new((0, BTreeMap::new())));
        let every = Duration::from_millis(gateway_testkit::env_size("CRON_BENCH_ACCOUNT_SAMPLE_MS", 5) as u64);
        let sampler = {
            let (stop, waits) = (Arc::clone(&stop), Arc::clone(&waits));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let lines = query(
                        &mut connection,
                        "SELECT backend_type || ' ' || coalesce(state, '-') || ' ' || coalesce(wait_event_type, 'CPU') \
                         || ':' || coalesce(wait_event, '') AS line FROM pg_stat_activity \
                         WHERE pid <> pg_backend_pid() AND (backend_type <> 'client backend' OR datname = current_database()) \
                         AND backend_type IN ('client backend', 'walwriter', 'checkpointer', 'autovacuum worker')",
                    );
                    let mut waits = waits.lock().unwrap();
                    waits.0 += 1;
                    for line in lines {
                        *waits.1.entry(line).or_default() += 1;
                    }
                    drop(waits);
                    std::thread::sleep(every);
                }
            })
        };
        Some(Self {
            url,
            postmaster,
            started: Instant::now(),
            machine: machine(),
            own_cpu: gateway_testkit::process_cpu_time().unwrap_or_default(),
            server_cpu: postmaster.and_then(crate::http_load::tree_cpu_time).unwrap_or_default(),
            lsn,
            server,
            stop,
            waits,
            sampler: Some(sampler),
        })
    }

    /// Ends the stretch and prints the account of its `jobs`.
    pub fn finish(mut self, jobs: usize) {
        let wall = self.started.elapsed();
        let own_cpu = gateway_testkit::process_cpu_time().unwrap_or_default().saturating_sub(self.own_cpu);
        let server_cpu = self
            .postmaster
            .and_then(crate::http_load::tree_cpu_time)
            .unwrap_or_default()
            .saturating_sub(self.server_cpu);
        let after = machine();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(sampler) = self.sampler.take() {
            let _ = sampler.join();
        }
        let mut connection = diesel::PgConnection::establish(&self.url).unwrap();
        let wal_bytes =
            query(&mut connection, &format!("SELECT (pg_current_wal_lsn() - '{}'::pg_lsn)::text AS line", self.lsn))
                .concat();
        let statements = query(
            &mut connection,
            "SELECT calls || ' calls, ' || rows || ' rows, ' || round(total_exec_time::numeric, 1) || ' ms: ' \
             || left(regexp_replace(query, '\\s+', ' ', 'g'), 60) AS line FROM pg_stat_statements \
             WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT 6",
        );
        std::thread::sleep(Duration::from_secs(11));
        let server = numbers(query(&mut connection, SERVER).first().map_or("", String::as_str));
        let per_job = |amount: f64| amount / jobs as f64;
        let (before, machine) = (self.machine, after);
        let cpu: Vec<u64> = (0..6).map(|index| machine.cpu[index] - before.cpu[index]).collect();
        let ticks = cpu.iter().sum::<u64>().max(1) as f64;
        let share = |index: usize| 100.0 * cpu[index] as f64 / ticks;
        let disk: Vec<u64> = (0..4).map(|index| machine.disk[index] - before.disk[index]).collect();
        println!("## account of the measured stretch ({wall:.2?}, {jobs} jobs)");
        println!(
            "cpu per job: this process {:.1} us, server {:.1} us | machine: user {:.0} % system {:.0} % idle {:.0} % \
             iowait {:.0} % irq {:.0} % steal {:.1} % | io full {:.0} ms",
            per_job(own_cpu.as_secs_f64() * 1e6),
            per_job(server_cpu.as_secs_f64() * 1e6),
            share(0),
            share(1),
            share(2),
            share(3),
            share(4),
            share(5),
            (machine.io_full_us - before.io_full_us) as f64 / 1e3
        );
        println!(
            "disk: {} writes ({:.3} ms each), {} flushes ({:.3} ms each), {:.0} flushes/s",
            disk[0],
            disk[1] as f64 / disk[0].max(1) as f64,
            disk[2],
            disk[3] as f64 / disk[2].max(1) as f64,
            disk[2] as f64 / wall.as_secs_f64()
        );
        let delta: BTreeMap<&str, f64> = server
            .iter()
            .zip(&self.server)
            .map(|((name, after), (_, before))| (name.as_str(), after - before))
            .collect();
        let at = |name: &str| delta.get(name).copied().unwrap_or(f64::NAN);
        println!(
            "server (+11 s): wal_bytes in stretch {wal_bytes}; {} | per commit: sync {:.3} ms, write {:.3} ms; \
             commits per job {:.3}, syncs per job {:.3}",
            delta.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join(" "),
            at("wal_sync_ms") / at("wal_sync").max(1.0),
            at("wal_write_ms") / at("wal_write").max(1.0),
            per_job(at("commits")),
            per_job(at("wal_sync")),
        );
        for statement in statements {
            println!("  {statement}");
        }
        let waits = self.waits.lock().unwrap();
        println!("waits ({} samples; share of samples in which a process was in that state):", waits.0);
        let mut sorted: Vec<_> = waits.1.iter().collect();
        sorted.sort_by(|a, b| b.1.cmp(a.1));
        for (state, count) in sorted.into_iter().take(14) {
            println!("  {:5.1} %  {state}", 100.0 * *count as f64 / waits.0.max(1) as f64);
        }
        println!();
    }
}
