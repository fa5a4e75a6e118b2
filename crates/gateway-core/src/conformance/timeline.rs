//! The time the suites of the rate ports pass. A [`crate::RateLimiter`] and a [`crate::DispatchRate`] take the
//! caller's `Instant`, and an adapter shared through Redis keeps its own clock besides (its windows end by
//! Redis's clock). A rule reads the time from a [`Timeline`] and lets it pass with [`Timeline::wait`]: on a
//! [`ManualTimeline`] (the in-process implementations, which read only the caller's instant) waiting is instant and
//! exact, so the rules check the boundaries exactly; on [`RealTimeline`] (an adapter with a clock of its own) it
//! sleeps, so the rules that wait ask for windows of a fraction of a second.

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runtime::sync::lock;

/// What a real clock's wait is given beyond an interval an adapter named, so that a clock counting whole
/// milliseconds (Redis's key expiry) is past the instant rather than on it.
pub const REAL_SLACK: Duration = Duration::from_millis(5);

/// The time as a rule sees it.
pub trait Timeline: Send + Sync + Debug {
    /// The instant to pass to the port now.
    fn now(&self) -> Instant;

    /// Lets `duration` pass.
    fn wait(&self, duration: Duration);

    /// What a rule adds when it waits out an interval the implementation named (a `retry_after`, a wait), before it
    /// expects the implementation to agree that the interval has passed: zero on a manual timeline, where the rule
    /// lands exactly on the boundary; [`REAL_SLACK`] on a real one.
    fn slack(&self) -> Duration;
}

/// A timeline that moves only when a rule waits: the in-process implementations' rules run instantly and land on
/// every boundary exactly.
#[derive(Debug)]
pub struct ManualTimeline {
    start: Instant,
    elapsed: Mutex<Duration>,
}

impl Default for ManualTimeline {
    fn default() -> Self {
        Self { start: Instant::now(), elapsed: Mutex::new(Duration::ZERO) }
    }
}

impl Timeline for ManualTimeline {
    fn now(&self) -> Instant {
        self.start + *lock(&self.elapsed)
    }

    fn wait(&self, duration: Duration) {
        *lock(&self.elapsed) += duration;
    }

    fn slack(&self) -> Duration {
        Duration::ZERO
    }
}

/// The system's monotonic clock, and sleeping: for an adapter whose clock is not the caller's.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealTimeline;

impl Timeline for RealTimeline {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wait(&self, duration: Duration) {
        std::thread::sleep(duration);
    }

    fn slack(&self) -> Duration {
        REAL_SLACK
    }
}
