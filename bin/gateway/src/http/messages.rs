//! `POST /gateway/messages`: a DecisionLog through the SchemaInterceptor (docs/api.md).

use bytes::Bytes;
use gateway_core::interceptor::RejectedLog;
use gateway_core::{
    AcceptedLog, AgentId, DecisionLog, Event, EventPayload, Rejection, ReminderRequest, ReminderRequestError,
    SchemaInterceptor, Topic,
};
use gateway_cron::CronError;
use http::StatusCode;
use serde_json::json;

use crate::http::agent_auth::{Access, Named};
use crate::http::error::ApiError;
use crate::http::request::{Request, read_body};
use crate::http::response::{Response, json_bytes, json_response};
use crate::state::AppState;

pub async fn post(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let caller = state.agent_auth.authenticate(request.headers()).await?;
    let body = read_body(request).await?;
    let inspected = SchemaInterceptor.inspect(&body);
    // Every request counts, the refused ones included: by the token's agent with auth on, else by the agent the
    // body names (the interceptor's "unknown" stands for an agent id it could not read).
    let rejected_agent = match &inspected {
        Err(Rejection::SchemaViolation(rejected)) if rejected.agent_id != "unknown" => {
            AgentId::new(rejected.agent_id.as_str()).ok()
        }
        _ => None,
    };
    let named = match (&inspected, &rejected_agent) {
        (Ok(accepted), _) => accepted.log.agent_id().map_or(Named::Nobody, Named::Agent),
        (Err(_), Some(agent_id)) => Named::Agent(agent_id),
        (Err(_), None) => Named::Unreadable,
    };
    state.agent_auth.admit(&caller, named, Access::Act).await?;
    match inspected {
        Ok(AcceptedLog { log, reminder: None }) => Ok(accept(state, log)),
        // Boxed: the scheduler's future is large, and unboxed it would size every DecisionLog's future, which
        // hyper moves several times per request.
        Ok(AcceptedLog { log, reminder: Some(reminder) }) => {
            Ok(Box::pin(accept_with_reminder(state, log, reminder)).await)
        }
        Err(Rejection::InvalidJson) => Err(ApiError::invalid_json()),
        Err(Rejection::SchemaViolation(rejected)) => Ok(reject(state, &rejected)),
    }
}

async fn accept_with_reminder(
    state: &AppState,
    log: DecisionLog,
    reminder: Result<ReminderRequest, ReminderRequestError>,
) -> Response {
    // FR-10.7: the reminder is handed to the scheduler before the log is published.
    match reminder {
        Ok(request) => schedule_reminder(state, request).await,
        Err(invalid) => tracing::warn!("{invalid}"),
    }
    accept(state, log)
}

fn accept(state: &AppState, log: DecisionLog) -> Response {
    if let Some(identity) = &log.identity {
        state.heartbeat.note_capabilities(&identity.agent_id, &identity.agent_type, &identity.capability_version);
    }
    let body = json_bytes(StatusCode::ACCEPTED, accepted_body(log.trace_id()));
    // The event is built only for someone to receive it: its id, timestamp and boxed log were about 1,500
    // instructions of every DecisionLog.
    if state.bridged || state.bus.has_subscribers(&Topic::Messages) {
        let event = Event::new(EventPayload::DecisionLog(Box::new(log)), state.clock.now());
        if let Err(error) = state.publisher.publish(&Topic::Messages, &event) {
            tracing::warn!(%error, event_id = %event.id, "decision_log event not published");
        }
    }
    body
}

/// `{"status":"accepted","trace_id":…}`, the trace id `null` when the log had none: the constant part as it is,
/// only the trace id through the serializer (a serialized struct cost about 600 instructions).
fn accepted_body(trace_id: Option<&str>) -> Bytes {
    const HEAD: &[u8] = br#"{"status":"accepted","trace_id":"#;
    let mut body = Vec::with_capacity(HEAD.len() + trace_id.map_or(4, |id| id.len() + 2) + 1);
    body.extend_from_slice(HEAD);
    // Writing a string or null into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut body, &trace_id);
    body.push(b'}');
    Bytes::from(body)
}

/// The hand-off of an agent's reminder request to the scheduler. Whatever happens here, the log is still
/// accepted and published (FR-10.7): a failure to schedule is a warning, never an error to the agent.
async fn schedule_reminder(state: &AppState, request: ReminderRequest) {
    let ReminderRequest { agent_id, delay_ms, payload, idempotency_key } = request;
    // A u64 beyond i64 is far past the scheduler's ten-year limit; it is refused there like any absurd delay.
    let delay = i64::try_from(delay_ms).unwrap_or(i64::MAX);
    let log_agent = agent_id.clone();
    // The key makes a retried log (same agent, same trace_id) find the reminder its first POST scheduled.
    let scheduled = state.cron.schedule_once_idempotent(agent_id, delay, payload, idempotency_key).await;
    match scheduled {
        Ok((job, false)) => tracing::info!(agent_id = %log_agent, job_id = job.id, delay_ms, "reminder scheduled"),
        Ok((job, true)) => tracing::info!(agent_id = %log_agent, job_id = job.id, "reminder already scheduled"),
        // Same text as the interceptor's own refusals, naming the value the agent sent.
        Err(CronError::InvalidDelay(_)) => tracing::warn!("invalid delay_ms for schedule_reminder: {delay_ms}"),
        Err(error) => tracing::warn!(agent_id = %log_agent, %error, "reminder not scheduled"),
    }
}

/// 422, and a `schema_violation` event that carries the body's hash, never the body. The log line names the
/// failing field path only.
fn reject(state: &AppState, rejected: &RejectedLog) -> Response {
    let reason = rejected.violation.to_string();
    tracing::info!(field = %rejected.violation.path, raw_payload_hash = %rejected.raw_payload_hash, "decision log rejected");
    let event = Event::new(
        EventPayload::SchemaViolation {
            agent_id: rejected.agent_id.clone(),
            capability_version: rejected.capability_version.clone(),
            violation_reason: reason.clone(),
            raw_payload_hash: rejected.raw_payload_hash.clone(),
        },
        state.clock.now(),
    );
    if let Err(error) = state.publisher.publish(&Topic::Violations, &event) {
        tracing::warn!(%error, event_id = %event.id, "schema_violation event not published");
    }
    json_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        &json!({"status": "rejected", "reason": "schema_violation", "detail": reason, "trace_id": rejected.trace_id}),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn the_accepted_body_is_the_json_document() {
        for trace_id in [None, Some("t-1"), Some("quote \" and \\ and \u{1}")] {
            let body: Value = serde_json::from_slice(&accepted_body(trace_id)).unwrap();
            assert_eq!(body, json!({"status": "accepted", "trace_id": trace_id}));
        }
    }
}
