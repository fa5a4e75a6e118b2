//! `GET /gateway/events?topic=…`: one topic as Server-Sent Events (docs/api.md).
//!
//! Memory (docs/architecture.md, "Stream memory"): every stream writes the frame the bus built once per event
//! (`PublishedEvent::frame`, shared by reference count), and what waits between the bus and the socket of one
//! stream is bounded in bytes ([`STREAM_BUFFER_BYTES`]): past it the stream skips events and then tells how many
//! (`event: lagged`), so a slow client never holds back a publisher, another stream, or the bus's own queue.
//!
//! A client that takes nothing for [`STALL_TIMEOUT`] while something waits for it is disconnected and its slot
//! freed. "Takes" is measured where hyper pulls the body, which it does only while the socket accepts what it
//! wrote: a client that stops reading first fills the kernel buffers, then hyper's, then the stream's queue.
//! Keep-alives are padded ([`KEEP_ALIVE_BYTES`]) and an event stream's socket send buffer is capped
//! ([`STREAM_SEND_BUFFER`]) so that even on a topic with no events those buffers fill within minutes and a client
//! that never reads is found out (docs/api.md, "Slow and stalled clients").
//!
//! A stream of `agent:<id>:scheduled` first replays the agent's mailbox (docs/api.md, "Replay of an agent's
//! reminders"; `replay.rs`), within the same byte budget, and reports every reminder hyper has taken from its
//! outbox as received.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use gateway_auth::{Access, AdmittedStream, Caller};
use gateway_core::runtime::stats::Counter;
use gateway_core::runtime::sync::lock;
use gateway_core::{AgentId, Receipt, Topic};
use gateway_edge::Connection;
use gateway_pubsub::{Received, Subscription};
use http::StatusCode;
use http_body::{Body, Frame};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, interval_at, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::reason::Reason;
use crate::http::replay::{self, AgentMailbox, BridgeWatch, SharedFire};
use crate::http::request::{Query, Request};
use crate::http::response::{Response, event_stream};
use crate::state::AppState;
use gateway_cron::Mailbox;

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
/// The largest piece of a frame handed to hyper at a time: hyper copies what it is handed into its own write
/// buffer, and pieces this small keep that buffer small however large an event is.
const WRITE_PIECE: usize = 16 * 1024;

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

/// What a reminder's frame adds to its payload: the `id:` and `event:` lines and the event's other fields.
pub const REMINDER_FRAME_OVERHEAD: usize = 1_024;

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            keep_alive: KEEP_ALIVE,
            keep_alive_bytes: KEEP_ALIVE_BYTES,
            stall_timeout: STALL_TIMEOUT,
            buffer_bytes: STREAM_BUFFER_BYTES,
            send_buffer: STREAM_SEND_BUFFER,
            replay_entry_bytes: gateway_cron::DEFAULT_REMINDER_PAYLOAD_MAX_BYTES + REMINDER_FRAME_OVERHEAD,
        }
    }
}

impl StreamLimits {
    /// `: keep-alive` padded with spaces to `keep_alive_bytes`, ending the comment and the frame.
    fn keep_alive_frame(&self) -> Bytes {
        let mut frame = b": keep-alive".to_vec();
        frame.resize(self.keep_alive_bytes.max(frame.len() + 2) - 2, b' ');
        frame.extend_from_slice(b"\n\n");
        Bytes::from(frame)
    }
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

pub async fn get(state: &AppState, request: &Request, connection: Connection) -> Result<Response, ApiError> {
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
        Topic::AgentScheduled(agent_id) => Some(AgentMailbox::new(
            state.mailbox.clone(),
            Arc::clone(&state.shared_fires),
            agent_id.clone(),
            replay::last_event_id(request.headers()),
        )),
        _ => None,
    };
    connection.limit_send_buffer(limits.send_buffer);
    // Subscribed before the response goes out (and before the mailbox is read): once a client sees the headers, it
    // sees every later event.
    let subscription = state.bus.subscribe(&topic);
    let receipts = mailbox.as_ref().filter(|_| !observer).map(Receipts::of);
    let outbox = Outbox::new(receipts);
    let body = StreamBody { outbox: Arc::clone(&outbox) };
    let bridge = mailbox.as_ref().and_then(|_| state.bridge_status.clone()).map(BridgeWatch::new);
    let lagged = Arc::clone(&state.metrics.lagged_events);
    let pump = Pump { subscription, outbox, limits, keep_alive: limits.keep_alive_frame(), mailbox, bridge, lagged };
    tokio::spawn(pump.run(stop, connection, slots));
    Ok(event_stream(body))
}

/// Moves events from the bus into one stream's [`Outbox`] and watches that the client takes them.
struct Pump {
    subscription: Subscription,
    outbox: Arc<Outbox>,
    limits: StreamLimits,
    keep_alive: Bytes,
    /// An agent's stream: the mailbox it replays and catches up from.
    mailbox: Option<AgentMailbox>,
    /// An agent's stream on an instance whose events cross the Redis bridge: a reconnect means a catch-up.
    bridge: Option<BridgeWatch>,
    /// Every event this stream could not deliver, counted for metrics.
    lagged: Arc<Counter>,
}

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Shutdown,
    ClientGone,
    BusClosed,
    Stalled,
}

impl Pump {
    async fn run(mut self, shutdown: CancellationToken, connection: Connection, slots: Slots) {
        if self.pump(&shutdown).await == Ended::Stalled {
            tracing::info!(
                topic = self.subscription.topic(),
                peer = %connection.peer(),
                "closing an event stream whose client took nothing for {:?}",
                self.limits.stall_timeout
            );
            // hyper may be waiting on a socket that takes nothing: ending the body would never reach it.
            connection.close();
        }
        // The slots go first, before the body: a stalled client's place is free as soon as it is found out.
        drop(slots);
        self.outbox.end();
    }

    async fn pump(&mut self, shutdown: &CancellationToken) -> Ended {
        let outbox = &self.outbox;
        let subscription = &mut self.subscription;
        let limits = &self.limits;
        outbox.push(Bytes::from_static(b": connected\n\n"));
        if let Some(mailbox) = &mut self.mailbox {
            let first = mailbox.replay().await;
            let replayed = match first {
                Ok(replay) => send_replay(outbox, mailbox, replay, limits, shutdown).await,
                Err(error) => Err(error),
            };
            match replayed {
                Ok(Ok(())) => mailbox.replayed(),
                Ok(Err(ended)) => return ended,
                Err(error) => {
                    tracing::warn!(agent_id = %mailbox.agent_id, %error, "cannot read the mailbox; retrying");
                    mailbox.replayed();
                    mailbox.read_failed();
                }
            }
        }
        let keep_alive = self.limits.keep_alive;
        let mut keep_alives = interval_at(Instant::now() + keep_alive, keep_alive);
        let mut missed: u64 = 0;
        loop {
            let stall_at = outbox.waiting_since().map(|since| since + self.limits.stall_timeout);
            let catch_up_at = self.mailbox.as_ref().and_then(AgentMailbox::next_catch_up);
            let bridge = &mut self.bridge;
            let mut catch_up = false;
            tokio::select! {
                () = shutdown.cancelled() => return Ended::Shutdown,
                () = outbox.body_dropped.cancelled() => return Ended::ClientGone,
                () = sleep_until(stall_at.unwrap_or_else(Instant::now)), if stall_at.is_some() => {
                    // Taking something moves the mark: look again rather than trust the deadline.
                    if outbox.waiting_since().is_some_and(|since| since.elapsed() >= self.limits.stall_timeout) {
                        return Ended::Stalled;
                    }
                }
                _ = keep_alives.tick() => {
                    if outbox.queued_bytes() == 0 {
                        if missed > 0 {
                            outbox.push(lagged_frame(missed));
                            missed = 0;
                        } else {
                            outbox.push(self.keep_alive.clone());
                        }
                    }
                }
                () = sleep_until(catch_up_at.unwrap_or_else(Instant::now)), if catch_up_at.is_some() => catch_up = true,
                () = reconnected(bridge), if bridge.is_some() => {
                    if let Some(mailbox) = &mut self.mailbox {
                        mailbox.missed_events();
                    }
                }
                received = subscription.recv() => match received {
                    Received::Event(event) => {
                        // A reminder this stream replayed (or caught up on) already goes out only once.
                        let replayed = self.mailbox.as_ref().is_some_and(|mailbox| mailbox.was_sent(event.id()));
                        let frame = event.frame();
                        if replayed {
                            tracing::trace!(fire_id = event.id(), "live reminder replayed already");
                        } else if outbox.has_room_for(frame.len(), self.limits.buffer_bytes) {
                            if missed > 0 {
                                outbox.push(lagged_frame(missed));
                                missed = 0;
                            }
                            let fire = self.mailbox.as_mut().and_then(|mailbox| {
                                mailbox.sent(event.id());
                                mailbox.fires.live(&mailbox.agent_id, &event)
                            });
                            match fire {
                                Some(fire) => outbox.push_reminder(fire),
                                None => outbox.push(frame.clone()),
                            }
                        } else {
                            missed += 1;
                            self.lagged.increment();
                            if let Some(mailbox) = &mut self.mailbox {
                                mailbox.missed_events();
                            }
                        }
                    }
                    Received::Lagged(count) => {
                        missed += count;
                        self.lagged.add(count);
                        if let Some(mailbox) = &mut self.mailbox {
                            mailbox.missed_events();
                        }
                    }
                    Received::Closed => return Ended::BusClosed,
                },
            }
            if let (true, Some(mailbox)) = (catch_up, &mut self.mailbox) {
                let caught_up = match mailbox.due_catch_up().await {
                    Ok(replay) => send_replay(outbox, mailbox, replay, limits, shutdown).await,
                    Err(error) => Err(error),
                };
                match caught_up {
                    Ok(Ok(())) => {}
                    Ok(Err(ended)) => return ended,
                    Err(error) => {
                        tracing::warn!(agent_id = %mailbox.agent_id, %error, "cannot read the mailbox; retrying");
                        mailbox.read_failed();
                    }
                }
            }
        }
    }
}

/// Resolves when the event bridge has reconnected (never without one).
async fn reconnected(bridge: &mut Option<BridgeWatch>) {
    match bridge {
        Some(bridge) => bridge.reconnected().await,
        None => std::future::pending().await,
    }
}

/// Sends `replay`'s fires that this stream has not sent, in order, each once the outbox has room for it (the same
/// byte budget as live events). `Ok(Err(_))` when the stream ended meanwhile; `Err` when the mailbox could not be
/// read (what was sent stays sent).
async fn send_replay(
    outbox: &Outbox,
    mailbox: &mut AgentMailbox,
    mut replay: gateway_cron::Replay,
    limits: &StreamLimits,
    shutdown: &CancellationToken,
) -> Result<Result<(), Ended>, gateway_cron::CronError> {
    let entry_bytes = limits.replay_entry_bytes.max(1);
    loop {
        // Read only what there is room for: entries read but not yet queued are this stream's own copies (unlike
        // live frames, which every stream shares), so a stream whose client does not read must not hold a page.
        if let Err(ended) = room_for(outbox, entry_bytes.min(limits.buffer_bytes), limits, shutdown).await {
            return Ok(Err(ended));
        }
        let room = limits.buffer_bytes.saturating_sub(outbox.queued_bytes());
        let limit = (room / entry_bytes).max(1);
        let page = tokio::select! {
            () = shutdown.cancelled() => return Ok(Err(Ended::Shutdown)),
            () = outbox.body_dropped.cancelled() => return Ok(Err(Ended::ClientGone)),
            page = mailbox.mailbox.next_page(&mut replay, limit) => page?,
        };
        if page.is_empty() {
            return Ok(Ok(()));
        }
        // Shared at once: the copies that other streams hold already replace this read's.
        let fires: Vec<Arc<SharedFire>> = page
            .into_iter()
            .filter(|entry| !mailbox.was_sent(&entry.reminder.fire_id))
            .map(|entry| mailbox.fires.replayed(entry.reminder))
            .collect();
        for fire in fires {
            if let Err(ended) = room_for(outbox, fire.frame.len(), limits, shutdown).await {
                return Ok(Err(ended));
            }
            mailbox.sent(&fire.reminder.fire_id);
            outbox.push_reminder(fire);
        }
    }
}

/// Waits until the outbox has room for a frame of `len` bytes, or the stream ends.
async fn room_for(
    outbox: &Outbox,
    len: usize,
    limits: &StreamLimits,
    shutdown: &CancellationToken,
) -> Result<(), Ended> {
    while !outbox.has_room_for(len, limits.buffer_bytes) {
        let stall_at = outbox.waiting_since().map(|since| since + limits.stall_timeout);
        tokio::select! {
            () = shutdown.cancelled() => return Err(Ended::Shutdown),
            () = outbox.body_dropped.cancelled() => return Err(Ended::ClientGone),
            () = outbox.taken.notified() => {}
            () = sleep_until(stall_at.unwrap_or_else(Instant::now)), if stall_at.is_some() => {
                if outbox.waiting_since().is_some_and(|since| since.elapsed() >= limits.stall_timeout) {
                    return Err(Ended::Stalled);
                }
            }
        }
    }
    Ok(())
}

fn lagged_frame(missed: u64) -> Bytes {
    Bytes::from(format!("event: lagged\ndata: {{\"missed\":{missed}}}\n\n"))
}

/// The frames between one stream's pump and hyper, and when the client last took any.
#[derive(Debug)]
struct Outbox {
    queue: Mutex<Queue>,
    /// Cancelled when hyper drops the body: the connection is gone.
    body_dropped: CancellationToken,
    /// Notified whenever hyper takes something: a replay waiting for room looks again.
    taken: tokio::sync::Notify,
    /// An agent's stream: where the reminders hyper has taken are reported received.
    receipts: Option<Receipts>,
}

/// Where an agent's stream reports the fires its client has taken: as its own agent's, whatever the event said.
#[derive(Debug)]
struct Receipts {
    mailbox: Mailbox,
    agent_id: AgentId,
}

impl Receipts {
    fn of(mailbox: &AgentMailbox) -> Self {
        Self { mailbox: mailbox.mailbox.clone(), agent_id: mailbox.agent_id.clone() }
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
    /// Frames queued and frames hyper has taken whole, since the stream began.
    pushed: u64,
    taken: u64,
    /// The fire of each reminder frame still queued, with the frame's number.
    reminders: VecDeque<(u64, Arc<SharedFire>)>,
}

impl Outbox {
    fn new(receipts: Option<Receipts>) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::new(Queue::default()),
            body_dropped: CancellationToken::new(),
            taken: tokio::sync::Notify::new(),
            receipts,
        })
    }

    fn queued_bytes(&self) -> usize {
        lock(&self.queue).bytes
    }

    fn waiting_since(&self) -> Option<Instant> {
        lock(&self.queue).waiting_since
    }

    /// Whether a frame of `len` bytes fits in `budget`; an empty queue takes any frame, so that an event larger
    /// than the budget is still delivered.
    fn has_room_for(&self, len: usize, budget: usize) -> bool {
        let bytes = lock(&self.queue).bytes;
        bytes == 0 || bytes.saturating_add(len) <= budget
    }

    /// Queues a reminder's frame: once hyper has taken all of it, the reminder is reported received.
    fn push_reminder(&self, fire: Arc<SharedFire>) {
        let frame = fire.frame.clone();
        let mut queue = lock(&self.queue);
        let number = queue.pushed;
        queue.reminders.push_back((number, fire));
        drop(queue);
        self.push(frame);
    }

    fn push(&self, frame: Bytes) {
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

    fn end(&self) {
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
        // Handed to hyper, which writes it to the socket: as far as the gateway can tell, the agent has it.
        if let (Some(receipts), Some(reminder)) = (&self.receipts, received) {
            let receipt = Receipt { agent_id: receipts.agent_id.clone(), fire_id: reminder.fire_id.clone() };
            receipts.mailbox.received(receipt);
        }
        Poll::Ready(Some(piece))
    }
}

/// The response body of a stream: what its pump queued, handed to hyper as hyper asks for it.
#[derive(Debug)]
pub struct StreamBody {
    outbox: Arc<Outbox>,
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.outbox.take(cx).map(|piece| piece.map(|bytes| Ok(Frame::data(bytes))))
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        self.outbox.body_dropped.cancel();
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
pub fn doc() -> crate::http::openapi::Operation {
    use serde_json::json;
    crate::http::openapi::Operation::new("events", "agents", "Server-Sent Events of one topic")
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
                "content": {"text/event-stream": {"schema": crate::http::openapi::reference("ServerSentEvent")}},
            }),
        )
        .error(429, Reason::TooManyStreams)
        .error(503, Reason::TooManyStreams)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::Ipv4Addr;

    use gateway_core::{BackgroundLoop, Event, EventPayload, EventPublisher};
    use gateway_pubsub::Bus;
    use http_body_util::BodyExt;
    use time::macros::datetime;

    use super::*;
    use crate::http::replay::SharedFires;
    use gateway_core::FiredReminder;
    use gateway_edge::HeadWatch;

    const LIMITS: StreamLimits = StreamLimits {
        keep_alive: Duration::from_secs(15),
        keep_alive_bytes: 64,
        stall_timeout: Duration::from_secs(30),
        buffer_bytes: 100,
        send_buffer: 4096,
        replay_entry_bytes: 64,
    };

    fn event(n: i64) -> Event {
        Event::with_id(
            format!("e-{n}"),
            EventPayload::WebhookSignatureFailure { webhook_id: n },
            datetime!(2026-02-22 12:00:00 UTC),
        )
    }

    /// A pump on `bus`'s `gateway:webhooks`, its body, the watcher of its connection and the connection's task.
    fn stream(bus: &Bus, limits: StreamLimits) -> (StreamBody, tokio::task::JoinHandle<()>, tokio::task::AbortHandle) {
        stream_of(bus, &Topic::Webhooks, limits, None, None)
    }

    /// [`stream`] of any topic, with an agent stream's mailbox and bridge watch.
    fn stream_of(
        bus: &Bus,
        topic: &Topic,
        limits: StreamLimits,
        mailbox: Option<AgentMailbox>,
        bridge: Option<BridgeWatch>,
    ) -> (StreamBody, tokio::task::JoinHandle<()>, tokio::task::AbortHandle) {
        let outbox = Outbox::new(mailbox.as_ref().map(Receipts::of));
        let body = StreamBody { outbox: Arc::clone(&outbox) };
        let pump = Pump {
            subscription: bus.subscribe(topic),
            outbox,
            limits,
            keep_alive: limits.keep_alive_frame(),
            mailbox,
            bridge,
            lagged: Arc::default(),
        };
        let watch = HeadWatch::for_peer((Ipv4Addr::LOCALHOST, 1).into());
        let connection_task = tokio::spawn(std::future::pending::<()>());
        let connection_aborted = connection_task.abort_handle();
        tokio::spawn(watch.clone().enforce(Duration::from_secs(3600), connection_task));
        let connection = Connection::new(watch);
        let slots = Slots::Operator { _permit: Arc::new(tokio::sync::Semaphore::new(1)).try_acquire_owned().unwrap() };
        let pumping = tokio::spawn(pump.run(CancellationToken::new(), connection, slots));
        (body, pumping, connection_aborted)
    }

    async fn next_piece(body: &mut StreamBody) -> Bytes {
        body.frame().await.unwrap().unwrap().into_data().unwrap()
    }

    /// Lets the pump run until it waits again.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_stream_writes_the_frame_the_bus_built_once() {
        let bus = Bus::default();
        let (mut first, _a, _) = stream(&bus, StreamLimits::default());
        let (mut second, _b, _) = stream(&bus, StreamLimits::default());
        assert_eq!(&next_piece(&mut first).await[..], b": connected\n\n");
        assert_eq!(&next_piece(&mut second).await[..], b": connected\n\n");
        bus.publish(&Topic::Webhooks, &event(1)).unwrap();
        let (one, two) = (next_piece(&mut first).await, next_piece(&mut second).await);
        assert!(one.starts_with(b"id: e-1\nevent: webhook_signature_failure\ndata: {"));
        assert_eq!(one.as_ptr(), two.as_ptr(), "one frame in memory, written by both streams");
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_frame_goes_to_hyper_in_pieces_of_the_same_memory() {
        let outbox = Outbox::new(None);
        let frame = Bytes::from(vec![b'x'; WRITE_PIECE * 2 + 10]);
        outbox.push(frame.clone());
        let mut body = StreamBody { outbox: Arc::clone(&outbox) };
        let pieces = [next_piece(&mut body).await, next_piece(&mut body).await, next_piece(&mut body).await];
        assert_eq!(pieces.each_ref().map(Bytes::len), [WRITE_PIECE, WRITE_PIECE, 10]);
        assert_eq!(pieces[1].as_ptr(), frame[WRITE_PIECE..].as_ptr());
        assert_eq!((outbox.queued_bytes(), outbox.waiting_since()), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn past_its_byte_budget_a_stream_skips_events_then_says_how_many() {
        let bus = Bus::default();
        let (mut body, _pumping, _) = stream(&bus, LIMITS);
        next_piece(&mut body).await;
        // Each frame is larger than the 100-byte budget: the first goes into the empty queue, the next three do not.
        for n in 1..=4 {
            bus.publish(&Topic::Webhooks, &event(n)).unwrap();
        }
        settle().await;
        assert!(next_piece(&mut body).await.starts_with(b"id: e-1\n"));
        bus.publish(&Topic::Webhooks, &event(5)).unwrap();
        assert_eq!(&next_piece(&mut body).await[..], b"event: lagged\ndata: {\"missed\":3}\n\n");
        assert!(next_piece(&mut body).await.starts_with(b"id: e-5\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_larger_than_the_budget_is_still_delivered() {
        let bus = Bus::default();
        let (mut body, _pumping, _) = stream(&bus, StreamLimits { buffer_bytes: 10, ..LIMITS });
        next_piece(&mut body).await;
        bus.publish(&Topic::Webhooks, &event(1)).unwrap();
        assert!(next_piece(&mut body).await.starts_with(b"id: e-1\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_nothing_for_the_stall_timeout_is_disconnected() {
        let bus = Bus::default();
        let (mut body, pumping, connection) = stream(&bus, LIMITS);
        next_piece(&mut body).await;
        // Only keep-alives, never taken: the first waits from the first tick on.
        let first_keep_alive = Instant::now() + LIMITS.keep_alive;
        sleep_until(first_keep_alive + LIMITS.stall_timeout - Duration::from_millis(1)).await;
        settle().await;
        assert!(!pumping.is_finished() && !connection.is_finished());
        pumping.await.unwrap();
        assert_eq!(Instant::now(), first_keep_alive + LIMITS.stall_timeout);
        settle().await;
        assert!(connection.is_finished(), "the connection is closed, not only the body");
        assert_eq!(bus.subscriber_count(&Topic::Webhooks), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_taking_is_never_stalled() {
        let bus = Bus::default();
        let (mut body, pumping, connection) = stream(&bus, LIMITS);
        next_piece(&mut body).await;
        for _ in 0..20 {
            let keep_alive = next_piece(&mut body).await;
            assert_eq!(keep_alive.len(), LIMITS.keep_alive_bytes);
            assert!(keep_alive.starts_with(b": keep-alive ") && keep_alive.ends_with(b" \n\n"));
        }
        assert!(!pumping.is_finished() && !connection.is_finished());
        drop(body);
        pumping.await.unwrap();
        assert_eq!(bus.subscriber_count(&Topic::Webhooks), 0);
    }

    /// What an agent's stream needs: the in-memory store (cron jobs and mailbox), the mailbox component with its
    /// receipt writer running, and a bus.
    struct AgentFixture {
        store: Arc<gateway_core::InMemoryCronJobStore>,
        mailbox: Mailbox,
        fires: Arc<SharedFires>,
        bus: Bus,
        _writer: tokio::task::JoinHandle<()>,
    }

    const AGENT: &str = "agent-7";

    impl AgentFixture {
        fn new() -> Self {
            let store = Arc::new(gateway_core::InMemoryCronJobStore::default());
            let ports = gateway_cron::MailboxPorts {
                store: store.clone(),
                clock: Arc::new(gateway_core::ManualClock::at_fixed_start()),
                leadership: Arc::new(gateway_core::SingleProcessLeadership),
            };
            let mailbox = Mailbox::new(ports, gateway_cron::MailboxConfig::default());
            let writer = tokio::spawn({
                let mailbox = mailbox.clone();
                async move { mailbox.run(CancellationToken::new()).await }
            });
            Self { store, mailbox, fires: Arc::default(), bus: Bus::default(), _writer: writer }
        }

        fn topic() -> Topic {
            Topic::AgentScheduled(AgentId::new(AGENT).unwrap())
        }

        /// The `n`-th fire of the agent (job `n`), recorded by a completion when `recorded`.
        fn fire(&self, n: i64, recorded: bool) -> FiredReminder {
            let at = datetime!(2026-02-22 12:00:00 UTC) + time::Duration::seconds(n);
            let reminder = FiredReminder {
                fire_id: gateway_cron::fire_id(n, at),
                job_id: n,
                agent_id: AgentId::new(AGENT).unwrap(),
                payload: serde_json::Map::new(),
                scheduled_for: at,
                fired_at: at,
            };
            if recorded {
                use gateway_core::CronJobStore;
                let fired = std::slice::from_ref(&reminder);
                self.store.complete_fires("scheduler", gateway_core::FencingToken(1), &[], fired).unwrap();
            }
            reminder
        }

        fn stream(
            &self,
            limits: StreamLimits,
            last_event_id: Option<&str>,
        ) -> (StreamBody, tokio::task::JoinHandle<()>) {
            self.stream_bridged(limits, last_event_id, None)
        }

        fn stream_bridged(
            &self,
            limits: StreamLimits,
            last_event_id: Option<&str>,
            bridge: Option<BridgeWatch>,
        ) -> (StreamBody, tokio::task::JoinHandle<()>) {
            let agent = AgentId::new(AGENT).unwrap();
            let fires = Arc::clone(&self.fires);
            let mailbox = AgentMailbox::new(self.mailbox.clone(), fires, agent, last_event_id.map(str::to_owned));
            let (body, pumping, _) = stream_of(&self.bus, &Self::topic(), limits, Some(mailbox), bridge);
            (body, pumping)
        }

        fn publish(&self, reminder: &FiredReminder) {
            self.bus.publish(&Self::topic(), &reminder.event()).unwrap();
        }

        /// The job ids of the agent's entries nobody received, once every receipt queued is written.
        async fn unreceived(&self) -> Vec<i64> {
            self.mailbox.receipts_settled().await;
            let query = gateway_core::MailboxQuery {
                agent_id: AgentId::new(AGENT).unwrap(),
                unreceived_only: true,
                after: 0,
                through: None,
                limit: 100,
            };
            use gateway_core::MailboxStore;
            self.store.mailbox_entries(&query).unwrap().iter().map(|entry| entry.reminder.job_id).collect()
        }
    }

    fn receipt(fire: &FiredReminder) -> Receipt {
        Receipt { agent_id: fire.agent_id.clone(), fire_id: fire.fire_id.clone() }
    }

    /// The fire id of the next reminder frame the body gives, skipping comments.
    async fn next_reminder(body: &mut StreamBody) -> String {
        loop {
            let piece = next_piece(body).await;
            let text = std::str::from_utf8(&piece).unwrap();
            if let Some(id) = text.strip_prefix("id: ") {
                assert!(text.contains("\nevent: reminder\n"), "{text}");
                return id.split('\n').next().unwrap().to_owned();
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_agent_stream_replays_what_nobody_received_then_live_ones_each_once() {
        let agent = AgentFixture::new();
        let (first, second, received) = (agent.fire(1, true), agent.fire(2, true), agent.fire(3, true));
        agent.mailbox.received(receipt(&received));
        assert_eq!(agent.unreceived().await, [1, 2]);
        let (mut body, _pumping) = agent.stream(StreamLimits::default(), None);
        assert_eq!(&next_piece(&mut body).await[..], b": connected\n\n");
        let replayed = next_piece(&mut body).await;
        assert_eq!(
            replayed,
            gateway_pubsub::PublishedEvent::of(&first.event()).frame(),
            "the frame its live event had"
        );
        assert_eq!(next_reminder(&mut body).await, second.fire_id);
        // Live now: one the stream replayed already is not sent again, a new one is.
        let live = agent.fire(4, false);
        agent.publish(&second);
        agent.publish(&live);
        assert_eq!(next_reminder(&mut body).await, live.fire_id);
        // The live fire's completion commits after its event was sent: its receipt, held, marks it then.
        agent.fire(4, true);
        assert!(agent.unreceived().await.is_empty(), "replayed and live alike are received once taken");
        let entries = {
            use gateway_core::MailboxStore;
            let query = gateway_core::MailboxQuery {
                agent_id: AgentId::new(AGENT).unwrap(),
                unreceived_only: false,
                after: 0,
                through: None,
                limit: 10,
            };
            agent.store.mailbox_entries(&query).unwrap()
        };
        assert_eq!(entries.len(), 4, "each fire recorded once, by its completion");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replay_waits_for_the_client_within_the_byte_budget_and_counts_only_what_it_took() {
        let agent = AgentFixture::new();
        for n in 1..=5 {
            agent.fire(n, true);
        }
        // Room for one reminder frame at a time.
        let limits = StreamLimits { buffer_bytes: 300, ..LIMITS };
        let (mut body, _pumping) = agent.stream(limits, None);
        next_piece(&mut body).await;
        assert!(next_reminder(&mut body).await.starts_with("1:"));
        settle().await;
        assert_eq!(agent.unreceived().await, [2, 3, 4, 5], "what the client has not taken is not received");
        for n in 2..=5 {
            assert!(next_reminder(&mut body).await.starts_with(&format!("{n}:")));
        }
        settle().await;
        assert!(agent.unreceived().await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn last_event_id_replays_what_came_after_it() {
        let agent = AgentFixture::new();
        let fires: Vec<FiredReminder> = (1..=4).map(|n| agent.fire(n, true)).collect();
        for n in [0, 2, 3] {
            agent.mailbox.received(receipt(&fires[n]));
        }
        agent.unreceived().await;
        let (mut body, _pumping) = agent.stream(StreamLimits::default(), Some(&fires[2].fire_id));
        next_piece(&mut body).await;
        assert_eq!(next_reminder(&mut body).await, fires[1].fire_id, "unreceived, before the id");
        assert_eq!(next_reminder(&mut body).await, fires[3].fire_id, "received, after the id");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fire_recorded_after_the_stream_read_the_mailbox_comes_with_the_catch_up() {
        let agent = AgentFixture::new();
        let replayed = agent.fire(1, true);
        let connected = Instant::now();
        let (mut body, _pumping) = agent.stream(StreamLimits::default(), None);
        next_piece(&mut body).await;
        // Once this came, the stream has read the mailbox (one short page).
        assert_eq!(next_reminder(&mut body).await, replayed.fire_id);
        // Published before the stream subscribed, recorded after it read the mailbox: neither saw it.
        let missed = agent.fire(2, true);
        let reminder = next_reminder(&mut body).await;
        assert_eq!(reminder, missed.fire_id);
        let [first, second] = replay::CATCH_UPS_AFTER_CONNECT;
        assert!((first..second).contains(&connected.elapsed()), "{:?}", connected.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_skipped_events_or_whose_bridge_reconnected_catches_up_from_the_mailbox() {
        let agent = AgentFixture::new();
        let (status, watch) = tokio::sync::watch::channel(gateway_pubsub::bridge::BridgeStatus::default());
        let (mut body, _pumping) = agent.stream_bridged(StreamLimits::default(), None, Some(BridgeWatch::new(watch)));
        next_piece(&mut body).await;
        // Past the catch-ups after connecting; the bridge then loses an event and reconnects.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let lost = agent.fire(1, true);
        settle().await;
        status.send_modify(|status| status.reconnects += 1);
        assert_eq!(next_reminder(&mut body).await, lost.fire_id);
        // The bus queue overflows: the stream is told it lagged, and catches up on everything after the last fire
        // it sent, even what another stream of the agent received.
        let burst: Vec<FiredReminder> = (2..=1_100).map(|n| agent.fire(n, true)).collect();
        for reminder in &burst {
            agent.mailbox.received(receipt(reminder));
        }
        assert!(agent.unreceived().await.is_empty());
        for reminder in &burst {
            agent.publish(reminder);
        }
        let mut ids = Vec::new();
        while ids.len() < burst.len() {
            let piece = next_piece(&mut body).await;
            if let Some(id) = std::str::from_utf8(&piece).unwrap().strip_prefix("id: ") {
                ids.push(id.split('\n').next().unwrap().to_owned());
            }
        }
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), burst.len(), "every fire once");
    }
}
