//! What the components count as it happens, for the gateway's `GET /metrics` (docs/operations.md, "Metrics"):
//! plain atomic counters and fixed-bucket histograms that a component bumps on its own path and the binary reads
//! at scrape time. Recording is a relaxed atomic add or three, with no lock, no allocation and no label lookup, so
//! that counting costs the hot paths next to nothing; what the numbers are called and how they are exposed is the
//! binary's business, so the component crates need no metrics library.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A count that only goes up (until the process ends).
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    pub fn increment(&self) {
        self.add(1);
    }

    pub fn add(&self, count: u64) {
        self.0.fetch_add(count, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A distribution of durations over fixed upper bounds (each bucket counts the observations at most its bound, as
/// Prometheus' `le` does, kept here per bucket and summed at read time). Observations above the last bound count
/// only in the total.
#[derive(Debug)]
pub struct DurationHistogram {
    bounds: &'static [Duration],
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A histogram read at one moment: cumulative bucket counts by upper bound in seconds, the total count and the
/// sum of the observations in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl DurationHistogram {
    /// `bounds` must ascend.
    pub fn new(bounds: &'static [Duration]) -> Self {
        debug_assert!(bounds.windows(2).all(|pair| pair[0] < pair[1]), "histogram bounds must ascend");
        Self {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: Duration) {
        if let Some(bucket) = self.bounds.iter().position(|bound| value <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        // Nanoseconds in a u64 overflow after 584 years of summed observations.
        self.sum_nanos.fetch_add(u64::try_from(value.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// How many observations so far (cheaper than a snapshot, for skipping series nothing was observed in).
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The counts so far. Read without a lock while others observe, so a snapshot may miss an observation that
    /// is half recorded; the next one has it.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0_u64;
        let buckets = self
            .bounds
            .iter()
            .zip(self.buckets.iter())
            .map(|(bound, bucket)| {
                cumulative = cumulative.saturating_add(bucket.load(Ordering::Relaxed));
                (bound.as_secs_f64(), cumulative)
            })
            .collect();
        // The total never shows fewer observations than the buckets do.
        let count = self.count.load(Ordering::Relaxed).max(cumulative);
        let sum_seconds = Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed)).as_secs_f64();
        HistogramSnapshot { buckets, count, sum_seconds }
    }
}

/// Bounds for how late a reminder is published after its instant: the scheduler claims ahead and usually
/// publishes within a millisecond or two; the long tail is a gateway that was down or overloaded.
pub const LATENESS_BOUNDS: &[Duration] = &[
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(300),
];

/// Bounds for how long one eviction pass takes: a pass that finds nobody silent is an index probe (well under a
/// millisecond to a few); one that evicts a crowd writes and announces every agent, seconds for 100,000.
pub const EVICTION_PASS_BOUNDS: &[Duration] = &[
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
];

/// What the heartbeat manager counts.
#[derive(Debug)]
pub struct HeartbeatStats {
    /// Heartbeats accepted (their row committed).
    pub accepted: Counter,
    /// Agents evicted by this instance's checks.
    pub evicted: Counter,
    /// How long each of this instance's eviction passes took, from the pass's start to its last announcement.
    pub eviction_passes: DurationHistogram,
}

impl Default for HeartbeatStats {
    fn default() -> Self {
        Self {
            accepted: Counter::new(),
            evicted: Counter::new(),
            eviction_passes: DurationHistogram::new(EVICTION_PASS_BOUNDS),
        }
    }
}

/// What the cron scheduler counts.
#[derive(Debug)]
pub struct CronStats {
    /// Reminders published.
    pub fired: Counter,
    /// Missed instants of `skip` jobs, recorded and not published.
    pub skipped_misfire: Counter,
    /// One-time reminders later than their `max_lateness_ms`, recorded and not published.
    pub skipped_late: Counter,
    /// Each published reminder's lateness: when it was published minus the instant it was scheduled for.
    pub lateness: DurationHistogram,
    /// The latest fire's lateness in ms since the hourly history's last flush.
    pub lateness_peak_ms: Peak,
}

impl Default for CronStats {
    fn default() -> Self {
        Self {
            fired: Counter::new(),
            skipped_misfire: Counter::new(),
            skipped_late: Counter::new(),
            lateness: DurationHistogram::new(LATENESS_BOUNDS),
            lateness_peak_ms: Peak::new(),
        }
    }
}

/// What the webhook router counts: each outbound attempt, and each recorded attempt by where it left its delivery.
#[derive(Debug, Default)]
pub struct DeliveryStats {
    /// Outbound attempts made (a POST sent, or tried and failed before an answer).
    pub attempts: Counter,
    /// Attempts that left their delivery delivered (a 2xx).
    pub delivered: Counter,
    /// Attempts that failed with another attempt scheduled.
    pub failed_retrying: Counter,
    /// Attempts that failed and left their delivery dead (no attempt left).
    pub dead: Counter,
    /// Inbound webhooks answered `duplicate` (a replay within the window): nothing stored.
    pub inbound_duplicates: Counter,
    /// Reads of the config id list made because an inbound request named an id the instance did not know.
    pub config_id_reads: Counter,
    /// New deliveries written already claimed, their attempt started at once: the insert and the attempt's
    /// record are their only commits.
    pub enqueued_claimed: Counter,
    /// New deliveries written unclaimed (no slot or start free at once, or the config disabled): each costs a
    /// claim commit more before its attempt, or waits for a poll.
    pub enqueued_unclaimed: Counter,
    /// The recorded attempts per webhook config since the last history flush took them.
    pub by_config: ConfigTally,
}

/// Where an attempt left its delivery, as [`ConfigTally`] counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TalliedAttempt {
    Delivered,
    FailedRetrying,
    Dead,
}

/// Recorded attempts per webhook config, `[delivered, failed_retrying, dead]`, until the hourly history's flush
/// takes them (every few seconds): a short lock per attempt, which the attempt's own database write dwarfs. As
/// many entries as configs with attempts since the last flush.
#[derive(Debug, Default)]
pub struct ConfigTally(std::sync::Mutex<std::collections::BTreeMap<i64, [u64; 3]>>);

impl ConfigTally {
    pub fn count(&self, webhook_id: i64, outcome: TalliedAttempt) {
        let slot = match outcome {
            TalliedAttempt::Delivered => 0,
            TalliedAttempt::FailedRetrying => 1,
            TalliedAttempt::Dead => 2,
        };
        let mut counts = crate::runtime::sync::lock(&self.0);
        let counts = counts.entry(webhook_id).or_default();
        counts[slot] = counts[slot].saturating_add(1);
    }

    /// The counts since the last take, and from zero again.
    pub fn take(&self) -> std::collections::BTreeMap<i64, [u64; 3]> {
        std::mem::take(&mut *crate::runtime::sync::lock(&self.0))
    }
}

/// The largest value seen since the last [`Peak::take`] (a relaxed atomic maximum).
#[derive(Debug, Default)]
pub struct Peak(AtomicU64);

impl Peak {
    pub const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    pub fn raise(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }

    pub fn take(&self) -> u64 {
        self.0.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up() {
        let counter = Counter::new();
        assert_eq!(counter.get(), 0);
        counter.increment();
        counter.add(41);
        assert_eq!(counter.get(), 42);
    }

    const BOUNDS: &[Duration] = &[Duration::from_millis(10), Duration::from_millis(100), Duration::from_secs(1)];

    #[test]
    fn a_histogram_counts_each_observation_in_the_first_bucket_that_holds_it_and_reads_cumulatively() {
        let histogram = DurationHistogram::new(BOUNDS);
        assert_eq!(
            histogram.snapshot(),
            HistogramSnapshot { buckets: vec![(0.01, 0), (0.1, 0), (1.0, 0)], count: 0, sum_seconds: 0.0 }
        );
        for millis in [0, 10, 11, 100, 999, 1_000, 1_001, 60_000] {
            histogram.observe(Duration::from_millis(millis));
        }
        let snapshot = histogram.snapshot();
        // A bound is inclusive (Prometheus' `le`); above the last bound counts only in the total (`+Inf`).
        assert_eq!(snapshot.buckets, vec![(0.01, 2), (0.1, 4), (1.0, 6)]);
        assert_eq!(snapshot.count, 8);
        assert_eq!(histogram.count(), 8);
        assert!((snapshot.sum_seconds - 63.121).abs() < 1e-9, "{}", snapshot.sum_seconds);
    }

    #[test]
    fn concurrent_observations_are_all_counted() {
        let histogram = std::sync::Arc::new(DurationHistogram::new(BOUNDS));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let histogram = std::sync::Arc::clone(&histogram);
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        histogram.observe(Duration::from_millis(50));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.buckets, vec![(0.01, 0), (0.1, 4_000), (1.0, 4_000)]);
        assert_eq!(snapshot.count, 4_000);
        assert!((snapshot.sum_seconds - 200.0).abs() < 1e-6);
    }

    #[test]
    fn the_lateness_bounds_ascend() {
        assert!(LATENESS_BOUNDS.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(CronStats::default().lateness.snapshot().buckets.len(), LATENESS_BOUNDS.len());
    }
}
