//! Every refusal reason the gateway answers with (`{"status":"error","reason":…}`), each with its meaning: one
//! enum, which `ApiError` takes (so no handler can answer a reason the document does not know) and from which the
//! OpenAPI document takes the reasons' names and meanings (http/openapi).

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// Declares [`Reason`]: each variant with its wire name and its meaning, in one line.
macro_rules! reasons {
    ($($variant:ident = $name:literal: $meaning:literal,)+) => {
        /// A refusal's `reason`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $(#[doc = $meaning] $variant,)+
        }

        impl Reason {
            /// Every reason, in the order declared.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)+];

            /// The `reason` of the error body.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $name,)+
                }
            }

            /// When the gateway answers it: the document lists it with each refusal that may carry it.
            pub const fn meaning(self) -> &'static str {
                match self {
                    $(Reason::$variant => $meaning,)+
                }
            }
        }
    };
}

reasons! {
    InvalidJson = "invalid_json": "the body is not JSON (or is nested deeper than 128 levels)",
    InvalidBody = "invalid_body": "the body could not be read (a broken chunked encoding)",
    InvalidQuery = "invalid_query":
        "an unknown query parameter, one given twice, or a bad value (`detail` names it)",
    InvalidIdempotencyKey = "invalid_idempotency_key":
        "`Idempotency-Key` is not 1 to 255 visible ASCII characters, or starts with `reminder:`",
    InvalidTopic = "invalid_topic": "`topic` is missing or names no topic",
    Unauthorized = "unauthorized": "no valid bearer token for this endpoint",
    TokenExpired = "token_expired":
        "the agent token's credential has expired (`expires_in_s` at issue): ask for a new token",
    TooManyRefusals = "too_many_refusals":
        "this client address presented 20 refused agent tokens this second: every agent token it presents is refused \
         for the rest of the second; `Retry-After` is 1",
    IdentityMismatch = "identity_mismatch":
        "with agent auth on: the token's agent is not the agent the request names",
    SignatureMismatch = "signature_mismatch": "the signature header is missing, malformed or wrong",
    TimestampRequired = "timestamp_required":
        "this webhook config accepts only Standard Webhooks signatures with a timestamp (`inbound_require_timestamp`)",
    NotFound = "not_found": "no such route",
    UnknownAgent = "unknown_agent":
        "the path's agent id cannot be an agent's (empty, over 256 bytes, control characters)",
    UnknownCredential = "unknown_credential": "the agent has no credential with this id",
    UnknownWebhook = "unknown_webhook": "no webhook config has this id",
    UnknownDelivery = "unknown_delivery": "no delivery has this id",
    UnknownCronJob = "unknown_cron_job": "no cron job has this id",
    UnknownTool = "unknown_tool": "no such tool",
    RequestTimeout = "request_timeout": "the body did not arrive within 30 s",
    DuplicateWebhookConfig = "duplicate_webhook_config":
        "a config for this (source_identifier, event_type) exists",
    RetryNotAllowed = "retry_not_allowed":
        "the delivery is pending or delivered: only failed and dead ones are retried",
    ToolCallConflict = "tool_call_conflict":
        "this tool_call_id of this agent was answered for another tool or other params",
    Conflict = "conflict": "the write conflicted with a concurrent one; retry",
    PayloadTooLarge = "payload_too_large": "the body is over 1 MiB",
    InvalidHeartbeatType = "invalid_heartbeat_type": "`type` is not \"heartbeat\"",
    MissingRequiredFields = "missing_required_fields":
        "a required field is absent or empty (`detail` names it)",
    InvalidField = "invalid_field":
        "a field of the wrong type, out of range, or unknown (`detail` names it, never its value)",
    InvalidSchedule = "invalid_schedule": "the cron expression does not parse (`detail` names the field)",
    InvalidDelay = "invalid_delay": "a reminder's delay is not a positive number of milliseconds",
    IdempotencyKeyReused = "idempotency_key_reused": "this `Idempotency-Key` was used for a different request",
    RateLimited = "rate_limited":
        "the agent is over `--agent-rate-limit-per-minute`; `Retry-After` says when its window ends",
    TooManyReminders = "too_many_reminders":
        "the agent has `--max-pending-reminders-per-agent` pending reminders already",
    QuotaExceeded = "quota_exceeded":
        "the agent's stored bytes (recorded tool answers, pending reminders, mailbox) would pass \
         `--agent-storage-quota-bytes`",
    StoreUnavailable = "store_unavailable": "the database cannot be reached right now; retry",
    InsufficientStorage = "insufficient_storage":
        "the gateway's storage (disk or database) is full: nothing was written; retry later",
    HeartbeatManagerUnavailable = "heartbeat_manager_unavailable":
        "the heartbeat manager is not running, or tracks as many agents as it may",
    TooManyStreams = "too_many_streams":
        "429: this agent has `--agent-streams-per-agent` streams open on this instance; 503: the gateway (or this \
         client address) holds as many event streams as it may",
    MisdirectedRequest = "misdirected_request":
        "on a loopback listener without agent auth (`--agent-auth auto`): `Host` is not `localhost`, 127.0.0.0/8 \
         or `[::1]`",
    CrossOrigin = "cross_origin":
        "on a loopback listener without agent auth: `Origin` is present and not the gateway's own",
    UnsupportedMediaType = "unsupported_media_type":
        "a body whose `Content-Type` is present and not JSON (`application/json`, `+json`)",
    Overloaded = "overloaded":
        "the request bodies being read hold `--max-inflight-body-bytes`; this one was not read; `Retry-After`",
    TooManyConnections = "too_many_connections":
        "the client address holds `--max-connections-per-address` connections; answered before the request is \
         read, then the connection closes",
    MethodNotAllowed = "method_not_allowed": "the path is known, the method is not (`Allow` lists those it takes)",
    InternalError = "internal_error": "a bug: the detail is in the gateway's log",
    AgentRequired = "agent_required":
        "on an open loopback gateway an MCP request names its agent in `X-Agent-Id` (with agent auth on, the token does)",
    SessionRequired = "session_required": "an MCP message other than `initialize` needs the `Mcp-Session-Id` it issued",
    UnknownSession = "unknown_session":
        "the `Mcp-Session-Id` names no session of this agent here (ended or expired): send `initialize` again",
    UnsupportedProtocolVersion = "unsupported_protocol_version":
        "`MCP-Protocol-Version` names an MCP revision this gateway does not speak",
    TooManySessions = "too_many_sessions": "the gateway holds as many MCP sessions as it may; retry later",
}

impl std::fmt::Display for Reason {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The schema of an error body's `reason`: one of the reasons above (each error response narrows it further).
impl utoipa::PartialSchema for Reason {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(Self::ALL.iter().map(|reason| reason.as_str())))
            .into()
    }
}

impl utoipa::ToSchema for Reason {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_snake_case_and_every_reason_has_a_meaning() {
        let mut names: Vec<&str> = Reason::ALL.iter().map(|reason| reason.as_str()).collect();
        for (reason, name) in Reason::ALL.iter().zip(&names) {
            assert!(name.bytes().all(|byte| byte.is_ascii_lowercase() || byte == b'_'), "{name}");
            assert!(!reason.meaning().is_empty(), "{name}");
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Reason::ALL.len(), "a name given twice");
    }
}
