//! The one error type of this crate.

use gateway_core::StoreError;

/// Why a scheduler call was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// `delay_ms` is zero, negative, or more than [`crate::MAX_DELAY_MS`]. Nothing was stored. The text is the
    /// warning FR-10.7 names, the same the SchemaInterceptor logs for a delay it refuses itself.
    #[error("invalid delay_ms for schedule_reminder: {0}")]
    InvalidDelay(i64),
    /// The cron expression does not parse or has no upcoming instant; the reason says which field and why.
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
    #[error("no cron job has id {0}")]
    NotFound(i64),
    /// An `Idempotency-Key` already created a job with a different agent, schedule or payload.
    #[error("this Idempotency-Key was used for a different job")]
    IdempotencyKeyReused,
    #[error(transparent)]
    Store(#[from] StoreError),
}
