//! How components run their work, whatever the port behind it: the one bridge from async code to the
//! synchronous ports ([`blocking`]), writers sharing one commit ([`group_commit`]), the shape of a leader-only
//! periodic loop ([`periodic`]), restarting a loop that panicked ([`supervisor`]) with the one backoff rule
//! ([`backoff`]), what `/readyz` reports of each loop ([`health`]), what components count for `/metrics`
//! ([`stats`]), the one way the workspace takes a mutex ([`sync`]), and who a client is for every per-address count
//! ([`address`]).
//!
//! `address`, `sync`, `blocking`, `backoff`, `health` and `stats` depend on nothing else of the crate (the ports use
//! them); `group_commit` and `periodic` speak the ports' [`StoreError`](crate::StoreError) and
//! [`Leadership`](crate::Leadership).

pub mod address;
pub mod backoff;
pub mod blocking;
pub mod group_commit;
pub mod health;
pub mod periodic;
pub mod stats;
pub mod supervisor;
pub mod sync;
