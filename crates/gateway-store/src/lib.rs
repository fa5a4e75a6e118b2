//! gateway-store: the Diesel adapters of gateway-core's store ports.
//!
//! One [`DieselStore`] implements every store port over a connection pool. SQLite is the embedded default
//! (bundled, so no system library is needed); PostgreSQL arrives in phase 2 behind the same type. Migrations are
//! embedded in the binary and run by [`DieselStore::open`], which first takes an exclusive lock on the SQLite file
//! (one gateway per file) and afterwards releases the claims a killed predecessor left.

mod connection;
mod cron;
mod database_url;
mod error;
#[cfg(test)]
mod explain;
mod fencing;
mod heartbeat;
mod lock;
mod recovery;
pub mod schema;
pub mod timestamp;
mod wal;
mod webhook;

pub use connection::DieselStore;
pub use database_url::DatabaseUrl;
pub use error::OpenError;
pub use wal::{CHECKPOINT_INTERVAL, WalCheckpointer};
