//! Helpers of the cron benchmark (`cargo bench -p cron-bench`); the benchmark itself is benches/cron.rs.

use std::time::Duration;

/// Lateness of fires: how long after its instant each job was published (negative: before it).
#[derive(Debug, Clone, PartialEq)]
pub struct Lateness {
    /// Signed lateness in microseconds, sorted ascending.
    sorted_micros: Vec<i64>,
}

impl Lateness {
    pub fn new(mut micros: Vec<i64>) -> Self {
        micros.sort_unstable();
        Self { sorted_micros: micros }
    }

    pub fn len(&self) -> usize {
        self.sorted_micros.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted_micros.is_empty()
    }

    /// The `percent`-th percentile (nearest rank), in microseconds; `None` without samples.
    pub fn percentile(&self, percent: f64) -> Option<i64> {
        if self.sorted_micros.is_empty() {
            return None;
        }
        let rank = (percent / 100.0 * self.sorted_micros.len() as f64).ceil() as usize;
        self.sorted_micros.get(rank.clamp(1, self.sorted_micros.len()) - 1).copied()
    }

    pub fn min(&self) -> Option<i64> {
        self.sorted_micros.first().copied()
    }

    pub fn max(&self) -> Option<i64> {
        self.sorted_micros.last().copied()
    }

    /// `p50 / p99 / max` as milliseconds, for the report.
    pub fn summary(&self) -> String {
        let ms = |micros: Option<i64>| micros.map_or("-".to_owned(), |micros| format!("{:.2} ms", micros as f64 / 1e3));
        format!(
            "min {}  p50 {}  p99 {}  max {}  ({} fires)",
            ms(self.min()),
            ms(self.percentile(50.0)),
            ms(self.percentile(99.0)),
            ms(self.max()),
            self.len()
        )
    }
}

/// Events per second, for the report.
pub fn rate(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let lateness = Lateness::new((1..=100).rev().collect());
        assert_eq!(lateness.percentile(50.0), Some(50));
        assert_eq!(lateness.percentile(99.0), Some(99));
        assert_eq!(lateness.percentile(100.0), Some(100));
        assert_eq!(lateness.percentile(0.0), Some(1));
        assert_eq!((lateness.min(), lateness.max()), (Some(1), Some(100)));
        assert_eq!(Lateness::new(vec![]).percentile(50.0), None);
        assert_eq!(
            Lateness::new(vec![-3, 7]).summary(),
            "min -0.00 ms  p50 -0.00 ms  p99 0.01 ms  max 0.01 ms  (2 fires)"
        );
    }

    #[test]
    fn rates() {
        assert_eq!(rate(20_000, Duration::from_millis(500)), 40_000.0);
    }
}
