//! What every store port shares: the error they report, [`StoreError`], and the readiness probe, [`StoreHealth`].
//!
//! The store ports themselves live each beside its in-memory implementation: [`crate::heartbeat`],
//! [`crate::cron`], [`crate::webhook`], [`crate::liveness`]. Synchronous because Diesel is; async callers go
//! through [`crate::run_blocking`].

use std::fmt::Debug;

use crate::leadership::FencingToken;

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

impl From<crate::blocking::BlockingTaskFailed> for StoreError {
    fn from(error: crate::blocking::BlockingTaskFailed) -> Self {
        Self::Unavailable(error.to_string())
    }
}

/// Readiness probe of a store.
pub trait StoreHealth: Send + Sync + Debug {
    fn ping(&self) -> Result<(), StoreError>;
}
