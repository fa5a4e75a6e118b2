#![doc = include_str!("../README.md")]

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
mod history;
mod liveness;
mod lock;
mod mailbox;
mod recovery;
mod runs;
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
pub use liveness::{COUNT_INTERVAL, FLUSH_INTERVAL, RECEIPT_MINUTE_SECONDS, SharedLiveness};
pub use wal::{CHECKPOINT_INTERVAL, WalCheckpointer};
