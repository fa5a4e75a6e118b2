//! `POST /gateway/messages`: a DecisionLog (docs/api.md). What happens to it (validation, the capability map, the
//! reminder handed to the scheduler before the log is published, the events) is gateway-core's
//! `DecisionLogIntake`; this reads the body and answers.

use std::net::IpAddr;

use bytes::Bytes;
use gateway_auth::{Access, Named};
use gateway_core::AgentId;
use gateway_core::Rejection;
use gateway_core::intake::interceptor::RejectedLog;
use http::StatusCode;

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::request::{Request, read_body};
use crate::http::response::{Response, json_bytes, json_response};
use crate::state::AppState;
use gateway_api::messages::{MessageRejected, RejectedStatus, SchemaViolation};

pub(super) async fn post(state: &AppState, request: Request, client: IpAddr) -> Result<Response, ApiError> {
    let caller = state.auth.authenticate(bearer_token(request.headers()), client).await?;
    let body = read_body(request).await?;
    let inspected = state.intake.inspect(&body);
    // Checked before the log is settled (nothing is done yet): the agent it names must be the caller's with agent
    // auth on, and the request counts against the agent's limit, refused logs included.
    let rejected_agent = inspected.rejected_agent_id().and_then(|agent_id| AgentId::new(agent_id).ok());
    let named = match (inspected.agent_id(), &rejected_agent) {
        (Some(agent_id), _) | (None, Some(agent_id)) => Named::Agent(agent_id),
        (None, None) if inspected.is_accepted() => Named::Nobody,
        (None, None) => Named::Unreadable,
    };
    state.auth.admit(&caller, named, Access::Act).await?;
    match state.intake.settle(inspected).await {
        Ok(accepted) => Ok(json_bytes(StatusCode::ACCEPTED, accepted_body(accepted.trace_id.as_deref()))),
        Err(Rejection::InvalidJson) => Err(ApiError::invalid_json()),
        // 503 or 507: the log's reminder is nowhere yet, so the log is not taken either; a retry schedules it once.
        Err(Rejection::StoreFailed(error)) => Err(error.into()),
        Err(Rejection::SchemaViolation(rejected)) => Ok(rejected_response(&rejected)),
    }
}

/// `{"status":"accepted","trace_id":…}` ([`gateway_api::messages::MessageAccepted`]), the trace id `null` when the log had none: the
/// constant part as it is, only the trace id through the serializer (a serialized struct cost about 600
/// instructions).
fn accepted_body(trace_id: Option<&str>) -> Bytes {
    const HEAD: &[u8] = br#"{"status":"accepted","trace_id":"#;
    let mut body = Vec::with_capacity(HEAD.len() + trace_id.map_or(4, |id| id.len() + 2) + 1);
    body.extend_from_slice(HEAD);
    // Writing a string or null into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut body, &trace_id);
    body.push(b'}');
    Bytes::from(body)
}

/// 422 naming the failing field path and the rule, with the log's own trace id (its event is published already).
fn rejected_response(rejected: &RejectedLog) -> Response {
    let body = MessageRejected {
        detail: rejected.violation.to_string(),
        reason: SchemaViolation,
        status: RejectedStatus,
        trace_id: rejected.trace_id.as_deref(),
    };
    json_response(StatusCode::UNPROCESSABLE_ENTITY, &body)
}

#[cfg(test)]
mod tests {
    use gateway_api::messages::{AcceptedStatus, MessageAccepted};
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn the_accepted_body_is_its_type_serialized() {
        for trace_id in [None, Some("t-1"), Some("quote \" and \\ and \u{1}")] {
            let typed = MessageAccepted { status: AcceptedStatus, trace_id };
            assert_eq!(accepted_body(trace_id), serde_json::to_vec(&typed).unwrap());
        }
    }

    #[test]
    fn the_accepted_body_is_the_json_document() {
        for trace_id in [None, Some("t-1"), Some("quote \" and \\ and \u{1}")] {
            let body: Value = serde_json::from_slice(&accepted_body(trace_id)).unwrap();
            assert_eq!(body, json!({"status": "accepted", "trace_id": trace_id}));
        }
    }
}
