//! The time source every component reads, so tests can move time by hand instead of sleeping.

use std::sync::{Arc, Mutex, PoisonError};

use time::{Duration, OffsetDateTime};

/// Wall-clock time in UTC.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> OffsetDateTime;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<OffsetDateTime>>,
}

impl ManualClock {
    pub fn new(start: OffsetDateTime) -> Self {
        Self { now: Arc::new(Mutex::new(start)) }
    }

    /// Starts at 2026-02-22T12:00:00Z, a fixed instant so test output is reproducible.
    pub fn at_fixed_start() -> Self {
        Self::new(time::macros::datetime!(2026-02-22 12:00:00 UTC))
    }

    pub fn set(&self, to: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = to;
    }

    pub fn advance(&self, by: Duration) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_time() {
        let clock = ManualClock::at_fixed_start();
        let other = clock.clone();
        let start = clock.now();
        assert_eq!(clock.now(), start);
        other.advance(Duration::seconds(91));
        assert_eq!(clock.now() - start, Duration::seconds(91));
    }
}
