//! The hourly history this instance adds to (docs/operations.md, "The last 24 hours"): every
//! [`HISTORY_FLUSH_INTERVAL_MS`] (`--history-flush-interval-ms`) it reads the components' own counters (the ones `/metrics` shows), takes the
//! differences since its last flush and writes them into `gateway_history` in one transaction through
//! [`HistoryStore::record_history`], so counting costs the hot paths nothing beyond what they already count, and the
//! database one transaction per flush however much traffic there was. Counters are added, so every instance's
//! share sums; the live agents (this instance's count of its liveness map) and the latest cron fire are raised, so
//! the hour shows the largest any instance saw. A flush that fails is kept and written with the next one; rows older
//! than [`HISTORY_RETENTION`] are deleted at the first flush of each hour.
//!
//! A flush's points count in the hour the flush happens in: an event up to one interval before an hour's start may
//! count in the hour after it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::ports::history::{HISTORY_RETENTION, WHOLE_GATEWAY, hour_start};
use gateway_core::runtime::sync::lock;
use gateway_core::{BackgroundLoop, Clock, HistoryPoint, HistorySeries, HistoryStore, run_blocking};
use gateway_cron::CronScheduler;
use gateway_heartbeat::HeartbeatManager;
use gateway_webhooks::WebhookRouter;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

/// How often each instance writes what it counted (`--history-flush-interval-ms`'s default).
pub(crate) const HISTORY_FLUSH_INTERVAL_MS: u64 = 5_000;

/// The components whose counters the history reads.
#[derive(Debug, Clone)]
pub(crate) struct HistorySources {
    pub(crate) heartbeat: HeartbeatManager,
    pub(crate) webhooks: WebhookRouter,
    pub(crate) cron: CronScheduler,
}

/// One reading of what the history is made of: the cumulative counters, and what is taken at each reading (the
/// attempts per webhook config and the latest fire since the last reading), with the live agents now.
#[derive(Debug, Default)]
struct Reading {
    totals: Totals,
    by_config: BTreeMap<i64, [u64; 3]>,
    lateness_peak_ms: u64,
    live_agents: u64,
}

/// Where the counters come from: the components, or a test's numbers.
trait Counters: std::fmt::Debug + Send + Sync {
    /// The cumulative counters alone (nothing taken).
    fn totals(&self) -> Totals;
    /// Everything, taking what is taken.
    fn read(&self) -> Reading;
}

impl Counters for HistorySources {
    fn totals(&self) -> Totals {
        totals(self)
    }

    fn read(&self) -> Reading {
        Reading {
            totals: totals(self),
            by_config: self.webhooks.stats().by_config.take(),
            lateness_peak_ms: self.cron.stats().lateness_peak_ms.take(),
            live_agents: u64::try_from(self.heartbeat.tracked_count()).unwrap_or(u64::MAX),
        }
    }
}

/// The counters as the last flush read them.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    heartbeats: u64,
    delivered: u64,
    failed_retrying: u64,
    dead: u64,
    cron_fires: u64,
    lateness_ms: u64,
}

/// What is waiting to be written: the sums to add and the values to raise, by (hour, series, subject).
#[derive(Debug, Default)]
struct Pending {
    added: BTreeMap<(OffsetDateTime, HistorySeries, i64), i64>,
    raised: BTreeMap<(OffsetDateTime, HistorySeries, i64), i64>,
}

impl Pending {
    fn add(&mut self, hour: OffsetDateTime, series: HistorySeries, subject: i64, value: u64) {
        if value > 0 {
            let sum = self.added.entry((hour, series, subject)).or_insert(0);
            *sum = sum.saturating_add(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    fn raise(&mut self, hour: OffsetDateTime, series: HistorySeries, subject: i64, value: u64) {
        let peak = self.raised.entry((hour, series, subject)).or_insert(0);
        *peak = (*peak).max(i64::try_from(value).unwrap_or(i64::MAX));
    }

    /// Forgets what a store that was down for longer than the retention would delete anyway.
    fn drop_before(&mut self, before: OffsetDateTime) {
        self.added.retain(|(hour, _, _), _| *hour >= before);
        self.raised.retain(|(hour, _, _), _| *hour >= before);
    }

    fn points(map: &BTreeMap<(OffsetDateTime, HistorySeries, i64), i64>) -> Vec<HistoryPoint> {
        map.iter()
            .map(|(&(hour_start, series, subject_id), &value)| HistoryPoint { hour_start, series, subject_id, value })
            .collect()
    }
}

/// This instance's share of the hourly history. Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub(crate) struct HistoryRecorder {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn HistoryStore>,
    clock: Arc<dyn Clock>,
    sources: Box<dyn Counters>,
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last: Totals,
    pending: Pending,
    /// The hour whose old rows were last pruned.
    pruned: Option<OffsetDateTime>,
}

impl HistoryRecorder {
    pub(crate) fn new(
        store: Arc<dyn HistoryStore>,
        clock: Arc<dyn Clock>,
        sources: HistorySources,
        interval: Duration,
    ) -> Self {
        Self::reading(store, clock, Box::new(sources), interval)
    }

    fn reading(
        store: Arc<dyn HistoryStore>,
        clock: Arc<dyn Clock>,
        sources: Box<dyn Counters>,
        interval: Duration,
    ) -> Self {
        let state = State { last: sources.totals(), ..State::default() };
        Self { inner: Arc::new(Inner { store, clock, sources, interval, state: Mutex::new(state) }) }
    }

    /// Reads the counters, and writes what changed since the last flush (with anything a failed flush left).
    pub(crate) async fn flush(&self) {
        let inner = &self.inner;
        let hour = hour_start(inner.clock.now());
        let cutoff = hour - HISTORY_RETENTION;
        let (added, raised, prune) = {
            let mut state = lock(&inner.state);
            let reading = inner.sources.read();
            let now = reading.totals;
            let last = std::mem::replace(&mut state.last, now);
            let pending = &mut state.pending;
            let failed = |totals: &Totals| totals.failed_retrying.saturating_add(totals.dead);
            let delivered = now.delivered.saturating_sub(last.delivered);
            pending.add(hour, HistorySeries::Deliveries, WHOLE_GATEWAY, delivered);
            pending.add(hour, HistorySeries::FailedAttempts, WHOLE_GATEWAY, failed(&now).saturating_sub(failed(&last)));
            pending.add(hour, HistorySeries::DeadLetters, WHOLE_GATEWAY, now.dead.saturating_sub(last.dead));
            pending.add(hour, HistorySeries::Heartbeats, WHOLE_GATEWAY, now.heartbeats.saturating_sub(last.heartbeats));
            let fires = now.cron_fires.saturating_sub(last.cron_fires);
            pending.add(hour, HistorySeries::CronFires, WHOLE_GATEWAY, fires);
            let lateness = now.lateness_ms.saturating_sub(last.lateness_ms);
            pending.add(hour, HistorySeries::CronLatenessTotalMs, WHOLE_GATEWAY, lateness);
            if fires > 0 {
                pending.raise(hour, HistorySeries::CronLatenessMaxMs, WHOLE_GATEWAY, reading.lateness_peak_ms);
            }
            pending.raise(hour, HistorySeries::LiveAgents, WHOLE_GATEWAY, reading.live_agents);
            for (webhook_id, [delivered, failed_retrying, dead]) in reading.by_config {
                pending.add(hour, HistorySeries::Deliveries, webhook_id, delivered);
                pending.add(hour, HistorySeries::FailedAttempts, webhook_id, failed_retrying.saturating_add(dead));
                pending.add(hour, HistorySeries::DeadLetters, webhook_id, dead);
            }
            pending.drop_before(cutoff);
            let prune = state.pruned != Some(hour);
            (Pending::points(&state.pending.added), Pending::points(&state.pending.raised), prune)
        };
        let store = Arc::clone(&inner.store);
        let written = run_blocking(move || {
            store.record_history(&added, &raised)?;
            if prune {
                store.prune_history(cutoff)?;
            }
            Ok::<_, gateway_core::StoreError>(())
        })
        .await;
        match written {
            Ok(Ok(())) => {
                let mut state = lock(&inner.state);
                // What was written; the counters read meanwhile wait for the next flush.
                state.pending = Pending::default();
                if prune {
                    state.pruned = Some(hour);
                }
            }
            Ok(Err(error)) => tracing::warn!(%error, "cannot write the hourly history; kept for the next flush"),
            Err(error) => tracing::warn!(%error, "cannot write the hourly history; kept for the next flush"),
        }
    }
}

/// The cumulative counters the history is made of.
fn totals(sources: &HistorySources) -> Totals {
    let (heartbeat, webhooks, cron) = (sources.heartbeat.stats(), sources.webhooks.stats(), sources.cron.stats());
    let lateness = cron.lateness.snapshot();
    Totals {
        heartbeats: heartbeat.accepted.get(),
        delivered: webhooks.delivered.get(),
        failed_retrying: webhooks.failed_retrying.get(),
        dead: webhooks.dead.get(),
        cron_fires: lateness.count,
        // Milliseconds, rounded down: what an average over an hour of fires needs.
        lateness_ms: (lateness.sum_seconds * 1_000.0) as u64,
    }
}

/// Flushes every interval, and once more when `shutdown` is cancelled.
impl BackgroundLoop for HistoryRecorder {
    fn name(&self) -> &'static str {
        "history"
    }

    async fn run(&self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.inner.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                _ = tick.tick() => self.flush().await,
            }
        }
        self.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use gateway_core::ports::history::HISTORY_RETENTION;
    use gateway_core::{InMemoryHistoryStore, ManualClock};
    use time::macros::datetime;

    use super::*;

    /// A test's counters: set by hand, taken like the components'.
    #[derive(Debug, Default)]
    struct Numbers(Mutex<Reading>);

    impl Counters for Arc<Numbers> {
        fn totals(&self) -> Totals {
            lock(&self.0).totals
        }

        fn read(&self) -> Reading {
            let mut reading = lock(&self.0);
            Reading {
                totals: reading.totals,
                by_config: std::mem::take(&mut reading.by_config),
                lateness_peak_ms: std::mem::take(&mut reading.lateness_peak_ms),
                live_agents: reading.live_agents,
            }
        }
    }

    fn value(store: &InMemoryHistoryStore, from: OffsetDateTime, subject: i64, series: HistorySeries) -> Option<i64> {
        store.history(from, subject).unwrap().into_iter().find(|point| point.series == series).map(|point| point.value)
    }

    /// A flush writes the differences since the last one (not the totals since start), per config too; one that
    /// the store refuses is kept and written with the next, so nothing is counted twice or lost; the first flush
    /// of an hour deletes what is older than the retention.
    #[tokio::test]
    async fn flushes_write_differences_keep_what_failed_and_prune_once_an_hour() {
        let store = Arc::new(InMemoryHistoryStore::default());
        let clock = ManualClock::new(datetime!(2026-02-22 12:10 UTC));
        let hour = datetime!(2026-02-22 12:00 UTC);
        let numbers = Arc::new(Numbers::default());
        lock(&numbers.0).totals.heartbeats = 100;
        let old = HistoryPoint {
            hour_start: hour - HISTORY_RETENTION - Duration::from_secs(3600),
            series: HistorySeries::Heartbeats,
            subject_id: WHOLE_GATEWAY,
            value: 1,
        };
        store.record_history(&[old], &[]).unwrap();
        let recorder = HistoryRecorder::reading(
            store.clone(),
            Arc::new(clock.clone()),
            Box::new(Arc::clone(&numbers)),
            Duration::from_secs(5),
        );

        {
            let mut reading = lock(&numbers.0);
            reading.totals.heartbeats = 105;
            reading.totals.dead = 1;
            reading.live_agents = 4;
            reading.by_config.insert(7, [0, 0, 1]);
        }
        recorder.flush().await;
        assert_eq!(value(&store, hour, 0, HistorySeries::Heartbeats), Some(5), "the difference since start");
        assert_eq!(value(&store, hour, 0, HistorySeries::LiveAgents), Some(4));
        assert_eq!(value(&store, hour, 7, HistorySeries::DeadLetters), Some(1));
        assert_eq!(value(&store, hour, 7, HistorySeries::FailedAttempts), Some(1));
        assert!(store.history(old.hour_start, 0).unwrap().iter().all(|point| point.hour_start >= hour), "pruned");

        store.failure.set_failing(true);
        lock(&numbers.0).totals.heartbeats = 108;
        lock(&numbers.0).by_config.insert(7, [2, 0, 0]);
        recorder.flush().await;
        store.failure.set_failing(false);
        lock(&numbers.0).totals.heartbeats = 110;
        recorder.flush().await;
        assert_eq!(value(&store, hour, 0, HistorySeries::Heartbeats), Some(10), "5 + the kept 3 + 2");
        assert_eq!(value(&store, hour, 7, HistorySeries::Deliveries), Some(2), "the failed flush's tally was kept");

        lock(&numbers.0).live_agents = 2;
        recorder.flush().await;
        assert_eq!(value(&store, hour, 0, HistorySeries::LiveAgents), Some(4), "the hour keeps its highest");
        assert_eq!(value(&store, hour, 0, HistorySeries::Heartbeats), Some(10), "nothing new, nothing added");

        clock.advance(time::Duration::hours(1));
        lock(&numbers.0).totals.heartbeats = 111;
        recorder.flush().await;
        let next = hour + time::Duration::hours(1);
        assert_eq!(value(&store, next, 0, HistorySeries::Heartbeats), Some(1), "counted in the hour of its flush");
        assert_eq!(value(&store, next, 0, HistorySeries::LiveAgents), Some(2));
    }
}
