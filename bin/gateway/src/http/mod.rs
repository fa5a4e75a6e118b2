//! The HTTP server: accepts connections on a pre-bound listener, routes requests, and drains in-flight requests
//! on shutdown.

pub(crate) mod auth;
pub(crate) mod error;
pub(crate) mod request;
pub(crate) mod response;
mod route_table;
mod router;
mod routes;

/// The `route` label of each route in `GET /metrics` (the route table's, http/routes.rs), the last the label of
/// paths that name no route.
pub const ROUTE_NAMES: &[&str] = routes::Route::LABELS;

mod agents;
mod console;
mod credentials;
mod cron;
pub(crate) mod events;
mod health;
mod heartbeat;
mod history;
mod mcp;
pub(crate) use mcp::tool_descriptors as mcp_tool_descriptors;
mod messages;
pub(crate) mod openapi;
#[cfg(test)]
mod properties;
mod reminders;
mod tools;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use gateway_edge::{BusyBody, Listener};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// hyper's read and write buffer of a connection: the largest request head, and what hyper copies of a response
/// before writing it. Small, because an event stream whose client has stopped reading keeps it full for as long as
/// the stream is open (docs/architecture.md, "Stream memory"); hyper's default is about 400 KiB.
pub(crate) const CONNECTION_BUFFER_BYTES: usize = 32 * 1024;
/// How long shutdown waits for in-flight requests before closing what is left.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// What a connection refused for its address's cap (`--max-connections-per-address`, gateway-edge) is sent before
/// it is closed: a complete answer that needs no request parsed (HTTP/1.1 allows an answer before the request), so
/// a client learns why.
pub(crate) const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
content-length: 50\r\n\
retry-after: 1\r\n\
x-content-type-options: nosniff\r\n\
cache-control: no-store\r\n\
connection: close\r\n\
\r\n\
{\"status\":\"error\",\"reason\":\"too_many_connections\"}";

/// Serves until `shutdown` is cancelled, then stops accepting and lets in-flight requests finish. The connection
/// caps and the head deadline are gateway-edge's; each request goes to the router.
pub(crate) async fn serve(listener: TcpListener, state: Arc<AppState>, shutdown: CancellationToken) {
    let graceful = GracefulShutdown::new();
    let mut listener = Listener::new(listener, &state.edge);
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let accepted = match accepted {
            Ok(accepted) => accepted,
            Err(refused) => {
                refused.answer(TOO_MANY_CONNECTIONS);
                continue;
            }
        };
        let state = Arc::clone(&state);
        let client = accepted.connection();
        let service = service_fn(move |request| {
            let busy = client.busy();
            // Mapped, not awaited in an `async` block: the block would move the router's future (~2.3 KB) into its
            // own state once more when first polled.
            router::handle(Arc::clone(&state), &client, request)
                .map(move |answer| answer.map(|response| response.map(|body| BusyBody::new(body, busy))))
        });
        // No hyper header_read_timeout: gateway-edge's watcher enforces it for a fraction of the per-request cost.
        // No vectored writes: the answers are small, and copying the body behind the head and sending both in one
        // plain write cost about 400 instructions less per request than queueing them for writev.
        accepted.serve(|io| {
            let connection = http1::Builder::new()
                .writev(false)
                .max_buf_size(CONNECTION_BUFFER_BYTES)
                .serve_connection(TokioIo::new(io), service);
            graceful.watch(connection)
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(SHUTDOWN_GRACE) => tracing::warn!("shutdown grace period over; closing remaining connections"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_answer() {
        let text = std::str::from_utf8(TOO_MANY_CONNECTIONS).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .and_then(|value| value.parse().ok())
            .unwrap();
        assert_eq!(body.len(), length);
        let parsed: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(parsed["reason"], "too_many_connections");
    }
}
