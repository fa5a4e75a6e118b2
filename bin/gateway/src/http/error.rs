//! Error policy of the HTTP layer, and the one place where every crate's errors become HTTP statuses.
//!
//! - Bad input is always a 4xx with `{"status":"error","reason":"<snake_case>","detail":…}` and changes nothing.
//! - A dependency that is down (store, a stopped loop) is a 503 with a reason naming it; the client may retry.
//! - Anything else is a 500 `internal_error` whose detail stays in the log, never in the response.
//! - `detail` names fields and limits; it never echoes request values, secrets or payloads. One exception: an
//!   `invalid_schedule` detail quotes the offending field of the operator's own cron expression (at most 256
//!   bytes), because "field 5: `MON-FUN` is not a weekday" is what makes the mistake findable; it goes only to the
//!   operator who sent it and is never logged.

use gateway_api::Reason;
use gateway_api::common::{ErrorBody, ErrorStatus};
use gateway_auth::{AuthError, StreamCap};
use gateway_core::StoreError;
use gateway_cron::CronError;
use gateway_edge::Refusal;
use gateway_heartbeat::HeartbeatError;
use gateway_mcp::McpError;
use gateway_webhooks::{SignatureError, WebhookError};
use http::StatusCode;

use crate::http::response::{Response, json_response};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    /// A [`Reason`]'s name: every constructor takes a [`Reason`].
    pub(crate) reason: &'static str,
    pub(crate) detail: Option<String>,
    /// Whole seconds for a `Retry-After` header (a 429, a 503 `overloaded`).
    pub(crate) retry_after_s: Option<u64>,
    /// `Connection: close` with the answer: the request's body was left unread, so the connection cannot carry
    /// another request.
    pub(crate) close_connection: bool,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, reason: Reason) -> Self {
        Self { status, reason: reason.as_str(), detail: None, retry_after_s: None, close_connection: false }
    }

    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// 422 with a detail: the body parsed but a field breaks a rule.
    pub(crate) fn unprocessable(reason: Reason, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, reason).with_detail(detail)
    }

    /// 404 for a path that names no route.
    pub(crate) fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, Reason::NotFound).with_detail("no such route")
    }

    /// 404 for an id that names nothing of its kind (or is not an id at all).
    pub(crate) fn unknown(reason: Reason, kind: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, reason).with_detail(format!("no {kind} has this id"))
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, Reason::Unauthorized)
    }

    /// 401: the agent token's credential has expired (it was issued with `expires_in_s`): a new token is needed.
    pub(crate) fn token_expired() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, Reason::TokenExpired)
            .with_detail("this agent token has expired: ask the operator for a new one")
    }

    /// 429 with `Retry-After: 1`: this client address presented too many refused agent tokens this second.
    pub(crate) fn too_many_refusals() -> Self {
        Self {
            retry_after_s: Some(1),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, Reason::TooManyRefusals).with_detail(
                "this client address presented too many refused agent tokens this second: retry after a second",
            )
        }
    }

    /// 403: the caller authenticated as one agent and acts as another (or as none, where an agent must be named).
    pub(crate) fn identity_mismatch(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, Reason::IdentityMismatch).with_detail(detail)
    }

    /// 429 with `Retry-After`: the agent's window ends in `retry_after`, given in whole seconds rounded up (at
    /// least 1, so a client that waits that long is let through).
    pub(crate) fn rate_limited(retry_after: std::time::Duration) -> Self {
        let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        Self { retry_after_s: Some(seconds.max(1)), ..Self::new(StatusCode::TOO_MANY_REQUESTS, Reason::RateLimited) }
    }

    /// 503 with `Retry-After: 1`: the request bodies being read already hold `--max-inflight-body-bytes`, and
    /// this one's would pass it. Nothing of it was read (or what was is dropped), so the connection closes.
    pub(crate) fn overloaded() -> Self {
        Self {
            retry_after_s: Some(1),
            close_connection: true,
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, Reason::Overloaded)
                .with_detail("the gateway is reading as many request bodies as it may; retry")
        }
    }

    /// 421: on a loopback listener without agent auth, the request names another host than this machine (a page
    /// that rebound its own name to 127.0.0.1, or a proxy forwarding the public name).
    pub(crate) fn misdirected_request() -> Self {
        Self::new(StatusCode::MISDIRECTED_REQUEST, Reason::MisdirectedRequest)
            .with_detail("on a loopback listener without agent auth, Host must be localhost, 127.0.0.0/8 or [::1]")
    }

    /// 403: on a loopback listener without agent auth, a web page of another origin sent the request.
    pub(crate) fn cross_origin() -> Self {
        Self::new(StatusCode::FORBIDDEN, Reason::CrossOrigin)
            .with_detail("on a loopback listener without agent auth, Origin must be the gateway's own")
    }

    /// 415: a body whose `Content-Type` is present and not JSON, on an endpoint that reads JSON.
    pub(crate) fn unsupported_media_type() -> Self {
        Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, Reason::UnsupportedMediaType)
            .with_detail("the body must be application/json (or absent Content-Type)")
    }

    pub(crate) fn invalid_json() -> Self {
        Self::new(StatusCode::BAD_REQUEST, Reason::InvalidJson)
    }

    pub(crate) fn payload_too_large(limit: usize) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, Reason::PayloadTooLarge).with_detail(format!("limit is {limit} bytes"))
    }

    pub(crate) fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, Reason::InternalError)
    }

    pub(crate) fn into_response(self) -> Response {
        let body = ErrorBody { detail: self.detail.as_deref(), reason: self.reason, status: ErrorStatus };
        let mut response = json_response(self.status, &body);
        if let Some(seconds) = self.retry_after_s {
            response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
        }
        if self.close_connection {
            response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
        }
        response
    }
}

/// The edge's refusals (gateway-edge), before any route saw the request.
impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::MisdirectedRequest => Self::misdirected_request(),
            Refusal::CrossOrigin => Self::cross_origin(),
            Refusal::Overloaded => Self::overloaded(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(cause) => {
                tracing::warn!(%cause, "store unavailable");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, Reason::StoreUnavailable)
            }
            StoreError::Full(cause) => {
                // Once per refused write: an operator watching the log sees what fills up, a client is told to wait.
                tracing::warn!(%cause, "store full: write refused");
                Self::new(StatusCode::INSUFFICIENT_STORAGE, Reason::InsufficientStorage)
                    .with_detail("the gateway's storage is full; retry later")
            }
            StoreError::Conflict(cause) => Self::new(StatusCode::CONFLICT, Reason::Conflict).with_detail(cause),
            StoreError::Fenced { .. } => {
                // Leader-only writes do not run on request paths; should one ever, the caller may retry elsewhere.
                tracing::warn!(%error, "a fenced store write reached a request");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, Reason::StoreUnavailable)
            }
            StoreError::Internal(cause) => {
                tracing::error!(%cause, "store error");
                Self::internal()
            }
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        match error {
            AuthError::TokenRequired => {
                Self::unauthorized().with_detail("agent auth is on: send Authorization: Bearer <an agent token>")
            }
            AuthError::Refused => Self::unauthorized(),
            AuthError::Expired => Self::token_expired(),
            AuthError::TooManyRefusals => Self::too_many_refusals(),
            AuthError::IdentityMismatch(mismatch) => Self::identity_mismatch(mismatch.to_string()),
            AuthError::RateLimited { retry_after } => Self::rate_limited(retry_after),
            // The agent's own cap is the agent's to fix (a 429); the others are the gateway's capacity (a 503).
            AuthError::TooManyStreams(cap @ StreamCap::Agent) => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, Reason::TooManyStreams).with_detail(cap.to_string())
            }
            AuthError::TooManyStreams(cap @ (StreamCap::Address | StreamCap::Instance)) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, Reason::TooManyStreams).with_detail(cap.to_string())
            }
            AuthError::UnknownCredential => Self::unknown(Reason::UnknownCredential, "credential of this agent"),
            AuthError::InvalidLifetime => Self::unprocessable(Reason::InvalidField, error.to_string()),
            // Logged where it happened.
            AuthError::NoRandomness => Self::internal(),
            AuthError::Store(store) => store.into(),
        }
    }
}

impl From<HeartbeatError> for ApiError {
    fn from(error: HeartbeatError) -> Self {
        let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
        match error {
            HeartbeatError::InvalidType => Self::new(unprocessable, Reason::InvalidHeartbeatType),
            HeartbeatError::MissingRequiredField(_) => {
                Self::new(unprocessable, Reason::MissingRequiredFields).with_detail(error.to_string())
            }
            HeartbeatError::InvalidField { .. } => {
                Self::new(unprocessable, Reason::InvalidField).with_detail(error.to_string())
            }
            HeartbeatError::Unavailable => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, Reason::HeartbeatManagerUnavailable)
            }
            HeartbeatError::CapacityExceeded { .. } => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, Reason::HeartbeatManagerUnavailable)
                    .with_detail(error.to_string())
            }
            HeartbeatError::Store(store) => store.into(),
        }
    }
}

impl From<CronError> for ApiError {
    fn from(error: CronError) -> Self {
        let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
        match error {
            CronError::InvalidDelay(_) => Self::new(unprocessable, Reason::InvalidDelay).with_detail(error.to_string()),
            CronError::InvalidSchedule(reason) => Self::new(unprocessable, Reason::InvalidSchedule).with_detail(reason),
            // A schedule is its expression read in its zone: an unknown zone is an invalid schedule, named.
            CronError::UnknownTimezone(_) => {
                Self::new(unprocessable, Reason::InvalidSchedule).with_detail(error.to_string())
            }
            CronError::NotFound(_) => Self::unknown(Reason::UnknownCronJob, "cron job"),
            CronError::IdempotencyKeyReused => {
                Self::new(unprocessable, Reason::IdempotencyKeyReused).with_detail(error.to_string())
            }
            CronError::UnknownTool => {
                Self::new(StatusCode::NOT_FOUND, Reason::UnknownTool).with_detail(error.to_string())
            }
            CronError::MissingToolParam(_) => {
                Self::new(unprocessable, Reason::MissingRequiredFields).with_detail(error.to_string())
            }
            CronError::InvalidToolParams(_) => {
                Self::new(unprocessable, Reason::InvalidField).with_detail(error.to_string())
            }
            CronError::ToolCallConflict => {
                Self::new(StatusCode::CONFLICT, Reason::ToolCallConflict).with_detail(error.to_string())
            }
            CronError::QuotaExceeded { .. } => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, Reason::QuotaExceeded).with_detail(error.to_string())
            }
            CronError::TooManyReminders { .. } | CronError::TooManyRecurringJobs { .. } => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, Reason::TooManyReminders).with_detail(error.to_string())
            }
            CronError::Store(store) => store.into(),
        }
    }
}

impl From<McpError> for ApiError {
    fn from(error: McpError) -> Self {
        let detail = error.to_string();
        match error {
            McpError::SessionRequired => Self::new(StatusCode::BAD_REQUEST, Reason::SessionRequired),
            McpError::UnknownSession => Self::new(StatusCode::NOT_FOUND, Reason::UnknownSession),
            McpError::UnsupportedProtocolVersion => {
                Self::new(StatusCode::BAD_REQUEST, Reason::UnsupportedProtocolVersion)
            }
            McpError::TooManySessions => {
                Self { retry_after_s: Some(1), ..Self::new(StatusCode::SERVICE_UNAVAILABLE, Reason::TooManySessions) }
            }
        }
        .with_detail(detail)
    }
}

impl From<WebhookError> for ApiError {
    fn from(error: WebhookError) -> Self {
        match error {
            WebhookError::UnknownWebhook(_) => Self::unknown(Reason::UnknownWebhook, "webhook config"),
            WebhookError::UnknownDelivery(_) => Self::unknown(Reason::UnknownDelivery, "delivery"),
            // A config's policy, not a verdict on a signature: the sender is told which scheme it must use.
            WebhookError::SignatureMismatch { reason: SignatureError::TimestampRequired, .. } => {
                Self::new(StatusCode::UNAUTHORIZED, Reason::TimestampRequired).with_detail(
                    "this webhook accepts only Standard Webhooks signatures (webhook-id, webhook-timestamp, \
                     webhook-signature)",
                )
            }
            // Which of missing, malformed or wrong is logged by the router; the sender only learns "mismatch".
            WebhookError::SignatureMismatch { .. } => Self::new(StatusCode::UNAUTHORIZED, Reason::SignatureMismatch),
            WebhookError::DuplicateConfig => {
                Self::new(StatusCode::CONFLICT, Reason::DuplicateWebhookConfig).with_detail(error.to_string())
            }
            WebhookError::InvalidConfig { .. } | WebhookError::InvalidDelivery { .. } => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, Reason::InvalidField).with_detail(error.to_string())
            }
            WebhookError::RetryNotAllowed { .. } => {
                Self::new(StatusCode::CONFLICT, Reason::RetryNotAllowed).with_detail(error.to_string())
            }
            WebhookError::IdempotencyKeyReused => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, Reason::IdempotencyKeyReused).with_detail(error.to_string())
            }
            WebhookError::Store(store) => store.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_edges_refusals_are_421_403_and_503_overloaded_with_retry_after() {
        let answer = |refusal| {
            let error = ApiError::from(refusal);
            (error.status.as_u16(), error.reason, error.retry_after_s)
        };
        assert_eq!(answer(Refusal::Overloaded), (503, "overloaded", Some(1)));
        assert_eq!(answer(Refusal::MisdirectedRequest), (421, "misdirected_request", None));
        assert_eq!(answer(Refusal::CrossOrigin), (403, "cross_origin", None));
    }

    #[test]
    fn a_429_says_when_to_retry_in_whole_seconds_rounded_up() {
        for (wait, seconds) in
            [(Duration::from_millis(1), "1"), (Duration::from_secs(59), "59"), (Duration::from_millis(59_001), "60")]
        {
            let response = ApiError::rate_limited(wait).into_response();
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(response.headers()[http::header::RETRY_AFTER], seconds, "{wait:?}");
        }
        assert_eq!(ApiError::rate_limited(Duration::ZERO).retry_after_s, Some(1));
        assert!(!ApiError::unauthorized().into_response().headers().contains_key(http::header::RETRY_AFTER));
    }

    /// Every refusal of gateway-auth as clients see it: status, reason, detail and `Retry-After`.
    #[test]
    fn auth_refusals_keep_their_answers() {
        use gateway_auth::Mismatch;
        let answer = |error: AuthError| {
            let error = ApiError::from(error);
            (error.status.as_u16(), error.reason, error.detail, error.retry_after_s)
        };
        let detail = |text: &str| Some(text.to_owned());
        let cases = [
            (
                AuthError::TokenRequired,
                (401, "unauthorized", detail("agent auth is on: send Authorization: Bearer <an agent token>"), None),
            ),
            (AuthError::Refused, (401, "unauthorized", None, None)),
            (
                AuthError::Expired,
                (401, "token_expired", detail("this agent token has expired: ask the operator for a new one"), None),
            ),
            (
                AuthError::TooManyRefusals,
                (
                    429,
                    "too_many_refusals",
                    detail(
                        "this client address presented too many refused agent tokens this second: retry after a second",
                    ),
                    Some(1),
                ),
            ),
            (
                AuthError::IdentityMismatch(Mismatch::OperatorActs),
                (403, "identity_mismatch", detail("the operator token does not act for agents: use the agent's"), None),
            ),
            (
                AuthError::IdentityMismatch(Mismatch::OtherAgent),
                (403, "identity_mismatch", detail("the agent named differs from the token's agent"), None),
            ),
            (
                AuthError::IdentityMismatch(Mismatch::Unnamed),
                (
                    403,
                    "identity_mismatch",
                    detail("identity.agent_id is required with agent auth on, and must be the token's agent"),
                    None,
                ),
            ),
            (
                AuthError::RateLimited { retry_after: Duration::from_millis(59_999) },
                (429, "rate_limited", None, Some(60)),
            ),
            (
                AuthError::TooManyStreams(StreamCap::Agent),
                (
                    429,
                    "too_many_streams",
                    detail("this agent has as many event streams open as it may: close one first"),
                    None,
                ),
            ),
            (
                AuthError::TooManyStreams(StreamCap::Address),
                (503, "too_many_streams", detail("this client address has as many agent streams open as it may"), None),
            ),
            (
                AuthError::TooManyStreams(StreamCap::Instance),
                (503, "too_many_streams", detail("the gateway serves as many agent streams as it can"), None),
            ),
            (
                AuthError::UnknownCredential,
                (404, "unknown_credential", detail("no credential of this agent has this id"), None),
            ),
            (
                AuthError::InvalidLifetime,
                (
                    422,
                    "invalid_field",
                    detail("expires_in_s: must be an integer from 1 to 315360000 (ten years)"),
                    None,
                ),
            ),
            (AuthError::NoRandomness, (500, "internal_error", None, None)),
            (AuthError::Store(StoreError::Unavailable("down".to_owned())), (503, "store_unavailable", None, None)),
        ];
        for (error, expected) in cases {
            assert_eq!(answer(error.clone()), expected, "{error:?}");
        }
    }
}
