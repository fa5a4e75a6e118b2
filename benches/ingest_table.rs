//! Issue 18's table (`CLUSTER_BENCH_TABLE=1`; `just bench-table` sets the method): heartbeats/s on SQLite,
//! on PostgreSQL and on PostgreSQL + Redis (cluster mode), one instance each, driven by wrk, each with its ratio to
//! SQLite, and beside each PostgreSQL figure its ceiling.
//!
//! The ceiling is the very statements the gateway sends for a heartbeat group, through the store's own pool
//! (`DieselStore::upsert_heartbeats`, or in cluster mode `SharedLiveness`: every heartbeat's receipt recorded, then
//! the rows and the receipts in one transaction), issued by one thread in a loop, one group after the other as the
//! gateway's one group writer does, pinned to the servers' CPUs in place of the gateway. Its groups are as large as
//! the load's connections (`CLUSTER_BENCH_CEILING_GROUP`, default the connections): the largest group the
//! gateway can form under that load, so the gateway cannot beat it by forming smaller ones. It runs on the database
//! the gateway has just used (its rows in place), after the gateway stopped.
//!
//! Two shares of the ceiling are printed. "of ceiling" is heartbeats/s against the loop's: with the gateway and
//! PostgreSQL on one CPU, the gateway's HTTP work (about ten times the loop's per heartbeat) takes CPU that the
//! loop leaves to PostgreSQL, so this share is bounded well under 1 whatever the statements are. "of ceiling, by
//! PostgreSQL CPU" is the loop's PostgreSQL CPU per heartbeat over the gateway's: what the gateway's statements,
//! groups and transactions cost the database against the least they could, i.e. the share of the database's
//! heartbeat capacity the gateway gets when PostgreSQL is the limit (its own cores, several instances).
//!
//! wrk (Debian package `wrk`) runs `benches/load/heartbeat.lua` with `HEARTBEAT_AGENTS` distinct agents
//! (`CLUSTER_BENCH_AGENTS`), one thread per generator CPU, on the generator's CPUs: a warm-up run
//! (`CLUSTER_BENCH_WARMUP_SECONDS`), then the measured one (`CLUSTER_BENCH_SECONDS`).

use std::process::Command;

use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore as _, LivenessMap as _};
use gateway_store::{DatabaseUrl, DieselStore, SharedLiveness};
use time::OffsetDateTime;

use super::*;

/// What one wrk run measured.
struct WrkRun {
    /// 2xx answers per second.
    rate: f64,
    /// Requests sent, answered or not.
    requests: u64,
    p50: String,
    p99: String,
    /// Non-2xx answers and socket errors, as wrk reports them.
    failures: String,
    /// CPU time of each watched process over the measured run.
    cpu: Vec<(String, Option<Duration>)>,
    elapsed: Duration,
}

impl WrkRun {
    fn cpu_of(&self, prefix: &str) -> Option<Duration> {
        self.cpu.iter().filter(|(name, _)| name.starts_with(prefix)).map(|(_, used)| *used).sum()
    }

    fn micros_per_heartbeat(&self, used: Option<Duration>) -> Option<f64> {
        let answered = self.rate * self.elapsed.as_secs_f64();
        used.filter(|_| answered > 0.0).map(|used| used.as_secs_f64() * 1e6 / answered)
    }

    fn per_heartbeat(&self, used: Option<Duration>) -> String {
        self.micros_per_heartbeat(used).map_or("-".to_owned(), |micros| format!("{micros:.1} µs"))
    }
}

/// What the ceiling loop measured.
struct Ceiling {
    group: usize,
    rate: f64,
    /// CPU per heartbeat of the loop's thread and of PostgreSQL.
    loop_cpu: Duration,
    postgres_cpu: Option<Duration>,
    heartbeats: u64,
}

impl Ceiling {
    fn micros_per_heartbeat(&self, used: Option<Duration>) -> Option<f64> {
        used.filter(|_| self.heartbeats > 0).map(|used| used.as_secs_f64() * 1e6 / self.heartbeats as f64)
    }

    fn per_heartbeat(&self, used: Option<Duration>) -> String {
        self.micros_per_heartbeat(used).map_or("-".to_owned(), |micros| format!("{micros:.1} µs"))
    }
}

struct Row {
    setup: &'static str,
    run: WrkRun,
    /// Transactions committed in the database per 1,000 heartbeats, over the whole setup.
    commits_per_thousand: Option<f64>,
    ceiling: Option<Ceiling>,
}

impl Bench {
    pub(super) fn table(&self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/load/heartbeat.lua");
        if Command::new("wrk").arg("--version").output().is_err() {
            println!("cluster-ingest table: skipped (wrk not found: Debian package `wrk`)");
            return;
        }
        let group =
            gateway_testkit::env_size(&format!("{ENV_PREFIX}_CEILING_GROUP"), self.settings.connections as usize);
        println!("wrk: {script}, {} connections, {} agents", self.settings.connections, self.settings.agents);
        println!("ceiling: groups of {group} ({ENV_PREFIX}_CEILING_GROUP), one writer, on the servers' CPUs");
        let setups = [
            Setup { name: "SQLite (one instance)", database: Database::Sqlite, redis: false, instances: 1 },
            Setup { name: "PostgreSQL, one instance", database: Database::Postgres, redis: false, instances: 1 },
            Setup {
                name: "PostgreSQL + Redis, one instance (cluster mode)",
                database: Database::Postgres,
                redis: true,
                instances: 1,
            },
        ];
        let mut rows = Vec::new();
        for setup in &setups {
            let started = self.start(setup);
            let address = started.gateways[0].1.address;
            self.wrk(script, address, self.settings.warmup, &[]);
            let window = Window::open(self.postmaster);
            let run = self.wrk(script, address, self.settings.duration, &started.watched);
            println!("  {}", window.close().describe());
            println!(
                "{}: {:.0} heartbeats/s, p50 {}, p99 {}, failures: {}; gateway CPU {} per heartbeat, PostgreSQL + \
                 Redis {} (Redis alone {})",
                started.title,
                run.rate,
                run.p50,
                run.p99,
                run.failures,
                run.per_heartbeat(run.cpu_of("gateway")),
                run.per_heartbeat(sum(run.cpu_of("postgres"), run.cpu_of("redis"))),
                run.per_heartbeat(run.cpu_of("redis")),
            );
            println!("machine after: {}", machine_state());
            let Started { gateways, postgres_database, commits_before, redis, .. } = started;
            let (_, gateway, log) = gateways.into_iter().next().unwrap();
            // Stopped before the statistics are read (a backend reports its counts when its connection ends) and
            // before the ceiling runs on its database.
            drop(gateway);
            print_log_summary("gw-a", &log);
            let (mut commits_per_thousand, mut ceiling) = (None, None);
            if let (Some(database), Some(before)) = (&postgres_database, commits_before) {
                std::thread::sleep(Duration::from_millis(1500));
                let commits = self.commits(database.name()) - before;
                // Warm-up and measured run: every request wrk sent was answered (failures are printed).
                let sent = run.requests + (run.rate * self.settings.warmup.as_secs_f64()) as u64;
                commits_per_thousand = Some(1000.0 * commits as f64 / sent.max(1) as f64);
                println!("  {}", hot_updates(database.url()));
                let measured = self.ceiling(database.url(), setup.redis, group);
                println!(
                    "  ceiling, groups of {}: {:.0} heartbeats/s; loop CPU {} and PostgreSQL {} per heartbeat",
                    measured.group,
                    measured.rate,
                    measured.per_heartbeat(Some(measured.loop_cpu)),
                    measured.per_heartbeat(measured.postgres_cpu),
                );
                ceiling = Some(measured);
            }
            drop(redis);
            rows.push(Row { setup: setup.name, run, commits_per_thousand, ceiling });
        }

        let sqlite = rows[0].run.rate;
        println!();
        println!(
            "| setup | heartbeats/s | of SQLite | p50 / p99 | ceiling (same statements, groups of {group}) | of \
             ceiling | gateway CPU per heartbeat | PostgreSQL + Redis CPU per heartbeat | ceiling's PostgreSQL CPU per \
             heartbeat | of ceiling, by PostgreSQL CPU | transactions per 1,000 heartbeats |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for row in &rows {
            let run = &row.run;
            let (ceiling, of_ceiling, ceiling_postgres) = match &row.ceiling {
                Some(ceiling) => (
                    format!("{:.0}", ceiling.rate),
                    format!("{:.2}", run.rate / ceiling.rate),
                    ceiling.per_heartbeat(ceiling.postgres_cpu),
                ),
                None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
            };
            // The heartbeats/s ratio above is bounded by the gateway's own HTTP work, which shares CPU 0 with
            // PostgreSQL while the loop's does not. This one asks what the gateway's statements and groups cost
            // PostgreSQL against the loop's: the rate PostgreSQL would carry for the gateway, were it the limit,
            // as a share of the rate it carries for the loop.
            let of_ceiling_by_postgres = row
                .ceiling
                .as_ref()
                .and_then(|ceiling| {
                    let loop_cost = ceiling.micros_per_heartbeat(ceiling.postgres_cpu)?;
                    let gateway_cost = run.micros_per_heartbeat(run.cpu_of("postgres"))?;
                    (gateway_cost > 0.0).then(|| format!("{:.2}", loop_cost / gateway_cost))
                })
                .unwrap_or_else(|| "-".to_owned());
            println!(
                "| {} | {:.0} | {:.2} | {} / {} | {ceiling} | {of_ceiling} | {} | {} | {ceiling_postgres} | \
                 {of_ceiling_by_postgres} | {} |",
                row.setup,
                run.rate,
                run.rate / sqlite,
                run.p50,
                run.p99,
                run.per_heartbeat(run.cpu_of("gateway")),
                if row.ceiling.is_some() {
                    run.per_heartbeat(sum(run.cpu_of("postgres"), run.cpu_of("redis")))
                } else {
                    "-".to_owned()
                },
                row.commits_per_thousand.map_or("-".to_owned(), |commits| format!("{commits:.1}")),
            );
        }
    }

    /// One wrk run against `address` for `duration`, reading the CPU time of `watched` around it.
    fn wrk(&self, script: &str, address: std::net::SocketAddr, duration: Duration, watched: &[Watched]) -> WrkRun {
        let before: Vec<_> = watched.iter().map(|process| http_load::tree_cpu_time(process.pid)).collect();
        // This process runs on the generator's CPUs, and wrk inherits them.
        let report = http_load::wrk(&self.settings, script, address, duration);
        let cpu = watched
            .iter()
            .zip(before)
            .map(|(process, before)| {
                let used = http_load::tree_cpu_time(process.pid)
                    .zip(before)
                    .map(|(after, before)| after.saturating_sub(before));
                (process.name.clone(), used)
            })
            .collect();
        let seconds = duration.as_secs().max(1) as f64;
        WrkRun {
            rate: report.requests.saturating_sub(report.non_2xx) as f64 / seconds,
            requests: report.requests,
            p50: report.p50,
            p99: report.p99,
            failures: format!(
                "{} non-2xx{}",
                report.non_2xx,
                report.socket_errors.map_or(String::new(), |errors| format!("; {errors}"))
            ),
            cpu,
            elapsed: duration,
        }
    }

    /// The ceiling loop on `url` (see the module's comment), warmed up and then measured like a wrk run.
    fn ceiling(&self, url: &str, cluster: bool, group: usize) -> Ceiling {
        let store = DieselStore::open(&DatabaseUrl::parse(url).unwrap()).unwrap();
        let shared = cluster.then(|| SharedLiveness::new(store.clone(), usize::MAX));
        let agents: Vec<AgentId> =
            (0..self.settings.agents).map(|n| AgentId::new(format!("agent-{n}")).unwrap()).collect();
        let cluster_id = ClusterId::new("bench").unwrap();
        let server_cpus = match &self.pinning {
            Pinning::Pinned { server_cpus, .. } => Some(server_cpus.clone()),
            Pinning::Unpinned(_) => None,
        };
        let (warmup, duration, postmaster) = (self.settings.warmup, self.settings.duration, self.postmaster);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    if let Some(cpus) = &server_cpus {
                        pin_this_thread(cpus);
                    }
                    let mut next = 0;
                    let mut write_group = || {
                        let now = OffsetDateTime::now_utc();
                        let records: Vec<HeartbeatRecord> = (0..group)
                            .map(|offset| HeartbeatRecord {
                                agent_id: agents[(next + offset) % agents.len()].clone(),
                                cluster_id: cluster_id.clone(),
                                last_seen_at: now,
                            })
                            .collect();
                        next = (next + group) % agents.len();
                        match &shared {
                            Some(shared) => {
                                for record in &records {
                                    shared.record(&record.agent_id, &record.cluster_id, now).unwrap();
                                }
                                shared.upsert_heartbeats(&records).unwrap();
                            }
                            None => store.upsert_heartbeats(&records).unwrap(),
                        }
                    };
                    let warm_until = Instant::now() + warmup;
                    while Instant::now() < warm_until {
                        write_group();
                    }
                    let (postgres_before, loop_before) = (http_load::tree_cpu_time(postmaster), thread_cpu_time());
                    let started = Instant::now();
                    let mut groups = 0_u64;
                    while started.elapsed() < duration {
                        write_group();
                        groups += 1;
                    }
                    let elapsed = started.elapsed();
                    let heartbeats = groups * group as u64;
                    Ceiling {
                        group,
                        rate: heartbeats as f64 / elapsed.as_secs_f64(),
                        loop_cpu: thread_cpu_time().saturating_sub(loop_before),
                        postgres_cpu: http_load::tree_cpu_time(postmaster)
                            .zip(postgres_before)
                            .map(|(after, before)| after.saturating_sub(before)),
                        heartbeats,
                    }
                })
                .join()
                .unwrap()
        })
    }
}

fn sum(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or_default() + b.unwrap_or_default()),
    }
}

/// Moves the calling thread (alone) onto `cpus`.
fn pin_this_thread(cpus: &str) {
    // `/proc/thread-self` links to `<pid>/task/<tid>`.
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    let tid = link.file_name().unwrap().to_string_lossy().into_owned();
    let status = Command::new("taskset").args(["-p", "-c", cpus, &tid]).output().unwrap().status;
    assert!(status.success(), "taskset -p -c {cpus} {tid} failed");
}

/// The calling thread's CPU time (user + system).
fn thread_cpu_time() -> Duration {
    let fields = http_load::stat_fields("thread-self").unwrap_or_default();
    Duration::from_millis(fields.get(11..=12).map_or(0, |used| used.iter().sum::<u64>()) * 10)
}

/// How many of the updates the gateway made to the two heartbeat tables were HOT (no index touched): what decides
/// PostgreSQL's cost per heartbeat in cluster mode, where every receipt rewrites its agent's row (in
/// `gateway_live_agents` before migration 2026-12-21-000017, in `gateway_heartbeats` since: either build is measured).
fn hot_updates(url: &str) -> String {
    #[derive(QueryableByName)]
    struct Updates {
        #[diesel(sql_type = diesel::sql_types::Text)]
        relname: String,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        updates: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        hot: i64,
    }
    let mut connection = PgConnection::establish(url).unwrap();
    diesel::sql_query("SELECT pg_stat_clear_snapshot()").execute(&mut connection).unwrap();
    let tables: Vec<Updates> = diesel::sql_query(
        "SELECT relname::text AS relname, n_tup_upd AS updates, n_tup_hot_upd AS hot FROM pg_stat_user_tables \
         WHERE relname IN ('gateway_heartbeats', 'gateway_live_agents') ORDER BY relname",
    )
    .load(&mut connection)
    .unwrap();
    let described: Vec<String> = tables
        .iter()
        .map(|table| {
            let share = 100.0 * table.hot as f64 / table.updates.max(1) as f64;
            format!("{} {} updates, {share:.0} % HOT", table.relname, table.updates)
        })
        .collect();
    format!("updates under the gateway: {}", described.join("; "))
}
