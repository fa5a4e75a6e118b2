//! The crate's one error type, and the reason a signature was refused, which it carries. The binary maps each
//! variant to an HTTP status in one place.

use gateway_core::{DeliveryStatus, StoreError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// No webhook config has this id.
    #[error("no webhook config has id {0}")]
    UnknownWebhook(i64),
    /// No delivery has this id.
    #[error("no delivery has id {0}")]
    UnknownDelivery(i64),
    /// An inbound webhook's signature header is missing, malformed or wrong.
    #[error("inbound webhook {webhook_id}: {reason}")]
    SignatureMismatch { webhook_id: i64, reason: SignatureError },
    /// A config for this `(source_identifier, event_type)` pair exists.
    #[error("a webhook config for this source_identifier and event_type already exists")]
    DuplicateConfig,
    /// A webhook config to create is invalid.
    #[error("{field}: {problem}")]
    InvalidConfig { field: &'static str, problem: String },
    /// A delivery to enqueue is invalid.
    #[error("{field}: {problem}")]
    InvalidDelivery { field: &'static str, problem: String },
    /// "Retry now" on a delivery that is neither failed nor dead.
    #[error("delivery {id} is {status}; only failed or dead deliveries can be retried")]
    RetryNotAllowed { id: i64, status: DeliveryStatus },
    /// An `Idempotency-Key` already created a delivery with a different webhook, session or payload.
    #[error("this Idempotency-Key was used for a different delivery")]
    IdempotencyKeyReused,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<gateway_core::runtime::blocking::BlockingTaskFailed> for WebhookError {
    fn from(error: gateway_core::runtime::blocking::BlockingTaskFailed) -> Self {
        Self::Store(error.into())
    }
}

impl gateway_core::MaybeFenced for WebhookError {
    fn is_fenced(&self) -> bool {
        matches!(self, Self::Store(store) if store.is_fenced())
    }
}

/// Why a signature header was refused. Kept apart from the response (always `signature_mismatch`) so logs can
/// say which, without ever showing the header's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("signature header missing")]
    Missing,
    #[error("signature header is not sha256=<64 hex digits>")]
    Malformed,
    #[error("signature does not match the body")]
    Mismatch,
    /// A Standard Webhooks signature whose timestamp is too far from now (a replay, or a wrong clock).
    #[error("signature timestamp is outside the tolerance")]
    Stale,
    /// The config requires a Standard Webhooks signature (with its timestamp) and the request carries none: the
    /// `X-Observatory-Signature` scheme alone is refused there, whether it would verify or not.
    #[error("this webhook requires a Standard Webhooks signature with a timestamp")]
    TimestampRequired,
}
