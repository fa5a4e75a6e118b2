//! Recurring jobs in a time zone, fired by the real loop on the in-memory store across real DST transitions
//! (DESIGN 17): a wall-clock time in the spring-forward gap fires once at the first instant after it, one in the
//! fall-back overlap once at its first occurrence. Two zones, one per hemisphere, both directions.
//!
//! The scheduler's clock is an injectable one that starts just before a transition and moves with tokio's paused
//! time, so the loop sleeps to each instant and the test sees every fire at the very instant it was published; a
//! second clock, a ManualClock, stands for a gateway that was down across a transition.
#![allow(clippy::unwrap_used)] // Test helpers may panic: that is how a test fails.

use std::sync::Arc;

use gateway_core::{
    AgentId, BackgroundLoop, Clock, CronJobStore, Event, EventPayload, EventPublisher, InMemoryAgentStorage,
    InMemoryCronJobStore, ManualClock, PublishError, SingleProcessLeadership, Topic,
};
use gateway_cron::{CronConfig, CronError, CronPorts, CronScheduler, preview, preview_local};
use serde_json::Map;
use time::OffsetDateTime;
use time::macros::datetime;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// `base` plus the paused tokio time elapsed since `started`.
#[derive(Debug, Clone, Copy)]
struct PausedClock {
    base: OffsetDateTime,
    started: Instant,
}

impl Clock for PausedClock {
    fn now(&self) -> OffsetDateTime {
        self.base + (Instant::now() - self.started)
    }
}

#[derive(Debug)]
struct ChannelPublisher(mpsc::UnboundedSender<Event>);

impl EventPublisher for ChannelPublisher {
    fn publish(&self, _topic: &Topic, event: &Event) -> Result<(), PublishError> {
        self.0.send(event.clone()).map_err(|_| PublishError("receiver gone".into()))
    }
}

/// Claimed at the instant, and few wake-ups besides the fires over simulated days.
fn config() -> CronConfig {
    CronConfig {
        claim_ahead: std::time::Duration::ZERO,
        lookahead: std::time::Duration::from_secs(7_200),
        refill_interval: std::time::Duration::from_secs(3_600),
        ..CronConfig::default()
    }
}

fn scheduler(
    store: &Arc<InMemoryCronJobStore>,
    clock: Arc<dyn Clock>,
    events: mpsc::UnboundedSender<Event>,
) -> CronScheduler {
    let ports = CronPorts {
        store: Arc::clone(store) as Arc<dyn CronJobStore>,
        storage: Arc::new(InMemoryAgentStorage { jobs: Arc::clone(store), calls: Arc::default() }),
        publisher: Arc::new(ChannelPublisher(events)),
        clock,
        leadership: Arc::new(SingleProcessLeadership),
    };
    CronScheduler::new(ports, config())
}

/// The first `count` fires of `schedule` read in `timezone`, from `start` on: each fire's `scheduled_for`, after
/// checking it was published at that very instant (the event's timestamp is the publishing clock's now).
async fn fires(schedule: &str, timezone: &str, start: OffsetDateTime, count: usize) -> Vec<OffsetDateTime> {
    let store = Arc::new(InMemoryCronJobStore::default());
    let clock = PausedClock { base: start, started: Instant::now() };
    let (sender, mut events) = mpsc::unbounded_channel();
    let scheduler = scheduler(&store, Arc::new(clock), sender);
    let agent = AgentId::new("agent-zoned").unwrap();
    let (job, _) = scheduler.add_recurring_in(agent, schedule, timezone, Map::new(), None).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
        async move { scheduler.run(shutdown).await }
    });
    let mut instants = Vec::with_capacity(count);
    while instants.len() < count {
        let event = events.recv().await.unwrap();
        let EventPayload::Reminder { job_id, scheduled_for, .. } = event.payload else { panic!("{event:?}") };
        assert_eq!(job_id, job.id);
        assert_eq!(event.timestamp, scheduled_for, "{schedule} in {timezone}: published at its instant");
        instants.push(scheduled_for);
    }
    shutdown.cancel();
    running.await.unwrap();
    instants
}

#[tokio::test(start_paused = true)]
async fn new_york_spring_forward_fires_the_missing_0230_at_0300_once() {
    // 2027-03-14 02:00 EST (07:00Z) becomes 03:00 EDT.
    let daily = fires("30 2 * * *", "America/New_York", datetime!(2027-03-13 00:00 UTC), 3).await;
    assert_eq!(
        daily,
        [datetime!(2027-03-13 07:30 UTC), datetime!(2027-03-14 07:00 UTC), datetime!(2027-03-15 06:30 UTC)]
    );
    // 2026-03-08, the year before: the same rule.
    let daily = fires("30 2 * * *", "America/New_York", datetime!(2026-03-07 12:00 UTC), 2).await;
    assert_eq!(daily, [datetime!(2026-03-08 07:00 UTC), datetime!(2026-03-09 06:30 UTC)]);
    // Every 30 minutes: 01:30 EST, then 03:00 EDT once for 02:00, 02:30 and 03:00, then 03:30 EDT.
    let half_hourly = fires("*/30 * * * *", "America/New_York", datetime!(2027-03-14 06:15 UTC), 3).await;
    assert_eq!(
        half_hourly,
        [datetime!(2027-03-14 06:30 UTC), datetime!(2027-03-14 07:00 UTC), datetime!(2027-03-14 07:30 UTC)]
    );
}

#[tokio::test(start_paused = true)]
async fn new_york_fall_back_fires_the_repeated_0130_once_at_its_first_occurrence() {
    // 2026-11-01 02:00 EDT (06:00Z) becomes 01:00 EST: 01:30 happens at 05:30Z and again at 06:30Z.
    let daily = fires("30 1 * * *", "America/New_York", datetime!(2026-10-31 00:00 UTC), 3).await;
    assert_eq!(
        daily,
        [datetime!(2026-10-31 05:30 UTC), datetime!(2026-11-01 05:30 UTC), datetime!(2026-11-02 06:30 UTC)]
    );
    // Every 30 minutes: the repeated hour's :00 and :30 do not fire again, so an hour passes without a fire.
    let half_hourly = fires("*/30 * * * *", "America/New_York", datetime!(2026-11-01 04:45 UTC), 4).await;
    assert_eq!(
        half_hourly,
        [
            datetime!(2026-11-01 05:00 UTC),
            datetime!(2026-11-01 05:30 UTC),
            datetime!(2026-11-01 07:00 UTC),
            datetime!(2026-11-01 07:30 UTC),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn sydney_fall_back_and_spring_forward_in_the_southern_hemisphere() {
    // 2026-04-05 03:00 AEDT (16:00Z the day before) becomes 02:00 AEST: 02:30 at 15:30Z, and again at 16:30Z.
    let daily = fires("30 2 * * *", "Australia/Sydney", datetime!(2026-04-03 12:00 UTC), 3).await;
    assert_eq!(
        daily,
        [datetime!(2026-04-03 15:30 UTC), datetime!(2026-04-04 15:30 UTC), datetime!(2026-04-05 16:30 UTC)]
    );
    // 2027-04-04, the same in the next year, every 30 minutes between 02:00 and 03:59.
    let half_hourly = fires("*/30 2-3 * * *", "Australia/Sydney", datetime!(2027-04-03 14:50 UTC), 4).await;
    assert_eq!(
        half_hourly,
        [
            datetime!(2027-04-03 15:00 UTC),
            datetime!(2027-04-03 15:30 UTC),
            datetime!(2027-04-03 17:00 UTC),
            datetime!(2027-04-03 17:30 UTC),
        ]
    );
    // 2026-10-04 02:00 AEST (16:00Z the day before) becomes 03:00 AEDT: 02:30 fires at 03:00 AEDT.
    let daily = fires("30 2 * * *", "Australia/Sydney", datetime!(2026-10-02 12:00 UTC), 3).await;
    assert_eq!(
        daily,
        [datetime!(2026-10-02 16:30 UTC), datetime!(2026-10-03 16:00 UTC), datetime!(2026-10-04 15:30 UTC)]
    );
}

/// A gateway down across the spring-forward gap (ManualClock moved past it at once): the missed instant fires once
/// on start, and the job's next instant is the zone's, computed from now.
#[tokio::test(start_paused = true)]
async fn after_a_downtime_across_the_gap_the_next_instant_is_the_zones() {
    let store = Arc::new(InMemoryCronJobStore::default());
    let clock = ManualClock::new(datetime!(2027-03-13 12:00 UTC));
    let (sender, mut events) = mpsc::unbounded_channel();
    let scheduler = scheduler(&store, Arc::new(clock.clone()), sender);
    let agent = AgentId::new("agent-zoned").unwrap();
    let (job, _) = scheduler.add_recurring_in(agent, "30 2 * * *", "America/New_York", Map::new(), None).await.unwrap();
    assert_eq!(job.next_fire_at, datetime!(2027-03-14 07:00 UTC));
    assert_eq!(job.timezone, "America/New_York");
    assert_eq!(
        preview_local(&job)[..2],
        ["2027-03-14T03:00:00-04:00".to_owned(), "2027-03-15T02:30:00-04:00".to_owned()]
    );
    assert_eq!(preview(&job)[1], datetime!(2027-03-15 06:30 UTC));

    // Down from before the gap until 2027-03-14 12:00Z (08:00 EDT).
    clock.set(datetime!(2027-03-14 12:00 UTC));
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
        async move { scheduler.run(shutdown).await }
    });
    let event = events.recv().await.unwrap();
    let EventPayload::Reminder { scheduled_for, .. } = event.payload else { panic!("{event:?}") };
    assert_eq!(scheduled_for, datetime!(2027-03-14 07:00 UTC), "the missed 03:00 EDT fires once");
    let advanced = loop {
        let row = store.cron_job(job.id).unwrap().unwrap();
        if row.next_fire_at != job.next_fire_at {
            break row;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(advanced.next_fire_at, datetime!(2027-03-15 06:30 UTC), "02:30 EDT the next day");
    assert_eq!(advanced.timezone, "America/New_York");
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn an_unknown_zone_is_refused_and_nothing_is_stored() {
    let store = Arc::new(InMemoryCronJobStore::default());
    let (sender, _events) = mpsc::unbounded_channel();
    let clock = ManualClock::new(datetime!(2027-03-13 12:00 UTC));
    let scheduler = scheduler(&store, Arc::new(clock), sender);
    let agent = AgentId::new("agent-zoned").unwrap();
    let refused = scheduler.add_recurring_in(agent, "30 2 * * *", "US/Atlantis", Map::new(), None).await;
    assert_eq!(refused.unwrap_err(), CronError::UnknownTimezone("`US/Atlantis`".to_owned()));
    assert!(store.is_empty());
}
