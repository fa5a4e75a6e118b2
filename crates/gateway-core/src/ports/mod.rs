//! The ports: the small synchronous `Send + Sync` traits every component talks through, each in one module
//! together with its types and its in-memory implementation (the fake for tests and embedders, and for the
//! coordination ports also the single-process adapter), so that a port and its fake are found in one place.
//!
//! Store ports, implemented for a database by gateway-store's `DieselStore`: [`heartbeat`], [`cron`], [`mailbox`],
//! [`tool_call`], [`storage`], [`webhook`] (with the outbound [`webhook::WebhookTransport`]), [`liveness`],
//! [`capability`], [`credential`], [`admin_token`]. What they share is in [`store`] (the error, the readiness
//! probe, the fencing token, what a stored row is charged); [`failure`] makes a fake fail on demand.
//!
//! [`replay`] is the mailbox as agent streams replay it: asynchronous, implemented by gateway-cron's `Mailbox` and
//! read by gateway-pubsub's event stream, so that neither component depends on the other.
//!
//! Coordination ports, implemented across instances by gateway-redis and gateway-pubsub: [`leadership`] (with the
//! fencing epoch a store keeps), [`rate_limit`] (per-agent limits), [`rate`] (the outbound dispatch rate) and
//! [`event`] (topics, events and their publisher). And [`clock`], the time every component reads.
//!
//! Every type of these modules is re-exported at the crate root (`gateway_core::InMemoryWebhookStore`); the
//! modules' own constants and helpers are reached through their path (`gateway_core::ports::credential::
//! MAX_TOKEN_LIFETIME_S`).

pub mod admin_token;
pub mod capability;
pub mod clock;
pub mod credential;
pub mod cron;
pub mod event;
pub mod failure;
pub mod heartbeat;
pub mod history;
pub mod leadership;
pub mod liveness;
pub mod mailbox;
pub mod rate;
pub mod rate_limit;
pub mod replay;
pub mod runs;
pub mod storage;
pub mod store;
pub mod tool_call;
pub mod webhook;
