//! Reading requests: bounded bodies, JSON, query strings.

use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;

use crate::http::error::ApiError;

/// Largest accepted request body (DESIGN.md §4).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// A client that has not sent its whole body by then is cut off, so slow senders cannot hold connections.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub type Request = http::Request<Incoming>;

/// The whole body, at most [`MAX_BODY_BYTES`]. A declared length over the limit is refused before reading.
pub async fn read_body(request: Request) -> Result<Bytes, ApiError> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(ApiError::payload_too_large(MAX_BODY_BYTES));
    }
    let limited = Limited::new(request.into_body(), MAX_BODY_BYTES);
    match tokio::time::timeout(BODY_READ_TIMEOUT, limited.collect()).await {
        Err(_) => Err(ApiError::new(http::StatusCode::REQUEST_TIMEOUT, "request_timeout")),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::payload_too_large(MAX_BODY_BYTES))
        }
        Ok(Err(_)) => Err(ApiError::new(http::StatusCode::BAD_REQUEST, "invalid_body")),
    }
}

/// The body as a JSON value; 400 `invalid_json` when it is not one.
pub async fn read_json(request: Request) -> Result<serde_json::Value, ApiError> {
    let body = read_body(request).await?;
    serde_json::from_slice(&body).map_err(|_| ApiError::invalid_json())
}

/// The value of query parameter `name` (percent-decoded), if present.
pub fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    let query = uri.query()?;
    form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == name).map(|(_, value)| value.into_owned())
}

/// Request header naming a create request's idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Response header set when a create request was answered from an earlier one with the same key.
pub const IDEMPOTENT_REPLAYED_HEADER: &str = "idempotent-replayed";

/// The `Idempotency-Key` header, if present; 400 `invalid_idempotency_key` when it is not 1 to 255 visible
/// ASCII characters, or starts with the prefix reserved for reminders scheduled from DecisionLogs.
pub fn idempotency_key(headers: &http::HeaderMap) -> Result<Option<gateway_core::IdempotencyKey>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY_HEADER) else { return Ok(None) };
    let invalid =
        |detail: String| ApiError::new(http::StatusCode::BAD_REQUEST, "invalid_idempotency_key").with_detail(detail);
    let text =
        value.to_str().map_err(|_| invalid("Idempotency-Key must be visible ASCII characters only".to_owned()))?;
    if text.starts_with(gateway_core::interceptor::REMINDER_KEY_PREFIX) {
        let prefix = gateway_core::interceptor::REMINDER_KEY_PREFIX;
        return Err(invalid(format!("Idempotency-Key must not start with {prefix:?} (reserved for agent reminders)")));
    }
    gateway_core::IdempotencyKey::new(text).map(Some).map_err(|error| invalid(format!("Idempotency-Key {error}")))
}
