//! The pump of one stream: the live subscription merged with the replay of an agent's mailbox, within the stream's
//! byte budget, with keep-alives, the count of what a lagging stream missed, and the stall of a client that takes
//! nothing.

use std::sync::Arc;

use bytes::Bytes;
use gateway_core::ReplaySource;
use gateway_core::runtime::stats::Counter;
use tokio::time::{Instant, interval_at, sleep_until};
use tokio_util::sync::CancellationToken;

use super::StreamLimits;
use super::outbox::Outbox;
use super::replay::{AgentMailbox, BridgeWatch, SharedFire};
use crate::{Received, Subscription};

/// Moves events from the bus into one stream's outbox and watches that the client takes them. Made by
/// [`open`](super::open); run it as a task of its own.
#[derive(Debug)]
pub struct Pump<S: ReplaySource> {
    pub(super) subscription: Subscription,
    pub(super) outbox: Arc<Outbox>,
    pub(super) limits: StreamLimits,
    pub(super) keep_alive: Bytes,
    /// An agent's stream: the mailbox it replays and catches up from.
    pub(super) mailbox: Option<AgentMailbox<S>>,
    /// An agent's stream on an instance whose events cross the Redis bridge: a reconnect means a catch-up.
    pub(super) bridge: Option<BridgeWatch>,
    /// Every event this stream could not deliver, counted for metrics.
    pub(super) lagged: Arc<Counter>,
}

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Shutdown,
    ClientGone,
    BusClosed,
    /// The client took nothing for the stall timeout while something waited for it: the server should close the
    /// connection itself, since it may be waiting on a socket that takes nothing, where the end of the stream would
    /// never arrive.
    Stalled,
}

impl<S: ReplaySource> Pump<S> {
    /// The topic this stream serves.
    pub fn topic(&self) -> &str {
        self.subscription.topic()
    }

    /// Pumps until the stream ends (`shutdown` cancelled, the reader dropped, the bus gone, or the client stalled),
    /// then calls `on_end` (where the server closes a stalled connection and frees the stream's slots: a stalled
    /// client's place is free as soon as it is found out) and only then ends the reader's stream.
    pub async fn run(mut self, shutdown: CancellationToken, on_end: impl FnOnce(Ended)) {
        let ended = self.pump(&shutdown).await;
        on_end(ended);
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
                () = outbox.reader_dropped.cancelled() => return Ended::ClientGone,
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
async fn send_replay<S: ReplaySource>(
    outbox: &Outbox,
    mailbox: &mut AgentMailbox<S>,
    mut replay: S::Cursor,
    limits: &StreamLimits,
    shutdown: &CancellationToken,
) -> Result<Result<(), Ended>, S::Error> {
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
            () = outbox.reader_dropped.cancelled() => return Ok(Err(Ended::ClientGone)),
            page = mailbox.source.next_page(&mut replay, limit) => page?,
        };
        if page.is_empty() {
            return Ok(Ok(()));
        }
        // Shared at once: the copies that other streams hold already replace this read's.
        let fires: Vec<Arc<SharedFire>> = page
            .into_iter()
            .filter(|reminder| !mailbox.was_sent(&reminder.fire_id))
            .map(|reminder| mailbox.fires.replayed(reminder))
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
            () = outbox.reader_dropped.cancelled() => return Err(Ended::ClientGone),
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

/// What a stream that skipped `missed` events sends before its next event.
fn lagged_frame(missed: u64) -> Bytes {
    Bytes::from(format!("event: lagged\ndata: {{\"missed\":{missed}}}\n\n"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use gateway_core::{
        AgentId, Event, EventPayload, EventPublisher, FiredReminder, InMemoryReplaySource, Receipt, Topic,
    };
    use time::macros::datetime;
    use tokio::time::{Instant, sleep_until};

    use super::*;
    use crate::Bus;
    use crate::stream::outbox::{Outbox, StreamReader};
    use crate::stream::{CATCH_UPS_AFTER_CONNECT, SharedFires, WRITE_PIECE, open};

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
    fn stream(
        bus: &Bus,
        limits: StreamLimits,
    ) -> (StreamReader, tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>) {
        stream_of(bus, &Topic::Webhooks, limits, None, None)
    }

    /// [`stream`] of any topic, with an agent stream's mailbox and bridge watch.
    fn stream_of(
        bus: &Bus,
        topic: &Topic,
        limits: StreamLimits,
        mailbox: Option<AgentMailbox<InMemoryReplaySource>>,
        bridge: Option<BridgeWatch>,
    ) -> (StreamReader, tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>) {
        let (pump, body) = open(bus.subscribe(topic), limits, mailbox, bridge, Arc::default());
        // The server's connection, which the server closes when its client stalled.
        let connection = tokio::spawn(std::future::pending::<()>());
        let close = connection.abort_handle();
        let on_end = move |ended| {
            if ended == Ended::Stalled {
                close.abort();
            }
        };
        let pumping = tokio::spawn(pump.run(CancellationToken::new(), on_end));
        (body, pumping, connection)
    }

    async fn next_piece(body: &mut StreamReader) -> Bytes {
        std::future::poll_fn(|cx| body.poll_piece(cx)).await.unwrap()
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
        let mut body = StreamReader::new(Arc::clone(&outbox));
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

    /// What an agent's stream needs: the mailbox (the in-memory replay source) and a bus.
    struct AgentFixture {
        mailbox: InMemoryReplaySource,
        fires: Arc<SharedFires>,
        bus: Bus,
    }

    const AGENT: &str = "agent-7";

    impl AgentFixture {
        fn new() -> Self {
            Self { mailbox: InMemoryReplaySource::default(), fires: Arc::default(), bus: Bus::default() }
        }

        fn topic() -> Topic {
            Topic::AgentScheduled(AgentId::new(AGENT).unwrap())
        }

        /// The `n`-th fire of the agent (job `n`), recorded by a completion when `recorded`.
        fn fire(&self, n: i64, recorded: bool) -> FiredReminder {
            let at = datetime!(2026-02-22 12:00:00 UTC) + time::Duration::seconds(n);
            let reminder = FiredReminder {
                fire_id: gateway_core::ports::mailbox::fire_id(n, at),
                job_id: n,
                agent_id: AgentId::new(AGENT).unwrap(),
                payload: serde_json::Map::new(),
                scheduled_for: at,
                fired_at: at,
                epoch: 1,
            };
            if recorded {
                self.mailbox.record(reminder.clone());
            }
            reminder
        }

        fn stream(
            &self,
            limits: StreamLimits,
            last_event_id: Option<&str>,
        ) -> (StreamReader, tokio::task::JoinHandle<()>) {
            self.stream_bridged(limits, last_event_id, None)
        }

        fn stream_bridged(
            &self,
            limits: StreamLimits,
            last_event_id: Option<&str>,
            bridge: Option<BridgeWatch>,
        ) -> (StreamReader, tokio::task::JoinHandle<()>) {
            let agent = AgentId::new(AGENT).unwrap();
            let fires = Arc::clone(&self.fires);
            let mailbox = AgentMailbox::new(self.mailbox.clone(), fires, agent, last_event_id.map(str::to_owned));
            let (body, pumping, _) = stream_of(&self.bus, &Self::topic(), limits, Some(mailbox), bridge);
            (body, pumping)
        }

        fn publish(&self, reminder: &FiredReminder) {
            self.bus.publish(&Self::topic(), &reminder.event()).unwrap();
        }

        /// The job ids of the agent's entries nobody received.
        async fn unreceived(&self) -> Vec<i64> {
            let fires = self.mailbox.unreceived_fires(&AgentId::new(AGENT).unwrap());
            fires.iter().map(|fire| fire.job_id).collect()
        }
    }

    fn receipt(fire: &FiredReminder) -> Receipt {
        Receipt { agent_id: fire.agent_id.clone(), fire_id: fire.fire_id.clone() }
    }

    /// The fire id of the next reminder frame the body gives, skipping comments.
    async fn next_reminder(body: &mut StreamReader) -> String {
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
        assert_eq!(replayed, crate::PublishedEvent::of(&first.event()).frame(), "the frame its live event had");
        assert_eq!(next_reminder(&mut body).await, second.fire_id);
        // Live now: one the stream replayed already is not sent again, a new one is.
        let live = agent.fire(4, false);
        agent.publish(&second);
        agent.publish(&live);
        assert_eq!(next_reminder(&mut body).await, live.fire_id);
        // The live fire's completion commits after its event was sent: its receipt, held, marks it then.
        agent.fire(4, true);
        assert!(agent.unreceived().await.is_empty(), "replayed and live alike are received once taken");
        let entries = agent.mailbox.fires(&AgentId::new(AGENT).unwrap());
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
        let [first, second] = CATCH_UPS_AFTER_CONNECT;
        assert!((first..second).contains(&connected.elapsed()), "{:?}", connected.elapsed());
    }

    #[cfg(feature = "redis")]
    #[tokio::test(start_paused = true)]
    async fn a_stream_that_skipped_events_or_whose_bridge_reconnected_catches_up_from_the_mailbox() {
        let agent = AgentFixture::new();
        let (status, watch) = tokio::sync::watch::channel(crate::bridge::BridgeStatus::default());
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
