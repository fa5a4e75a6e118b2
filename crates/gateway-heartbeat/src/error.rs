//! Error policy: every way a heartbeat can be refused is a variant here; the binary maps each to one HTTP status
//! in its error module. Variants carry field names, never field values.

use gateway_core::StoreError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// `type` is not `"heartbeat"`.
    #[error("type must be \"heartbeat\"")]
    InvalidType,
    /// `agent_id` or `cluster_id` is absent, empty, or not a string.
    #[error("{0} is required and must be a non-empty string")]
    MissingRequiredField(&'static str),
    /// `agent_id` or `cluster_id` is a string that is not a valid id (too long, control characters).
    #[error("{field}: {reason}")]
    InvalidField { field: &'static str, reason: String },
    /// The manager's loop is not running (stopped, or crashed).
    #[error("heartbeat manager is not running")]
    Unavailable,
    /// The liveness map is full and this agent is not in it.
    #[error("tracked-agent cap of {cap} reached")]
    CapacityExceeded { cap: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}
