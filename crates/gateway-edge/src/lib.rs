#![doc = include_str!("../README.md")]

mod body_budget;
mod caller;
mod connection;
mod edge;
mod head_timeout;
mod listener;
mod per_address;

pub use body_budget::{BodyBudget, DEFAULT_MAX_INFLIGHT_BODY_BYTES, Reservation};
pub use caller::{check_loopback_caller, is_loopback_authority};
pub use connection::{Connection, ConnectionIo};
pub use edge::{Edge, EdgeConfig};
pub use head_timeout::{Busy, BusyBody, HEADER_READ_TIMEOUT, HeadWatch};
pub use listener::{Accepted, Listener, MAX_CONNECTIONS, RefusedConnection};
pub use per_address::{AddressSlot, ConnectionsPerAddress, DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, REFUSAL_LOG_INTERVAL};

/// Why the edge refuses a request, before any route sees it. A server answers each its own way (the gateway:
/// 421 `misdirected_request`, 403 `cross_origin`, 503 `overloaded` with `Retry-After: 1`). A connection refused for
/// its address's cap is a [`RefusedConnection`], answered before any request is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request names a host other than this machine's loopback, or several, while the loopback rules are on
    /// ([`check_loopback_caller`]).
    #[error("the request's host is not this machine's loopback")]
    MisdirectedRequest,
    /// The request comes from another site's page ([`check_loopback_caller`]).
    #[error("the request comes from another origin's page")]
    CrossOrigin,
    /// The body budget cannot hold the request's body beside the bodies being read ([`BodyBudget`]).
    #[error("the in-flight body budget cannot hold the request's body")]
    Overloaded,
}
