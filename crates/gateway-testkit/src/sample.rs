//! Measurements for the reports: nearest-rank percentiles, rates, sizes from the environment.

use std::time::Duration;

/// A sample of measurements (durations, signed microseconds, ...), sorted once for nearest-rank percentiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample<T> {
    sorted: Vec<T>,
}

impl<T: Ord + Copy> Sample<T> {
    pub fn new(mut values: Vec<T>) -> Self {
        values.sort_unstable();
        Self { sorted: values }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The `percent`-th percentile by nearest rank: the smallest value with at least `percent` % of the sample
    /// at or below it (`percent` is clamped to 0..=100, and 0 gives the minimum). `None` for an empty sample.
    pub fn percentile(&self, percent: f64) -> Option<T> {
        let count = self.sorted.len();
        if count == 0 {
            return None;
        }
        // NaN saturates to rank 0, which the clamp turns into the minimum.
        let rank = (percent.clamp(0.0, 100.0) / 100.0 * count as f64).ceil() as usize;
        self.sorted.get(rank.clamp(1, count) - 1).copied()
    }

    pub fn min(&self) -> Option<T> {
        self.sorted.first().copied()
    }

    pub fn max(&self) -> Option<T> {
        self.sorted.last().copied()
    }
}

impl<T: Ord + Copy> FromIterator<T> for Sample<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        Self::new(values.into_iter().collect())
    }
}

/// Events per second; a zero `elapsed` counts as the smallest positive time rather than dividing by zero.
pub fn rate(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// A duration in milliseconds with three decimals, for the reports.
pub fn millis(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1000.0)
}

/// A size from the environment variable `name`, `default` when it is unset.
///
/// # Panics
/// When the variable is set to something that is not a whole number: a benchmark run with a mistyped size
/// would otherwise measure the default and look like it measured what was asked.
pub fn env_size(name: &str, default: usize) -> usize {
    match size_or(std::env::var(name).ok().as_deref(), default) {
        Ok(size) => size,
        Err(value) => panic!("{name}={value:?} is not a whole number"),
    }
}

fn size_or(value: Option<&str>, default: usize) -> Result<usize, &str> {
    value.map_or(Ok(default), |value| value.trim().parse().map_err(|_| value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_of_durations() {
        let sample: Sample<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(sample.percentile(50.0), Some(Duration::from_millis(50)));
        assert_eq!(sample.percentile(99.0), Some(Duration::from_millis(99)));
        assert_eq!(sample.percentile(99.5), Some(Duration::from_millis(100)));
        assert_eq!(sample.percentile(100.0), Some(Duration::from_millis(100)));
        assert_eq!(sample.percentile(0.0), Some(Duration::from_millis(1)));
        assert_eq!(sample.percentile(250.0), Some(Duration::from_millis(100)));
        assert_eq!(sample.percentile(f64::NAN), Some(Duration::from_millis(1)));
        assert_eq!((sample.len(), sample.is_empty()), (100, false));
    }

    #[test]
    fn signed_samples_and_small_ones() {
        // Lateness can be negative: a fire published before its instant.
        let lateness = Sample::new(vec![7_i64, -3]);
        assert_eq!((lateness.min(), lateness.max()), (Some(-3), Some(7)));
        assert_eq!(lateness.percentile(50.0), Some(-3));
        assert_eq!(lateness.percentile(51.0), Some(7));
        let seven: Sample<i64> = (1..=7).collect();
        assert_eq!(seven.percentile(50.0), Some(4), "the median of an odd sample is its middle value");
    }

    #[test]
    fn an_empty_sample_has_no_percentiles() {
        let empty = Sample::<Duration>::new(Vec::new());
        assert!(empty.is_empty());
        assert_eq!((empty.percentile(50.0), empty.min(), empty.max()), (None, None, None));
    }

    #[test]
    fn rates_and_millis() {
        assert_eq!(rate(20_000, Duration::from_millis(500)), 40_000.0);
        assert_eq!(millis(Duration::from_micros(1500)), "1.500 ms");
    }

    #[test]
    fn sizes_from_the_environment() {
        assert_eq!(size_or(None, 64), Ok(64));
        assert_eq!(size_or(Some("100000"), 64), Ok(100_000));
        assert_eq!(size_or(Some(" 8 "), 64), Ok(8));
        assert_eq!(size_or(Some("100k"), 64), Err("100k"));
        assert_eq!(env_size("GATEWAY_TESTKIT_SURELY_UNSET_VARIABLE", 3), 3);
    }
}

/// CPU time (user + system) this process has used so far, from `/proc/self/stat`; `None` where that file does not
/// exist. Wall-clock throughput on a shared machine depends on what else runs; CPU time per operation does much
/// less, so benchmarks report both.
pub fn process_cpu_time() -> Option<Duration> {
    cpu_time_of("self")
}

/// [`process_cpu_time`] of process `pid` (a number, or `self`).
pub fn cpu_time_of(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces, so split after its closing parenthesis).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name. Clock ticks are 1/100 s
    // on Linux (USER_HZ), which is all this needs for runs of seconds.
    let total = ticks(11)?.checked_add(ticks(12)?)?;
    Some(Duration::from_millis(total.checked_mul(10)?))
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn busy_work_shows_in_the_process_cpu_time() {
        let Some(before) = process_cpu_time() else { return };
        let started = std::time::Instant::now();
        let mut spin = 0u64;
        while started.elapsed() < Duration::from_millis(300) {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let used = process_cpu_time().unwrap() - before;
        assert!(used >= Duration::from_millis(100), "{used:?} of CPU for 300 ms of spinning");
    }
}
