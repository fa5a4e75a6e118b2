//! gateway-cron: the durable cron scheduler of the agent gateway.
//!
//! Recurring jobs (crontab expressions, UTC) and one-time agent reminders ([`CronScheduler::schedule_once`],
//! FR-10.5 in docs/requirements.md) live in the `cron_jobs` table behind gateway-core's
//! [`gateway_core::CronJobStore`] port; the database is the source of truth. [`CronScheduler::run`] keeps in
//! memory only the fires due soon (a bounded window reloaded from the `next_fire_at` index), claims each instant
//! in the database before publishing its `reminder` event on `agent:<id>:scheduled`, then deletes the one-time
//! row or advances the recurring one. Delivery is at-least-once with a stable `fire_id`; no instant is ever
//! claimed twice while its claim holds. docs/scheduler.md states the guarantees precisely.
//!
//! This crate depends only on gateway-core: embed it with any store that implements the port, and test with
//! gateway-core's in-memory fakes:
//!
//! ```
//! use std::sync::Arc;
//! use gateway_core::{AgentId, InMemoryCronJobStore, SingleProcessLeadership, SystemClock, Topic};
//! use gateway_core::memory::RecordingPublisher;
//! use gateway_cron::{CronConfig, CronPorts, CronScheduler};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bus = Arc::new(RecordingPublisher::default());
//! let ports = CronPorts {
//!     store: Arc::new(InMemoryCronJobStore::default()),
//!     publisher: bus.clone(),
//!     clock: Arc::new(SystemClock),
//!     leadership: Arc::new(SingleProcessLeadership),
//! };
//! let scheduler = CronScheduler::new(ports, CronConfig::default());
//! let shutdown = CancellationToken::new();
//! let firing = tokio::spawn({
//!     let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
//!     async move { scheduler.run(shutdown).await }
//! });
//!
//! let agent = AgentId::new("agent-7")?;
//! scheduler.schedule_once(agent.clone(), 20, serde_json::Map::new()).await?; // due in 20 ms
//! scheduler.progress().wait_for(|progress| progress.fired >= 1).await?;
//! assert_eq!(bus.on_topic(&Topic::AgentScheduled(agent)).len(), 1);
//!
//! shutdown.cancel();
//! firing.await?;
//! # Ok(())
//! # }
//! ```

mod error;
mod firing;
mod jobs;
mod schedule;
mod scheduler;
mod window;

pub use error::CronError;
pub use jobs::{MAX_DELAY_MS, MAX_LIST_LIMIT, fire_id, preview};
pub use schedule::{CronSchedule, MAX_SCHEDULE_LEN, PREVIEW_INSTANTS};
pub use scheduler::{
    CLAIM_LEASE, CronConfig, CronPorts, CronScheduler, DEFAULT_BATCH_SIZE, DEFAULT_CLAIM_AHEAD, DEFAULT_LOOKAHEAD,
    DEFAULT_REFILL_INTERVAL, DEFAULT_WINDOW_CAPACITY, LEADERSHIP_POLL, LoopProgress, MAX_INSERT_GROUP, RETRY_INITIAL,
    RETRY_MAX,
};
