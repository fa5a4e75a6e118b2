//! `GET /gateway/events?topic=…`: one topic as Server-Sent Events (docs/api.md).
//!
//! The handler: the topic, who asks, admission (gateway-auth's stream caps, or the operator streams' own limit),
//! the subscription, and the response. What flows between the bus and the socket once the stream is open (the byte
//! budget, stalled clients, keep-alives, the replay of an agent's mailbox and its receipts) is gateway-pubsub's
//! event stream (`gateway_pubsub::stream`); here it is only handed to hyper as the response body, and a stalled
//! client's connection is closed.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use gateway_auth::{Access, AdmittedStream, Caller};
use gateway_core::Topic;
use gateway_edge::Connection;
use gateway_pubsub::stream::{self, AgentMailbox, BridgeWatch, Ended, StreamReader};
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame};
use tokio::sync::OwnedSemaphorePermit;

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::request::{Query, Request};
use crate::http::response::{Response, event_stream};
use crate::state::AppState;
use gateway_api::Reason;

/// Streams of `gateway:*` topics, counted apart: agent topics need no token yet, and a flood of them must not
/// lock the operator out of their own event streams.
pub(crate) const MAX_OPERATOR_EVENT_STREAMS: usize = 64;

/// The `Last-Event-ID` request header; a header that is not visible ASCII names no fire (so: everything retained).
pub(crate) fn last_event_id(headers: &HeaderMap) -> Option<String> {
    headers.get("last-event-id").map(|value| value.to_str().map(str::to_owned).unwrap_or_default())
}

/// What a stream holds on to for as long as it is open: its place among the streams it is counted with.
#[derive(Debug)]
enum Slots {
    /// An agent's stream: its places in the stream caps and, opened with an agent's credential, its registration to
    /// be closed when the credential is revoked or expires (gateway-auth).
    Agent { _admitted: AdmittedStream },
    /// A `gateway:*` stream.
    Operator { _permit: OwnedSemaphorePermit },
}

pub(crate) async fn get(state: &AppState, request: &Request, connection: Connection) -> Result<Response, ApiError> {
    let invalid_topic = || {
        ApiError::new(StatusCode::BAD_REQUEST, Reason::InvalidTopic).with_detail(
            "topic must be gateway:messages, gateway:violations, gateway:webhooks, gateway:agents or agent:<agent_id>:scheduled",
        )
    };
    let query = Query::parse(request.uri(), &["topic"])?;
    let topic = query.get("topic").and_then(Topic::parse).ok_or_else(invalid_topic)?;
    let limits = state.stream_limits;
    let client = connection.peer().ip();
    let token = bearer_token(request.headers());
    // Stopped at shutdown, or, for a stream opened with an agent's credential, when that credential is revoked.
    let mut stop = state.shutdown.clone();
    let mut observer = false;
    let slots = match &topic {
        Topic::AgentScheduled(agent_id) => {
            // Who is asking comes first: a refused client takes no slot.
            let caller = state.auth.authorize(token, client, agent_id, Access::Read).await?;
            let admitted = state.auth.admit_stream(&caller, agent_id, client, &state.shutdown)?;
            stop = admitted.stop().clone();
            // The operator's token makes an observer (the console's live tail): it sees the agent's reminders,
            // replayed ones too, and marks none received, so the agent still gets each of them replayed.
            observer = matches!(caller, Caller::Operator) || state.auth.check_operator(token).is_ok();
            Slots::Agent { _admitted: admitted }
        }
        _ => {
            state.auth.check_operator(token)?;
            let total = Arc::clone(&state.operator_event_streams).try_acquire_owned().map_err(|_| {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, Reason::TooManyStreams)
                    .with_detail("the gateway serves as many gateway:* streams as it can")
            })?;
            Slots::Operator { _permit: total }
        }
    };
    let mailbox = match &topic {
        Topic::AgentScheduled(agent_id) => {
            let fires = Arc::clone(&state.shared_fires);
            let mailbox =
                AgentMailbox::new(state.mailbox.clone(), fires, agent_id.clone(), last_event_id(request.headers()));
            Some(if observer { mailbox.observed() } else { mailbox })
        }
        _ => None,
    };
    connection.limit_send_buffer(limits.send_buffer);
    // Subscribed before the response goes out (and before the mailbox is read): once a client sees the headers, it
    // sees every later event.
    let subscription = state.bus.subscribe(&topic);
    let bridge = mailbox.as_ref().and_then(|_| state.bridge_status.clone()).map(BridgeWatch::new);
    let lagged = Arc::clone(&state.metrics.lagged_events);
    let (pump, reader) = stream::open(subscription, limits, mailbox, bridge, lagged);
    let on_end = move |ended| {
        if ended == Ended::Stalled {
            tracing::info!(
                topic = %topic,
                peer = %connection.peer(),
                "closing an event stream whose client took nothing for {:?}",
                limits.stall_timeout
            );
            // hyper may be waiting on a socket that takes nothing: ending the body would never reach it.
            connection.close();
        }
        // The slots go first, before the body: a stalled client's place is free as soon as it is found out.
        drop(slots);
    };
    tokio::spawn(pump.run(stop, on_end));
    Ok(event_stream(StreamBody { reader }))
}

/// The response body of a stream: what its pump queued, handed to hyper as hyper asks for it (hyper asks only while
/// the socket takes what it wrote, which is what tells a stalled client).
#[derive(Debug)]
pub(crate) struct StreamBody {
    reader: StreamReader,
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.reader.poll_piece(cx).map(|piece| piece.map(|bytes| Ok(Frame::data(bytes))))
    }
}

// The names of the events a stream sends (docs/api.md, "Events"), and `lagged`.
#[derive(Debug, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // Only its schema is used.
enum EventName {
    DecisionLog,
    SchemaViolation,
    Reminder,
    AgentEvicted,
    WebhookDeliveryStatus,
    WebhookDlq,
    WebhookSignatureFailure,
    Lagged,
}

/// One event of a stream (comments such as `: connected` and keep-alives are not events).
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)] // Only its schema is used: the stream writes its frames as text.
struct ServerSentEvent {
    #[schema(inline)]
    event: EventName,
    /// The event's id (a reminder's `fire_id`); `lagged` has none.
    #[schema(required = false)]
    id: String,
    /// The event as JSON: `event_type`, `id`, `timestamp` and its fields; for `lagged`, `{"missed":N}`.
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// How the document shows `GET /gateway/events` (the route table, http/routes.rs, names it).
pub(crate) fn doc() -> gateway_api::openapi::Operation {
    use serde_json::json;
    gateway_api::openapi::Operation::new("events", "agents", "Server-Sent Events of one topic")
        .describe(
            "`gateway:*` topics need the operator token; `agent:<agent_id>:scheduled` needs, with agent auth on, \
             that agent's token or the operator's, and first replays the agent's mailbox. The stream does not end \
             by itself: it opens with `: connected`, then sends events and a padded keep-alive comment every 15 s.",
        )
        .parameter(
            "query",
            "topic",
            true,
            "`gateway:messages`, `gateway:violations`, `gateway:webhooks`, `gateway:agents` or `agent:<agent_id>:scheduled`.",
            json!({"type": "string", "pattern": "^(gateway:(messages|violations|webhooks|agents)|agent:[^\\u0000-\\u001F\\u007F-\\u009F]{1,256}:scheduled)$"}),
        )
        .parameter(
            "header",
            "Last-Event-ID",
            false,
            "On an agent's topic: the `fire_id` of the last reminder received; every retained fire after it is replayed.",
            json!({"type": "string"}),
        )
        .error(400, Reason::InvalidQuery)
        .error(400, Reason::InvalidTopic)
        .with_component::<ServerSentEvent>()
        .raw_answer(
            200,
            json!({
                "description": "The stream: `id:`, `event:` and `data:` (the event's JSON) lines per event.",
                // Without OpenAPI 3.2's `itemSchema`, the schema of an event stream describes one event.
                "content": {"text/event-stream": {"schema": gateway_api::openapi::reference("ServerSentEvent")}},
            }),
        )
        .error(429, Reason::TooManyStreams)
        .error(503, Reason::TooManyStreams)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use http::HeaderValue;

    use super::*;

    #[test]
    fn the_default_stream_limits_replay_reminders_of_the_default_payload_limit() {
        let limits = stream::StreamLimits::default();
        assert_eq!(limits.replaying_payloads_up_to(gateway_cron::DEFAULT_REMINDER_PAYLOAD_MAX_BYTES), limits);
    }

    #[test]
    fn a_last_event_id_that_is_not_text_names_no_fire() {
        let mut headers = HeaderMap::new();
        assert_eq!(last_event_id(&headers), None);
        headers.insert("last-event-id", HeaderValue::from_static("7:2026-02-22T12:00:05Z"));
        assert_eq!(last_event_id(&headers).as_deref(), Some("7:2026-02-22T12:00:05Z"));
        headers.insert("last-event-id", HeaderValue::from_bytes(b"\xff\xfe").unwrap());
        assert_eq!(last_event_id(&headers).as_deref(), Some(""));
    }
}
