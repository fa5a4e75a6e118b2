//! gateway-webhooks: the agent gateway's durable webhook router.
//!
//! - [`signature`]: `X-Observatory-Signature: sha256=<hex>` signing and constant-time verification.
//! - [`retry`]: the exact retry schedule and the state machine after each attempt.
//! - [`router`]: [`WebhookRouter`]: configs, enqueue, inbound verification and routing, the rate-limited
//!   dispatcher with its poll loop, "Retry now", and the `gateway:webhooks` events.
//! - [`transport`]: [`UreqTransport`], the real [`gateway_core::WebhookTransport`], with the [`ssrf`] guard.
//!
//! Storage is reached only through [`gateway_core::WebhookStore`]; this crate depends on gateway-core and on
//! no other crate of the workspace. Embedded with gateway-core's in-memory fakes, a delivery is enqueued and
//! delivered, signed, to a test transport:
//!
//! ```
//! use std::sync::Arc;
//! use gateway_core::memory::RecordingPublisher;
//! use gateway_core::webhook_memory::{FakeTransport, InMemoryWebhookStore};
//! use gateway_core::{DeliveryStatus, SingleProcessLeadership, SlidingWindowRate, SystemClock, WebhookSecret};
//! use gateway_webhooks::{MAX_PER_SECOND, RouterConfig, RouterPorts, WebhookConfigDraft, WebhookRouter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let transport = Arc::new(FakeTransport::new()); // answers 200 unless told otherwise
//! let router = WebhookRouter::new(RouterPorts {
//!     store: Arc::new(InMemoryWebhookStore::default()),
//!     transport: transport.clone(),
//!     publisher: Arc::new(RecordingPublisher::default()),
//!     clock: Arc::new(SystemClock),
//!     leadership: Arc::new(SingleProcessLeadership),
//!     rate: Arc::new(SlidingWindowRate::per_second(MAX_PER_SECOND)),
//! }, RouterConfig::default());
//! let config = router.create_config(WebhookConfigDraft {
//!     source_identifier: "github".into(), event_type: "push".into(), agent_intent: "review".into(),
//!     target_session: "s-1".into(), target_url: "https://example.com/hook".into(),
//!     secret: WebhookSecret::new("It's a Secret to Everybody"),
//! }).await?;
//! let delivery = router.enqueue(config.id, "s-1".into(), r#"{"build":"green"}"#.into()).await?;
//! router.wait_idle().await; // the immediate attempt has been made and recorded
//! assert_eq!(transport.requests()[0].body, r#"{"build":"green"}"#);
//! assert_eq!(router.delivery(delivery.id).await?.delivery.status, DeliveryStatus::Delivered);
//! # Ok(())
//! # }
//! ```

pub mod envelope;
pub mod error;
pub mod input;
pub mod retry;
pub mod router;
pub mod signature;
pub mod ssrf;
pub mod transport;

pub use error::WebhookError;
pub use input::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_TEXT_FIELD_BYTES, WebhookConfigDraft};
pub use retry::{MAX_ATTEMPTS, RETRY_SCHEDULE, RetrySchedule, ScheduleError};
pub use router::{
    ATTEMPT_TIMEOUT, DeliveryDetail, ENQUEUE_SAFETY_NET, Enqueued, MAX_PER_CYCLE, MAX_PER_SECOND, POLL_INTERVAL,
    RouterConfig, RouterPorts, SIGNATURE_FAILURE_REPORT_INTERVAL, WebhookRouter,
};
pub use signature::{DELIVERY_HEADER, SIGNATURE_HEADER, SignatureError};
pub use transport::{TransportSettings, UreqTransport};
