#![doc = include_str!("../README.md")]

pub mod agents;
pub mod common;
pub mod console;
pub mod credentials;
pub mod cron;
pub mod fields;
pub mod heartbeat;
pub mod history;
pub mod mcp;
pub mod messages;
pub mod openapi;
mod reason;
pub mod reminders;
pub mod tools;
pub mod webhooks;

pub use common::{Deleted, ErrorBody, STATUS_OK, StatusOk};
pub use openapi::{Access, Documented, Operation, RouteOperation};
pub use reason::Reason;

/// What [`literal!`]'s expansion names, so that a crate using it needs neither serde nor utoipa itself.
#[doc(hidden)]
pub mod __private {
    pub use serde;
    pub use utoipa;
}
