//! Helpers of the webhook benchmark (`cargo bench -p webhook-bench`); the benchmark itself is
//! benches/webhooks.rs.

use std::time::Duration;

/// A sample of durations, for percentiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    sorted: Vec<Duration>,
}

impl Sample {
    pub fn new(mut durations: Vec<Duration>) -> Self {
        durations.sort_unstable();
        Self { sorted: durations }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The nearest-rank percentile (`fraction` in 0..=1); zero for an empty sample.
    pub fn percentile(&self, fraction: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = (fraction.clamp(0.0, 1.0) * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1]
    }
}

/// Events per second.
pub fn rate(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// A duration in milliseconds with three decimals, for the report.
pub fn millis(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let sample = Sample::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(sample.percentile(0.5), Duration::from_millis(50));
        assert_eq!(sample.percentile(0.99), Duration::from_millis(99));
        assert_eq!(sample.percentile(1.0), Duration::from_millis(100));
        assert_eq!(sample.percentile(0.0), Duration::from_millis(1));
        assert_eq!(Sample::new(Vec::new()).percentile(0.5), Duration::ZERO);
        assert_eq!(rate(10, Duration::from_secs(2)), 5.0);
        assert_eq!(millis(Duration::from_micros(1500)), "1.500 ms");
    }
}
