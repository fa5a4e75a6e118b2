//! The one way the gateway writes and reads what it shows as text: instants as RFC 3339 in UTC ([`rfc3339`]) and
//! digests as lowercase hex ([`hex`]). Every crate of the workspace goes through these, so an instant written by
//! one is read back by another, on every backend.

pub mod hex;
pub mod rfc3339;
