//! gateway-store: the Diesel adapters of gateway-core's store ports.
//!
//! One [`DieselStore`] implements every store port over a connection pool. SQLite is the embedded default;
//! PostgreSQL, which several gateways can share, is behind the same type. Both client libraries are bundled, so
//! no system library is needed. Migrations (one directory per backend, the same tables and columns) are embedded
//! in the binary and run by [`DieselStore::open`]: on SQLite after taking an exclusive lock on the file (one
//! gateway per file), and followed by releasing the claims a killed predecessor left; on PostgreSQL under an
//! advisory lock, so that instances starting together migrate once.

#[macro_use]
mod connection;
#[macro_use]
mod batch;
#[cfg(test)]
#[macro_use]
mod testing;
mod admin_token;
mod background;
mod credential;
mod cron;
mod database_url;
mod error;
#[cfg(test)]
mod explain;

mod fencing;
mod heartbeat;
mod liveness;
mod lock;
mod mailbox;
mod recovery;
pub mod schema;
mod storage;
pub mod timestamp;
mod tool_call;
mod wal;
mod webhook;

pub use background::PeriodicThread;
pub use connection::DieselStore;
pub use database_url::{DatabaseUrl, PostgresUrl};
pub use error::OpenError;
pub use liveness::{COUNT_INTERVAL, FLUSH_INTERVAL, SharedLiveness};
pub use wal::{CHECKPOINT_INTERVAL, WalCheckpointer};
