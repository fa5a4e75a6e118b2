//! The scheduler against gateway-core's in-memory store, on a ManualClock and tokio's paused time.
//!
//! The loop converts "due at T" (ManualClock) into a tokio sleep. Each test moves the ManualClock to the next
//! instant first and then lets tokio's paused time auto-advance to the loop's timer; the test publisher
//! records the tokio instant of every publish, so "fired exactly when due" is checked on both clocks and a
//! timer that fires early or late fails the assertion. Those tests claim nothing ahead ([`exact`]): with the
//! ManualClock already moved to the instant, a loop that wakes to claim ahead would see the instant reached
//! and publish at the earlier tokio time. The claim-ahead tests at the end run on [`TokioClock`] instead, where
//! the two clocks cannot disagree.
#![allow(clippy::unwrap_used)] // Test helpers may panic: that is how a test fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gateway_core::{
    AgentId, BackgroundLoop, Clock, CronJobStore, Event, EventPayload, EventPublisher, FencingToken, FiredReminder,
    IdempotencyKey, InMemoryCronJobStore, Leadership, MailboxEntry, MailboxQuery, MailboxStore, ManualClock,
    NewCronJob, PublishError, SingleProcessLeadership, SwitchableLeadership, Topic,
};
use gateway_cron::{
    CLAIM_LEASE, CronConfig, CronError, CronPorts, CronScheduler, DEFAULT_CLAIM_AHEAD, LoopProgress, MAX_DELAY_MS,
    fire_id,
};
use serde_json::{Map, Value, json};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

/// Publishes into a channel, stamping each event with tokio's (paused) time.
#[derive(Debug)]
struct ChannelPublisher {
    sender: mpsc::UnboundedSender<Fired>,
    failing: AtomicBool,
}

#[derive(Debug)]
struct Fired {
    topic: Topic,
    event: Event,
    at: Instant,
}

impl EventPublisher for ChannelPublisher {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(PublishError("bus down".into()));
        }
        let fired = Fired { topic: topic.clone(), event: event.clone(), at: Instant::now() };
        self.sender.send(fired).map_err(|_| PublishError("receiver gone".into()))
    }
}

struct Harness {
    clock: ManualClock,
    store: Arc<InMemoryCronJobStore>,
    publisher: Arc<ChannelPublisher>,
    fired: mpsc::UnboundedReceiver<Fired>,
    started: Instant,
    /// Set by [`Harness::on_tokio_time`]: schedulers read this instead of `clock`.
    tokio_clock: Option<TokioClock>,
}

/// START plus the paused tokio time elapsed since the harness was made: the scheduler's clock and its timers
/// move together.
#[derive(Debug, Clone, Copy)]
struct TokioClock {
    started: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> OffsetDateTime {
        START + (Instant::now() - self.started)
    }
}

impl Harness {
    fn new() -> Self {
        let (sender, fired) = mpsc::unbounded_channel();
        Self {
            clock: ManualClock::new(START),
            store: Arc::new(InMemoryCronJobStore::default()),
            publisher: Arc::new(ChannelPublisher { sender, failing: AtomicBool::new(false) }),
            fired,
            started: Instant::now(),
            tokio_clock: None,
        }
    }

    fn on_tokio_time() -> Self {
        let harness = Self::new();
        Self { tokio_clock: Some(TokioClock { started: harness.started }), ..harness }
    }

    fn scheduler_with(&self, leadership: Arc<dyn Leadership>, config: CronConfig) -> CronScheduler {
        let clock: Arc<dyn Clock> = match self.tokio_clock {
            Some(clock) => Arc::new(clock),
            None => Arc::new(self.clock.clone()),
        };
        let ports = CronPorts {
            store: Arc::clone(&self.store) as Arc<dyn CronJobStore>,
            storage: Arc::new(gateway_core::InMemoryAgentStorage {
                jobs: Arc::clone(&self.store),
                calls: Arc::default(),
            }),
            publisher: Arc::clone(&self.publisher) as Arc<dyn EventPublisher>,
            clock,
            leadership,
        };
        CronScheduler::new(ports, config)
    }

    /// A scheduler whose loop is running and idle.
    async fn running(&self, shutdown: &CancellationToken) -> (CronScheduler, watch::Receiver<LoopProgress>) {
        self.running_with(Arc::new(SingleProcessLeadership), exact(), shutdown).await
    }

    async fn running_with(
        &self,
        leadership: Arc<dyn Leadership>,
        config: CronConfig,
        shutdown: &CancellationToken,
    ) -> (CronScheduler, watch::Receiver<LoopProgress>) {
        let scheduler = self.scheduler_with(leadership, config);
        let mut progress = scheduler.progress();
        tokio::spawn({
            let scheduler = scheduler.clone();
            let shutdown = shutdown.clone();
            async move { scheduler.run(shutdown).await }
        });
        progress.wait_for(|progress| progress.cycles >= 1 && !progress.reloading).await.unwrap();
        (scheduler, progress)
    }

    async fn next_fire(&mut self) -> Fired {
        self.fired.recv().await.expect("publisher alive")
    }

    fn elapsed(&self, fired: &Fired) -> std::time::Duration {
        fired.at - self.started
    }

    fn nothing_fired(&mut self) -> bool {
        self.fired.try_recv().is_err()
    }
}

/// How many cycles the loop has finished; take it before doing what should make the loop run.
fn cycles(progress: &watch::Receiver<LoopProgress>) -> u64 {
    progress.borrow().cycles
}

/// Waits until the loop has finished a cycle after `seen` and has no window reload in flight (a reload that
/// lands later wakes the loop, which must not happen after the test moved the clock on).
async fn cycle_after(progress: &mut watch::Receiver<LoopProgress>, seen: u64) {
    progress.wait_for(|progress| progress.cycles > seen && !progress.reloading && !progress.writing).await.unwrap();
}

/// The defaults, but each fire claimed at its instant, not ahead of it (see the module comment).
fn exact() -> CronConfig {
    CronConfig { claim_ahead: std::time::Duration::ZERO, ..CronConfig::default() }
}

/// No periodic reload within a test's span, so the only timer is the next due fire and a ManualClock moved
/// ahead cannot be observed early by an unrelated wake-up.
fn quiet() -> CronConfig {
    CronConfig {
        lookahead: std::time::Duration::from_secs(7_200),
        refill_interval: std::time::Duration::from_secs(3_600),
        ..exact()
    }
}

/// Waits until the loop cycle that published the `count`-th reminder has ended (rows completed).
async fn settled(progress: &mut watch::Receiver<LoopProgress>, count: u64) {
    progress.wait_for(|progress| progress.fired >= count).await.unwrap();
}

fn agent(id: &str) -> AgentId {
    AgentId::new(id).unwrap()
}

fn payload(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

fn reminder_fields(event: &Event) -> (i64, OffsetDateTime, String, Map<String, Value>) {
    match &event.payload {
        EventPayload::Reminder { job_id, scheduled_for, fire_id, payload, .. } => {
            (*job_id, *scheduled_for, fire_id.clone(), payload.clone())
        }
        other => panic!("expected a reminder, got {other:?}"),
    }
}

fn secs(seconds: u64) -> std::time::Duration {
    std::time::Duration::from_secs(seconds)
}

#[tokio::test(start_paused = true)]
async fn a_one_time_job_fires_exactly_after_its_delay_then_its_row_is_gone() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;

    let seen = cycles(&progress);
    let job = scheduler.schedule_once(agent("agent-7"), 5_000, payload(json!({"task": "check_quota"}))).await.unwrap();
    assert_eq!(job.next_fire_at, START + Duration::seconds(5));
    assert!(job.is_one_time);
    assert_eq!(harness.store.len(), 1, "the row is written before the timer is armed");
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired());

    harness.clock.advance(Duration::seconds(5));
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(5), "the timer fires at the delay, not before or after");
    assert_eq!(fired.topic.to_string(), "agent:agent-7:scheduled");
    let (job_id, scheduled_for, fire, body) = reminder_fields(&fired.event);
    assert_eq!((job_id, scheduled_for), (job.id, START + Duration::seconds(5)));
    assert_eq!(fire, format!("{}:2026-02-22T12:00:05Z", job.id));
    assert_eq!(fired.event.id, fire, "the event id is the fire_id, so a refire keeps it");
    assert_eq!(fired.event.timestamp, START + Duration::seconds(5));
    assert_eq!(body["task"], "check_quota");

    settled(&mut progress, 1).await;
    assert!(harness.store.is_empty(), "a fired one-time row is deleted");
    assert!(harness.nothing_fired());
    assert_eq!(progress.borrow().fired, 1);
    shutdown.cancel();
}

fn key(text: &str) -> Option<IdempotencyKey> {
    Some(IdempotencyKey::new(text).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_repeated_key_schedules_once_and_the_reminder_fires_once() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;

    let seen = cycles(&progress);
    let reminder = || payload(json!({"task": "check_quota"}));
    let (first, replayed) =
        scheduler.schedule_once_idempotent(agent("agent-7"), 5_000, reminder(), key("reminder:k1")).await.unwrap();
    assert!(!replayed);
    // The retry arrives a second later: same request, and nothing new is written or armed.
    harness.clock.advance(Duration::seconds(1));
    let (again, replayed) =
        scheduler.schedule_once_idempotent(agent("agent-7"), 5_000, reminder(), key("reminder:k1")).await.unwrap();
    assert!(replayed, "the second call reports the reminder as already scheduled");
    assert_eq!(again, first, "with the first job, at the first instant");
    // A retry that asks for something else still gets the first job: the first request stands.
    let (other, replayed) = scheduler
        .schedule_once_idempotent(agent("agent-7"), 60_000, payload(json!({"task": "other"})), key("reminder:k1"))
        .await
        .unwrap();
    assert!(replayed);
    assert_eq!(other, first);
    assert_eq!(harness.store.len(), 1, "one row for one key");
    cycle_after(&mut progress, seen).await;

    harness.clock.advance(Duration::seconds(4));
    let fired = harness.next_fire().await;
    assert_eq!(fired.event.timestamp, START + Duration::seconds(5), "fired at the first request's instant");
    let (job_id, scheduled_for, _, body) = reminder_fields(&fired.event);
    assert_eq!((job_id, scheduled_for), (first.id, START + Duration::seconds(5)));
    assert_eq!(body["task"], "check_quota");
    settled(&mut progress, 1).await;
    assert!(harness.store.is_empty());
    // Well past the other request's delay: nothing else fires.
    harness.clock.advance(Duration::seconds(120));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(120)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired(), "the reminder fired once");
    assert_eq!(progress.borrow().fired, 1);

    // Its row is gone, so the key is free: a late retry schedules a new reminder.
    let (late, replayed) =
        scheduler.schedule_once_idempotent(agent("agent-7"), 1_000, reminder(), key("reminder:k1")).await.unwrap();
    assert!(!replayed);
    assert_ne!(late.id, first.id);
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_with_one_key_share_one_job_and_fail_no_one() {
    let harness = Harness::new();
    let scheduler = harness.scheduler_with(Arc::new(SingleProcessLeadership), CronConfig::default());
    // Tasks that overlap at every await: the group commit shares commits between them.
    let callers: Vec<_> = (0..16)
        .map(|caller| {
            let scheduler = scheduler.clone();
            tokio::spawn(async move {
                let shared = key(&format!("reminder:shared-{}", caller % 2));
                let own = key(&format!("reminder:own-{caller}"));
                let mut outcomes = Vec::new();
                for _ in 0..20 {
                    for idempotency_key in [shared.clone(), own.clone(), None] {
                        let outcome =
                            scheduler.schedule_once_idempotent(agent("a"), 1_000, Map::new(), idempotency_key);
                        outcomes.push(outcome.await.unwrap());
                    }
                }
                outcomes
            })
        })
        .collect();
    let mut shared_jobs = std::collections::BTreeMap::<i64, usize>::new();
    let mut created = 0;
    for (caller, task) in callers.into_iter().enumerate() {
        let outcomes = task.await.unwrap();
        let own: Vec<_> = outcomes.iter().skip(1).step_by(3).collect();
        assert!(!own[0].1 && own[1..].iter().all(|(job, replayed)| *replayed && job.id == own[0].0.id), "{caller}");
        for (job, replayed) in outcomes.iter().step_by(3) {
            *shared_jobs.entry(job.id).or_default() += 1;
            created += usize::from(!replayed);
        }
        assert!(outcomes.iter().skip(2).step_by(3).all(|(_, replayed)| !replayed), "no key, no replay");
    }
    assert_eq!(shared_jobs.len(), 2, "one job per shared key: {shared_jobs:?}");
    assert_eq!(created, 2, "each shared key's job was created by exactly one call");
    assert_eq!(harness.store.len(), 2 + 16 + 16 * 20);
}

#[tokio::test(start_paused = true)]
async fn invalid_delays_are_refused_before_anything_is_stored() {
    let harness = Harness::new();
    let scheduler = harness.scheduler_with(Arc::new(SingleProcessLeadership), CronConfig::default());
    for delay in [0, -1, -500, i64::MIN, MAX_DELAY_MS + 1, i64::MAX] {
        let refused = scheduler.schedule_once(agent("a"), delay, Map::new()).await.unwrap_err();
        assert_eq!(refused, CronError::InvalidDelay(delay));
        assert_eq!(refused.to_string(), format!("invalid delay_ms for schedule_reminder: {delay}"));
    }
    assert!(harness.store.is_empty());
    let longest = scheduler.schedule_once(agent("a"), MAX_DELAY_MS, Map::new()).await.unwrap();
    assert_eq!(longest.next_fire_at, START + Duration::milliseconds(MAX_DELAY_MS));
    let shortest = scheduler.schedule_once(agent("a"), 1, Map::new()).await.unwrap();
    assert_eq!(shortest.next_fire_at, START + Duration::milliseconds(1));
}

#[tokio::test(start_paused = true)]
async fn a_store_that_refuses_the_insert_reports_it_and_arms_nothing() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&shutdown).await;
    harness.store.failure.set_failing(true);
    assert!(matches!(scheduler.schedule_once(agent("a"), 10, Map::new()).await, Err(CronError::Store(_))));
    harness.store.failure.set_failing(false);
    harness.clock.advance(Duration::seconds(1));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(5)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_recurring_job_fires_each_instant_with_distinct_fire_ids_and_advances() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let seen = cycles(&progress);
    let job = scheduler.add_recurring(agent("agent-1"), "*/10 * * * * *", payload(json!({"n": 1}))).await.unwrap();
    assert_eq!(job.next_fire_at, START + Duration::seconds(10));
    assert_eq!(job.schedule.as_deref(), Some("*/10 * * * * *"));
    cycle_after(&mut progress, seen).await;

    let mut fire_ids = Vec::new();
    for round in 1..=3_i64 {
        harness.clock.advance(Duration::seconds(10));
        let fired = harness.next_fire().await;
        assert_eq!(harness.elapsed(&fired), secs(10 * round.unsigned_abs()));
        let (job_id, scheduled_for, fire, _) = reminder_fields(&fired.event);
        assert_eq!((job_id, scheduled_for), (job.id, START + Duration::seconds(10 * round)));
        fire_ids.push(fire);
        settled(&mut progress, round.unsigned_abs()).await;
        let stored = harness.store.cron_job(job.id).unwrap().unwrap();
        assert_eq!(stored.next_fire_at, START + Duration::seconds(10 * (round + 1)), "advanced past now");
    }
    fire_ids.dedup();
    assert_eq!(fire_ids.len(), 3);

    scheduler.remove(job.id).await.unwrap();
    assert_eq!(scheduler.remove(job.id).await, Err(CronError::NotFound(job.id)));
    harness.clock.advance(Duration::seconds(10));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(10)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired(), "a removed job stops");
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn missed_instants_of_a_recurring_job_fire_once_after_downtime() {
    let mut harness = Harness::new();
    // Written while no scheduler runs: due every minute from 12:01.
    let job = harness
        .store
        .insert_cron_job(&NewCronJob {
            agent_id: agent("agent-1"),
            schedule: Some("* * * * *".into()),
            next_fire_at: START + Duration::minutes(1),
            payload: Map::new(),
            is_one_time: false,
            idempotency_key: None,
            timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
            misfire_policy: gateway_core::MisfirePolicy::FireOnce,
            max_lateness_ms: None,
        })
        .unwrap();
    // Down for ten minutes and a half: ten instants missed.
    harness.clock.advance(Duration::seconds(10 * 60 + 30));
    let shutdown = CancellationToken::new();
    let (_scheduler, mut progress) = harness.running(&shutdown).await;
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(0), "overdue at start: fires at once");
    let (_, scheduled_for, fire, _) = reminder_fields(&fired.event);
    assert_eq!(scheduled_for, START + Duration::minutes(10), "the fire names the newest missed instant");
    assert_eq!(fire, fire_id(job.id, START + Duration::minutes(10)));
    settled(&mut progress, 1).await;
    let seen = cycles(&progress);
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired(), "once for all the missed instants");
    let stored = harness.store.cron_job(job.id).unwrap().unwrap();
    assert_eq!(stored.next_fire_at, START + Duration::minutes(11), "next instant strictly after now");
    shutdown.cancel();
}

/// A recurring job every minute from 12:01, written while no scheduler runs, under `policy`.
fn every_minute(harness: &Harness, policy: gateway_core::MisfirePolicy) -> gateway_core::CronJob {
    harness
        .store
        .insert_cron_job(&NewCronJob {
            agent_id: agent("agent-1"),
            schedule: Some("* * * * *".into()),
            next_fire_at: START + Duration::minutes(1),
            payload: Map::new(),
            is_one_time: false,
            idempotency_key: None,
            timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
            misfire_policy: policy,
            max_lateness_ms: None,
        })
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_skip_job_fires_none_of_its_missed_instants_and_records_each_as_skipped() {
    let mut harness = Harness::new();
    let job = every_minute(&harness, gateway_core::MisfirePolicy::Skip);
    // Down for ten minutes and a half: ten instants missed, the newest of them 30 s late (within the threshold,
    // so it is the one on time), the nine before it skipped.
    harness.clock.advance(Duration::seconds(10 * 60 + 30));
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&shutdown).await;
    let fired = harness.next_fire().await;
    let (_, scheduled_for, _, _) = reminder_fields(&fired.event);
    assert_eq!(scheduled_for, START + Duration::minutes(10), "only the instant on time fires");
    settled(&mut progress, 1).await;
    assert!(harness.nothing_fired());
    let runs = harness.store.cron_job_runs(job.id, 50).unwrap();
    let outcomes: Vec<_> = runs.iter().map(|run| (run.scheduled_for, run.outcome)).collect();
    let mut expected = vec![(START + Duration::minutes(10), gateway_core::RunOutcome::Fired)];
    expected.extend(
        (1..=9).rev().map(|minute| (START + Duration::minutes(minute), gateway_core::RunOutcome::SkippedMisfire)),
    );
    assert_eq!(outcomes, expected);
    assert_eq!(scheduler.stats().skipped_misfire.get(), 9);
    assert_eq!(scheduler.stats().fired.get(), 1);
    assert_eq!(harness.store.cron_job(job.id).unwrap().unwrap().next_fire_at, START + Duration::minutes(11));
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_fire_all_job_fires_each_missed_instant_with_its_own_fire_id() {
    let mut harness = Harness::new();
    let job = every_minute(&harness, gateway_core::MisfirePolicy::FireAll);
    harness.clock.advance(Duration::seconds(3 * 60 + 30));
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&shutdown).await;
    let mut fires = Vec::new();
    for _ in 0..3 {
        // Paused time: a minute of the scheduler's own sleeps, not of the test's; a missing fire fails, not hangs.
        let fired = tokio::time::timeout(secs(60), harness.next_fire()).await.expect("each missed instant fires");
        let (_, scheduled_for, fire, _) = reminder_fields(&fired.event);
        fires.push((scheduled_for, fire));
    }
    settled(&mut progress, 1).await;
    assert!(harness.nothing_fired(), "three instants missed, three fires");
    let expected: Vec<_> =
        (1..=3).map(|minute| START + Duration::minutes(minute)).map(|at| (at, fire_id(job.id, at))).collect();
    assert_eq!(fires, expected, "oldest first, each its own instant and fire_id");
    assert_eq!(harness.store.cron_job_runs(job.id, 50).unwrap().len(), 3, "each recorded in the mailbox");
    assert_eq!(scheduler.stats().fired.get(), 3);
    assert_eq!(harness.store.cron_job(job.id).unwrap().unwrap().next_fire_at, START + Duration::minutes(4));
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_reminder_later_than_its_max_lateness_is_recorded_skipped_late_and_not_published() {
    let mut harness = Harness::new();
    let reminder = |max_lateness_ms| NewCronJob {
        agent_id: agent("agent-3"),
        schedule: None,
        next_fire_at: START + Duration::seconds(1),
        payload: Map::new(),
        is_one_time: true,
        idempotency_key: None,
        timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
        misfire_policy: gateway_core::MisfirePolicy::FireOnce,
        max_lateness_ms,
    };
    let late = harness.store.insert_cron_job(&reminder(Some(5_000))).unwrap();
    let on_time = harness.store.insert_cron_job(&reminder(Some(60_000))).unwrap();
    // Both due while the gateway is down, found 10 s late.
    harness.clock.advance(Duration::seconds(11));
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&shutdown).await;
    let fired = harness.next_fire().await;
    assert_eq!(reminder_fields(&fired.event).0, on_time.id, "within its lateness: delivered");
    settled(&mut progress, 2).await;
    assert!(harness.nothing_fired(), "the late one is not published");
    let runs = harness.store.cron_job_runs(late.id, 10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, gateway_core::RunOutcome::SkippedLate);
    assert!(runs[0].lateness_ms() > 5_000, "{}", runs[0].lateness_ms());
    assert_eq!(harness.store.cron_job(late.id).unwrap(), None, "its row is gone as a fired one's is");
    assert_eq!(scheduler.stats().skipped_late.get(), 1);
    let entries = mailbox_of(&harness, "agent-3");
    assert_eq!(entries.len(), 1, "the mailbox holds the delivered one only");
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn overdue_rows_fire_at_start_and_future_rows_wait() {
    let mut harness = Harness::new();
    let row = |at: OffsetDateTime| NewCronJob {
        agent_id: agent("agent-2"),
        schedule: None,
        next_fire_at: at,
        payload: Map::new(),
        is_one_time: true,
        idempotency_key: None,
        timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
        misfire_policy: gateway_core::MisfirePolicy::FireOnce,
        max_lateness_ms: None,
    };
    let overdue = harness.store.insert_cron_job(&row(START - Duration::hours(3))).unwrap();
    let future = harness.store.insert_cron_job(&row(START + Duration::seconds(42))).unwrap();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let first = harness.next_fire().await;
    assert_eq!((reminder_fields(&first.event).0, harness.elapsed(&first)), (overdue.id, secs(0)));
    settled(&mut progress, 1).await;
    assert!(harness.nothing_fired());
    harness.clock.advance(Duration::seconds(42));
    let second = harness.next_fire().await;
    assert_eq!((reminder_fields(&second.event).0, harness.elapsed(&second)), (future.id, secs(42)));
    settled(&mut progress, 2).await;
    assert!(harness.store.is_empty());
    // For metrics: two fires, the overdue one three hours late (past every bound), the other on its instant.
    let stats = scheduler.stats();
    assert_eq!(stats.fired.get(), 2);
    let lateness = stats.lateness.snapshot();
    assert_eq!(lateness.count, 2);
    assert_eq!(lateness.buckets.first(), Some(&(0.001, 1)), "the fire on its instant is 0 s late");
    assert_eq!(lateness.buckets.last(), Some(&(300.0, 1)), "the overdue fire is above the last bound");
    assert!((lateness.sum_seconds - 3.0 * 3600.0).abs() < 1.0, "{}", lateness.sum_seconds);
    shutdown.cancel();
}

/// Schedules a one-time job 1 s out and lets it fire while deletes fail: publishing works, deleting does not,
/// the situation a crash between the two leaves behind. Returns the job and its first fire.
async fn fire_with_a_failing_delete(
    harness: &mut Harness,
    scheduler: &CronScheduler,
    progress: &mut watch::Receiver<LoopProgress>,
) -> (gateway_core::CronJob, Fired) {
    let seen = cycles(progress);
    let job = scheduler.schedule_once(agent("agent-3"), 1_000, Map::new()).await.unwrap();
    cycle_after(progress, seen).await;
    harness.store.completion_failure.set_failing(true);
    harness.clock.advance(Duration::seconds(1));
    let first = harness.next_fire().await;
    progress.wait_for(|progress| progress.failures == 1).await.unwrap();
    (job, first)
}

#[tokio::test(start_paused = true)]
async fn a_failed_delete_after_publishing_refires_with_the_same_fire_id() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&shutdown).await;
    let (job, first) = fire_with_a_failing_delete(&mut harness, &scheduler, &mut progress).await;
    assert!(!scheduler.health().report().healthy, "degraded while the store refuses writes");
    assert!(harness.store.cron_job(job.id).unwrap().is_some(), "the row survived the failed delete");
    harness.store.completion_failure.set_failing(false);

    // The claim holds for its lease; after it the same instant is claimed again and fires again.
    harness.clock.advance(Duration::try_from(CLAIM_LEASE).unwrap());
    let second = harness.next_fire().await;
    assert_eq!(second.event.id, first.event.id);
    assert_eq!(reminder_fields(&second.event).2, reminder_fields(&first.event).2);
    assert_eq!(reminder_fields(&second.event).2, fire_id(job.id, START + Duration::seconds(1)));
    settled(&mut progress, 2).await;
    assert!(harness.store.is_empty());
    assert!(scheduler.health().report().healthy, "recovered");
    assert!(harness.nothing_fired());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn after_a_crash_between_publish_and_delete_a_new_scheduler_refires_it() {
    let mut harness = Harness::new();
    let crashed = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&crashed).await;
    let (job, first) = fire_with_a_failing_delete(&mut harness, &scheduler, &mut progress).await;
    crashed.cancel();
    harness.store.completion_failure.set_failing(false);
    assert!(harness.store.claim_of(job.id).is_some(), "the dead scheduler's claim is still on the row");

    // The process comes back after the dead claim's lease ran out: the row fires at start, same fire_id.
    harness.clock.advance(Duration::try_from(CLAIM_LEASE).unwrap());
    let shutdown = CancellationToken::new();
    let (_restarted, mut progress) = harness.running(&shutdown).await;
    let refired = harness.next_fire().await;
    assert_eq!(refired.event.id, first.event.id);
    settled(&mut progress, 1).await;
    assert!(harness.store.is_empty());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn the_loop_survives_a_store_outage_reports_it_and_catches_up() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&shutdown).await;
    let seen = cycles(&progress);
    scheduler.schedule_once(agent("agent-4"), 2_000, Map::new()).await.unwrap();
    cycle_after(&mut progress, seen).await;

    harness.store.failure.set_failing(true);
    harness.clock.advance(Duration::seconds(2));
    progress.wait_for(|progress| progress.failures >= 3).await.unwrap();
    let report = scheduler.health().report();
    assert!(report.running && !report.healthy);
    assert!(report.problem.unwrap().contains("cannot reach the cron store"));
    assert!(harness.nothing_fired());

    harness.store.failure.set_failing(false);
    let fired = harness.next_fire().await;
    assert_eq!(reminder_fields(&fired.event).1, START + Duration::seconds(2));
    settled(&mut progress, 1).await;
    assert!(scheduler.health().report().healthy);
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn nothing_fires_without_leadership() {
    let mut harness = Harness::new();
    let leadership = Arc::new(SwitchableLeadership::default());
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) =
        harness.running_with(Arc::clone(&leadership) as Arc<dyn Leadership>, exact(), &shutdown).await;
    scheduler.schedule_once(agent("agent-5"), 1_000, Map::new()).await.unwrap();
    assert_eq!(harness.next_fire().await.topic, Topic::ScheduledJobs, "announced for whoever leads");
    harness.clock.advance(Duration::seconds(5));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(5)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired());
    assert_eq!(harness.store.len(), 1);

    leadership.set_leading(true);
    let fired = harness.next_fire().await;
    assert_eq!(reminder_fields(&fired.event).1, START + Duration::seconds(1));
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn two_loops_on_one_store_fire_each_instant_once() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (first, mut first_progress) = harness.running(&shutdown).await;
    let (second, mut second_progress) = harness.running(&shutdown).await;
    assert_ne!(first.claimer_id(), second.claimer_id());
    // Each loop learns of the other's jobs through its window reload.
    for delay in [1_000, 1_000, 2_000, 3_000] {
        first.schedule_once(agent("agent-6"), delay, Map::new()).await.unwrap();
        second.schedule_once(agent("agent-6"), delay, Map::new()).await.unwrap();
    }
    harness.clock.advance(Duration::seconds(10));
    let mut fire_ids = Vec::new();
    for _ in 0..8 {
        fire_ids.push(harness.next_fire().await.event.id);
    }
    let (first_seen, second_seen) = (cycles(&first_progress), cycles(&second_progress));
    cycle_after(&mut first_progress, first_seen).await;
    cycle_after(&mut second_progress, second_seen).await;
    assert!(harness.nothing_fired());
    fire_ids.sort();
    fire_ids.dedup();
    assert_eq!(fire_ids.len(), 8, "every instant fired exactly once across both loops");
    assert!(harness.store.is_empty());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_small_window_still_fires_every_job_in_order() {
    let mut harness = Harness::new();
    let config = CronConfig { window_capacity: 3, batch_size: 2, ..exact() };
    let shutdown = CancellationToken::new();
    let (scheduler, _progress) = harness.running_with(Arc::new(SingleProcessLeadership), config, &shutdown).await;
    // Scheduled in reverse so the bounded window keeps evicting later jobs.
    let mut expected = Vec::new();
    for step in (1..=12_i64).rev() {
        let job = scheduler.schedule_once(agent("agent-8"), step * 100, Map::new()).await.unwrap();
        expected.push((job.id, job.next_fire_at));
    }
    expected.sort_by_key(|(_, at)| *at);
    harness.clock.advance(Duration::seconds(2));
    let mut seen = Vec::new();
    for _ in 0..12 {
        let fired = harness.next_fire().await;
        let (job_id, scheduled_for, _, _) = reminder_fields(&fired.event);
        seen.push((job_id, scheduled_for));
    }
    assert_eq!(seen, expected);
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_publish_failure_keeps_the_row_and_refires_after_the_lease() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let seen = cycles(&progress);
    let job = scheduler.schedule_once(agent("agent-9"), 1_000, Map::new()).await.unwrap();
    cycle_after(&mut progress, seen).await;
    harness.publisher.failing.store(true, Ordering::SeqCst);
    harness.clock.advance(Duration::seconds(1));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(1)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.store.cron_job(job.id).unwrap().is_some());
    harness.publisher.failing.store(false, Ordering::SeqCst);
    harness.clock.advance(Duration::try_from(CLAIM_LEASE).unwrap());
    let fired = harness.next_fire().await;
    assert_eq!(fired.event.id, fire_id(job.id, START + Duration::seconds(1)));
    assert_eq!(harness.elapsed(&fired), secs(1) + CLAIM_LEASE);
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn api_lists_previews_and_rejects_bad_schedules() {
    let harness = Harness::new();
    let scheduler = harness.scheduler_with(Arc::new(SingleProcessLeadership), CronConfig::default());
    let recurring = scheduler.add_recurring(agent("a"), "0 9 * * mon-fri", Map::new()).await.unwrap();
    // 2026-02-22 is a Sunday: the next weekday mornings follow.
    assert_eq!(
        gateway_cron::preview(&recurring),
        vec![
            datetime!(2026-02-23 09:00:00 UTC),
            datetime!(2026-02-24 09:00:00 UTC),
            datetime!(2026-02-25 09:00:00 UTC),
            datetime!(2026-02-26 09:00:00 UTC),
            datetime!(2026-02-27 09:00:00 UTC),
        ]
    );
    let once = scheduler.schedule_once(agent("a"), 60_000, Map::new()).await.unwrap();
    assert_eq!(gateway_cron::preview(&once), vec![START + Duration::minutes(1)]);
    assert_eq!(scheduler.list(None, 10).await.unwrap().len(), 2);
    assert_eq!(scheduler.list(Some(recurring.id), 10).await.unwrap()[0].id, once.id);
    assert_eq!(scheduler.job(once.id).await.unwrap(), once);
    assert_eq!(scheduler.job(999).await, Err(CronError::NotFound(999)));
    for bad in ["", "* * *", "61 * * * *", "@reboot", "0 0 30 2 *"] {
        assert!(
            matches!(scheduler.add_recurring(agent("a"), bad, Map::new()).await, Err(CronError::InvalidSchedule(_))),
            "{bad}"
        );
    }
    assert_eq!(harness.store.len(), 2, "nothing stored for a refused schedule");
}

#[tokio::test(start_paused = true)]
async fn fires_are_claimed_ahead_and_published_exactly_at_their_instant() {
    let mut harness = Harness::on_tokio_time();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) =
        harness.running_with(Arc::new(SingleProcessLeadership), CronConfig::default(), &shutdown).await;
    let job = scheduler.schedule_once(agent("agent-10"), 5_000, Map::new()).await.unwrap();
    let claim_at = secs(5) - DEFAULT_CLAIM_AHEAD;
    tokio::time::sleep_until(harness.started + claim_at - std::time::Duration::from_millis(1)).await;
    assert!(harness.store.claim_of(job.id).is_none(), "not claimed before the margin");
    tokio::time::sleep_until(harness.started + claim_at + std::time::Duration::from_millis(1)).await;
    assert!(harness.store.claim_of(job.id).is_some(), "claimed ahead of the instant");
    assert!(harness.nothing_fired(), "but not published ahead of it");

    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(5));
    assert_eq!(fired.event.timestamp, START + Duration::seconds(5));
    assert_eq!(fired.event.id, fire_id(job.id, START + Duration::seconds(5)));
    settled(&mut progress, 1).await;
    assert!(harness.store.is_empty());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_publishes_what_it_already_claimed_on_time_and_completes_it() {
    let mut harness = Harness::on_tokio_time();
    let shutdown = CancellationToken::new();
    let scheduler = harness.scheduler_with(Arc::new(SingleProcessLeadership), CronConfig::default());
    let running = tokio::spawn({
        let scheduler = scheduler.clone();
        let shutdown = shutdown.clone();
        async move { scheduler.run(shutdown).await }
    });
    let job = scheduler.schedule_once(agent("agent-11"), 1_000, Map::new()).await.unwrap();
    let later = scheduler.schedule_once(agent("agent-11"), 60_000, Map::new()).await.unwrap();
    tokio::time::sleep(secs(1) - DEFAULT_CLAIM_AHEAD / 2).await;
    assert!(harness.store.claim_of(job.id).is_some());
    shutdown.cancel();
    running.await.unwrap();

    let fired = harness.next_fire().await;
    assert_eq!(
        (fired.event.id.clone(), harness.elapsed(&fired)),
        (fire_id(job.id, START + Duration::seconds(1)), secs(1))
    );
    assert!(harness.nothing_fired());
    assert_eq!(harness.store.cron_job(job.id).unwrap(), None, "completed before the loop returned");
    assert!(harness.store.cron_job(later.id).unwrap().is_some(), "unclaimed jobs stay for the next start");
}

/// Leadership that believes it leads under term 1 until the store fences it.
#[derive(Debug, Default)]
struct DeposedLeadership {
    fenced: std::sync::Mutex<Vec<FencingToken>>,
}

impl Leadership for DeposedLeadership {
    fn current(&self) -> Option<FencingToken> {
        self.fenced.lock().unwrap().is_empty().then_some(FencingToken(1))
    }

    fn fenced(&self, token: FencingToken) {
        self.fenced.lock().unwrap().push(token);
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_fenced_by_a_newer_term_fires_nothing_and_steps_down() {
    let mut harness = Harness::new();
    let leadership = Arc::new(DeposedLeadership::default());
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) =
        harness.running_with(Arc::clone(&leadership) as Arc<dyn Leadership>, exact(), &shutdown).await;
    let job = scheduler.schedule_once(agent("agent-12"), 1_000, Map::new()).await.unwrap();
    // Meanwhile another instance took over under term 2 (it wrote to the store, which raised the epoch).
    let newer = gateway_core::ClaimLease {
        owner: "new-leader".into(),
        token: FencingToken(2),
        now: START,
        due_by: START,
        expires_at: START + Duration::seconds(10),
    };
    assert!(harness.store.claim_fires(&[job.id + 1000], &newer).unwrap().is_empty());

    harness.clock.advance(Duration::seconds(5));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(5)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired(), "a deposed leader published a reminder");
    assert_eq!(*leadership.fenced.lock().unwrap(), [FencingToken(1)], "the loop told its leadership");
    assert_eq!(harness.store.claim_of(job.id), None, "and claimed nothing");
    assert_eq!(harness.store.len(), 1, "the row waits for the new leader");
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_job_scheduled_where_another_instance_leads_is_announced_and_the_leader_fires_it_on_time() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    // The leader reloads its window only every hour: only the announcement can arm the job in time.
    let (leader, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let follower = harness.scheduler_with(Arc::new(SwitchableLeadership::default()), quiet());

    let job = follower.schedule_once(agent("agent-5"), 2_000, Map::new()).await.unwrap();
    let announced = harness.next_fire().await;
    assert_eq!(announced.topic, Topic::ScheduledJobs);
    match announced.event.payload {
        EventPayload::JobScheduled { job_id, next_fire_at } => {
            assert_eq!((job_id, next_fire_at), (job.id, job.next_fire_at))
        }
        other => panic!("expected a job announcement, got {other:?}"),
    }
    let seen = cycles(&progress);
    follower.arm_announced(job.id, job.next_fire_at);
    leader.arm_announced(job.id, job.next_fire_at);
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired());

    harness.clock.advance(Duration::seconds(2));
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(2), "fired at its instant, not at the leader's next refill");
    assert_eq!(reminder_fields(&fired.event).0, job.id);
    settled(&mut progress, 1).await;

    // Beyond the lookahead the leader's refill arms it in time: nothing to announce.
    follower.schedule_once(agent("agent-5"), 3 * 3_600_000, Map::new()).await.unwrap();
    assert!(harness.nothing_fired());
    shutdown.cancel();
}

/// Every entry of `agent`'s mailbox in the harness's store, received or not.
fn mailbox_of(harness: &Harness, agent_id: &str) -> Vec<MailboxEntry> {
    let query = MailboxQuery { agent_id: agent(agent_id), unreceived_only: false, after: 0, through: None, limit: 100 };
    harness.store.mailbox_entries(&query).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_fire_is_recorded_in_its_agents_mailbox_by_the_write_that_completes_it() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let seen = cycles(&progress);
    let job = scheduler.schedule_once(agent("agent-7"), 1_000, payload(json!({"task": "check_quota"}))).await.unwrap();
    cycle_after(&mut progress, seen).await;
    // Published at an instant with sub-millisecond digits, which events do not write.
    harness.clock.advance(Duration::seconds(1) + Duration::nanoseconds(1_001_500));
    let fired = harness.next_fire().await;
    settled(&mut progress, 1).await;

    let entries = mailbox_of(&harness, "agent-7");
    assert_eq!(entries.len(), 1, "{entries:?}");
    let recorded = &entries[0];
    assert_eq!(recorded.received_at, None);
    assert_eq!(recorded.reminder.fire_id, fire_id(job.id, START + Duration::seconds(1)));
    assert_eq!(recorded.reminder.payload, payload(json!({"task": "check_quota"})));
    assert_eq!(fired.event.timestamp, START + Duration::seconds(1) + Duration::milliseconds(1));
    assert_eq!(recorded.reminder.event(), fired.event, "a replay of the entry is the very event published");
    assert!(harness.store.is_empty(), "and the same write deleted the row");
    assert!(mailbox_of(&harness, "agent-8").is_empty());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_refire_after_a_crash_records_its_fire_once() {
    let mut harness = Harness::new();
    let crashed = CancellationToken::new();
    let (scheduler, mut progress) = harness.running(&crashed).await;
    let (job, first) = fire_with_a_failing_delete(&mut harness, &scheduler, &mut progress).await;
    crashed.cancel();
    assert!(mailbox_of(&harness, "agent-3").is_empty(), "the failed completion recorded nothing");
    harness.store.completion_failure.set_failing(false);

    // A completion of this fire that recorded it but no longer held its claim (a predecessor that stalled past
    // its lease): the record is there before the refire.
    let recorded = FiredReminder::from_event_json(&first.event.to_json()).unwrap();
    harness.store.complete_fires("predecessor", FencingToken(1), &[], std::slice::from_ref(&recorded)).unwrap();

    harness.clock.advance(Duration::try_from(CLAIM_LEASE).unwrap());
    let shutdown = CancellationToken::new();
    let (_restarted, mut progress) = harness.running(&shutdown).await;
    let refired = harness.next_fire().await;
    assert_eq!(refired.event.id, first.event.id);
    settled(&mut progress, 1).await;
    assert!(harness.store.is_empty(), "the refire completed the row");
    let entries = mailbox_of(&harness, "agent-3");
    assert_eq!(entries.iter().map(|entry| &entry.reminder).collect::<Vec<_>>(), [&recorded], "recorded once");
    assert_eq!(entries[0].reminder.fire_id, fire_id(job.id, START + Duration::seconds(1)));
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_recurring_job_records_each_instant_it_fires() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let seen = cycles(&progress);
    let job = scheduler.add_recurring(agent("agent-7"), "* * * * * *", Map::new()).await.unwrap();
    cycle_after(&mut progress, seen).await;
    for n in 1..=3 {
        harness.clock.advance(Duration::seconds(1));
        harness.next_fire().await;
        settled(&mut progress, n).await;
    }
    let recorded: Vec<String> =
        mailbox_of(&harness, "agent-7").into_iter().map(|entry| entry.reminder.fire_id).collect();
    let expected: Vec<String> = (1..=3).map(|n| fire_id(job.id, START + Duration::seconds(n))).collect();
    assert_eq!(recorded, expected, "one entry per instant, in firing order");
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_paused_recurring_job_fires_nothing_and_once_on_resume_for_the_instants_it_missed() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let seen = cycles(&progress);
    let job = scheduler.add_recurring(agent("agent-1"), "*/10 * * * * *", Map::new()).await.unwrap();
    assert!(!job.paused);
    cycle_after(&mut progress, seen).await;

    let paused = scheduler.pause(job.id).await.unwrap();
    assert_eq!(paused, gateway_core::CronJob { paused: true, ..job.clone() });
    assert_eq!(scheduler.pause(job.id).await.unwrap(), paused, "pausing a paused job changes nothing");
    // Three instants go by: 12:00:10, :20 and :30.
    harness.clock.advance(Duration::seconds(35));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(35)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired(), "a paused job does not fire");
    assert_eq!(harness.store.cron_job(job.id).unwrap(), Some(paused), "its row stays as it was");

    let resumed = scheduler.resume(job.id).await.unwrap();
    assert_eq!(resumed, job, "resumed at the first instant it missed");
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(35), "at once, not at the next reload");
    let (_, scheduled_for, fire, _) = reminder_fields(&fired.event);
    assert_eq!(scheduled_for, START + Duration::seconds(30), "the fire names the newest missed instant");
    assert_eq!(fire, fire_id(job.id, START + Duration::seconds(30)));
    settled(&mut progress, 1).await;
    assert!(harness.nothing_fired(), "once for all the missed instants");
    let stored = harness.store.cron_job(job.id).unwrap().unwrap();
    assert_eq!(stored.next_fire_at, START + Duration::seconds(40), "then the schedule, from now");
    assert_eq!(scheduler.resume(job.id).await.unwrap(), stored, "resuming a running job changes nothing");

    harness.clock.advance(Duration::seconds(5));
    let fired = harness.next_fire().await;
    assert_eq!(reminder_fields(&fired.event).1, START + Duration::seconds(40));
    settled(&mut progress, 2).await;
    assert!(harness.nothing_fired(), "a second resume armed no second fire");
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_one_time_job_paused_past_its_instant_fires_once_on_resume() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (scheduler, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let seen = cycles(&progress);
    let job = scheduler.schedule_once(agent("agent-2"), 5_000, Map::new()).await.unwrap();
    cycle_after(&mut progress, seen).await;
    assert!(scheduler.pause(job.id).await.unwrap().paused);

    harness.clock.advance(Duration::seconds(10));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(10)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired(), "its instant passed while it was paused");
    assert_eq!(harness.store.len(), 1, "the row stays");

    scheduler.resume(job.id).await.unwrap();
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(10), "at once, not at the next reload");
    assert_eq!(reminder_fields(&fired.event).1, START + Duration::seconds(5));
    settled(&mut progress, 1).await;
    assert!(harness.store.is_empty(), "fired, then deleted as any one-time job");
    assert!(harness.nothing_fired());
    assert_eq!(scheduler.pause(job.id).await, Err(CronError::NotFound(job.id)));
    assert_eq!(scheduler.resume(job.id).await, Err(CronError::NotFound(job.id)));
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_pause_on_a_follower_stops_the_leaders_fire_and_a_resume_there_is_announced() {
    let mut harness = Harness::new();
    let shutdown = CancellationToken::new();
    let (leader, mut progress) = harness.running_with(Arc::new(SingleProcessLeadership), quiet(), &shutdown).await;
    let follower = harness.scheduler_with(Arc::new(SwitchableLeadership::default()), quiet());
    let seen = cycles(&progress);
    let job = leader.add_recurring(agent("agent-3"), "*/10 * * * * *", Map::new()).await.unwrap();
    cycle_after(&mut progress, seen).await;

    // The leader's window still holds the job: only the store's refusal to claim a paused row stops it.
    follower.pause(job.id).await.unwrap();
    harness.clock.advance(Duration::seconds(10));
    let seen = cycles(&progress);
    tokio::time::sleep(secs(10)).await;
    cycle_after(&mut progress, seen).await;
    assert!(harness.nothing_fired(), "paused on a follower: the leader does not fire it");

    follower.resume(job.id).await.unwrap();
    let announced = harness.next_fire().await;
    assert_eq!(announced.topic, Topic::ScheduledJobs, "the leader is told, as of a new job");
    match announced.event.payload {
        EventPayload::JobScheduled { job_id, next_fire_at } => {
            assert_eq!((job_id, next_fire_at), (job.id, START + Duration::seconds(10)));
            leader.arm_announced(job_id, next_fire_at);
        }
        other => panic!("expected a job announcement, got {other:?}"),
    }
    // The leader reloads only hourly here: the announcement alone arms the missed instant.
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(10), "at once, not at the next reload");
    assert_eq!(reminder_fields(&fired.event).1, START + Duration::seconds(10));
    settled(&mut progress, 1).await;
    shutdown.cancel();
}

/// Leads under a fixed term.
#[derive(Debug)]
struct TermLeadership(u64);

impl Leadership for TermLeadership {
    fn current(&self) -> Option<FencingToken> {
        Some(FencingToken(self.0))
    }
}

/// A reminder due in 1 s that a leader of term 1 claimed (for [`CLAIM_LEASE`]) and never published: it was killed.
/// Returns the job and the instant it is due.
fn claimed_by_a_dead_leader(harness: &Harness) -> (gateway_core::CronJob, OffsetDateTime) {
    let due = START + Duration::seconds(1);
    let job = harness
        .store
        .insert_cron_job(&NewCronJob {
            agent_id: agent("agent-deposed"),
            schedule: None,
            next_fire_at: due,
            payload: Map::new(),
            is_one_time: true,
            idempotency_key: None,
            timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
            misfire_policy: gateway_core::MisfirePolicy::FireOnce,
            max_lateness_ms: None,
        })
        .unwrap();
    let lease = gateway_core::ClaimLease {
        owner: "killed-leader".into(),
        token: FencingToken(1),
        now: START,
        due_by: due,
        expires_at: START + Duration::try_from(CLAIM_LEASE).unwrap(),
    };
    assert_eq!(harness.store.claim_fires(&[job.id], &lease).unwrap().len(), 1);
    (job, due)
}

/// The next leader (term 2) fires a reminder its killed predecessor had claimed at its instant, not when the dead
/// claim's lease ends (docs/scheduler.md, guarantee 3): same fire_id, the row completed.
#[tokio::test(start_paused = true)]
async fn a_new_term_fires_a_deposed_leaders_claimed_reminder_on_time_not_after_its_lease() {
    let mut harness = Harness::on_tokio_time();
    let (job, due) = claimed_by_a_dead_leader(&harness);
    let shutdown = CancellationToken::new();
    let (_scheduler, mut progress) = harness.running_with(Arc::new(TermLeadership(2)), exact(), &shutdown).await;
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), secs(1), "fired at its instant, {CLAIM_LEASE:?} lease notwithstanding");
    assert_eq!(fired.event.id, fire_id(job.id, due));
    settled(&mut progress, 1).await;
    assert!(harness.store.is_empty(), "the new term completed it");
    shutdown.cancel();
}

/// Within one term a claim is another claimer's until its lease ends: a second scheduler of term 1 waits for it.
#[tokio::test(start_paused = true)]
async fn a_claimer_of_the_same_term_waits_out_the_lease() {
    let mut harness = Harness::on_tokio_time();
    let (job, due) = claimed_by_a_dead_leader(&harness);
    let shutdown = CancellationToken::new();
    let (_scheduler, mut progress) = harness.running_with(Arc::new(TermLeadership(1)), exact(), &shutdown).await;
    let fired = harness.next_fire().await;
    assert_eq!(harness.elapsed(&fired), CLAIM_LEASE, "after the lease, not at the instant");
    assert_eq!(fired.event.id, fire_id(job.id, due));
    settled(&mut progress, 1).await;
    shutdown.cancel();
}
