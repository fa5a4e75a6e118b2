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
    /// The time zone is not an IANA name the tz database knows; the text is the name quoted (or `(unprintable)`).
    #[error("timezone: unknown time zone {0}; an IANA name such as America/New_York or UTC is expected")]
    UnknownTimezone(String),
    #[error("no cron job has id {0}")]
    NotFound(i64),
    /// An `Idempotency-Key` already created a job with a different agent, schedule or payload.
    #[error("this Idempotency-Key was used for a different job")]
    IdempotencyKeyReused,
    /// A tool call names no tool of [`crate::ToolName::ALL`].
    #[error("no such tool; the tools are schedule_reminder, cancel_reminder, list_reminders, schedule_recurring")]
    UnknownTool,
    /// A tool call lacks a parameter its tool requires (absent or `null`).
    #[error("params.{0} is required")]
    MissingToolParam(&'static str),
    /// A tool call's parameter is of the wrong type, out of range, or unknown; the text names it and what was
    /// expected, never its value.
    #[error("{0}")]
    InvalidToolParams(String),
    /// A tool call's id was answered before for another tool or other parameters.
    #[error("this tool_call_id was used for another call (another tool or other params)")]
    ToolCallConflict,
    /// The agent has `limit` pending reminders already.
    #[error("at most {limit} pending reminders per agent")]
    TooManyReminders { limit: usize },
    /// The agent has `limit` recurring jobs already (`schedule_recurring`).
    #[error("at most {limit} recurring jobs per agent")]
    TooManyRecurringJobs { limit: usize },
    /// The call would take the agent's stored bytes (tool answers, pending reminders, mailbox) past `limit`.
    #[error(
        "this agent's stored bytes (tool answers, pending reminders, mailbox) would pass its quota of {limit}: \
         fired reminders leave the mailbox after its retention, and answers after theirs"
    )]
    QuotaExceeded { limit: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}
