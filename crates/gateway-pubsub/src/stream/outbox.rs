//! The frames between one stream's pump and the server, and when the client last took any: the byte budget and the
//! stall detection, and the receipts of the reminders the client has taken.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use gateway_core::runtime::sync::lock;
use gateway_core::{AgentId, Receipt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::replay::SharedFire;

/// The largest piece of a frame handed to the server at a time: hyper copies what it is handed into its own write
/// buffer, and pieces this small keep that buffer small however large an event is.
pub const WRITE_PIECE: usize = 16 * 1024;

#[derive(Debug)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Cancelled when the server drops the reader: the connection is gone.
    pub(crate) reader_dropped: CancellationToken,
    /// Notified whenever the server takes something: a replay waiting for room looks again.
    pub(crate) taken: tokio::sync::Notify,
    /// An agent's stream: where the reminders the server has taken are reported received.
    receipts: Option<Receipts>,
}

/// Where an agent's stream reports the fires its client has taken: as its own agent's, whatever the event said.
pub(crate) struct Receipts {
    pub(crate) received: Box<dyn Fn(Receipt) + Send + Sync>,
    pub(crate) agent_id: AgentId,
}

impl fmt::Debug for Receipts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receipts").field("agent_id", &self.agent_id).finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    bytes: usize,
    /// Since when something has waited without the client taking any of it; `None` while nothing waits.
    waiting_since: Option<Instant>,
    ended: bool,
    waker: Option<Waker>,
    /// Frames queued and frames the server has taken whole, since the stream began.
    pushed: u64,
    taken: u64,
    /// The fire of each reminder frame still queued, with the frame's number.
    reminders: VecDeque<(u64, Arc<SharedFire>)>,
}

impl Outbox {
    pub(crate) fn new(receipts: Option<Receipts>) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::new(Queue::default()),
            reader_dropped: CancellationToken::new(),
            taken: tokio::sync::Notify::new(),
            receipts,
        })
    }

    pub(crate) fn queued_bytes(&self) -> usize {
        lock(&self.queue).bytes
    }

    pub(crate) fn waiting_since(&self) -> Option<Instant> {
        lock(&self.queue).waiting_since
    }

    /// Whether a frame of `len` bytes fits in `budget`; an empty queue takes any frame, so that an event larger
    /// than the budget is still delivered.
    pub(crate) fn has_room_for(&self, len: usize, budget: usize) -> bool {
        let bytes = lock(&self.queue).bytes;
        bytes == 0 || bytes.saturating_add(len) <= budget
    }

    /// Queues a reminder's frame: once the server has taken all of it, the reminder is reported received.
    pub(crate) fn push_reminder(&self, fire: Arc<SharedFire>) {
        let frame = fire.frame.clone();
        let mut queue = lock(&self.queue);
        let number = queue.pushed;
        queue.reminders.push_back((number, fire));
        drop(queue);
        self.push(frame);
    }

    pub(crate) fn push(&self, frame: Bytes) {
        let mut queue = lock(&self.queue);
        queue.pushed += 1;
        queue.bytes += frame.len();
        queue.frames.push_back(frame);
        if queue.waiting_since.is_none() {
            queue.waiting_since = Some(Instant::now());
        }
        if let Some(waker) = queue.waker.take() {
            waker.wake();
        }
    }

    pub(crate) fn end(&self) {
        let mut queue = lock(&self.queue);
        queue.ended = true;
        if let Some(waker) = queue.waker.take() {
            waker.wake();
        }
    }

    /// The next piece for the socket, at most [`WRITE_PIECE`] bytes; `None` once ended and empty.
    fn take(&self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut queue = lock(&self.queue);
        let Some(front) = queue.frames.front_mut() else {
            if queue.ended {
                return Poll::Ready(None);
            }
            queue.waker = Some(cx.waker().clone());
            return Poll::Pending;
        };
        let piece = if front.len() > WRITE_PIECE { front.split_to(WRITE_PIECE) } else { std::mem::take(front) };
        let mut received = None;
        if front.is_empty() {
            queue.frames.pop_front();
            queue.taken += 1;
            let taken = queue.taken;
            if queue.reminders.front().is_some_and(|(number, _)| *number < taken) {
                received = queue.reminders.pop_front().map(|(_, fire)| Arc::clone(&fire.reminder));
            }
        }
        queue.bytes -= piece.len();
        queue.waiting_since = if queue.frames.is_empty() { None } else { Some(Instant::now()) };
        drop(queue);
        self.taken.notify_one();
        // Handed to the server, which writes it to the socket: as far as the gateway can tell, the agent has it.
        if let (Some(receipts), Some(reminder)) = (&self.receipts, received) {
            let receipt = Receipt { agent_id: receipts.agent_id.clone(), fire_id: reminder.fire_id.clone() };
            (receipts.received)(receipt);
        }
        Poll::Ready(Some(piece))
    }
}

/// The reading end of a stream: what its pump queued, for the server to write as the socket takes it (the gateway
/// wraps it in its response body). Dropping it tells the pump that the client is gone.
#[derive(Debug)]
pub struct StreamReader {
    outbox: Arc<Outbox>,
}

impl StreamReader {
    pub(crate) fn new(outbox: Arc<Outbox>) -> Self {
        Self { outbox }
    }

    /// The next piece to write, at most [`WRITE_PIECE`] bytes; `None` once the stream has ended and all was taken.
    /// Poll it only when the socket can take more: taking is what tells a reading client from a stalled one.
    pub fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.outbox.take(cx)
    }
}

impl Drop for StreamReader {
    fn drop(&mut self) {
        self.outbox.reader_dropped.cancel();
    }
}
