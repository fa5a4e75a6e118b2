//! What a request handler may know and do about the connection it arrived on: the client's address, closing
//! the connection, and the socket's send buffer (event streams, the gateway's docs/architecture.md "Stream
//! memory").

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::head_timeout::{Busy, HeadWatch};

/// The connection a request arrived on: a pointer to its watcher's state, which holds the rest (the size of a
/// request's future, which hyper moves several times, grows by one pointer for it). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Connection {
    watch: HeadWatch,
}

impl Connection {
    pub fn new(watch: HeadWatch) -> Self {
        Self { watch }
    }

    /// Marks a request head as received: the connection is busy, and so exempt from the head deadline, until the
    /// returned guard is dropped (wrap the response body in a [`BusyBody`](crate::BusyBody) to drop it when the
    /// response has been sent).
    pub fn busy(&self) -> Busy {
        self.watch.busy()
    }

    /// The client's address (the proxy's, behind a reverse proxy).
    pub fn peer(&self) -> SocketAddr {
        self.watch.peer()
    }

    /// Closes the connection at once, whatever hyper is waiting for.
    pub fn close(&self) {
        self.watch.close();
    }

    /// Sets the socket's send buffer to `bytes` (before the next write).
    pub fn limit_send_buffer(&self, bytes: usize) {
        self.watch.request_send_buffer(bytes);
    }
}

/// The socket of a connection, which applies what [`Connection::limit_send_buffer`] asked for before writing.
#[derive(Debug)]
pub struct ConnectionIo {
    stream: TcpStream,
    watch: HeadWatch,
}

impl ConnectionIo {
    pub fn new(stream: TcpStream, watch: HeadWatch) -> Self {
        Self { stream, watch }
    }

    fn apply_requests(&self) {
        if let Some(bytes) = self.watch.take_send_buffer_request()
            && let Err(error) = socket2::SockRef::from(&self.stream).set_send_buffer_size(bytes)
        {
            tracing::debug!(%error, "cannot set a socket's send buffer size");
        }
    }
}

impl AsyncRead for ConnectionIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ConnectionIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.apply_requests();
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.apply_requests();
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
