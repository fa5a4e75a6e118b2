//! One topic as a Server-Sent Events stream, whatever serves it (the gateway serves it as `GET /gateway/events`,
//! docs/api.md): the rules of the product that hold between the bus and a client's socket.
//!
//! Memory (docs/architecture.md, "Stream memory"): every stream writes the frame the bus built once per event
//! ([`PublishedEvent::frame`](crate::PublishedEvent::frame), shared by reference count), and what waits between the
//! bus and the socket of one stream is bounded in bytes ([`STREAM_BUFFER_BYTES`]): past it the stream skips events
//! and then tells how many (`event: lagged`), so a slow client never holds back a publisher, another stream, or the
//! bus's own queue.
//!
//! A client that takes nothing for [`STALL_TIMEOUT`] while something waits for it is cut off ([`Ended::Stalled`]).
//! "Takes" is measured where the server pulls the stream's [`StreamReader`], which it should do only while the
//! socket accepts what it wrote. Keep-alives are padded ([`KEEP_ALIVE_BYTES`]) and the server caps the socket's
//! send buffer ([`STREAM_SEND_BUFFER`]) so that even on a topic with no events the buffers fill within minutes and a
//! client that never reads is found out (docs/api.md, "Slow and stalled clients").
//!
//! A stream of `agent:<id>:scheduled` first replays the agent's mailbox ([`AgentMailbox`], through gateway-core's
//! `ReplaySource` port), within the same byte budget, then reports every reminder the server has taken from its
//! outbox as received: a reminder is replayed until its agent has received it.

mod outbox;
mod pump;
mod replay;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gateway_core::ReplaySource;
use gateway_core::runtime::stats::Counter;

pub use outbox::{StreamReader, WRITE_PIECE};
pub use pump::{Ended, Pump};
pub use replay::{
    AgentMailbox, BridgeWatch, CATCH_UP_RETRY, CATCH_UPS_AFTER_CONNECT, SENT_REMEMBERED, SharedFire, SharedFires, frame,
};

use crate::Subscription;

/// A comment this often keeps proxies and clients from timing out an idle stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The size of a keep-alive frame (a comment line padded with spaces): on a topic without events it is what
/// fills the buffers of a client that stopped reading, so that [`STALL_TIMEOUT`] can tell it from an idle one.
/// 4 KiB per 15 s is 273 bytes a second per idle stream.
pub const KEEP_ALIVE_BYTES: usize = 8 * 1024;
/// A stream that has had something waiting for the client this long without the client taking any of it is
/// closed.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The bytes one stream may hold between the bus and the socket. Frames are shared, so this bounds what one
/// stream keeps alive, not a copy; an event larger than this is still sent when the stream's queue is empty.
pub const STREAM_BUFFER_BYTES: usize = 2 * 1024 * 1024;
/// The kernel send buffer of an event stream's connection (Linux doubles it for its bookkeeping). Fixed rather
/// than auto-tuned, which lets a socket take megabytes before its writes block: with it, a client that reads
/// nothing stops taking data after about 100 KiB on Linux (its own receive window plus this).
pub const STREAM_SEND_BUFFER: usize = 16 * 1024;
/// What a reminder's frame adds to its payload: the `id:` and `event:` lines and the event's other fields.
pub const REMINDER_FRAME_OVERHEAD: usize = 1_024;
/// The largest reminder payload [`StreamLimits::default`] sizes a replay for: gateway-cron's default payload limit
/// (`DEFAULT_REMINDER_PAYLOAD_MAX_BYTES`; the gateway's tests hold the two equal). A server whose limit differs says
/// so with [`StreamLimits::replaying_payloads_up_to`].
pub const DEFAULT_REPLAY_PAYLOAD_BYTES: usize = 65_536;

/// The stream limits, configurable for tests; [`StreamLimits::default`] is the constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub keep_alive: Duration,
    pub keep_alive_bytes: usize,
    pub stall_timeout: Duration,
    pub buffer_bytes: usize,
    pub send_buffer: usize,
    /// The largest frame one replayed reminder can make (the payload limit and the event's other fields): a replay
    /// reads from the mailbox only as many entries as the stream's budget has room for at this size, so a stream
    /// whose client does not read holds no more replayed reminders than live ones.
    pub replay_entry_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            keep_alive: KEEP_ALIVE,
            keep_alive_bytes: KEEP_ALIVE_BYTES,
            stall_timeout: STALL_TIMEOUT,
            buffer_bytes: STREAM_BUFFER_BYTES,
            send_buffer: STREAM_SEND_BUFFER,
            replay_entry_bytes: DEFAULT_REPLAY_PAYLOAD_BYTES + REMINDER_FRAME_OVERHEAD,
        }
    }
}

impl StreamLimits {
    /// These limits for reminders whose payload is at most `payload_max_bytes`.
    #[must_use]
    pub fn replaying_payloads_up_to(self, payload_max_bytes: usize) -> Self {
        Self { replay_entry_bytes: payload_max_bytes.saturating_add(REMINDER_FRAME_OVERHEAD), ..self }
    }

    /// `: keep-alive` padded with spaces to `keep_alive_bytes`, ending the comment and the frame.
    fn keep_alive_frame(&self) -> Bytes {
        let mut frame = b": keep-alive".to_vec();
        frame.resize(self.keep_alive_bytes.max(frame.len() + 2) - 2, b' ');
        frame.extend_from_slice(b"\n\n");
        Bytes::from(frame)
    }
}

/// A stream of what `subscription` receives: the [`Pump`] to run (a task of its own, until it ends) and the
/// [`StreamReader`] the server hands to its socket. An agent's stream replays `mailbox` first; `bridge` (on an
/// instance whose events cross the Redis bridge) makes it catch up after a reconnect; every event it could not
/// deliver is counted in `lagged`.
pub fn open<S: ReplaySource>(
    subscription: Subscription,
    limits: StreamLimits,
    mailbox: Option<AgentMailbox<S>>,
    bridge: Option<BridgeWatch>,
    lagged: Arc<Counter>,
) -> (Pump<S>, StreamReader) {
    let receipts = mailbox.as_ref().and_then(AgentMailbox::receipts);
    let outbox = outbox::Outbox::new(receipts);
    let reader = StreamReader::new(Arc::clone(&outbox));
    let keep_alive = limits.keep_alive_frame();
    (Pump { subscription, outbox, limits, keep_alive, mailbox, bridge, lagged }, reader)
}
