//! The CronScheduler: the API that creates, lists and removes jobs, and the loop that fires them.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gateway_core::group_commit::GroupCommit;
use gateway_core::memory::lock;
use gateway_core::{
    AgentId, ClaimLease, Clock, ComponentHealth, CronJob, CronJobStore, Event, EventPayload, EventPublisher,
    FencingToken, FireCompletion, FireKey, IdempotencyKey, Leadership, NewCronJob, PendingFire, StoreError, Topic,
    run_blocking,
};
use serde_json::{Map, Value};
use time::{Duration, OffsetDateTime};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::error::CronError;
use crate::schedule::{CronSchedule, PREVIEW_INSTANTS};
use crate::window::Window;

/// Longest accepted one-time delay: ten years (of 365.25 days). Longer is almost surely a unit mistake
/// (seconds or microseconds sent as milliseconds), and a row that fires after the operator's retirement only
/// clutters the table.
pub const MAX_DELAY_MS: i64 = 10 * 36_525 * 86_400_000 / 100;

/// How far ahead the window is loaded.
pub const DEFAULT_LOOKAHEAD: std::time::Duration = std::time::Duration::from_secs(30);
/// Most fires held in memory at once; beyond it the window's horizon moves in and the rest waits in the
/// database.
pub const DEFAULT_WINDOW_CAPACITY: usize = 10_000;
/// How often the window is reloaded even when nothing seems missing (rows written by other processes).
pub const DEFAULT_REFILL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a claim holds. A claimer that dies after claiming leaves the instant to be claimed again (with
/// the same fire_id) once this has passed; a live claimer publishes and completes well within it.
pub const CLAIM_LEASE: std::time::Duration = std::time::Duration::from_secs(10);
/// Most fires claimed, published and completed per database transaction pair.
pub const DEFAULT_BATCH_SIZE: usize = 512;
/// First pause after a store error; doubled per consecutive failure up to [`RETRY_MAX`].
pub const RETRY_INITIAL: std::time::Duration = std::time::Duration::from_millis(250);
/// The cap of the store-error backoff (seed scheduler-hardening D: bounded, never unbounded).
pub const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);
/// How often a non-leader checks whether it became leader.
pub const LEADERSHIP_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long before its instant a fire is claimed. The claim is a database commit, and a commit can stall for
/// milliseconds (a WAL checkpoint's fsync on a slow disk); claimed this far ahead, the fire is published at its
/// instant by a loop that is not waiting for the database. The reminder is never published early.
pub const DEFAULT_CLAIM_AHEAD: std::time::Duration = std::time::Duration::from_millis(50);
/// Most one-time jobs written in one store call by the group commit of concurrent `schedule_once` calls.
pub const MAX_INSERT_GROUP: usize = 1_024;
/// Most jobs one `list` call returns.
pub const MAX_LIST_LIMIT: usize = 1_000;

/// Tuning of the timing engine. The defaults are the constants above.
#[derive(Debug, Clone)]
pub struct CronConfig {
    pub lookahead: std::time::Duration,
    pub window_capacity: usize,
    pub refill_interval: std::time::Duration,
    pub claim_lease: std::time::Duration,
    pub claim_ahead: std::time::Duration,
    pub batch_size: usize,
    pub retry_initial: std::time::Duration,
    pub retry_max: std::time::Duration,
    pub leadership_poll: std::time::Duration,
}

impl Default for CronConfig {
    fn default() -> Self {
        Self {
            lookahead: DEFAULT_LOOKAHEAD,
            window_capacity: DEFAULT_WINDOW_CAPACITY,
            refill_interval: DEFAULT_REFILL_INTERVAL,
            claim_lease: CLAIM_LEASE,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
            batch_size: DEFAULT_BATCH_SIZE,
            retry_initial: RETRY_INITIAL,
            retry_max: RETRY_MAX,
            leadership_poll: LEADERSHIP_POLL,
        }
    }
}

/// What the loop has done so far; watch it with [`CronScheduler::progress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopProgress {
    /// Completed loop iterations (each ends right before the loop sleeps).
    pub cycles: u64,
    /// Reminders published, counted once the write that completes their rows has landed (written, or
    /// failed), so a watcher that sees `fired >= n` also sees the n-th fire's row settled.
    pub fired: u64,
    /// Consecutive store failures (0 while healthy).
    pub failures: u32,
    /// A window reload is in flight (the loop will be woken when it lands).
    pub reloading: bool,
    /// A store write (completions and claims) is in flight (the loop will be woken when it lands).
    pub writing: bool,
}

/// The `fire_id` of one instant of one job: `"<job_id>:<scheduled_for as RFC 3339 UTC>"`. It is also the
/// reminder event's id, so a refire after a crash carries the same id and consumers can deduplicate.
pub fn fire_id(job_id: i64, scheduled_for: OffsetDateTime) -> String {
    format!("{job_id}:{}", rfc3339(scheduled_for))
}

fn rfc3339(instant: OffsetDateTime) -> String {
    instant
        .to_offset(time::UtcOffset::UTC)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| instant.unix_timestamp().to_string())
}

/// The instants a job fires next: its `next_fire_at`, then (recurring jobs) the following ones, up to
/// [`PREVIEW_INSTANTS`] in all. Shown by the API so a mistaken expression is seen before it fires.
pub fn preview(job: &CronJob) -> Vec<OffsetDateTime> {
    let mut instants = vec![job.next_fire_at];
    if let Some(Ok(schedule)) = job.schedule.as_deref().map(CronSchedule::parse) {
        instants.extend(schedule.upcoming(job.next_fire_at, PREVIEW_INSTANTS - 1));
    }
    instants
}

/// Durable recurring and one-time jobs. Cloning is cheap and clones share everything.
///
/// The API methods ([`Self::schedule_once`], [`Self::add_recurring`], [`Self::remove`], [`Self::list`],
/// [`Self::job`]) are synchronous because they write to the store: async callers run them through
/// `gateway_core::run_blocking`. [`Self::run`] is the loop that fires jobs; it must be spawned once.
#[derive(Debug, Clone)]
pub struct CronScheduler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn CronJobStore>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    leadership: Arc<dyn Leadership>,
    config: CronConfig,
    /// Identifies this scheduler's claims in the database.
    owner: String,
    window: Mutex<Window>,
    wake: Notify,
    health: ComponentHealth,
    progress: watch::Sender<LoopProgress>,
    published: AtomicU64,
    /// Shares commits between concurrent `schedule_once` calls.
    inserts: GroupCommit<NewCronJob, gateway_core::CronJobInsert>,
    /// Serializes this scheduler's writes. SQLite has one writer at a time, and a connection that finds the
    /// write lock taken sleeps in SQLite's busy handler for a millisecond or more; queueing here instead costs
    /// microseconds, which is most of the difference between a few thousand and tens of thousands of fires a
    /// second when the loop and `schedule_once` callers write at once.
    writes: Mutex<()>,
}

/// Store work running on the blocking pool while the loop goes on: the loop is woken when it lands, and takes
/// the outcome in its next cycle.
#[derive(Debug)]
struct InFlight<T> {
    landed: Arc<Mutex<Option<Result<T, StoreError>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Send + 'static> InFlight<T> {
    fn start(inner: &Arc<Inner>, work: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static) -> Self {
        let landed = Arc::new(Mutex::new(None));
        let task = tokio::spawn({
            let inner = Arc::clone(inner);
            let landed = Arc::clone(&landed);
            async move {
                let worker = Arc::clone(&inner);
                let outcome = run_blocking(move || work(&worker)).await;
                *lock(&landed) = Some(outcome.unwrap_or_else(|failed| Err(StoreError::from(failed))));
                inner.wake.notify_one();
            }
        });
        Self { landed, task }
    }

    /// The outcome, once it has landed.
    fn take(&self) -> Option<Result<T, StoreError>> {
        lock(&self.landed).take()
    }
}

/// A window reload: a reload of thousands of rows takes milliseconds, and fires due meanwhile must not wait
/// for it.
#[derive(Debug)]
struct Refill {
    started: OffsetDateTime,
    before: OffsetDateTime,
    limit: usize,
    rows: InFlight<Vec<PendingFire>>,
}

/// One store transaction: the completions of published fires, then the claims of the fires due within the
/// claim-ahead margin. At most one at a time.
#[derive(Debug)]
struct Write {
    completions: Vec<FireCompletion>,
    /// The jobs this write claims.
    claiming: Vec<i64>,
    /// When the claims this write makes run out.
    expires_at: OffsetDateTime,
    /// Rows completed, and the jobs claimed.
    outcome: InFlight<(usize, Vec<CronJob>)>,
}

/// A fire this scheduler has claimed and not yet published.
#[derive(Debug)]
struct Claimed {
    job: CronJob,
    expires_at: OffsetDateTime,
}

/// What the loop carries from one cycle to the next.
#[derive(Debug, Default)]
struct LoopState {
    refill: Option<Refill>,
    write: Option<Write>,
    /// Claimed fires by `(scheduled_for, job_id)`, published when their instant comes.
    claimed: BTreeMap<(OffsetDateTime, i64), Claimed>,
    /// Completions of published fires, written by the next write.
    deferred: Vec<FireCompletion>,
}

impl LoopState {
    /// The jobs this loop is firing: claimed (or being claimed) and not yet completed.
    fn held(&self) -> HashSet<i64> {
        let claimed = self.claimed.values().map(|held| held.job.id);
        let published = self.deferred.iter().map(|completion| completion.fire().job_id);
        let writing = self.write.iter().flat_map(|write| {
            write.claiming.iter().copied().chain(write.completions.iter().map(|completion| completion.fire().job_id))
        });
        claimed.chain(published).chain(writing).collect()
    }
}

/// What the loop does after a cycle.
enum Next {
    Immediately,
    At(OffsetDateTime),
}

impl CronScheduler {
    pub fn new(
        store: Arc<dyn CronJobStore>,
        publisher: Arc<dyn EventPublisher>,
        clock: Arc<dyn Clock>,
        leadership: Arc<dyn Leadership>,
        config: CronConfig,
    ) -> Self {
        let window = Mutex::new(Window::new(config.window_capacity, duration(config.claim_ahead)));
        Self {
            inner: Arc::new(Inner {
                store,
                publisher,
                clock,
                leadership,
                config,
                owner: claimer_id(),
                window,
                wake: Notify::new(),
                health: ComponentHealth::new("cron_scheduler"),
                progress: watch::Sender::new(LoopProgress::default()),
                published: AtomicU64::new(0),
                inserts: GroupCommit::new(MAX_INSERT_GROUP),
                writes: Mutex::new(()),
            }),
        }
    }

    /// The loop's readiness: running while [`Self::run`] runs, unhealthy while it cannot reach the store.
    pub fn health(&self) -> ComponentHealth {
        self.inner.health.clone()
    }

    pub fn progress(&self) -> watch::Receiver<LoopProgress> {
        self.inner.progress.subscribe()
    }

    /// The id this scheduler's claims carry in the database.
    pub fn claimer_id(&self) -> &str {
        &self.inner.owner
    }

    /// Files a one-time reminder for `agent_id` in `delay_ms` milliseconds (FR-10.5). The row is committed
    /// first and the timer armed after, so a job that was acknowledged survives a crash. Concurrent calls
    /// share one commit (group commit), which is what lets SQLite take tens of thousands of them a second.
    pub fn schedule_once(
        &self,
        agent_id: AgentId,
        delay_ms: i64,
        payload: Map<String, Value>,
    ) -> Result<CronJob, CronError> {
        Ok(self.schedule_once_idempotent(agent_id, delay_ms, payload, None)?.0)
    }

    /// [`Self::schedule_once`] under an idempotency key (a retried DecisionLog's reminder): while a row holds
    /// the key, nothing is written or armed and that row comes back with `true` (already scheduled), even if
    /// it was asked for with another delay or payload — the first request stands. That is never an error and
    /// never fails the other calls sharing the commit. Once the row is gone (fired, or removed) the key is free
    /// and a call with it schedules again.
    pub fn schedule_once_idempotent(
        &self,
        agent_id: AgentId,
        delay_ms: i64,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<(CronJob, bool), CronError> {
        if !(1..=MAX_DELAY_MS).contains(&delay_ms) {
            return Err(CronError::InvalidDelay(delay_ms));
        }
        let next_fire_at = ceil_to_millisecond(self.inner.clock.now() + Duration::milliseconds(delay_ms));
        // Kept only to tell a differing replay apart, so only keyed calls pay for the copy.
        let requested = idempotency_key.as_ref().map(|_| (agent_id.clone(), payload.clone()));
        let new_job =
            NewCronJob { agent_id, schedule: None, next_fire_at, payload, is_one_time: true, idempotency_key };
        let (store, writes) = (&self.inner.store, &self.inner.writes);
        let outcome = self.inner.inserts.submit(new_job, |jobs| {
            let _writing = lock(writes);
            store.insert_cron_jobs(&jobs)
        })?;
        let job = outcome.job;
        if !outcome.inserted {
            let same = requested.is_some_and(|(agent_id, payload)| {
                job.is_one_time && job.agent_id == agent_id && job.payload == payload
            });
            if !same {
                // The payload is the agent's data: only the fact that it differs is logged.
                info!(job_id = job.id, agent_id = %job.agent_id,
                    "the job already holding this key differs from the one requested; the first one stands");
            }
            return Ok((job, true));
        }
        debug!(job_id = job.id, agent_id = %job.agent_id, delay_ms, "one-time job scheduled");
        self.arm(&job);
        Ok((job, false))
    }

    /// Adds a recurring job; `schedule` is crontab (5 fields, `@` shorthands) or 6/7 fields with seconds.
    pub fn add_recurring(
        &self,
        agent_id: AgentId,
        schedule: &str,
        payload: Map<String, Value>,
    ) -> Result<CronJob, CronError> {
        Ok(self.add_recurring_idempotent(agent_id, schedule, payload, None)?.0)
    }

    /// [`Self::add_recurring`] under an `Idempotency-Key`: the first request with a key creates the job; a
    /// later one with the same key, agent, schedule and payload gets that job back (`true`: replayed) and
    /// creates nothing; with anything different it is refused.
    pub fn add_recurring_idempotent(
        &self,
        agent_id: AgentId,
        schedule: &str,
        payload: Map<String, Value>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<(CronJob, bool), CronError> {
        let parsed = CronSchedule::parse(schedule)?;
        let replay = |existing: CronJob| {
            let same = existing.agent_id == agent_id
                && existing.schedule.as_deref() == Some(parsed.source())
                && existing.payload == payload;
            if same { Ok((existing, true)) } else { Err(CronError::IdempotencyKeyReused) }
        };
        if let Some(key) = &idempotency_key {
            if let Some(existing) = self.inner.store.cron_job_by_idempotency_key(key)? {
                return replay(existing);
            }
        }
        let next_fire_at = parsed
            .next_after(self.inner.clock.now())
            .ok_or_else(|| CronError::InvalidSchedule("the schedule has no upcoming instant".to_owned()))?;
        let new_job = NewCronJob {
            agent_id: agent_id.clone(),
            schedule: Some(parsed.source().to_owned()),
            next_fire_at,
            payload: payload.clone(),
            is_one_time: false,
            idempotency_key: idempotency_key.clone(),
        };
        let inserted = {
            let _writing = lock(&self.inner.writes);
            self.inner.store.insert_cron_job(&new_job)
        };
        let job = match (inserted, &idempotency_key) {
            (Ok(job), _) => job,
            // The key was taken by a concurrent request between the lookup and the insert.
            (Err(StoreError::Conflict(conflict)), Some(key)) => {
                return match self.inner.store.cron_job_by_idempotency_key(key)? {
                    Some(existing) => replay(existing),
                    None => Err(StoreError::Conflict(conflict).into()),
                };
            }
            (Err(error), _) => return Err(error.into()),
        };
        info!(job_id = job.id, agent_id = %job.agent_id, schedule = parsed.source(), "recurring job added");
        self.arm(&job);
        Ok((job, false))
    }

    /// Deletes a job. A fire of it already claimed may still be published; none is claimed afterwards.
    pub fn remove(&self, job_id: i64) -> Result<(), CronError> {
        let deleted = {
            let _writing = lock(&self.inner.writes);
            self.inner.store.delete_cron_job(job_id)?
        };
        if deleted {
            info!(job_id, "cron job removed");
            Ok(())
        } else {
            Err(CronError::NotFound(job_id))
        }
    }

    pub fn job(&self, job_id: i64) -> Result<CronJob, CronError> {
        self.inner.store.cron_job(job_id)?.ok_or(CronError::NotFound(job_id))
    }

    /// Jobs by ascending id after `after_id`, at most `limit` (capped at [`MAX_LIST_LIMIT`]).
    pub fn list(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<CronJob>, CronError> {
        Ok(self.inner.store.list_cron_jobs(after_id, limit.min(MAX_LIST_LIMIT))?)
    }

    fn arm(&self, job: &CronJob) {
        let fire = PendingFire { job_id: job.id, scheduled_for: job.next_fire_at, claimed_until: None };
        if lock(&self.inner.window).push(fire) {
            self.inner.wake.notify_one();
        }
    }

    /// Fires jobs until `shutdown`. Never returns early: store errors are logged, backed off (capped) and
    /// reported through [`Self::health`]; fires happen only while leadership says so.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        let _running = inner.health.start();
        info!(claimer = %inner.owner, "cron scheduler started");
        let mut failures: u32 = 0;
        let mut state = LoopState::default();
        loop {
            // `false`: sleep without listening to wake-ups (backing off, or not leader).
            let (pause, wakeable) = match inner.leadership.current() {
                None => {
                    // Another instance owns the timed work now: what this one claimed is left to its lease.
                    self.settle_write(&mut state).await;
                    state.claimed.clear();
                    self.flush(&mut state.deferred).await;
                    lock(&inner.window).reset();
                    if let Some(abandoned) = state.refill.take() {
                        abandoned.rows.task.abort();
                    }
                    (inner.config.leadership_poll, false)
                }
                Some(token) => match self.cycle(token, &mut state) {
                    Ok((next, reached_store)) => {
                        // A cycle that only started a reload or a write has not shown the store is back.
                        if reached_store {
                            if failures > 0 {
                                info!(failures, "cron scheduler reaches the store again");
                                inner.health.recovered();
                            }
                            failures = 0;
                        }
                        match next {
                            Next::Immediately => (std::time::Duration::ZERO, true),
                            Next::At(at) => (until(inner.clock.now(), at), true),
                        }
                    }
                    Err(store_error) => {
                        failures = failures.saturating_add(1);
                        let delay = backoff(&inner.config, failures);
                        warn!(error = %store_error, failures, retry_in_ms = delay.as_millis(),
                            "cron dispatch failed; backing off");
                        inner.health.degraded(format!("cannot reach the cron store: {store_error}"));
                        lock(&inner.window).mark_stale();
                        if let Some(abandoned) = state.refill.take() {
                            abandoned.rows.task.abort();
                        }
                        (delay, false)
                    }
                },
            };
            let fired = inner.published.load(Ordering::Relaxed);
            let (reloading, writing) = (state.refill.is_some(), state.write.is_some());
            inner.progress.send_modify(|progress| {
                progress.cycles += 1;
                progress.fired = fired;
                progress.failures = failures;
                progress.reloading = reloading;
                progress.writing = writing;
            });
            if pause.is_zero() {
                tokio::task::yield_now().await;
                if shutdown.is_cancelled() {
                    break;
                }
                continue;
            }
            let woken = async {
                if wakeable {
                    inner.wake.notified().await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = woken => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        if let Some(abandoned) = state.refill.take() {
            abandoned.rows.task.abort();
        }
        self.finish(&mut state).await;
        info!("cron scheduler stopped");
    }

    /// One pass: take in a landed reload or write, start a reload if needed, publish the claimed fires that are
    /// due, start the next write (completions of what was published, claims of what is due within the
    /// claim-ahead margin), and say when to look again. Never waits for the store: reloads and writes run on
    /// the blocking pool and wake the loop when they land, so a slow commit delays no fire that is already
    /// claimed. Also says whether the store answered in this cycle.
    fn cycle(&self, token: FencingToken, state: &mut LoopState) -> Result<(Next, bool), StoreError> {
        let inner = &self.inner;
        let mut reached_store = false;
        if let Some(in_flight) = state.refill.take() {
            let outcome = in_flight.rows.take();
            match outcome {
                Some(rows) => {
                    let rows = rows?;
                    reached_store = true;
                    debug!(rows = rows.len(), "cron window reloaded");
                    let interval = duration(inner.config.refill_interval);
                    let held = state.held();
                    let mut window = lock(&inner.window);
                    window.refill(in_flight.started, in_flight.before, &rows, in_flight.limit, interval, &held);
                }
                None => state.refill = Some(in_flight),
            }
        }
        if let Some(in_flight) = state.write.take() {
            let outcome = in_flight.outcome.take();
            match outcome {
                Some(outcome) => {
                    self.landed(in_flight, outcome, state)?;
                    reached_store = true;
                }
                None => state.write = Some(in_flight),
            }
        }
        let now = inner.clock.now();
        if state.refill.is_none() && lock(&inner.window).needs_refill(now) {
            state.refill = Some(self.start_refill(now));
        }
        self.publish_due(state);
        if state.write.is_none() {
            let now = inner.clock.now();
            let due = lock(&inner.window).pop_due(now, inner.config.batch_size.max(1));
            if !due.is_empty() || !state.deferred.is_empty() {
                let completions = std::mem::take(&mut state.deferred);
                state.write = Some(self.start_write(token, completions, due, now));
            }
        }
        let now = inner.clock.now();
        let window = lock(&inner.window);
        if state.refill.is_none() && window.needs_refill(now) {
            return Ok((Next::Immediately, reached_store));
        }
        // A write or reload in flight wakes the loop when it lands; until then the window's entries cannot be
        // claimed (one write at a time) or may be incomplete (reload), so only what is held counts.
        let window_wake = match (&state.write, &state.refill) {
            (Some(_), _) => None,
            (None, Some(_)) => window.first_claimable_at(),
            (None, None) => Some(window.next_wake(now)),
        };
        let claimed_wake = state.claimed.first_key_value().map(|((at, _), _)| *at);
        let idle_until = now + duration(inner.config.lookahead);
        let wake = [window_wake, claimed_wake].into_iter().flatten().fold(idle_until, OffsetDateTime::min);
        Ok((Next::At(wake), reached_store))
    }

    fn start_refill(&self, now: OffsetDateTime) -> Refill {
        let before = now + duration(self.inner.config.lookahead);
        let limit = self.inner.config.window_capacity.max(1);
        let rows = InFlight::start(&self.inner, move |inner| inner.store.pending_fires(before, limit));
        Refill { started: now, before, limit, rows }
    }

    /// Starts one transaction that writes `completions` (fires already published) and claims `due` (fires due
    /// by `now` plus the claim-ahead margin).
    fn start_write(
        &self,
        token: FencingToken,
        completions: Vec<FireCompletion>,
        due: Vec<i64>,
        now: OffsetDateTime,
    ) -> Write {
        let claiming = due.clone();
        let config = &self.inner.config;
        let lease = ClaimLease {
            owner: self.inner.owner.clone(),
            token,
            now,
            due_by: now + duration(config.claim_ahead),
            expires_at: now + duration(config.claim_lease),
        };
        let expires_at = lease.expires_at;
        let writing = completions.clone();
        let outcome = InFlight::start(&self.inner, move |inner| {
            let _writing = lock(&inner.writes);
            inner.store.complete_and_claim(&inner.owner, &writing, &due, &lease)
        });
        Write { completions, claiming, expires_at, outcome }
    }

    /// Applies a landed write: its completions are settled (advanced rows go back into the window) and its
    /// claims join the fires held for publishing. Published fires count as fired once their completion has
    /// landed, written or not; if it was not, the rows fire again once their claims expire, with the same
    /// fire_id.
    fn landed(
        &self,
        write: Write,
        outcome: Result<(usize, Vec<CronJob>), StoreError>,
        state: &mut LoopState,
    ) -> Result<(), StoreError> {
        self.inner.published.fetch_add(u64::try_from(write.completions.len()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let (completed, claimed) = outcome?;
        self.completed(write.completions, completed);
        for job in claimed {
            state.claimed.insert((job.next_fire_at, job.id), Claimed { job, expires_at: write.expires_at });
        }
        Ok(())
    }

    /// Publishes a reminder per held fire whose instant has come; their completions wait for the next write.
    fn publish_due(&self, state: &mut LoopState) {
        let inner = &self.inner;
        loop {
            let now = inner.clock.now();
            let Some(entry) = state.claimed.first_entry() else { return };
            if entry.key().0 > now {
                return;
            }
            let Claimed { job, expires_at } = entry.remove();
            let fire = FireKey { job_id: job.id, scheduled_for: job.next_fire_at };
            let fire_id = fire_id(job.id, job.next_fire_at);
            if now >= expires_at {
                // Someone else may hold this instant by now; publishing could make it a double fire.
                warn!(job_id = job.id, fire_id, "claim lease ran out before publishing; the fire is claimed again");
                continue;
            }
            let completion = completion(&job, now);
            let topic = Topic::AgentScheduled(job.agent_id.clone());
            let event = Event::with_id(
                fire_id.clone(),
                EventPayload::Reminder {
                    job_id: job.id,
                    agent_id: job.agent_id,
                    scheduled_for: job.next_fire_at,
                    payload: job.payload,
                    fire_id: fire_id.clone(),
                },
                now,
            );
            if let Err(publish_error) = inner.publisher.publish(&topic, &event) {
                warn!(job_id = fire.job_id, fire_id, error = %publish_error,
                    "reminder not published; it fires again when its claim lease ends");
                lock(&inner.window).push(PendingFire {
                    job_id: fire.job_id,
                    scheduled_for: fire.scheduled_for,
                    claimed_until: Some(expires_at),
                });
                continue;
            }
            debug!(job_id = fire.job_id, fire_id, %topic, "reminder fired");
            state.deferred.push(completion);
        }
    }

    /// Waits for the write in flight, if any, and applies it.
    async fn settle_write(&self, state: &mut LoopState) {
        let Some(mut in_flight) = state.write.take() else { return };
        // The task fills `landed` before it ends; one that panicked leaves it empty.
        let _ = (&mut in_flight.outcome.task).await;
        let outcome = in_flight.outcome.take();
        let settled = match outcome {
            Some(outcome) => self.landed(in_flight, outcome, state),
            None => Err(StoreError::Unavailable("the cron write task ended without an outcome".to_owned())),
        };
        if let Err(store_error) = settled {
            warn!(error = %store_error, "cron write failed; its fires repeat after their claims expire");
        }
    }

    /// On the way out: the write in flight lands, fires already claimed (due within the claim-ahead margin)
    /// are published on time rather than left to wait for their lease after a restart, and completions are
    /// written.
    async fn finish(&self, state: &mut LoopState) {
        self.settle_write(state).await;
        if let Some(((last, _), _)) = state.claimed.last_key_value() {
            let wait = until(self.inner.clock.now(), *last).min(self.inner.config.claim_ahead);
            tokio::time::sleep(wait).await;
            self.publish_due(state);
        }
        self.flush(&mut state.deferred).await;
    }

    /// Writes completions on their own, waiting for them.
    async fn complete(&self, completions: Vec<FireCompletion>) -> Result<(), StoreError> {
        let count = u64::try_from(completions.len()).unwrap_or(u64::MAX);
        let writer = Arc::clone(&self.inner);
        let written = run_blocking(move || {
            let _writing = lock(&writer.writes);
            writer.store.complete_fires(&writer.owner, &completions).map(|count| (count, completions))
        })
        .await;
        self.inner.published.fetch_add(count, Ordering::Relaxed);
        let (completed, completions) = written??;
        self.completed(completions, completed);
        Ok(())
    }

    /// Best effort on the way out (shutdown, leadership lost): a completion not written now only means a refire
    /// with the same fire_id after the claim expires.
    async fn flush(&self, deferred: &mut Vec<FireCompletion>) {
        if deferred.is_empty() {
            return;
        }
        let pending = std::mem::take(deferred);
        let count = pending.len();
        if let Err(store_error) = self.complete(pending).await {
            warn!(error = %store_error, count, "completions not written; those fires repeat after their claims expire");
        }
    }

    /// After completions were written: advanced rows go back into the window.
    fn completed(&self, completions: Vec<FireCompletion>, written: usize) {
        if written < completions.len() {
            debug!(written, attempted = completions.len(), "some fires were deleted or taken over meanwhile");
        }
        let mut window = lock(&self.inner.window);
        for completion in completions {
            if let FireCompletion::Advance { fire, next_fire_at } = completion {
                window.push(PendingFire { job_id: fire.job_id, scheduled_for: next_fire_at, claimed_until: None });
            }
        }
    }
}

/// What a fire of `job` at `now` leaves behind: no row (one-time) or the row at its next instant after now.
fn completion(job: &CronJob, now: OffsetDateTime) -> FireCompletion {
    let fire = FireKey { job_id: job.id, scheduled_for: job.next_fire_at };
    if job.is_one_time {
        return FireCompletion::Delete(fire);
    }
    match job.schedule.as_deref().map(CronSchedule::parse) {
        // Strictly after now, not after the missed instant: a job that missed several instants during a
        // downtime fires once for all of them.
        Some(Ok(schedule)) => match schedule.next_after(now) {
            Some(next_fire_at) => FireCompletion::Advance { fire, next_fire_at },
            None => {
                info!(job_id = job.id, "recurring job has no instant left; removing it");
                FireCompletion::Delete(fire)
            }
        },
        _ => {
            error!(job_id = job.id, "recurring job has no valid schedule (edited outside the API?); removing it");
            FireCompletion::Delete(fire)
        }
    }
}

fn backoff(config: &CronConfig, failures: u32) -> std::time::Duration {
    gateway_core::capped_backoff(config.retry_initial, config.retry_max, failures)
}

fn duration(std: std::time::Duration) -> Duration {
    Duration::try_from(std).unwrap_or(Duration::MAX)
}

/// The pause until `at`, zero if it has passed.
fn until(now: OffsetDateTime, at: OffsetDateTime) -> std::time::Duration {
    std::time::Duration::try_from(at - now).unwrap_or(std::time::Duration::ZERO)
}

/// Rounds up to whole milliseconds: the instant survives the database round trip unchanged (so the fire_id
/// is the same after a restart), and a reminder never fires before its full delay.
fn ceil_to_millisecond(instant: OffsetDateTime) -> OffsetDateTime {
    let sub_millisecond = i64::from(instant.nanosecond() % 1_000_000);
    if sub_millisecond == 0 { instant } else { instant + Duration::nanoseconds(1_000_000 - sub_millisecond) }
}

/// A random id per scheduler instance, so two loops on one database tell their claims apart.
fn claimer_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 12];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // No entropy source: fall back to what differs between processes and between instances of one.
        static INSTANCES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        bytes[..4].copy_from_slice(&std::process::id().to_be_bytes());
        bytes[4..8].copy_from_slice(&instance.to_be_bytes());
        let nanos = OffsetDateTime::now_utc().nanosecond();
        bytes[8..].copy_from_slice(&nanos.to_be_bytes());
    }
    format!("cron-{}", gateway_core::hex::encode(&bytes))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn fire_id_names_job_and_instant_in_rfc3339_utc() {
        assert_eq!(fire_id(42, datetime!(2026-02-22 12:00:05 UTC)), "42:2026-02-22T12:00:05Z");
        assert_eq!(fire_id(7, datetime!(2026-02-22 14:00:05.25 +02:00)), "7:2026-02-22T12:00:05.25Z");
    }

    #[test]
    fn ten_years_is_the_longest_delay() {
        assert_eq!(MAX_DELAY_MS, 315_576_000_000);
    }

    #[test]
    fn rounding_up_to_milliseconds_never_fires_early() {
        let exact = datetime!(2026-02-22 12:00:00.005 UTC);
        assert_eq!(ceil_to_millisecond(exact), exact);
        assert_eq!(
            ceil_to_millisecond(datetime!(2026-02-22 12:00:00.005000001 UTC)),
            exact + Duration::milliseconds(1)
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let config = CronConfig::default();
        let delays: Vec<_> = (1..=10).map(|failures| backoff(&config, failures)).collect();
        assert_eq!(delays[0], RETRY_INITIAL);
        assert_eq!(delays[1], RETRY_INITIAL * 2);
        assert_eq!(delays[2], RETRY_INITIAL * 4);
        assert!(delays.windows(2).all(|pair| pair[0] <= pair[1]));
        assert_eq!(delays[9], RETRY_MAX);
        assert_eq!(backoff(&config, u32::MAX), RETRY_MAX);
    }

    #[test]
    fn claimer_ids_differ() {
        assert_ne!(claimer_id(), claimer_id());
    }
}
