//! `GET /gateway/events?topic=…`: one topic as Server-Sent Events (docs/api.md).
//!
//! Each stream has a small buffer between the bus and the socket. A client that reads slowly first makes its
//! bus subscription lag (it gets `event: lagged` with the count it missed); a client that accepts nothing for
//! [`SLOW_CONSUMER_TIMEOUT`] is disconnected. Neither ever slows a publisher or another subscriber.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gateway_core::Topic;
use gateway_pubsub::{Received, Subscription};
use http::StatusCode;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::{self, error::SendTimeoutError};
use tokio::time::{Instant, interval_at};
use tokio_util::sync::CancellationToken;

use crate::http::agent_auth::{Access, Caller};
use crate::http::error::ApiError;
use crate::http::request::{Query, Request};
use crate::http::response::{Response, event_stream};
use crate::state::AppState;

/// A comment line this often keeps proxies and clients from timing out an idle stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A client that cannot take the next chunk within this time is disconnected.
pub const SLOW_CONSUMER_TIMEOUT: Duration = Duration::from_secs(10);
/// Chunks buffered between the bus and the socket of one stream.
const STREAM_BUFFER: usize = 16;

pub async fn get(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let invalid_topic = || {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_topic").with_detail(
            "topic must be gateway:messages, gateway:violations, gateway:webhooks, gateway:agents or agent:<agent_id>:scheduled",
        )
    };
    let query = Query::parse(request.uri(), &["topic"])?;
    let topic = query.get("topic").and_then(Topic::parse).ok_or_else(invalid_topic)?;
    let mut caller = Caller::Open;
    let streams = match &topic {
        Topic::AgentScheduled(agent_id) => {
            caller = state.agent_auth.authorize(request.headers(), agent_id, Access::Read).await?;
            &state.event_streams
        }
        _ => {
            state.operator.check(request.headers())?;
            &state.operator_event_streams
        }
    };
    let permit = Arc::clone(streams)
        .try_acquire_owned()
        .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_streams"))?;
    // Subscribed before the response goes out: once a client sees the headers, it sees every later event.
    let subscription = state.bus.subscribe(&topic);
    let (chunks, body) = mpsc::channel(STREAM_BUFFER);
    // A stream opened with an agent's credential ends when that credential is revoked.
    let (stop, revocation) = match &caller {
        Caller::Agent(verified) => {
            let (stop, guard) = state.agent_auth.credentials().stream_stop(verified, &state.shutdown);
            (stop, Some(guard))
        }
        Caller::Open | Caller::Operator => (state.shutdown.clone(), None),
    };
    tokio::spawn(async move {
        let _revocation = revocation;
        pump(subscription, chunks, stop, permit).await;
    });
    Ok(event_stream(body))
}

async fn pump(
    mut subscription: Subscription,
    chunks: mpsc::Sender<Bytes>,
    shutdown: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    if chunks.send(Bytes::from_static(b": connected\n\n")).await.is_err() {
        return;
    }
    let mut keep_alive = interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    loop {
        let chunk = tokio::select! {
            () = shutdown.cancelled() => break,
            () = chunks.closed() => break,
            _ = keep_alive.tick() => Bytes::from_static(b": keep-alive\n\n"),
            received = subscription.recv() => match received {
                Received::Event(event) => {
                    Bytes::from(format!("id: {}\nevent: {}\ndata: {}\n\n", event.id, event.event_type, event.json))
                }
                Received::Lagged(missed) => Bytes::from(format!("event: lagged\ndata: {{\"missed\":{missed}}}\n\n")),
                Received::Closed => break,
            },
        };
        match chunks.send_timeout(chunk, SLOW_CONSUMER_TIMEOUT).await {
            Ok(()) => {}
            Err(SendTimeoutError::Timeout(_)) => {
                tracing::info!(topic = subscription.topic(), "disconnecting a slow event-stream consumer");
                break;
            }
            Err(SendTimeoutError::Closed(_)) => break,
        }
    }
}
