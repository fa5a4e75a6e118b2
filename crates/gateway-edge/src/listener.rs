//! Accepting connections: at most [`MAX_CONNECTIONS`] open at once (further clients wait in the listen backlog), at
//! most the per-address cap from one client address (refused at once, with an answer the server chooses), and
//! each accepted connection served under the head deadline ([`HeadWatch`]).

use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::connection::{Connection, ConnectionIo};
use crate::edge::Edge;
use crate::head_timeout::{HEADER_READ_TIMEOUT, HeadWatch};
use crate::per_address::{AddressSlot, ConnectionsPerAddress};

/// Open connections at once; further clients wait in the listen backlog. Each client address may hold the
/// per-address cap of them ([`ConnectionsPerAddress`]).
pub const MAX_CONNECTIONS: usize = 10_000;

/// A bound listener behind the edge's connection caps.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    places: Arc<Semaphore>,
    per_address: Arc<ConnectionsPerAddress>,
    accept_backoff: Duration,
}

impl Listener {
    pub fn new(listener: TcpListener, edge: &Edge) -> Self {
        Self {
            listener,
            places: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            per_address: Arc::clone(&edge.connections),
            accept_backoff: Duration::from_millis(5),
        }
    }

    /// The next connection, once one of the [`MAX_CONNECTIONS`] places is free; [`RefusedConnection`] for one
    /// from an address at its cap. Cancel-safe: dropped while waiting, it has taken nothing.
    pub async fn accept(&mut self) -> Result<Accepted, RefusedConnection> {
        // A closed semaphore would have no place to give, ever; this one is never closed.
        let Ok(place) = Arc::clone(&self.places).acquire_owned().await else { return std::future::pending().await };
        let (stream, peer) = loop {
            match self.listener.accept().await {
                Ok(accepted) => break accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(self.accept_backoff).await;
                    self.accept_backoff = (self.accept_backoff * 2).min(Duration::from_secs(1));
                }
            }
        };
        self.accept_backoff = Duration::from_millis(5);
        let Some(address) = self.per_address.admit(peer.ip()) else {
            return Err(RefusedConnection { stream });
        };
        Ok(Accepted {
            stream,
            peer,
            watch: HeadWatch::for_peer(peer),
            places: Places { _address: address, _total: place },
        })
    }
}

/// A connection refused because its client address holds its cap of connections.
#[derive(Debug)]
pub struct RefusedConnection {
    stream: TcpStream,
}

impl RefusedConnection {
    /// Sends `answer` (a complete HTTP response, which needs no request parsed: HTTP/1.1 allows an answer before the
    /// request) and closes the connection, without a task or a wait: one non-blocking write (a full socket buffer
    /// just skips it), and a non-blocking read of what the client already sent, so that the close is a plain FIN
    /// rather than a reset that could discard the answer. On the plain socket: tokio's `try_write` on a socket it
    /// has just registered would see no readiness yet and not write.
    pub fn answer(self, answer: &[u8]) {
        use std::io::{Read, Write};

        let Ok(mut stream) = self.stream.into_std() else { return };
        let _ = stream.write(answer);
        let mut discard = [0; 4096];
        for _ in 0..4 {
            match stream.read(&mut discard) {
                Ok(read) if read > 0 => {}
                _ => break,
            }
        }
    }
}

/// The places a connection holds until it ends: one of [`MAX_CONNECTIONS`], one of its address's.
#[derive(Debug)]
struct Places {
    _address: AddressSlot,
    _total: OwnedSemaphorePermit,
}

/// An accepted connection, not yet served.
#[derive(Debug)]
pub struct Accepted {
    stream: TcpStream,
    peer: SocketAddr,
    watch: HeadWatch,
    places: Places,
}

impl Accepted {
    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The connection as its requests see it (their handlers, and [`Connection::busy`] for each request).
    pub fn connection(&self) -> Connection {
        Connection::new(self.watch.clone())
    }

    /// Serves the connection on a task of its own: `serve` turns its socket into the server's connection future
    /// (hyper's `serve_connection`, over `hyper_util::rt::TokioIo`). A watcher task closes it when it has waited
    /// [`HEADER_READ_TIMEOUT`] for a request head; its places are given back when it ends.
    pub fn serve<F, E>(self, serve: impl FnOnce(ConnectionIo) -> F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let Self { stream, peer, watch, places } = self;
        let connection = serve(ConnectionIo::new(stream, watch.clone()));
        let connection = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(places);
        });
        tokio::spawn(watch.enforce(HEADER_READ_TIMEOUT, connection));
    }
}
