#![doc = include_str!("../README.md")]

pub mod common;
pub mod credentials;
pub mod fields;
pub mod openapi;
mod reason;
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
