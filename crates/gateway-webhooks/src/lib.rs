#![doc = include_str!("../README.md")]

pub mod envelope;
pub mod epoch;
pub mod error;
pub mod input;
pub mod replay;
pub mod retention;
pub mod retry;
pub mod router;
pub mod signature;
pub mod ssrf;
pub mod standard;
pub mod transport;

pub use error::WebhookError;
pub use input::{
    DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_RATE_LIMIT_PER_SECOND, MAX_TEXT_FIELD_BYTES, WebhookConfigDraft,
    check_rate_limit,
};
pub use replay::INBOUND_REPLAY_WINDOW;
pub use retention::{DeliveryRetention, RETENTION, RetentionConfig, RetentionPorts};
pub use retry::{MAX_ATTEMPTS, RETRY_SCHEDULE, RetrySchedule, ScheduleError};
pub use router::{
    ATTEMPT_TIMEOUT, CONFIG_IDS_REFRESH_INTERVAL, DEFAULT_DISABLE_AFTER_FAILURES, DEFAULT_MAX_PER_CYCLE,
    DEFAULT_MAX_PER_SECOND, DeliveryDetail, ENQUEUE_SAFETY_NET, EPOCH_REFRESH, Enqueued, EventDraft, Inbound,
    MAX_DELIVERIES_PER_EVENT, POLL_INTERVAL, Published, RECOVER_BATCH, RouterConfig, RouterPorts,
    SIGNATURE_FAILURE_REPORT_INTERVAL, TEST_EVENT_TYPE, WebhookRouter,
};
pub use signature::{
    DELIVERY_HEADER, InboundSignature, SECRET_ROTATION_GRACE, SIGNATURE_HEADER, SignatureError, Verified,
};
pub use transport::{TransportSettings, UreqTransport};
