//! gateway-cron: the durable cron scheduler of the agent gateway.
//!
//! Recurring jobs (crontab expressions, UTC) and one-time agent reminders (`schedule_once`, FR-10.5) live in
//! the `cron_jobs` table behind gateway-core's [`gateway_core::CronJobStore`] port; the database is the source
//! of truth. [`CronScheduler::run`] keeps in memory only the fires due soon (a bounded window reloaded from
//! the `next_fire_at` index), claims each instant in the database before publishing its `reminder` event on
//! `agent:<id>:scheduled`, then deletes the one-time row or advances the recurring one. Delivery is
//! at-least-once with a stable `fire_id`; no instant is ever claimed twice while its claim holds. See
//! docs/scheduler.md for the precise guarantees.
//!
//! This crate depends only on gateway-core: embed it with any store that implements the port, and test with
//! [`gateway_core::InMemoryCronJobStore`].

mod error;
mod schedule;
mod scheduler;
mod window;

pub use error::CronError;
pub use schedule::{CronSchedule, MAX_SCHEDULE_LEN, PREVIEW_INSTANTS};
pub use scheduler::{
    CLAIM_LEASE, CronConfig, CronScheduler, DEFAULT_BATCH_SIZE, DEFAULT_CLAIM_AHEAD, DEFAULT_LOOKAHEAD,
    DEFAULT_REFILL_INTERVAL, DEFAULT_WINDOW_CAPACITY, LEADERSHIP_POLL, LoopProgress, MAX_DELAY_MS, MAX_LIST_LIMIT,
    RETRY_INITIAL, RETRY_MAX, fire_id, preview,
};
