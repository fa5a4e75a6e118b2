//! The HTTP server: accepts connections on a pre-bound listener, routes requests, and drains in-flight requests
//! on shutdown.

pub mod auth;
pub mod body_budget;
pub mod connection;
pub mod edge;
pub mod error;
mod head_timeout;
pub mod per_address;
pub mod reason;
pub mod request;
pub mod response;
mod router;
mod routes;

/// The `route` label of each route in `GET /metrics` (the route table's, http/routes.rs), the last the label of
/// paths that name no route.
pub const ROUTE_NAMES: &[&str] = routes::Route::LABELS;

mod agents;
mod console;
mod credentials;
mod cron;
pub mod events;
mod health;
mod heartbeat;
mod messages;
pub mod openapi;
#[cfg(test)]
mod properties;
mod reminders;
mod tools;
mod webhooks;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::http::connection::{Connection, ConnectionIo};
use crate::http::head_timeout::{BusyBody, HeadWatch};
use crate::state::AppState;

/// Open connections at once; further clients wait in the listen backlog. Each client address may hold
/// `--max-connections-per-address` of them (http/per_address.rs).
pub const MAX_CONNECTIONS: usize = 10_000;
/// A client must send its request head within this time of connecting, and of its previous answer (slowloris
/// guard): an idle socket costs a place among [`MAX_CONNECTIONS`], so it is not kept long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// hyper's read and write buffer of a connection: the largest request head, and what hyper copies of a response
/// before writing it. Small, because an event stream whose client has stopped reading keeps it full for as long as
/// the stream is open (docs/architecture.md, "Stream memory"); hyper's default is about 400 KiB.
pub const CONNECTION_BUFFER_BYTES: usize = 32 * 1024;
/// How long shutdown waits for in-flight requests before closing what is left.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Serves until `shutdown` is cancelled, then stops accepting and lets in-flight requests finish.
pub async fn serve(listener: TcpListener, state: Arc<AppState>, shutdown: CancellationToken) {
    let graceful = GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut accept_backoff = Duration::from_millis(5);
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(accept_backoff).await;
                    accept_backoff = (accept_backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            },
        };
        accept_backoff = Duration::from_millis(5);
        let Some(address_slot) = state.edge.connections.admit(peer.ip()) else {
            refuse(stream);
            continue;
        };
        let state = Arc::clone(&state);
        let heads = HeadWatch::for_peer(peer);
        let requests = heads.clone();
        let client = Connection::new(heads.clone());
        let service = service_fn(move |request| {
            let busy = requests.busy();
            let response = router::handle(Arc::clone(&state), &client, request);
            async move { Ok::<_, Infallible>(response.await?.map(|body| BusyBody::new(body, busy))) }
        });
        // No hyper header_read_timeout: `HeadWatch` enforces it for a fraction of the per-request cost. No
        // vectored writes: the answers are small, and copying the body behind the head and sending both in one
        // plain write cost about 400 instructions less per request than queueing them for writev.
        let io = TokioIo::new(ConnectionIo::new(stream, heads.clone()));
        let connection =
            http1::Builder::new().writev(false).max_buf_size(CONNECTION_BUFFER_BYTES).serve_connection(io, service);
        let connection = graceful.watch(connection);
        let connection = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(address_slot);
            drop(permit);
        });
        tokio::spawn(heads.enforce(HEADER_READ_TIMEOUT, connection));
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(SHUTDOWN_GRACE) => tracing::warn!("shutdown grace period over; closing remaining connections"),
    }
}

/// Answers a connection from an address at its cap with [`per_address::REFUSAL`] and closes it, without a task
/// or a wait: one non-blocking write (a full socket buffer just skips it), and a non-blocking read of what the
/// client already sent, so that the close is a plain FIN rather than a reset that could discard the answer. On the
/// plain socket: tokio's `try_write` on a socket it has just registered would see no readiness yet and not write.
fn refuse(stream: tokio::net::TcpStream) {
    use std::io::{Read, Write};

    let Ok(mut stream) = stream.into_std() else { return };
    let _ = stream.write(per_address::REFUSAL);
    let mut discard = [0; 4096];
    for _ in 0..4 {
        match stream.read(&mut discard) {
            Ok(read) if read > 0 => {}
            _ => break,
        }
    }
}
