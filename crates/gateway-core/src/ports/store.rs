//! What every store port shares: the error they report, [`StoreError`], the readiness probe, [`StoreHealth`], the
//! leadership term their leader-only writes carry, [`FencingToken`], and what a stored row of an agent is charged
//! ([`row_charge`], for the storage quota of [`crate::ports::storage`]).
//!
//! The store ports themselves live each beside its in-memory implementation: [`crate::ports::heartbeat`],
//! [`crate::ports::cron`], [`crate::ports::webhook`], [`crate::ports::liveness`]. Synchronous because Diesel is; async
//! callers go through [`crate::run_blocking`].

use std::fmt::Debug;

use serde::Serialize;

/// A leadership term. Every leader-only write carries it, and a store refuses writes of an older term than the newest
/// it has seen ([`StoreError::Fenced`]). [`crate::ports::leadership`], whose port hands terms out, re-exports it; it is
/// defined here because the store ports and their error take it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FencingToken(pub u64);

/// A storage failure, as every store port reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached right now (pool exhausted, database locked past the busy timeout, disk
    /// gone); retrying later may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store has no room left to write (the disk, or the database's size limit, is full). Reads still work;
    /// writes fail until an operator frees space, and then work again without a restart. Nothing was written.
    #[error("store full: {0}")]
    Full(String),
    /// A uniqueness or state rule refused the write.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Anything else: a bug or corrupt data. Logged with context, reported as a server error.
    #[error("store error: {0}")]
    Internal(String),
    /// A leader-only write carried an older leadership token than the newest the store has seen: another
    /// instance leads now. Nothing was written. The loop that made the write steps down
    /// ([`crate::Leadership::fenced`]).
    #[error("fenced: token {} is older than the newest, {}", token.0, newest.0)]
    Fenced { token: FencingToken, newest: FencingToken },
}

impl StoreError {
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }
}

impl From<crate::runtime::blocking::BlockingTaskFailed> for StoreError {
    fn from(error: crate::runtime::blocking::BlockingTaskFailed) -> Self {
        Self::Unavailable(error.to_string())
    }
}

/// What each stored row of an agent is charged beyond the bytes of its JSON: its key, instants and index entries
/// take disk too (about 200 to 300 bytes a row), so rows with tiny payloads are not free. Below a row's real cost so
/// that the default quota still holds a month of a reminder a minute; enough that a flood of empty payloads is
/// bounded by the quota as well as by the rate limit.
pub const STORED_ROW_CHARGE_BYTES: u64 = 128;

/// The charge of a row whose JSON is `json_bytes` long: what the stores' [`crate::AgentStorage`] sums.
pub fn row_charge(json_bytes: usize) -> u64 {
    u64::try_from(json_bytes).unwrap_or(u64::MAX).saturating_add(STORED_ROW_CHARGE_BYTES)
}

/// Readiness probe of a store.
pub trait StoreHealth: Send + Sync + Debug {
    fn ping(&self) -> Result<(), StoreError>;
}
