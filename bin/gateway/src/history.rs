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
    sources: HistorySources,
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
        let state = State { last: totals(&sources), ..State::default() };
        Self { inner: Arc::new(Inner { store, clock, sources, interval, state: Mutex::new(state) }) }
    }

    /// Reads the counters, and writes what changed since the last flush (with anything a failed flush left).
    pub(crate) async fn flush(&self) {
        let inner = &self.inner;
        let hour = hour_start(inner.clock.now());
        let cutoff = hour - HISTORY_RETENTION;
        let (added, raised, prune) = {
            let mut state = lock(&inner.state);
            let now = totals(&inner.sources);
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
            let peak = inner.sources.cron.stats().lateness_peak_ms.take();
            if fires > 0 {
                pending.raise(hour, HistorySeries::CronLatenessMaxMs, WHOLE_GATEWAY, peak);
            }
            let live = u64::try_from(inner.sources.heartbeat.tracked_count()).unwrap_or(u64::MAX);
            pending.raise(hour, HistorySeries::LiveAgents, WHOLE_GATEWAY, live);
            for (webhook_id, [delivered, failed_retrying, dead]) in inner.sources.webhooks.stats().by_config.take() {
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
