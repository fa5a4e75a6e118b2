//! The retry state machine (FR-10.9 in docs/requirements.md): a pure function of the attempt's outcome, the attempts
//! made before it, the time it finished and the schedule, so every transition is testable to the second.

use gateway_core::{AttemptOutcome, DeliveryStatus};
use time::{Duration, OffsetDateTime};

/// Seconds to wait after failed attempts 1..5: 30 s, 2 min, 10 min, 1 h, 6 h (FR-10.9's schedule, and the
/// default of `--webhook-retry-schedule-s`). An explicit table, never a formula (FR-10.9).
pub const RETRY_SCHEDULE: [u64; 5] = [30, 120, 600, 3600, 21600];

/// Attempts in all with the default schedule: the first, then one after each delay. A failure of the last one
/// makes the delivery dead.
pub const MAX_ATTEMPTS: i32 = RETRY_SCHEDULE.len() as i32 + 1;

/// The longest accepted delay: 30 days. Bounds `now + delay` far from the calendar's end.
const MAX_DELAY_SECONDS: i64 = 30 * 24 * 3600;

/// The delays between attempts. Attempts in all = delays + 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    delays: Vec<Duration>,
}

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("the retry schedule must have at least one delay")]
    Empty,
    #[error("retry delays must be between 1 s and 30 days (delay {position} is {seconds} s)")]
    OutOfRange { position: usize, seconds: u64 },
    #[error("the retry schedule has too many delays ({0}, at most 100)")]
    TooLong(usize),
}

impl RetrySchedule {
    /// A schedule from delays in seconds, as `--webhook-retry-schedule-s` gives them.
    pub fn from_seconds(seconds: &[u64]) -> Result<Self, ScheduleError> {
        if seconds.is_empty() {
            return Err(ScheduleError::Empty);
        }
        if seconds.len() > 100 {
            return Err(ScheduleError::TooLong(seconds.len()));
        }
        let delays = seconds
            .iter()
            .enumerate()
            .map(|(index, &delay)| match i64::try_from(delay) {
                Ok(delay) if (1..=MAX_DELAY_SECONDS).contains(&delay) => Ok(Duration::seconds(delay)),
                _ => Err(ScheduleError::OutOfRange { position: index + 1, seconds: delay }),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { delays })
    }

    /// Attempts in all: one more than there are delays.
    pub fn max_attempts(&self) -> i32 {
        // At most 100 delays (checked at construction), so this cannot truncate.
        i32::try_from(self.delays.len()).unwrap_or(i32::MAX - 1) + 1
    }

    /// The wait after failed attempt `attempt` (1-based); `None` when that attempt was the last.
    pub fn delay_after(&self, attempt: i32) -> Option<Duration> {
        let index = usize::try_from(attempt.checked_sub(1)?).ok()?;
        self.delays.get(index).copied()
    }

    pub fn delays(&self) -> &[Duration] {
        &self.delays
    }
}

impl Default for RetrySchedule {
    fn default() -> Self {
        // The table's values are far below i64::MAX, so the cast is exact.
        Self { delays: RETRY_SCHEDULE.iter().map(|&seconds| Duration::seconds(seconds as i64)).collect() }
    }
}

/// A delivery's state after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub status: DeliveryStatus,
    pub attempt_count: i32,
    pub next_retry_at: Option<OffsetDateTime>,
    pub error_detail: Option<String>,
}

/// The state after an attempt that came to `outcome`, when `attempts_before` attempts had been made and the
/// attempt finished at `now`.
///
/// - 2xx: delivered, `next_retry_at` cleared.
/// - failure of attempt n with a delay left: failed, `next_retry_at = now + delay[n-1]`.
/// - failure of the last attempt (or beyond, when the schedule was shortened since): dead, never retried.
pub fn after_attempt(
    outcome: &AttemptOutcome,
    attempts_before: i32,
    now: OffsetDateTime,
    schedule: &RetrySchedule,
) -> Transition {
    let attempt = attempts_before.saturating_add(1);
    if let AttemptOutcome::Delivered { .. } = outcome {
        return Transition {
            status: DeliveryStatus::Delivered,
            attempt_count: attempt,
            next_retry_at: None,
            error_detail: None,
        };
    }
    let error_detail = outcome.error_detail();
    match schedule.delay_after(attempt) {
        Some(delay) => Transition {
            status: DeliveryStatus::Failed,
            attempt_count: attempt,
            next_retry_at: Some(now + delay),
            error_detail,
        },
        None => Transition { status: DeliveryStatus::Dead, attempt_count: attempt, next_retry_at: None, error_detail },
    }
}

#[cfg(test)]
mod tests {
    use gateway_core::{Clock, FailureClass, ManualClock};

    use super::*;

    fn failure() -> AttemptOutcome {
        AttemptOutcome::Failed { class: FailureClass::Http(503), detail: None }
    }

    #[test]
    fn the_default_schedule_is_the_fr_10_9_table() {
        assert_eq!(RETRY_SCHEDULE, [30, 120, 600, 3600, 21600]);
        assert_eq!(MAX_ATTEMPTS, 6);
        assert_eq!(RetrySchedule::default().max_attempts(), MAX_ATTEMPTS);
        assert_eq!(RetrySchedule::default(), RetrySchedule::from_seconds(&RETRY_SCHEDULE).unwrap());
    }

    #[test]
    fn each_failed_attempt_schedules_the_next_exactly_and_the_sixth_is_dead() {
        let clock = ManualClock::at_fixed_start();
        let schedule = RetrySchedule::default();
        let expected_waits = [30, 120, 600, 3600, 21600];
        let mut attempts = 0;
        for (index, wait) in expected_waits.into_iter().enumerate() {
            // Attempts finish at arbitrary instants; the next is always exactly `wait` seconds after.
            clock.advance(Duration::seconds(7 * (index as i64 + 1)));
            let transition = after_attempt(&failure(), attempts, clock.now(), &schedule);
            assert_eq!(transition.status, DeliveryStatus::Failed);
            assert_eq!(transition.attempt_count, attempts + 1);
            assert_eq!(transition.next_retry_at, Some(clock.now() + Duration::seconds(wait)), "attempt {}", index + 1);
            assert_eq!(transition.error_detail.as_deref(), Some("http_503"));
            attempts = transition.attempt_count;
            clock.set(transition.next_retry_at.unwrap());
        }
        let last = after_attempt(&failure(), attempts, clock.now(), &schedule);
        assert_eq!(
            last,
            Transition {
                status: DeliveryStatus::Dead,
                attempt_count: 6,
                next_retry_at: None,
                error_detail: Some("http_503".into())
            }
        );
    }

    #[test]
    fn success_clears_the_retry_and_the_error() {
        let now = ManualClock::at_fixed_start().now();
        let transition =
            after_attempt(&AttemptOutcome::Delivered { status_code: 204 }, 3, now, &RetrySchedule::default());
        assert_eq!(
            transition,
            Transition { status: DeliveryStatus::Delivered, attempt_count: 4, next_retry_at: None, error_detail: None }
        );
    }

    #[test]
    fn a_shortened_schedule_has_fewer_attempts_and_rows_past_it_die() {
        let now = ManualClock::at_fixed_start().now();
        let schedule = RetrySchedule::from_seconds(&[1, 2]).unwrap();
        assert_eq!(schedule.max_attempts(), 3);
        assert_eq!(after_attempt(&failure(), 1, now, &schedule).next_retry_at, Some(now + Duration::seconds(2)));
        assert_eq!(after_attempt(&failure(), 2, now, &schedule).status, DeliveryStatus::Dead);
        // A row left at attempt 4 by a run with the longer default schedule.
        assert_eq!(after_attempt(&failure(), 4, now, &schedule).status, DeliveryStatus::Dead);
    }

    #[test]
    fn bad_schedules_are_refused() {
        assert_eq!(RetrySchedule::from_seconds(&[]), Err(ScheduleError::Empty));
        assert_eq!(RetrySchedule::from_seconds(&[30, 0]), Err(ScheduleError::OutOfRange { position: 2, seconds: 0 }));
        for too_long in [30 * 24 * 3600 + 1, u64::MAX] {
            assert_eq!(
                RetrySchedule::from_seconds(&[too_long]),
                Err(ScheduleError::OutOfRange { position: 1, seconds: too_long })
            );
        }
        assert!(RetrySchedule::from_seconds(&[30 * 24 * 3600]).is_ok());
        assert_eq!(RetrySchedule::from_seconds(&[1; 101]), Err(ScheduleError::TooLong(101)));
        assert_eq!(RetrySchedule::default().delay_after(0), None);
        assert_eq!(RetrySchedule::default().delay_after(-3), None);
    }
}
