//! The cron scheduler on the real SQLite adapter, and tokio-cron-scheduler on the same workload in the same run.
//!
//! Run: `cargo bench -p gateway-benches --bench cron` (release profile, or `just bench cron`);
//! `cargo bench -p gateway-benches --bench cron -- lateness` runs one part.
//! Environment: `CRON_BENCH_JOBS` (100,000), `CRON_BENCH_ROWS` (1,000,000), `CRON_BENCH_PRODUCERS` (32
//! concurrent callers), `CRON_BENCH_AGENTS` (one per caller: the agents the jobs belong to), `CRON_BENCH_PENDING`
//! (0: one-time jobs due in a year written before part 1, spread over the agents), `CRON_BENCH_SPREAD_S` (10), `CRON_BENCH_TCS_CHANNEL` (200, tokio-cron-scheduler's
//! default channel size), `CRON_BENCH_NO_CHECKPOINTER` (set: no background WAL checkpoints, SQLite's default),
//! `CRON_BENCH_DUMP` (a file: one line per fire), `CRON_BENCH_WITHOUT_RUNS_INDEX` (set: the mailbox's index by job,
//! which the runs of a job are read through, is dropped, to measure what it costs per fire), `BENCH_DATABASE=postgres` (parts 1 and 2 on a throwaway
//! PostgreSQL server instead of SQLite; part 3 is SQLite's start-up claim release, so it is skipped). On PostgreSQL,
//! `CRON_BENCH_PG_STATS` (set: part 1 prints the server's account of the run with `psql` — per statement when the
//! server has `pg_stat_statements`, which `TESTKIT_POSTGRES_OPTIONS="-c shared_preload_libraries=pg_stat_statements"`
//! loads, WAL, rows and HOT updates per table) and `CRON_BENCH_PG_AFTER_SQL` (SQL run after the migrations, to
//! measure a schema change before writing its migration), and `CRON_BENCH_ACCOUNT` (set: part 1 prints what explains its rate —
//! CPU per job, disk flushes, WAL flushes and their times, checkpoints, commits, group sizes, wait events: see
//! cron_account.rs).
//! Results: docs/benchmarks.md.
//!
//! 1. Throughput: one-time jobs scheduled (`schedule_once`, one row each), fired and deleted, per second.
//! 2. Lateness with 100,000 pending jobs due over 10 s: publish time minus the job's instant, p50/p99; then
//!    tokio-cron-scheduler with one-shot jobs at the same offsets.
//! 3. Start-up recovery with 1,000,000 rows (1,000 overdue): from opening the database to every overdue row
//!    fired.
//! 4. Ceiling (`-- ceiling`, also run by default; PostgreSQL only): part 1 traced, then the scheduler's own store calls with the
//!    group sizes it formed, back to back, and the gateway's jobs/s as a share of that (see [`ceiling`]).
//!    `CRON_BENCH_CEILING_INSERT_GROUP`, `CRON_BENCH_CEILING_FIRE_BATCH` fix the group sizes instead.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // A benchmark reports on stdout and aborts on setup errors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use database::{Backend, BenchDatabase};
use diesel::{Connection, RunQueryDsl};
use gateway_core::{
    AgentId, BackgroundLoop, CronJobStore, Event, EventPayload, EventPublisher, PublishError, SingleProcessLeadership,
    StoreError as StoreErr, SystemClock, Topic,
};
use gateway_cron::{CronConfig, CronPorts, CronScheduler};
use gateway_store::{DatabaseUrl, DieselStore};
use gateway_testkit::{Sample, env_size, rate};
use serde_json::json;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

#[path = "cron_account.rs"]
mod cron_account;
#[path = "database.rs"]
mod database;
#[path = "http_load.rs"]
mod http_load;

/// The scheduler runs in this process, so it gets the allocator the gateway binary ships with (bin/gateway's
/// main.rs), as in webhooks.rs: with glibc's, malloc and free were 12 % of this benchmark's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Records how late each reminder is published, against its `scheduled_for`.
#[derive(Debug, Default)]
struct LatenessRecorder {
    /// `(scheduled_for, lateness)` in microseconds (since the epoch, and after the instant).
    micros: Mutex<Vec<(i128, i64)>>,
    fired: AtomicUsize,
}

impl EventPublisher for LatenessRecorder {
    fn publish(&self, _topic: &Topic, event: &Event) -> Result<(), PublishError> {
        if let EventPayload::Reminder { scheduled_for, .. } = &event.payload {
            let late = OffsetDateTime::now_utc() - *scheduled_for;
            let micros = i64::try_from(late.whole_microseconds()).unwrap_or(i64::MAX);
            self.micros.lock().unwrap().push((scheduled_for.unix_timestamp_nanos() / 1_000, micros));
            self.fired.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

impl LatenessRecorder {
    fn fired(&self) -> usize {
        self.fired.load(Ordering::SeqCst)
    }

    fn lateness(&self) -> Sample<i64> {
        self.micros.lock().unwrap().iter().map(|(_, late)| *late).collect()
    }

    /// `CRON_BENCH_DUMP=<file>`: one line per fire, `<scheduled_for µs> <lateness µs>`, to see when the tail
    /// happens (a stall of the loop shows as a run of fires whose lateness falls by 1 ms per ms).
    fn dump(&self) {
        if let Some(path) = std::env::var_os("CRON_BENCH_DUMP") {
            let mut fires = self.micros.lock().unwrap().clone();
            fires.sort_unstable();
            let text: String = fires.iter().map(|(at, late)| format!("{at} {late}\n")).collect();
            std::fs::write(path, text).unwrap();
        }
    }
}

/// Lateness in signed microseconds, `min / p50 / p99 / max` as milliseconds, for the report.
fn summary(lateness: &Sample<i64>) -> String {
    let ms = |micros: Option<i64>| micros.map_or("-".to_owned(), |micros| format!("{:.2} ms", micros as f64 / 1e3));
    format!(
        "min {}  p50 {}  p99 {}  max {}  ({} fires)",
        ms(lateness.min()),
        ms(lateness.percentile(50.0)),
        ms(lateness.percentile(99.0)),
        ms(lateness.max()),
        lateness.len()
    )
}

/// `CRON_BENCH_TRACE=<file>`: the store calls of the scheduler, timed (`call start_ms duration_ms rows`), and the
/// progress every 10 ms (`progress at_ms scheduled fired`), to see where a run's time goes.
#[derive(Debug)]
struct TracedStore {
    inner: DieselStore,
    started: Instant,
    calls: Mutex<Vec<(&'static str, f64, f64, usize)>>,
}

impl TracedStore {
    fn timed<T>(&self, call: &'static str, rows: usize, work: impl FnOnce() -> T) -> T {
        let begun = Instant::now();
        let outcome = work();
        let at = (begun - self.started).as_secs_f64() * 1e3;
        self.calls.lock().unwrap().push((call, at, begun.elapsed().as_secs_f64() * 1e3, rows));
        outcome
    }
}

impl CronJobStore for TracedStore {
    fn single_writer(&self) -> bool {
        self.inner.single_writer()
    }
    fn insert_cron_job(&self, job: &gateway_core::NewCronJob) -> Result<gateway_core::CronJob, StoreErr> {
        self.inner.insert_cron_job(job)
    }
    fn insert_cron_jobs(
        &self,
        jobs: &[gateway_core::NewCronJob],
    ) -> Result<Vec<gateway_core::CronJobInsert>, StoreErr> {
        self.timed("insert", jobs.len(), || self.inner.insert_cron_jobs(jobs))
    }
    fn cron_job(&self, id: i64) -> Result<Option<gateway_core::CronJob>, StoreErr> {
        self.inner.cron_job(id)
    }
    fn cron_job_by_idempotency_key(
        &self,
        key: &gateway_core::IdempotencyKey,
    ) -> Result<Option<gateway_core::CronJob>, StoreErr> {
        self.inner.cron_job_by_idempotency_key(key)
    }
    fn list_cron_jobs(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<gateway_core::CronJob>, StoreErr> {
        self.inner.list_cron_jobs(after_id, limit)
    }
    fn delete_cron_job(&self, id: i64) -> Result<bool, StoreErr> {
        self.inner.delete_cron_job(id)
    }
    fn set_cron_job_paused(&self, id: i64, paused: bool) -> Result<Option<gateway_core::CronJob>, StoreErr> {
        self.inner.set_cron_job_paused(id, paused)
    }
    fn count_cron_jobs(&self) -> Result<u64, StoreErr> {
        self.inner.count_cron_jobs()
    }
    fn count_one_time_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreErr> {
        self.inner.count_one_time_jobs(agent_id)
    }
    fn one_time_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<gateway_core::CronJob>, StoreErr> {
        self.inner.one_time_jobs_of(agent_id, limit)
    }
    fn delete_one_time_job(&self, id: i64, agent_id: &AgentId, now: OffsetDateTime) -> Result<bool, StoreErr> {
        self.inner.delete_one_time_job(id, agent_id, now)
    }
    fn count_recurring_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreErr> {
        self.inner.count_recurring_jobs(agent_id)
    }
    fn recurring_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<gateway_core::CronJob>, StoreErr> {
        self.inner.recurring_jobs_of(agent_id, limit)
    }
    fn delete_recurring_job(&self, id: i64, agent_id: &AgentId) -> Result<bool, StoreErr> {
        self.inner.delete_recurring_job(id, agent_id)
    }
    fn pending_fires(&self, before: OffsetDateTime, limit: usize) -> Result<Vec<gateway_core::PendingFire>, StoreErr> {
        let mut count = 0;
        self.timed("pending", limit, || {
            let rows = self.inner.pending_fires(before, limit);
            count = rows.as_ref().map_or(0, Vec::len);
            rows
        })
    }
    fn claim_fires(
        &self,
        job_ids: &[i64],
        lease: &gateway_core::ClaimLease,
    ) -> Result<Vec<gateway_core::CronJob>, StoreErr> {
        self.timed("claim", job_ids.len(), || self.inner.claim_fires(job_ids, lease))
    }
    fn complete_fires(
        &self,
        owner: &str,
        token: gateway_core::FencingToken,
        completions: &[gateway_core::FireCompletion],
        fired: &[gateway_core::FiredReminder],
    ) -> Result<usize, StoreErr> {
        self.timed("complete", completions.len(), || self.inner.complete_fires(owner, token, completions, fired))
    }
    fn complete_and_claim(
        &self,
        owner: &str,
        completions: &[gateway_core::FireCompletion],
        fired: &[gateway_core::FiredReminder],
        job_ids: &[i64],
        lease: &gateway_core::ClaimLease,
    ) -> Result<(usize, Vec<gateway_core::CronJob>), StoreErr> {
        let name = if completions.is_empty() {
            "claim+"
        } else if job_ids.is_empty() {
            "complete+"
        } else {
            "both"
        };
        self.timed(name, completions.len().max(job_ids.len()), || {
            self.inner.complete_and_claim(owner, completions, fired, job_ids, lease)
        })
    }
    fn record_skipped_runs(
        &self,
        token: gateway_core::FencingToken,
        skipped: &[gateway_core::SkippedRun],
    ) -> Result<usize, StoreErr> {
        self.timed("skips", skipped.len(), || self.inner.record_skipped_runs(token, skipped))
    }
    fn cron_job_runs(&self, job_id: i64, limit: usize) -> Result<Vec<gateway_core::CronJobRun>, StoreErr> {
        self.inner.cron_job_runs(job_id, limit)
    }
}

fn open(dir: &tempfile::TempDir) -> DieselStore {
    DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("bench.db"))).unwrap()
}

fn open_fresh(backend: &Backend, scenario: &str) -> (BenchDatabase, DieselStore) {
    let database = backend.fresh(scenario);
    let store = DieselStore::open(&database.url).unwrap();
    if std::env::var_os("CRON_BENCH_WITHOUT_RUNS_INDEX").is_some() {
        // What a fire costs without the index that finds a job's runs (migration `cron_misfire_and_runs`): the
        // same binary and the same run, the index's b-tree write per fire the only difference.
        let drop = diesel::sql_query("DROP INDEX agent_mailbox_job_seq");
        match (&database.sqlite_path, &database.postgres_url) {
            (Some(path), _) => drop.execute(&mut diesel::SqliteConnection::establish(path.to_str().unwrap()).unwrap()),
            (None, Some(url)) => drop.execute(&mut diesel::PgConnection::establish(url).unwrap()),
            (None, None) => unreachable!("a bench database is SQLite or PostgreSQL"),
        }
        .unwrap();
        println!("(without the index agent_mailbox_job_seq)");
    }
    if let (Ok(sql), Some(url)) = (std::env::var("CRON_BENCH_PG_AFTER_SQL"), &database.postgres_url) {
        // An experiment's schema change, made after the migrations (PostgreSQL only).
        diesel::connection::SimpleConnection::batch_execute(&mut diesel::PgConnection::establish(url).unwrap(), &sql)
            .unwrap();
        println!("(after the migrations: {sql})");
    }
    (database, store)
}

fn start(store: &DieselStore, recorder: &Arc<LatenessRecorder>, shutdown: &CancellationToken) -> CronScheduler {
    start_with(store, Arc::new(store.clone()), recorder, shutdown)
}

fn start_with(
    store: &DieselStore,
    jobs: Arc<dyn CronJobStore>,
    recorder: &Arc<LatenessRecorder>,
    shutdown: &CancellationToken,
) -> CronScheduler {
    let ports = CronPorts {
        store: jobs,
        storage: Arc::new(store.clone()),
        publisher: Arc::clone(recorder) as Arc<dyn EventPublisher>,
        clock: Arc::new(SystemClock),
        leadership: Arc::new(SingleProcessLeadership),
    };
    let scheduler = CronScheduler::new(ports, CronConfig::default());
    let running = scheduler.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move { running.run(stop).await });
    // The gateway checkpoints the WAL in the background; so does the benchmark, unless CRON_BENCH_NO_CHECKPOINTER
    // is set (then commits checkpoint by themselves, SQLite's default). The handle lives as long as the process.
    if std::env::var_os("CRON_BENCH_NO_CHECKPOINTER").is_none() {
        let checkpointer = store.start_wal_checkpointer(gateway_store::CHECKPOINT_INTERVAL).expect("checkpoint thread");
        std::mem::forget(checkpointer);
    }
    scheduler
}

async fn wait_until(what: &str, limit: Duration, condition: impl FnMut() -> bool) {
    assert!(wait_at_most(limit, condition).await, "gave up waiting for {what}");
}

/// `false` when `condition` did not hold within `limit`.
async fn wait_at_most(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// Concurrent `schedule_once` callers, like requests in flight (`CRON_BENCH_PRODUCERS`, default 32).
fn producers() -> usize {
    env_size("CRON_BENCH_PRODUCERS", 32).max(1)
}

fn remaining_rows(store: &DieselStore) -> usize {
    store.pending_fires(OffsetDateTime::now_utc() + time::Duration::days(36_600), 1).unwrap().len()
}

/// How many agents the jobs belong to (`CRON_BENCH_AGENTS`, default one per caller): job `i` is agent
/// `i % agents`'s. With few agents, a group's rows share the leaves of the agent index; a deployment's thousands of
/// agents each write a leaf of their own, which a run with more agents shows.
fn agents() -> usize {
    env_size("CRON_BENCH_AGENTS", producers()).max(1)
}

fn agent(n: usize) -> AgentId {
    AgentId::new(format!("agent-{n}")).unwrap()
}

/// The one-time job numbered `index` as the bench writes it straight to the store: `{"n": index}`, no key.
fn one_time_job(agent_id: AgentId, next_fire_at: OffsetDateTime, index: usize) -> gateway_core::NewCronJob {
    gateway_core::NewCronJob {
        agent_id,
        schedule: None,
        next_fire_at,
        payload: json!({"n": index}).as_object().cloned().unwrap_or_default(),
        is_one_time: true,
        idempotency_key: None,
        timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
        misfire_policy: gateway_core::MisfirePolicy::FireOnce,
        max_lateness_ms: None,
    }
}

/// `count` one-time jobs due in a year, spread over the agents round the clock, written before part 1 runs
/// (`CRON_BENCH_PENDING`, default none): the pending rows a deployment carries, so that the agent index is as large
/// as theirs and each new row's entry lands among an agent's others rather than in a nearly empty index.
fn write_backlog(store: &DieselStore, count: usize) {
    let due = OffsetDateTime::now_utc() + time::Duration::days(365);
    let agents = agents();
    for first in (0..count).step_by(1_000) {
        let group: Vec<gateway_core::NewCronJob> = (first..(first + 1_000).min(count))
            .map(|index| {
                let at = due + time::Duration::seconds((index * 7_919 % 86_400) as i64);
                one_time_job(agent(index % agents), at, index)
            })
            .collect();
        store.insert_cron_jobs(&group).unwrap();
    }
    // The backlog's pages go to the database file now rather than through the checkpointer during the run.
    store.checkpoint_wal().unwrap();
}

/// Rows due before tomorrow: part 1's jobs, not the backlog.
fn rows_due_within_a_day(store: &DieselStore) -> usize {
    store.pending_fires(OffsetDateTime::now_utc() + time::Duration::days(1), 1).unwrap().len()
}

/// Jobs scheduled so far by [`produce`], for the trace.
static SCHEDULED: AtomicUsize = AtomicUsize::new(0);

/// Schedules `count` jobs from `producers` concurrent tasks, each job due `delay_of(i)` ms after its call.
async fn produce(
    scheduler: &CronScheduler,
    count: usize,
    producers: usize,
    delay_of: impl Fn(usize) -> i64 + Send + Sync + Clone + 'static,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for producer in 0..producers {
        let scheduler = scheduler.clone();
        let delay_of = delay_of.clone();
        tasks.spawn(async move {
            let agents = agents();
            for index in (producer..count).step_by(producers) {
                let payload = json!({"n": index}).as_object().cloned().unwrap_or_default();
                scheduler.schedule_once(agent(index % agents), delay_of(index), payload).await.unwrap();
                SCHEDULED.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// The mean sizes of the gateway's store writes in a traced run: rows per insert group, and fires per firing-loop
/// transaction (the larger of its completions and its claims, as the trace counts them).
#[derive(Debug, Clone, Copy)]
struct GroupSizes {
    insert: f64,
    fires: f64,
}

impl TracedStore {
    fn group_sizes(&self) -> GroupSizes {
        let calls = self.calls.lock().unwrap();
        let mean = |wanted: &dyn Fn(&str) -> bool| {
            let (count, rows) = calls
                .iter()
                .filter(|(call, ..)| wanted(call))
                .fold((0_usize, 0_usize), |(count, rows), (.., call_rows)| (count + 1, rows + call_rows));
            if count == 0 { 1.0 } else { rows as f64 / count as f64 }
        };
        GroupSizes {
            insert: mean(&|call| call == "insert"),
            fires: mean(&|call| matches!(call, "both" | "claim+" | "complete+")),
        }
    }
}

/// Part 1. Returns the jobs/s, and the gateway's group sizes when `measure_groups` (the store calls are then
/// traced, which the `ceiling` part needs to issue groups of the same sizes).
async fn throughput(backend: &Backend, jobs: usize, measure_groups: bool) -> (f64, Option<GroupSizes>) {
    let (database, store) = open_fresh(backend, "cron_throughput");
    let backlog = env_size("CRON_BENCH_PENDING", 0);
    if backlog > 0 {
        tokio::task::block_in_place(|| write_backlog(&store, backlog));
    }
    let recorder = Arc::new(LatenessRecorder::default());
    let shutdown = CancellationToken::new();
    let trace = std::env::var_os("CRON_BENCH_TRACE");
    let traced = Arc::new(TracedStore { inner: store.clone(), started: Instant::now(), calls: Mutex::default() });
    let scheduler = if trace.is_some() || measure_groups {
        start_with(&store, Arc::clone(&traced) as Arc<dyn CronJobStore>, &recorder, &shutdown)
    } else {
        start(&store, &recorder, &shutdown)
    };
    let progress = Arc::new(Mutex::new(Vec::new()));
    if trace.is_some() || measure_groups {
        let (traced, recorder, progress, shutdown) =
            (Arc::clone(&traced), Arc::clone(&recorder), Arc::clone(&progress), shutdown.clone());
        tokio::spawn(async move {
            while !shutdown.is_cancelled() {
                let at = traced.started.elapsed().as_secs_f64() * 1e3;
                progress.lock().unwrap().push((at, SCHEDULED.load(Ordering::Relaxed), recorder.fired()));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    let stats = PgStats::start(&database);
    let postmaster = match backend {
        Backend::Postgres(server) => server.postmaster_pid(),
        Backend::Sqlite => None,
    };
    let account = cron_account::Account::start(database.postgres_url.as_deref(), postmaster);
    let started = Instant::now();
    produce(&scheduler, jobs, producers(), |_| 1).await;
    let scheduled = started.elapsed();
    wait_until("every job fired", Duration::from_secs(600), || recorder.fired() >= jobs).await;
    wait_until("every row deleted", Duration::from_secs(600), || rows_due_within_a_day(&store) == 0).await;
    let total = started.elapsed();
    if let Some(account) = account {
        account.finish(jobs);
    }
    shutdown.cancel();
    if let Some(stats) = stats {
        stats.print();
    }
    if let Some(path) = trace {
        let mut text = String::new();
        for (call, at, took, rows) in traced.calls.lock().unwrap().iter() {
            text.push_str(&format!("{call} {at:.3} {took:.3} {rows}\n"));
        }
        for (at, scheduled, fired) in progress.lock().unwrap().iter() {
            text.push_str(&format!("progress {at:.3} {scheduled} {fired}\n"));
        }
        std::fs::write(path, text).unwrap();
    }
    println!(
        "## throughput: {jobs} one-time jobs (delay 1 ms), {} concurrent callers, {} agents, {backlog} pending \
         beside them, {}",
        producers(),
        agents(),
        backend.name()
    );
    println!("scheduled (rows written):        {:>9.0} jobs/s  ({scheduled:.2?})", rate(jobs, scheduled));
    println!("scheduled + fired + deleted:     {:>9.0} jobs/s  ({total:.2?})", rate(jobs, total));
    let sizes = measure_groups.then(|| traced.group_sizes());
    if let Some(sizes) = sizes {
        println!(
            "mean group sizes (traced):       {:.1} rows per insert group, {:.1} fires per loop transaction",
            sizes.insert, sizes.fires
        );
    }
    println!();
    (rate(jobs, total), sizes)
}

/// Part 4 (`ceiling`): the gateway's run of part 1, traced for its group sizes, then the cron ceiling on a fresh
/// database of the same backend, and the gateway's figure as a share of it.
///
/// The ceiling is the very store calls the scheduler makes for `jobs` one-time jobs — `insert_cron_jobs` (the
/// group insert of `schedule_once`) and `complete_and_claim` (one transaction: the previous batch's mailbox
/// records and deletes, then the next batch's claims) — through a `DieselStore` opened as the gateway opens it
/// (its pool), each issued back to back by one thread as the gateway's one insert writer and its one firing loop
/// do, with the mean group sizes the gateway just formed (`CRON_BENCH_CEILING_INSERT_GROUP`,
/// `CRON_BENCH_CEILING_FIRE_BATCH` override them). Nothing else: no callers, no window, no publishing, no
/// clock to wait for. PostgreSQL only (see `main`).
async fn ceiling(backend: &Backend, jobs: usize) {
    let (gateway, sizes) = throughput(backend, jobs, true).await;
    let sizes = sizes.expect("a traced run measures its group sizes");
    let insert_group = env_size("CRON_BENCH_CEILING_INSERT_GROUP", sizes.insert.round() as usize).max(1);
    let fire_batch = env_size("CRON_BENCH_CEILING_FIRE_BATCH", sizes.fires.round() as usize).max(1);
    let (_database, store) = open_fresh(backend, "cron_ceiling");
    let took = tokio::task::block_in_place(|| ceiling_loop(&store, jobs, insert_group, fire_batch));
    assert_eq!(remaining_rows(&store), 0, "the ceiling fired and deleted every job");
    let ceiling = rate(jobs, took);
    println!("## ceiling: {jobs} one-time jobs, the gateway's store calls back to back, {}", backend.name());
    println!(
        "groups: {insert_group} rows per insert, {fire_batch} fires per loop transaction (the gateway's means above)"
    );
    println!("ceiling, scheduled + fired + deleted: {ceiling:>9.0} jobs/s  ({took:.2?})");
    println!("gateway / ceiling:                    {:>9.2}", gateway / ceiling);
    println!();
}

/// The ceiling's two writers (see [`ceiling`]); returns the time from the first insert to the last delete.
fn ceiling_loop(store: &DieselStore, jobs: usize, insert_group: usize, fire_batch: usize) -> Duration {
    use gateway_core::{ClaimLease, FencingToken, FireCompletion, FireKey, FiredReminder, NewCronJob};
    // SingleProcessLeadership's term, under which the gateway's loop writes.
    let token = FencingToken(1);
    let agents: Vec<AgentId> = (0..agents()).map(agent).collect();
    let (inserted, due) = std::sync::mpsc::channel::<Vec<i64>>();
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let inserted = inserted;
            for first in (0..jobs).step_by(insert_group) {
                // What `schedule_once` builds: due 1 ms from now, to the millisecond, the bench's payload.
                let next_fire_at = OffsetDateTime::now_utc() + time::Duration::milliseconds(1);
                let next_fire_at =
                    next_fire_at.replace_nanosecond(next_fire_at.millisecond() as u32 * 1_000_000).unwrap();
                let group: Vec<NewCronJob> = (first..(first + insert_group).min(jobs))
                    .map(|index| one_time_job(agents[index % agents.len()].clone(), next_fire_at, index))
                    .collect();
                let written = store.insert_cron_jobs(&group).unwrap();
                inserted.send(written.iter().map(|insert| insert.job.id).collect()).unwrap();
            }
            drop(inserted);
        });
        scope.spawn(move || {
            let (mut waiting, mut claimed, mut done) = (Vec::<i64>::new(), Vec::new(), 0_usize);
            let mut open = true;
            while done < jobs {
                // A batch as large as the gateway's, or what is left once every job is in.
                while open && waiting.len() < fire_batch {
                    match due.recv() {
                        Ok(ids) => waiting.extend(ids),
                        Err(_) => open = false,
                    }
                }
                let batch: Vec<i64> = waiting.drain(..fire_batch.min(waiting.len())).collect();
                let now = OffsetDateTime::now_utc();
                let fired_at = now.replace_nanosecond(now.millisecond() as u32 * 1_000_000).unwrap();
                let completions: Vec<FireCompletion> = claimed
                    .iter()
                    .map(|job: &gateway_core::CronJob| {
                        FireCompletion::Delete(FireKey { job_id: job.id, scheduled_for: job.next_fire_at })
                    })
                    .collect();
                let fired: Vec<FiredReminder> = claimed
                    .drain(..)
                    .map(|job| FiredReminder {
                        fire_id: gateway_cron::fire_id(job.id, job.next_fire_at),
                        job_id: job.id,
                        agent_id: job.agent_id,
                        payload: job.payload,
                        scheduled_for: job.next_fire_at,
                        fired_at,
                        epoch: 1,
                    })
                    .collect();
                let lease = ClaimLease {
                    owner: "cron-ceiling".to_owned(),
                    token,
                    now,
                    due_by: now + time::Duration::milliseconds(50),
                    expires_at: now + time::Duration::seconds(10),
                };
                let (completed, jobs_claimed) =
                    store.complete_and_claim("cron-ceiling", &completions, &fired, &batch, &lease).unwrap();
                assert_eq!(completed, completions.len(), "the ceiling completes every fire it claimed");
                assert_eq!(jobs_claimed.len(), batch.len(), "the ceiling claims every job it asks for");
                done += completed;
                claimed = jobs_claimed;
            }
        });
    });
    started.elapsed()
}

/// Spread of the lateness workload: every job is due within this span after the first
/// (`CRON_BENCH_SPREAD_S`, default 10 s: 100,000 jobs make 10,000 fires a second).
fn spread() -> Duration {
    Duration::from_secs(env_size("CRON_BENCH_SPREAD_S", 10) as u64)
}

/// Time between the start of writing the jobs and the first one being due.
const LEAD: Duration = Duration::from_secs(15);

/// Returns each job's instant as an offset from the first one, for the comparison run.
async fn lateness(backend: &Backend, jobs: usize) -> Vec<time::Duration> {
    let (_database, store) = open_fresh(backend, "cron_lateness");
    let recorder = Arc::new(LatenessRecorder::default());
    let shutdown = CancellationToken::new();
    let scheduler = start(&store, &recorder, &shutdown);
    // Every job is written before the first is due, so all of them are pending at once.
    let lead = LEAD;
    let first = OffsetDateTime::now_utc() + lead;
    let spread_ms = spread().as_millis() as f64;
    let started = Instant::now();
    produce(&scheduler, jobs, producers(), move |index| {
        let target = first + time::Duration::milliseconds((index as f64 * spread_ms / jobs as f64) as i64);
        (target - OffsetDateTime::now_utc()).whole_milliseconds().max(1) as i64
    })
    .await;
    let written = started.elapsed();
    assert!(written < lead, "writing the jobs took longer than the lead time; lower CRON_BENCH_JOBS");
    let instants: Vec<OffsetDateTime> = store
        .pending_fires(first + time::Duration::days(1), jobs)
        .unwrap()
        .iter()
        .map(|fire| fire.scheduled_for)
        .collect();
    wait_until("every job fired", lead + spread() + Duration::from_secs(120), || recorder.fired() >= jobs).await;
    shutdown.cancel();
    println!(
        "## lateness: {jobs} one-time jobs pending (written in {written:.2?}), due over {:?} ({:.0} fires/s)",
        spread(),
        rate(jobs, spread())
    );
    println!("gateway-cron ({}, claim per fire): {}", backend.name(), summary(&recorder.lateness()));
    recorder.dump();
    assert_eq!(instants.len(), jobs, "every job was pending before the first was due");
    let earliest = instants.first().copied().unwrap_or(first);
    instants.iter().map(|instant| *instant - earliest).collect()
}

/// tokio-cron-scheduler on the same workload: one one-shot job per instant, at the same offsets from a first
/// instant [`LEAD`] after the start.
async fn tokio_cron_scheduler_lateness(offsets: &[time::Duration]) {
    use tokio_cron_scheduler::{Job, JobScheduler};
    let first = OffsetDateTime::now_utc() + LEAD;
    let instants: Vec<OffsetDateTime> = offsets.iter().map(|offset| first + *offset).collect();
    // Its default channel size (200) drops jobs under this load; `CRON_BENCH_TCS_CHANNEL` raises it.
    let channel = env_size("CRON_BENCH_TCS_CHANNEL", 200);
    let scheduler = JobScheduler::new_with_channel_size(channel).await.unwrap();
    let recorded = Arc::new(Mutex::new(Vec::with_capacity(instants.len())));
    let fired = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    for instant in &instants {
        let instant = *instant;
        let delay = (instant - OffsetDateTime::now_utc()).max(time::Duration::ZERO);
        let recorded = Arc::clone(&recorded);
        let fired = Arc::clone(&fired);
        let job = Job::new_one_shot_async(delay.try_into().unwrap_or_default(), move |_id, _scheduler| {
            let recorded = Arc::clone(&recorded);
            let fired = Arc::clone(&fired);
            Box::pin(async move {
                let late = OffsetDateTime::now_utc() - instant;
                recorded.lock().unwrap().push(i64::try_from(late.whole_microseconds()).unwrap_or(i64::MAX));
                fired.fetch_add(1, Ordering::SeqCst);
            })
        })
        .unwrap();
        scheduler.add(job).await.unwrap();
    }
    let added = started.elapsed();
    let first_due = instants.first().map_or(Duration::ZERO, |first| {
        Duration::try_from(*first - OffsetDateTime::now_utc()).unwrap_or(Duration::ZERO)
    });
    scheduler.start().await.unwrap();
    let limit = first_due + spread() + Duration::from_secs(30);
    let all = wait_at_most(limit, || fired.load(Ordering::SeqCst) >= instants.len()).await;
    let lateness = Sample::new(recorded.lock().unwrap().clone());
    println!(
        "tokio-cron-scheduler 0.15 (in memory, channel size {channel}):  {}  (jobs added in {added:.2?}{}{})",
        summary(&lateness),
        if first_due.is_zero() { "; adding took longer than the lead, so early jobs were already due" } else { "" },
        if all {
            String::new()
        } else {
            format!("; only {} of {} fired within 30 s after the last instant", lateness.len(), instants.len())
        }
    );
    println!();
}

/// Writes `rows` one-time rows straight into the database, `overdue` of them in the past.
fn populate(dir: &tempfile::TempDir, rows: usize, overdue: usize) {
    use gateway_store::schema::cron_jobs;
    use gateway_store::timestamp::to_db;
    #[derive(diesel::Insertable)]
    #[diesel(table_name = cron_jobs)]
    struct Row {
        agent_id: String,
        next_fire_at: time::PrimitiveDateTime,
        payload: &'static str,
        is_one_time: bool,
    }
    drop(open(dir));
    let path = dir.path().join("bench.db");
    let mut connection = diesel::SqliteConnection::establish(path.to_str().unwrap()).unwrap();
    let now = OffsetDateTime::now_utc();
    let row = |index: usize| Row {
        agent_id: format!("agent-{}", index % 1_000),
        next_fire_at: to_db(if index < overdue {
            now - time::Duration::hours(1) + time::Duration::milliseconds(index as i64)
        } else {
            now + time::Duration::hours(1) + time::Duration::milliseconds(index as i64)
        }),
        payload: r#"{"kind":"bench"}"#,
        is_one_time: true,
    };
    // 4 columns x 4,000 rows stays under SQLite's bound-parameter limit.
    for chunk_start in (0..rows).step_by(100_000) {
        let chunk_end = (chunk_start + 100_000).min(rows);
        connection
            .transaction(|connection| {
                for start in (chunk_start..chunk_end).step_by(4_000) {
                    let batch: Vec<Row> = (start..(start + 4_000).min(chunk_end)).map(row).collect();
                    diesel::insert_into(cron_jobs::table).values(&batch).execute(connection)?;
                }
                diesel::QueryResult::Ok(())
            })
            .unwrap();
    }
}

async fn recovery(rows: usize) {
    let overdue = 1_000.min(rows);
    let dir = tempfile::tempdir().unwrap();
    let populating = Instant::now();
    {
        let dir = &dir;
        tokio::task::block_in_place(|| populate(dir, rows, overdue));
    }
    let populated = populating.elapsed();
    let recorder = Arc::new(LatenessRecorder::default());
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let store = tokio::task::block_in_place(|| open(&dir));
    let opened = started.elapsed();
    let _scheduler = start(&store, &recorder, &shutdown);
    wait_until("the first overdue fire", Duration::from_secs(120), || recorder.fired() >= 1).await;
    let first = started.elapsed();
    wait_until("every overdue fire", Duration::from_secs(120), || recorder.fired() >= overdue).await;
    let all = started.elapsed();
    shutdown.cancel();
    println!("## start-up recovery: {rows} rows ({overdue} overdue), populated in {populated:.2?}");
    println!("database opened and migrated:    {opened:.2?}");
    println!("first overdue job fired:         {first:.2?}");
    println!("all {overdue} overdue jobs fired:  {all:.2?}");
    println!();
}

fn main() {
    // `cargo test --benches` runs bench targets without `--bench`: nothing to measure then.
    if !std::env::args().any(|argument| argument == "--bench") {
        return;
    }
    // Any argument other than flags is taken as a filter like libtest's.
    let filter: Option<String> = std::env::args().skip(1).find(|argument| !argument.starts_with("--"));
    let wanted = |name: &str| filter.as_deref().is_none_or(|filter| name.contains(filter));
    let jobs = env_size("CRON_BENCH_JOBS", 100_000);
    let rows = env_size("CRON_BENCH_ROWS", 1_000_000);
    let backend = Backend::from_env("cron bench");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        println!(
            "# gateway-cron benchmark ({} cores, {})\n",
            std::thread::available_parallelism().map_or(0, usize::from),
            backend.name()
        );
        if wanted("throughput") {
            throughput(&backend, jobs, false).await;
        }
        // The ceiling answers how far the PostgreSQL path is from its statements' limit; on SQLite the scheduler's
        // writes take turns on one writer, which two threads and a lock do not reproduce (measured: that loop was
        // slower than the gateway, 27k against 35k jobs/s), so there it is no ceiling.
        if wanted("ceiling") && !backend.is_sqlite() {
            ceiling(&backend, jobs).await;
        }
        if wanted("lateness") {
            let offsets = lateness(&backend, jobs).await;
            tokio_cron_scheduler_lateness(&offsets).await;
        }
        if wanted("recovery") && backend.is_sqlite() {
            recovery(rows).await;
        }
    });
}

/// `CRON_BENCH_PG_STATS`: PostgreSQL's own account of a run (per statement with `pg_stat_statements` loaded through
/// `TESTKIT_POSTGRES_OPTIONS="-c shared_preload_libraries=pg_stat_statements"`, WAL, per table and index), printed
/// with `psql` after it.
struct PgStats {
    url: String,
}

impl PgStats {
    fn start(database: &BenchDatabase) -> Option<Self> {
        std::env::var_os("CRON_BENCH_PG_STATS")?;
        let url = database.postgres_url.clone()?;
        let stats = Self { url };
        stats.psql(
            "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset(); \
             SELECT pg_stat_reset_shared('wal'); SELECT pg_stat_reset();",
        );
        Some(stats)
    }

    fn psql(&self, sql: &str) {
        let output = std::process::Command::new("psql").args([&self.url, "-X", "-q", "-c", sql]).output().unwrap();
        print!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    }

    fn print(&self) {
        self.psql(
            "SELECT calls, round(total_exec_time::numeric, 1) AS total_ms, round(mean_exec_time::numeric, 3) AS mean_ms, \
             plans, round(total_plan_time::numeric, 1) AS plan_ms, rows, wal_records, wal_fpi, wal_bytes, shared_blks_hit, shared_blks_dirtied, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS query \
             FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 14",
        );
        self.psql("SELECT wal_records, wal_fpi, wal_bytes, wal_buffers_full, wal_write, wal_sync FROM pg_stat_wal");
        self.psql(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables \
             WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname",
        );
        self.psql(
            "SELECT xact_commit, blks_hit, blks_read, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database \
             WHERE datname = current_database()",
        );
    }
}
