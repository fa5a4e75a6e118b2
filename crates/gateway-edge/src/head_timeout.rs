//! The slowloris guard: a connection must deliver each request head within [`HEADER_READ_TIMEOUT`] of starting
//! to wait for it (from its opening, or from the end of the previous response), or it is closed.
//!
//! hyper can enforce this itself (`header_read_timeout`), but it arms a fresh timer for every request and polls
//! the connection once more per request to start it: about 1,600 instructions of every request (see
//! the gateway's docs/benchmarks.md). Here each connection has one watcher task that sleeps until the earliest moment the
//! connection could be over time and only then looks; a request costs two atomic updates and a clock read.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A client must send its request head within this time of connecting, and of its previous answer (slowloris
/// guard): an idle socket costs a place among [`MAX_CONNECTIONS`](crate::MAX_CONNECTIONS), so it is not kept long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether one connection is busy with a request or, since when, waiting for the next head. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HeadWatch {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The client's address, kept here so that a request can learn it through the one pointer it already has.
    peer: SocketAddr,
    opened: Instant,
    /// Requests whose response has not been sent in full (one at a time over HTTP/1, but a count is as cheap).
    busy: AtomicUsize,
    /// When the connection last became idle, as nanoseconds after `opened`.
    idle_since: AtomicU64,
    /// Wakes the watcher to close the connection at once (a stalled event stream).
    close: Notify,
    /// A socket send buffer size a request asked for, not yet applied; 0 for none.
    send_buffer: AtomicUsize,
}

impl HeadWatch {
    #[cfg(test)]
    fn new() -> Self {
        Self::for_peer(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    pub fn for_peer(peer: SocketAddr) -> Self {
        Self {
            shared: Arc::new(Shared {
                peer,
                opened: Instant::now(),
                busy: AtomicUsize::new(0),
                idle_since: AtomicU64::new(0),
                close: Notify::new(),
                send_buffer: AtomicUsize::new(0),
            }),
        }
    }

    /// Marks a request head as received; the connection is busy until the returned guard is dropped, which
    /// happens when the response has been sent (it travels with the response body).
    pub fn busy(&self) -> Busy {
        self.shared.busy.fetch_add(1, Ordering::AcqRel);
        Busy { shared: Arc::clone(&self.shared) }
    }

    pub fn peer(&self) -> SocketAddr {
        self.shared.peer
    }

    /// Closes the connection now, whatever it is doing: for a response that its client stopped taking, which
    /// hyper, waiting for the socket, would never finish.
    pub fn close(&self) {
        // A stored permit if the watcher is not waiting yet: the close is not lost.
        self.shared.close.notify_one();
    }

    /// Asks for the socket's send buffer to be `bytes` from its next write on.
    pub fn request_send_buffer(&self, bytes: usize) {
        self.shared.send_buffer.store(bytes, Ordering::Release);
    }

    /// The send buffer size asked for since the last call, if any.
    pub fn take_send_buffer_request(&self) -> Option<usize> {
        // A load first: the swap, a write to a shared line, only when a request is there (rarely).
        if self.shared.send_buffer.load(Ordering::Relaxed) == 0 {
            return None;
        }
        Some(self.shared.send_buffer.swap(0, Ordering::AcqRel)).filter(|bytes| *bytes > 0)
    }

    /// `None` while busy; else since when the connection has been waiting for a head.
    fn waiting_since(&self) -> Option<Instant> {
        if self.shared.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.shared.opened + Duration::from_nanos(self.shared.idle_since.load(Ordering::Acquire)))
    }

    /// Runs beside the connection's task until it ends, and aborts it once it has waited `limit` for a head, or
    /// when [`HeadWatch::close`] is called.
    pub async fn enforce(self, limit: Duration, mut connection: JoinHandle<()>) {
        let mut deadline = Instant::now() + limit;
        loop {
            tokio::select! {
                _ = &mut connection => return,
                () = self.shared.close.notified() => {
                    connection.abort();
                    return;
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
            match self.waiting_since() {
                // Busy: the next head cannot be late before a full limit from now.
                None => deadline = Instant::now() + limit,
                Some(since) if since.elapsed() >= limit => {
                    connection.abort();
                    tracing::debug!("connection closed: no request head within {limit:?}");
                    return;
                }
                Some(since) => deadline = since + limit,
            }
        }
    }
}

/// Holds a connection busy; see [`HeadWatch::busy`].
#[derive(Debug)]
pub struct Busy {
    shared: Arc<Shared>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let since = u64::try_from(self.shared.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Stored before the count drops: a watcher that sees the connection idle sees when it became so.
        self.shared.idle_since.store(since, Ordering::Release);
        self.shared.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its connection [`Busy`] until hyper has sent it and drops it.
#[derive(Debug)]
pub struct BusyBody<B> {
    body: B,
    _busy: Busy,
}

impl<B> BusyBody<B> {
    pub fn new(body: B, busy: Busy) -> Self {
        Self { body, _busy: busy }
    }
}

impl<B: Body + Unpin> Body for BusyBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = HEADER_READ_TIMEOUT;

    /// A stand-in for a connection's task: pending until aborted.
    fn connection() -> JoinHandle<()> {
        tokio::spawn(std::future::pending())
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_no_head_is_closed_at_the_limit() {
        let opened = Instant::now();
        let watch = HeadWatch::new();
        let task = connection();
        let aborted = task.abort_handle();
        let enforcing = tokio::spawn(watch.enforce(LIMIT, task));
        tokio::time::sleep(LIMIT - Duration::from_millis(1)).await;
        assert!(!aborted.is_finished());
        enforcing.await.unwrap();
        assert!(aborted.is_finished());
        assert_eq!(opened.elapsed(), LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_counts_from_the_end_of_the_last_response_and_not_while_busy() {
        let start = Instant::now();
        let watch = HeadWatch::new();
        let task = connection();
        let aborted = task.abort_handle();
        let enforcing = tokio::spawn(watch.clone().enforce(LIMIT, task));
        tokio::time::sleep(LIMIT / 2).await;
        let busy = watch.busy();
        // A response that takes three limits to send (an event stream) keeps the connection open.
        tokio::time::sleep(LIMIT * 3).await;
        assert!(!aborted.is_finished());
        drop(busy);
        let idle_from = Instant::now();
        tokio::time::sleep(LIMIT - Duration::from_millis(1)).await;
        assert!(!aborted.is_finished(), "closed before the limit after the response");
        enforcing.await.unwrap();
        assert!(aborted.is_finished());
        assert_eq!(Instant::now() - idle_from, LIMIT);
        assert!(Instant::now() - start > LIMIT * 3);
    }

    #[tokio::test]
    async fn a_response_keeps_its_connection_busy_until_its_body_is_dropped() {
        use http_body_util::{BodyExt, Full};

        let watch = HeadWatch::new();
        assert!(watch.waiting_since().is_some(), "a new connection waits for its first head");
        let body = BusyBody::new(Full::new(bytes::Bytes::from_static(b"{}")), watch.busy());
        assert_eq!(body.size_hint().exact(), Some(2));
        let sent = body.collect().await.unwrap().to_bytes();
        assert_eq!(&sent[..], b"{}");
        assert!(watch.waiting_since().is_some(), "collected, so dropped");
        let body = BusyBody::new(Full::new(bytes::Bytes::new()), watch.busy());
        assert!(watch.waiting_since().is_none());
        let before = Instant::now();
        drop(body);
        assert!(watch.waiting_since().is_some_and(|since| since >= before));
    }

    #[tokio::test(start_paused = true)]
    async fn close_aborts_a_busy_connection_at_once() {
        let watch = HeadWatch::new();
        let task = connection();
        let aborted = task.abort_handle();
        let _busy = watch.busy();
        watch.close();
        let enforcing = tokio::spawn(watch.clone().enforce(LIMIT, task));
        tokio::time::timeout(Duration::from_millis(1), enforcing).await.unwrap().unwrap();
        assert!(aborted.is_finished());
        assert_eq!(watch.take_send_buffer_request(), None);
        watch.request_send_buffer(4096);
        assert_eq!(watch.take_send_buffer_request(), Some(4096));
        assert_eq!(watch.take_send_buffer_request(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_watcher_ends_with_the_connection() {
        let watch = HeadWatch::new();
        let enforcing = tokio::spawn(watch.enforce(LIMIT, tokio::spawn(async {})));
        tokio::time::timeout(LIMIT / 2, enforcing).await.unwrap().unwrap();
    }
}
