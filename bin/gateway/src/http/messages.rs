//! `POST /gateway/messages`: a DecisionLog (docs/api.md). What happens to it (validation, the capability map, the
//! reminder handed to the scheduler before the log is published, the events) is gateway-core's
//! `DecisionLogIntake`; this reads the body and answers.

use std::net::IpAddr;

use bytes::Bytes;
use gateway_auth::{Access, Caller, Named};
use gateway_core::AgentId;
use gateway_core::Rejection;
use gateway_core::intake::interceptor::RejectedLog;
use gateway_core::intake::{AcceptedReceipt, BoxFuture, InspectedLog};
use http::StatusCode;

use http::header::AUTHORIZATION;

use crate::http::auth::bearer_token_of;
use crate::http::error::ApiError;
use crate::http::request::{Request, read_body};
use crate::http::response::{Response, json_bytes, json_response};
use crate::state::AppState;
use gateway_api::messages::{MessageRejected, RejectedStatus, SchemaViolation};

/// A plain `fn` returning the handler's future rather than an `async fn`: an `async fn` keeps its arguments (the
/// whole request, head included) in its future for as long as it runs, beside what it awaits. Here the head is
/// looked at and dropped before the future is made, which keeps only the `Authorization` value and the body's
/// reading; the body is still read only once the caller is known, as before.
pub(super) fn post(
    state: &AppState,
    request: Request,
    client: IpAddr,
) -> impl Future<Output = Result<Response, ApiError>> + '_ {
    let authorization = request.headers().get(AUTHORIZATION).cloned();
    let body = read_body(request);
    async move {
        let caller = state.auth.authenticate(bearer_token_of(authorization.as_ref()), client).await?;
        let body = body.await?;
        // Settled at once unless the rate limiter is shared or the log asks for a reminder; only then is anything
        // awaited, a boxed future: the log (about 550 bytes) and its outcome (about 400) stay out of this future.
        let waiting = match decide(state, caller, &body)? {
            Decided::Settled(settled) => return answer(settled),
            Decided::Waiting(waiting) => waiting,
        };
        answer(waiting.await?)
    }
}

/// A log inspected and admitted: settled, or settling in a boxed future.
enum Decided<'a> {
    Settled(Result<AcceptedReceipt, Rejection>),
    Waiting(BoxFuture<'a, Result<Result<AcceptedReceipt, Rejection>, ApiError>>),
}

/// The read body of a known caller: inspected, admitted (the agent it names must be the caller's with agent auth on,
/// and the request counts against the agent's limit, refused logs included), then settled (see [`Decided`]).
fn decide<'a>(state: &'a AppState, caller: Caller, body: &[u8]) -> Result<Decided<'a>, ApiError> {
    let inspected = state.intake.inspect(body);
    let admitted = {
        let rejected_agent = rejected_agent(&inspected);
        state.auth.admit_now(&caller, named(&inspected, rejected_agent.as_ref()), Access::Act)
    };
    let Some(admitted) = admitted else {
        return Ok(Decided::Waiting(Box::pin(admit_and_settle(state, caller, inspected))));
    };
    admitted?;
    Ok(match state.intake.settle_now(inspected) {
        Ok(settled) => Decided::Settled(settled),
        Err(scheduling) => Decided::Waiting(Box::pin(async move { Ok(scheduling.await) })),
    })
}

/// The admission that needs a round trip (a shared rate limiter), then the log settled.
async fn admit_and_settle(
    state: &AppState,
    caller: Caller,
    inspected: InspectedLog,
) -> Result<Result<AcceptedReceipt, Rejection>, ApiError> {
    let rejected_agent = rejected_agent(&inspected);
    state.auth.admit(&caller, named(&inspected, rejected_agent.as_ref()), Access::Act).await?;
    Ok(state.intake.settle(inspected).await)
}

/// For a log refused by the schema, the agent it names when that is a valid id.
fn rejected_agent(inspected: &InspectedLog) -> Option<AgentId> {
    inspected.rejected_agent_id().and_then(|agent_id| AgentId::new(agent_id).ok())
}

/// Whom the log names, as the rate limit and agent auth see it.
fn named<'a>(inspected: &'a InspectedLog, rejected_agent: Option<&'a AgentId>) -> Named<'a> {
    match (inspected.agent_id(), rejected_agent) {
        (Some(agent_id), _) | (None, Some(agent_id)) => Named::Agent(agent_id),
        (None, None) if inspected.is_accepted() => Named::Nobody,
        (None, None) => Named::Unreadable,
    }
}

/// The answer to a settled log: 202, or the refusal.
fn answer(settled: Result<AcceptedReceipt, Rejection>) -> Result<Response, ApiError> {
    match settled {
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
