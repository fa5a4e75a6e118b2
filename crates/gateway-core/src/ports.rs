//! The ports: small synchronous traits through which components reach storage, the bus, the capability map,
//! the clock and leadership. Each has an in-memory implementation in [`crate::memory`] and a real adapter in
//! another crate. Synchronous because Diesel is; async callers go through [`crate::run_blocking`].

use std::fmt::Debug;

use serde::Serialize;
use time::OffsetDateTime;

use crate::event::{Event, Topic};
use crate::ids::{AgentId, ClusterId};

/// A storage failure, as every store port reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached right now (pool exhausted, database locked past the busy timeout, disk
    /// gone); retrying later may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A uniqueness or state rule refused the write.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Anything else: a bug or corrupt data. Logged with context, reported as a server error.
    #[error("store error: {0}")]
    Internal(String),
    /// A leader-only write carried an older leadership token than the newest the store has seen: another
    /// instance leads now. Nothing was written. The loop that made the write steps down
    /// ([`Leadership::fenced`]).
    #[error("fenced: token {} is older than the newest, {}", token.0, newest.0)]
    Fenced { token: FencingToken, newest: FencingToken },
}

impl StoreError {
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }
}

impl From<crate::blocking::BlockingTaskFailed> for StoreError {
    fn from(error: crate::blocking::BlockingTaskFailed) -> Self {
        Self::Unavailable(error.to_string())
    }
}

/// Readiness probe of a store.
pub trait StoreHealth: Send + Sync + Debug {
    fn ping(&self) -> Result<(), StoreError>;
}

/// One row of `gateway_heartbeats`: the most recent heartbeat of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRecord {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    /// The timestamp the agent sent (or the receipt time when it sent none that parses).
    pub last_seen_at: OffsetDateTime,
}

/// Durable liveness snapshot, one row per agent (FR-10.4).
pub trait HeartbeatStore: Send + Sync + Debug {
    /// Inserts each row, or replaces the agent's existing one, in order and in one transaction: the last
    /// heartbeat wins, also between two records of one agent in the same call.
    fn upsert_heartbeats(&self, records: &[HeartbeatRecord]) -> Result<(), StoreError>;

    fn upsert_heartbeat(&self, record: &HeartbeatRecord) -> Result<(), StoreError> {
        self.upsert_heartbeats(std::slice::from_ref(record))
    }

    fn heartbeat(&self, agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError>;
}

/// Why an event could not be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("publish failed: {0}")]
pub struct PublishError(pub String);

/// Publishes events on topics. Publishing never waits for subscribers; having none is not an error.
pub trait EventPublisher: Send + Sync + Debug {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError>;
}

/// What the gateway knows of a live agent's capabilities: the identity of its latest accepted DecisionLog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapabilityEntry {
    pub agent_type: String,
    pub capability_version: String,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// The live capability map. Entries go when their agent is evicted.
pub trait CapabilityMap: Send + Sync + Debug {
    fn register(&self, agent_id: &AgentId, entry: CapabilityEntry);
    fn remove_agent(&self, agent_id: &AgentId);
    fn get(&self, agent_id: &AgentId) -> Option<CapabilityEntry>;
}

/// A leadership term. Every leader-only write carries it, and a store may refuse writes of an older term
/// (phase 2 fencing).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FencingToken(pub u64);

/// "Am I leader, and with which token?" The timed loops (eviction, cron dispatch, webhook poll) only act
/// while this answers `Some`.
pub trait Leadership: Send + Sync + Debug {
    fn current(&self) -> Option<FencingToken>;

    /// A leader-only write made under `token` was refused by the store ([`StoreError::Fenced`]): another
    /// instance took over. From now on this must not answer `token` again (a lease-based adapter steps down).
    /// A single process is never fenced, so the default does nothing.
    fn fenced(&self, token: FencingToken) {
        let _ = token;
    }
}

/// The newest leadership token a store has accepted: its fencing epoch. A new leader whose token would not be
/// newer (a Redis that lost its data restarts its counter) raises its counter past this first.
pub trait FencingEpoch: Send + Sync + Debug {
    fn newest_token(&self) -> Result<FencingToken, StoreError>;
}

/// The single-process deployment: always leader, with a fixed token.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcessLeadership;

impl Leadership for SingleProcessLeadership {
    fn current(&self) -> Option<FencingToken> {
        Some(FencingToken(1))
    }
}
