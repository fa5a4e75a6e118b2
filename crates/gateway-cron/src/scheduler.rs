//! The CronScheduler: its ports, its tuning and its shared state. The job API is in `jobs.rs`, the loop that
//! fires jobs in `firing.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gateway_core::runtime::group_commit::GroupCommit;
use gateway_core::runtime::stats::CronStats;
use gateway_core::runtime::sync::lock;
use gateway_core::{
    AgentId, AgentStorage, Clock, ComponentHealth, CronJobInsert, CronJobStore, EventPublisher, Leadership, NewCronJob,
};
use time::Duration;
use tokio::sync::{Notify, watch};

use crate::window::Window;

/// How far ahead the window is loaded.
pub const DEFAULT_LOOKAHEAD: std::time::Duration = std::time::Duration::from_secs(30);
/// Most fires held in memory at once; beyond it the window's horizon moves in and the rest waits in the
/// database.
pub const DEFAULT_WINDOW_CAPACITY: usize = 10_000;
/// How often the window is reloaded even when nothing seems missing (rows written by other processes).
pub const DEFAULT_REFILL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a claim holds. A claimer that dies after claiming leaves the instant to be claimed again (with
/// the same fire_id) once this has passed; a live claimer publishes and completes well within it.
pub const CLAIM_LEASE: std::time::Duration = std::time::Duration::from_secs(10);
/// Most fires claimed, published and completed per database transaction pair.
pub const DEFAULT_BATCH_SIZE: usize = 512;
/// First pause after a store error; doubled per consecutive failure up to [`RETRY_MAX`].
pub const RETRY_INITIAL: std::time::Duration = std::time::Duration::from_millis(250);
/// The cap of the store-error backoff (H-4 in docs/requirements.md: bounded, never unbounded). Short, so that once
/// the store answers again (PostgreSQL restarted, disk space freed) overdue reminders fire within seconds: a
/// failing claim every 5 s costs a store that is down nothing.
pub const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a non-leader checks whether it became leader.
pub const LEADERSHIP_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long before its instant a fire is claimed. The claim is a database commit, and a commit can stall for
/// milliseconds (a WAL checkpoint's fsync on a slow disk); claimed this far ahead, the fire is published at its
/// instant by a loop that is not waiting for the database. The reminder is never published early.
pub const DEFAULT_CLAIM_AHEAD: std::time::Duration = std::time::Duration::from_millis(50);
/// Most one-time jobs written in one store call by the group commit of concurrent `schedule_once` calls.
pub const MAX_INSERT_GROUP: usize = 1_024;

// The agent limits on reminders (`reminders.rs`), which are the scheduler's so that every way in keeps them.
/// Default largest reminder payload, serialized as JSON (`--reminder-payload-max-bytes`).
pub const DEFAULT_REMINDER_PAYLOAD_MAX_BYTES: usize = 65_536;
/// Highest accepted `--reminder-payload-max-bytes`: a request body's limit, which no payload can exceed anyway.
pub const MAX_REMINDER_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Default most pending one-time jobs per agent (`--max-pending-reminders-per-agent`).
pub const DEFAULT_MAX_PENDING_REMINDERS_PER_AGENT: usize = 1_000;
/// Highest accepted `--max-pending-reminders-per-agent`.
pub const MAX_PENDING_REMINDERS_PER_AGENT: usize = 1_000_000;
/// Default most bytes an agent's stored rows may take (`--agent-storage-quota-bytes`): 16 MiB.
pub const DEFAULT_AGENT_STORAGE_QUOTA_BYTES: u64 = 16 * 1024 * 1024;
/// Highest accepted `--agent-storage-quota-bytes`: 1 TiB, a bound only so that no sum overflows.
pub const MAX_AGENT_STORAGE_QUOTA_BYTES: u64 = 1 << 40;

/// Tuning of the timing engine. The defaults are the constants above.
#[derive(Debug, Clone)]
pub struct CronConfig {
    pub lookahead: std::time::Duration,
    pub window_capacity: usize,
    pub refill_interval: std::time::Duration,
    pub claim_lease: std::time::Duration,
    pub claim_ahead: std::time::Duration,
    pub batch_size: usize,
    pub retry_initial: std::time::Duration,
    pub retry_max: std::time::Duration,
    pub leadership_poll: std::time::Duration,
    /// Largest payload, serialized as JSON, of a reminder an agent asks for (`schedule_reminder`).
    pub reminder_payload_max_bytes: usize,
    /// Most pending one-time jobs an agent may have; further reminders it asks for are refused.
    pub max_pending_reminders_per_agent: usize,
    /// Most bytes an agent's stored rows may take ([`gateway_core::ports::storage`]); a reminder or a tool answer that
    /// would take it past this is refused.
    pub agent_storage_quota_bytes: u64,
}

impl Default for CronConfig {
    fn default() -> Self {
        Self {
            lookahead: DEFAULT_LOOKAHEAD,
            window_capacity: DEFAULT_WINDOW_CAPACITY,
            refill_interval: DEFAULT_REFILL_INTERVAL,
            claim_lease: CLAIM_LEASE,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
            batch_size: DEFAULT_BATCH_SIZE,
            retry_initial: RETRY_INITIAL,
            retry_max: RETRY_MAX,
            leadership_poll: LEADERSHIP_POLL,
            reminder_payload_max_bytes: DEFAULT_REMINDER_PAYLOAD_MAX_BYTES,
            max_pending_reminders_per_agent: DEFAULT_MAX_PENDING_REMINDERS_PER_AGENT,
            agent_storage_quota_bytes: DEFAULT_AGENT_STORAGE_QUOTA_BYTES,
        }
    }
}

/// What the loop has done so far; watch it with [`CronScheduler::progress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopProgress {
    /// Completed loop iterations (each ends right before the loop sleeps).
    pub cycles: u64,
    /// Reminders published, counted once the write that completes their rows has landed (written, or
    /// failed), so a watcher that sees `fired >= n` also sees the n-th fire's row settled.
    pub fired: u64,
    /// Consecutive store failures (0 while healthy).
    pub failures: u32,
    /// A window reload is in flight (the loop will be woken when it lands).
    pub reloading: bool,
    /// A store write (completions and claims) is in flight (the loop will be woken when it lands).
    pub writing: bool,
}
/// What the scheduler works through: the durable job table, the bus its reminders go out on, the time, and
/// whether this process may fire (leadership); and what an agent's rows take in the store (its quota).
#[derive(Debug, Clone)]
pub struct CronPorts {
    pub store: Arc<dyn CronJobStore>,
    /// The same store's view of an agent's stored bytes (tool answers, pending reminders, mailbox).
    pub storage: Arc<dyn AgentStorage>,
    pub publisher: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
}

/// Durable recurring and one-time jobs. Cloning is cheap and clones share everything.
///
/// The job API ([`Self::schedule_once`], [`Self::add_recurring`], [`Self::remove`], [`Self::list`], [`Self::job`]) is
/// async and runs its store work on tokio's blocking pool. [`run`](gateway_core::BackgroundLoop::run) is the loop that
/// fires jobs; run it once (a second concurrent run would only compete for the same claims).
#[derive(Debug, Clone)]
pub struct CronScheduler {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn CronJobStore>,
    pub(crate) storage: Arc<dyn AgentStorage>,
    pub(crate) publisher: Arc<dyn EventPublisher>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) leadership: Arc<dyn Leadership>,
    pub(crate) config: CronConfig,
    /// Identifies this scheduler's claims in the database.
    pub(crate) owner: String,
    pub(crate) window: Mutex<Window>,
    pub(crate) wake: Notify,
    pub(crate) health: ComponentHealth,
    pub(crate) progress: watch::Sender<LoopProgress>,
    pub(crate) published: AtomicU64,
    /// Fires and their lateness, for metrics.
    pub(crate) stats: CronStats,
    /// Shares commits between concurrent `schedule_once` calls.
    pub(crate) inserts: Arc<GroupCommit<NewCronJob, CronJobInsert>>,
    /// Serializes this scheduler's writes on a single-writer store ([`WriteTurns`]).
    pub(crate) writes: Arc<WriteTurns>,
    pub(crate) pending_gates: PendingGates,
}

/// Turns for this scheduler's writes, taken only when the store has one writer at a time
/// ([`CronJobStore::single_writer`]). On SQLite a connection that finds the write lock taken sleeps in SQLite's busy
/// handler for a millisecond or more; queueing here instead costs microseconds, which is most of the difference
/// between a few thousand and tens of thousands of fires a second when the loop and `schedule_once` callers write
/// at once. On PostgreSQL the same queue made a group of inserts wait for the loop's transaction and the other way
/// round, each a durable commit the server would have flushed together: half the cron throughput.
#[derive(Debug)]
pub(crate) struct WriteTurns(Option<Mutex<()>>);

impl WriteTurns {
    fn new(single_writer: bool) -> Self {
        Self(single_writer.then(|| Mutex::new(())))
    }

    /// Waits for this scheduler's turn to write, if writes take turns; hold the guard for the write.
    pub(crate) fn take(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        self.0.as_ref().map(lock)
    }
}

/// Stripes of [`PendingGates`]: agents that share one wait for each other, which matters only when both schedule
/// at the same moment.
const PENDING_GATE_STRIPES: usize = 64;

/// Turns for scheduling an agent's reminder, from counting its pending ones to committing the new one: without
/// them, concurrent reminders of an agent at its cap all count the same number and all go in (`reminders.rs`).
#[derive(Debug)]
pub(crate) struct PendingGates {
    stripes: Vec<tokio::sync::Mutex<()>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for PendingGates {
    fn default() -> Self {
        Self {
            stripes: (0..PENDING_GATE_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl PendingGates {
    pub(crate) fn gate(&self, agent_id: &AgentId) -> &tokio::sync::Mutex<()> {
        use std::hash::BuildHasher;
        let stripe = usize::try_from(self.hasher.hash_one(agent_id.as_str())).unwrap_or(0) % self.stripes.len();
        &self.stripes[stripe]
    }
}

impl CronScheduler {
    pub fn new(ports: CronPorts, config: CronConfig) -> Self {
        let CronPorts { store, storage, publisher, clock, leadership } = ports;
        let window = Mutex::new(Window::new(config.window_capacity, duration(config.claim_ahead)));
        let writes = Arc::new(WriteTurns::new(store.single_writer()));
        let inserts = Arc::new(GroupCommit::new(MAX_INSERT_GROUP, {
            let (store, writes) = (Arc::clone(&store), Arc::clone(&writes));
            move |jobs: Vec<NewCronJob>| {
                let _writing = writes.take();
                store.insert_cron_jobs(&jobs)
            }
        }));
        Self {
            inner: Arc::new(Inner {
                store,
                storage,
                publisher,
                clock,
                leadership,
                config,
                owner: claimer_id(),
                window,
                wake: Notify::new(),
                health: ComponentHealth::new("cron_scheduler"),
                progress: watch::Sender::new(LoopProgress::default()),
                published: AtomicU64::new(0),
                stats: CronStats::default(),
                inserts,
                writes,
                pending_gates: PendingGates::default(),
            }),
        }
    }

    /// The loop's readiness: running while its loop ([`run`](gateway_core::BackgroundLoop::run)) runs, unhealthy while
    /// it cannot reach the store.
    pub fn health(&self) -> ComponentHealth {
        self.inner.health.clone()
    }

    /// Reminders this instance published, and how late.
    pub fn stats(&self) -> &CronStats {
        &self.inner.stats
    }

    pub fn progress(&self) -> watch::Receiver<LoopProgress> {
        self.inner.progress.subscribe()
    }

    /// The id this scheduler's claims carry in the database.
    pub fn claimer_id(&self) -> &str {
        &self.inner.owner
    }
}

pub(crate) fn duration(std: std::time::Duration) -> Duration {
    Duration::try_from(std).unwrap_or(Duration::MAX)
}

/// A random id per scheduler instance, so two loops on one database tell their claims apart.
fn claimer_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 12];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // No entropy source: fall back to what differs between processes and between instances of one.
        static INSTANCES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        bytes[..4].copy_from_slice(&std::process::id().to_be_bytes());
        bytes[4..8].copy_from_slice(&instance.to_be_bytes());
        let nanos = time::OffsetDateTime::now_utc().nanosecond();
        bytes[8..].copy_from_slice(&nanos.to_be_bytes());
    }
    format!("cron-{}", gateway_core::encoding::hex::encode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimer_ids_differ() {
        assert_ne!(claimer_id(), claimer_id());
    }
}
