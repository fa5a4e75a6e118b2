//! The gateway's own activity per hour (docs/api.md, "History"): what the console charts for the last day. Each
//! instance counts in memory and flushes every few seconds into one small table (`gateway_history`), so the
//! history is durable and shared by every instance, and costs one write per flush, never one per event.
//!
//! A row is (hour, series, subject): `subject_id` 0 is the whole gateway, another value a webhook config's id (the
//! delivery series only). Counters are added to ([`HistoryStore::record_history`]'s `added`), maxima and gauges only
//! raised (`raised`), so instances flushing in any order sum and agree. Rows older than [`HISTORY_RETENTION`] are
//! pruned: the table holds at most 48 hours x the series x (1 + the configs with deliveries in those hours).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use time::OffsetDateTime;

use crate::ports::failure::FailureSwitch;
use crate::ports::store::StoreError;
use crate::runtime::sync::lock;

/// How long hourly rows are kept.
pub const HISTORY_RETENTION: Duration = Duration::from_secs(48 * 3600);
/// The most hours a history read may ask for.
pub const MAX_HISTORY_HOURS: u32 = 48;
/// The subject of the whole gateway's series.
pub const WHOLE_GATEWAY: i64 = 0;

/// One series of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HistorySeries {
    /// Deliveries delivered (an attempt answered 2xx), per hour. Also per webhook config.
    Deliveries,
    /// Attempts that failed (retrying or dead). Also per webhook config.
    FailedAttempts,
    /// Deliveries that went dead (no attempt left). Also per webhook config.
    DeadLetters,
    /// Heartbeats accepted.
    Heartbeats,
    /// The most agents live at once in the hour, as instances sampled it.
    LiveAgents,
    /// Reminders and cron jobs fired.
    CronFires,
    /// The latest fire of the hour: publication minus its scheduled instant, in ms.
    CronLatenessMaxMs,
    /// The sum of the hour's fires' lateness, in ms (with [`Self::CronFires`], the average).
    CronLatenessTotalMs,
}

impl HistorySeries {
    pub const ALL: [Self; 8] = [
        Self::Deliveries,
        Self::FailedAttempts,
        Self::DeadLetters,
        Self::Heartbeats,
        Self::LiveAgents,
        Self::CronFires,
        Self::CronLatenessMaxMs,
        Self::CronLatenessTotalMs,
    ];

    /// The name stored in `gateway_history.series`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deliveries => "deliveries",
            Self::FailedAttempts => "failed_attempts",
            Self::DeadLetters => "dead_letters",
            Self::Heartbeats => "heartbeats",
            Self::LiveAgents => "live_agents",
            Self::CronFires => "cron_fires",
            Self::CronLatenessMaxMs => "cron_lateness_max_ms",
            Self::CronLatenessTotalMs => "cron_lateness_total_ms",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|series| series.as_str() == name)
    }
}

impl fmt::Display for HistorySeries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value of one series, subject and hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HistoryPoint {
    /// The start of the hour (whole hours of UTC).
    pub hour_start: OffsetDateTime,
    pub series: HistorySeries,
    /// [`WHOLE_GATEWAY`] or a webhook config's id.
    pub subject_id: i64,
    pub value: i64,
}

/// `at`'s hour: its start, in whole hours of UTC.
pub fn hour_start(at: OffsetDateTime) -> OffsetDateTime {
    let seconds = at.unix_timestamp();
    OffsetDateTime::from_unix_timestamp(seconds - seconds.rem_euclid(3600)).unwrap_or(at)
}

/// The hourly history of the gateway's own activity (`gateway_history`).
pub trait HistoryStore: Send + Sync + fmt::Debug {
    /// One flush of an instance, in one transaction: each of `added` is added to its row's value (the row made at
    /// 0 first), each of `raised` becomes its row's value when it is larger (made if absent).
    fn record_history(&self, added: &[HistoryPoint], raised: &[HistoryPoint]) -> Result<(), StoreError>;

    /// Every stored point of `subject_id` whose hour starts at or after `from`, in hour then series order.
    fn history(&self, from: OffsetDateTime, subject_id: i64) -> Result<Vec<HistoryPoint>, StoreError>;

    /// Deletes every row whose hour starts before `before`; how many.
    fn prune_history(&self, before: OffsetDateTime) -> Result<usize, StoreError>;
}

/// `gateway_history` in memory. [`Self::failure`] makes every operation report [`StoreError::Unavailable`].
#[derive(Debug, Default)]
pub struct InMemoryHistoryStore {
    rows: Mutex<BTreeMap<(OffsetDateTime, i64, HistorySeries), i64>>,
    pub failure: FailureSwitch,
}

impl HistoryStore for InMemoryHistoryStore {
    fn record_history(&self, added: &[HistoryPoint], raised: &[HistoryPoint]) -> Result<(), StoreError> {
        self.failure.check()?;
        let mut rows = lock(&self.rows);
        for point in added {
            let value = rows.entry((point.hour_start, point.subject_id, point.series)).or_insert(0);
            *value = value.saturating_add(point.value);
        }
        for point in raised {
            let value = rows.entry((point.hour_start, point.subject_id, point.series)).or_insert(point.value);
            *value = (*value).max(point.value);
        }
        Ok(())
    }

    fn history(&self, from: OffsetDateTime, subject_id: i64) -> Result<Vec<HistoryPoint>, StoreError> {
        self.failure.check()?;
        let mut points: Vec<HistoryPoint> = lock(&self.rows)
            .iter()
            .filter(|((hour_start, subject, _), _)| *hour_start >= from && *subject == subject_id)
            .map(|(&(hour_start, subject_id, series), &value)| HistoryPoint { hour_start, series, subject_id, value })
            .collect();
        points.sort_by_key(|point| (point.hour_start, point.series.as_str()));
        Ok(points)
    }

    fn prune_history(&self, before: OffsetDateTime) -> Result<usize, StoreError> {
        self.failure.check()?;
        let mut rows = lock(&self.rows);
        let held = rows.len();
        rows.retain(|(hour_start, _, _), _| *hour_start >= before);
        Ok(held - rows.len())
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    crate::history_store_conformance!(Some(Box::<InMemoryHistoryStore>::default()));

    #[test]
    fn an_instant_falls_in_the_hour_that_starts_at_its_whole_hour() {
        assert_eq!(hour_start(datetime!(2026-02-22 12:59:59.999 UTC)), datetime!(2026-02-22 12:00 UTC));
        assert_eq!(hour_start(datetime!(2026-02-22 13:00 UTC)), datetime!(2026-02-22 13:00 UTC));
        assert_eq!(hour_start(datetime!(1969-12-31 23:30 UTC)), datetime!(1969-12-31 23:00 UTC));
    }

    #[test]
    fn every_series_parses_back_from_its_name() {
        for series in HistorySeries::ALL {
            assert_eq!(HistorySeries::parse(series.as_str()), Some(series));
        }
        assert_eq!(HistorySeries::parse("nothing"), None);
    }
}
