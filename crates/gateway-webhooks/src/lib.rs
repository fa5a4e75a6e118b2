//! gateway-webhooks: the agent gateway's durable webhook router.
//!
//! - [`signature`]: `X-Observatory-Signature: sha256=<hex>` signing and constant-time verification.
//! - [`retry`]: the exact retry schedule and the state machine after each attempt.
//! - [`router`]: [`WebhookRouter`] — configs, enqueue, inbound verification and routing, the rate-limited
//!   dispatcher with its poll loop, "Retry now", and the `gateway:webhooks` events.
//! - [`transport`]: [`UreqTransport`], the real [`gateway_core::WebhookTransport`], with the [`ssrf`] guard.
//!
//! Storage is reached only through [`gateway_core::WebhookStore`]; this crate depends on gateway-core and on
//! no other crate of the workspace.

pub mod envelope;
pub mod error;
pub mod input;
pub mod retry;
pub mod router;
pub mod signature;
pub mod ssrf;
pub mod transport;

pub use error::WebhookError;
pub use input::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, WebhookConfigDraft, delivery_filter};
pub use retry::{MAX_ATTEMPTS, RETRY_SCHEDULE, RetrySchedule, ScheduleError};
pub use router::{
    ATTEMPT_TIMEOUT, DeliveryDetail, ENQUEUE_SAFETY_NET, Enqueued, MAX_PER_CYCLE, POLL_INTERVAL, RouterPorts,
    RouterSettings, WebhookRouter,
};
pub use signature::{DELIVERY_HEADER, SIGNATURE_HEADER, SignatureError};
pub use transport::{TransportSettings, UreqTransport};
