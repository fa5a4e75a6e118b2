//! [`RedisBridge`]: events across instances over Redis pub/sub (docs/architecture.md, "The event bridge").
//!
//! The bridge is the `EventPublisher` the components of an instance publish through. Each event goes to the
//! local [`Bus`] at once and into a bounded queue that a background task `PUBLISH`es to Redis on the channel
//! `gateway:events:<topic>`; publishing never waits (a full queue drops the event for the other instances and
//! counts it), except through [`EventPublisher::publish_paced`], which background producers that burst (an
//! eviction pass) use: it waits for room in the part of the queue they may fill, while Redis takes what is sent,
//! so a burst reaches the other instances whole without taking a request's room. Every instance holds one pattern subscription, `gateway:events:*`, and hands what it receives to
//! its own bus, skipping what it published itself (each message names its origin instance) and any event id it
//! has delivered on that topic recently (a bounded set), so a local subscriber gets each event once, whichever
//! instance published it, and an event published by two instances under one id (a re-fired reminder) once.
//!
//! One pattern rather than a subscription per topic: topics come and go with every agent stream
//! (`agent:<id>:scheduled`), and tracking them in Redis would add a round trip per stream for nothing an
//! instance could not filter itself: the bus drops an event for a topic nobody here listens to.
//!
//! Redis pub/sub is at most once: what is published while an instance's subscription is down is gone for that
//! instance. The subscription comes back by itself (capped backoff), and [`RedisBridge::status`] says when it did,
//! so the streams of durable events (reminders) can catch up from the mailbox; and durable events reach every
//! instance through the store anyway ([`RedisBridge::local_delivery`]): the bridge is only their fast path.
//!
//! Redis is not trusted (docs/architecture.md, "The bridge's trust model"): anyone who can `PUBLISH` there could
//! otherwise speak for an instance. Every message carries an HMAC-SHA256, under a key derived from the cluster
//! secret, of its version, the channel it is published on, its origin, when it was sent, and the event; a message
//! whose MAC does not verify, that is older than [`MAX_MESSAGE_AGE`], larger than [`MAX_MESSAGE_BYTES`] or of another
//! version is dropped, counted ([`BridgeCounters::rejected`]) and warned about at most once per
//! [`REJECTION_WARNING_INTERVAL`], never with its content. Its MAC is checked before anything else of it is read.

use std::collections::{HashSet, VecDeque};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use gateway_core::runtime::sync::lock;
use gateway_core::{BackgroundLoop, Clock, Event, EventPublisher, PacedPublish, PublishError, Topic, capped_backoff};
use redis::aio::{MultiplexedConnection, PubSub};
use ring::hmac;
use time::OffsetDateTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{Bus, PublishedEvent};

/// Prefix of the Redis channels: an event on topic `T` goes to `gateway:events:T`.
pub const CHANNEL_PREFIX: &str = "gateway:events:";
/// Events waiting to be sent to Redis before publishing starts dropping them (for the other instances only).
pub const OUTBOUND_CAPACITY: usize = 4096;
/// The share of the queue (numerator over [`PACED_SHARE_OF`]) that events published through `publish_paced` may
/// fill: a burst from a background producer waits for room there, and the rest of the queue stays free for the
/// events of requests, which never wait.
pub const PACED_SHARE: usize = 1;
pub const PACED_SHARE_OF: usize = 2;
/// Event ids remembered per instance to deliver each at most once. At a few thousand events per second this is
/// several seconds of history, far more than the time an event takes to come back through Redis.
pub const RECENT_IDS: usize = 16_384;
/// The first pause before subscribing again after a failed attempt; doubled per failure up to
/// [`RECONNECT_MAX`]. A subscription that was lost is tried again at once.
pub const RECONNECT_INITIAL: Duration = Duration::from_millis(100);
pub const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How often the subscription is checked with a `PING`: a connection cut without a reset (a partition) is
/// noticed within this plus [`COMMAND_TIMEOUT`].
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// The time limit of connecting, subscribing, a `PING`, or sending a batch of events.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// The most events sent to Redis in one pipeline.
const BATCH: usize = 256;
/// The message format's version, first line of every message. Version 1 was unsigned; an instance of this version
/// rejects its messages (and version 1 instances skip these), so a cluster is upgraded as a whole.
const WIRE_VERSION: &str = "2";
/// The shortest cluster secret (`--cluster-secret`): 256 bits, the HMAC-SHA256 key size.
pub const MIN_SECRET_BYTES: usize = 32;
/// The largest message taken from Redis: an event is at most a 1 MiB payload, escaped; anything larger is no event
/// of ours, and is dropped before its MAC is computed.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// A message sent longer ago than this (by its sender's clock, against this instance's) is dropped: a captured
/// message replayed later is refused once the set of recent ids has forgotten it. The instances' clocks must agree
/// to within it (NTP does far better).
pub const MAX_MESSAGE_AGE: Duration = Duration::from_secs(60);
/// Rejected messages are warned about at most this often (with how many since the last warning).
pub const REJECTION_WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// What the bridge's MAC key is derived from the cluster secret with, so that the secret could key other things
/// without one MAC ever standing for another.
const KEY_PURPOSE: &[u8] = b"agent-gateway event bridge v2";
/// The MAC's line: 32 bytes, in hex.
const MAC_HEX_LEN: usize = 64;

/// Why a bridge could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error("invalid bridge configuration: {0}")]
    Config(String),
}

/// The keys of the bridge's MACs, derived from the cluster secret (`--cluster-secret`) and, during a rotation, the
/// previous one, which is still accepted but never signs. Debug shows neither.
#[derive(Clone)]
pub struct ClusterKeys {
    signing: hmac::Key,
    also_accepted: Option<hmac::Key>,
}

impl ClusterKeys {
    /// Refuses a secret (or previous secret) shorter than [`MIN_SECRET_BYTES`].
    pub fn new(secret: &[u8], previous: Option<&[u8]>) -> Result<Self, BridgeError> {
        let derive = |secret: &[u8]| {
            if secret.len() < MIN_SECRET_BYTES {
                return Err(BridgeError::Config(format!("a cluster secret must be at least {MIN_SECRET_BYTES} bytes")));
            }
            let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), KEY_PURPOSE);
            Ok(hmac::Key::new(hmac::HMAC_SHA256, tag.as_ref()))
        };
        Ok(Self { signing: derive(secret)?, also_accepted: previous.map(derive).transpose()? })
    }
}

impl ClusterKeys {
    /// The message an instance with these keys publishes on `channel` for `event`, sent by `origin` at `sent_at`:
    /// what another program trusted with the cluster secret (or a test) needs to speak on the bridge.
    pub fn seal(&self, channel: &str, origin: &str, sent_at: OffsetDateTime, event: &PublishedEvent) -> Vec<u8> {
        wire_message(self, channel, origin, unix_millis(sent_at), event)
    }
}

impl Debug for ClusterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKeys(<redacted>)")
    }
}

/// What the bridge works through.
#[derive(Debug)]
pub struct BridgePorts {
    /// This instance's bus: what the HTTP layer subscribes to.
    pub bus: Bus,
    pub redis: redis::Client,
    /// Tells when a reconnect happened.
    pub clock: Arc<dyn Clock>,
}

/// The bridge's settings; [`BridgeConfig::new`] takes the defaults (the constants above).
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// This process's name in the cluster (`--instance-id`): the origin of the messages it sends.
    pub instance_id: String,
    /// What every message is signed with and checked against.
    pub keys: ClusterKeys,
    pub max_message_age: Duration,
    pub channel_prefix: String,
    pub outbound_capacity: usize,
    pub recent_ids: usize,
    pub reconnect_initial: Duration,
    pub reconnect_max: Duration,
    pub keepalive_interval: Duration,
    pub command_timeout: Duration,
}

impl BridgeConfig {
    pub fn new(instance_id: impl Into<String>, keys: ClusterKeys) -> Self {
        Self {
            instance_id: instance_id.into(),
            keys,
            max_message_age: MAX_MESSAGE_AGE,
            channel_prefix: CHANNEL_PREFIX.into(),
            outbound_capacity: OUTBOUND_CAPACITY,
            recent_ids: RECENT_IDS,
            reconnect_initial: RECONNECT_INITIAL,
            reconnect_max: RECONNECT_MAX,
            keepalive_interval: KEEPALIVE_INTERVAL,
            command_timeout: COMMAND_TIMEOUT,
        }
    }
}

/// The subscription's state, as [`RedisBridge::status`] reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeStatus {
    /// Whether events from other instances arrive right now.
    pub subscribed: bool,
    /// Subscriptions made after one was lost or could not be made: each means events from other instances may
    /// have been missed before `last_reconnect_at`.
    pub reconnects: u64,
    pub last_reconnect_at: Option<OffsetDateTime>,
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeCounters {
    /// Events sent to Redis.
    pub sent: u64,
    /// Events not sent because the queue was full (they still reached this instance's subscribers).
    pub dropped_full: u64,
    /// Events not sent because Redis did not take them.
    pub send_failed: u64,
    /// Events from other instances handed to the bus.
    pub received: u64,
    /// This instance's own events coming back from Redis, skipped.
    pub skipped_own: u64,
    /// Events whose id had been delivered on its topic already, skipped.
    pub skipped_seen: u64,
    /// Messages on the bridge's channels dropped unread: a MAC that does not verify (forged, altered, moved to
    /// another channel, another secret), another version, too old, too large, or not an event.
    pub rejected: u64,
    /// Events that reached this instance's subscribers through [`RedisBridge::local_delivery`] (the store) before
    /// the bridge delivered them: lost or late on Redis.
    pub recovered: u64,
}

/// The bridge: an `EventPublisher` for this instance's components, and a [`BackgroundLoop`] (`run`) that moves
/// events to and from Redis. Cheap to clone; clones share everything.
///
/// Publish through it, not through the bus: the bus alone reaches only this instance. Components that skip
/// building an event when `Bus::has_subscribers` says nobody listens must not do so while bridged: a subscriber
/// on another instance may be listening.
#[derive(Debug, Clone)]
pub struct RedisBridge {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    bus: Bus,
    redis: redis::Client,
    clock: Arc<dyn Clock>,
    config: BridgeConfig,
    outbound: mpsc::Sender<Outbound>,
    /// Room for paced events in the queue ([`PACED_SHARE`]): each holds a permit until the sending task takes it.
    paced_room: Arc<Semaphore>,
    /// Whether the sending task runs and Redis took its last batch: paced publishers wait for room only then (a
    /// queue that does not drain would hold an eviction pass for nothing).
    sending: watch::Sender<bool>,
    /// Taken by the sending task for as long as it runs (and back after a panic, for the restarted one).
    outbound_queue: tokio::sync::Mutex<mpsc::Receiver<Outbound>>,
    recent: Mutex<RecentIds>,
    status: watch::Sender<BridgeStatus>,
    /// Set when an event was dropped for a full queue, until the queue drains: one warning per overflow.
    overflowing: AtomicBool,
    counters: Counters,
    /// When rejected messages were last warned about, and how many were rejected since.
    rejections: Mutex<Rejections>,
}

#[derive(Debug, Default)]
struct Rejections {
    warned_at: Option<tokio::time::Instant>,
    since_warning: u64,
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    dropped_full: AtomicU64,
    send_failed: AtomicU64,
    received: AtomicU64,
    skipped_own: AtomicU64,
    skipped_seen: AtomicU64,
    rejected: AtomicU64,
    recovered: AtomicU64,
}

#[derive(Debug)]
struct Outbound {
    topic: Topic,
    event: Arc<PublishedEvent>,
    /// A paced event's place in its share of the queue, given back when the sending task takes the event.
    _paced: Option<OwnedSemaphorePermit>,
}

impl RedisBridge {
    /// Refuses an instance id that is empty, longer than 256 bytes or has whitespace or control characters (it
    /// is a line of every message), and zero capacities or durations.
    pub fn new(ports: BridgePorts, config: BridgeConfig) -> Result<Self, BridgeError> {
        let id = &config.instance_id;
        if id.is_empty() || id.len() > 256 || id.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(BridgeError::Config("the instance id must be 1 to 256 bytes without whitespace".into()));
        }
        if config.outbound_capacity == 0 || config.recent_ids == 0 {
            return Err(BridgeError::Config("capacities must be positive".into()));
        }
        let durations = [
            config.reconnect_initial,
            config.reconnect_max,
            config.keepalive_interval,
            config.command_timeout,
            config.max_message_age,
        ];
        if durations.iter().any(Duration::is_zero) {
            return Err(BridgeError::Config("durations must be positive".into()));
        }
        let (outbound, queue) = mpsc::channel(config.outbound_capacity);
        let paced_room = (config.outbound_capacity * PACED_SHARE / PACED_SHARE_OF).clamp(1, Semaphore::MAX_PERMITS);
        let inner = Inner {
            bus: ports.bus,
            redis: ports.redis,
            clock: ports.clock,
            recent: Mutex::new(RecentIds::new(config.recent_ids)),
            config,
            outbound,
            paced_room: Arc::new(Semaphore::new(paced_room)),
            sending: watch::Sender::new(false),
            outbound_queue: tokio::sync::Mutex::new(queue),
            status: watch::Sender::new(BridgeStatus::default()),
            overflowing: AtomicBool::new(false),
            counters: Counters::default(),
            rejections: Mutex::default(),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The bus this bridge delivers to.
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// The subscription's state; `changed()` on it wakes at every change, and a grown `reconnects` says a gap in
    /// the events from other instances just ended (the streams of durable events catch up from the mailbox then).
    pub fn status(&self) -> watch::Receiver<BridgeStatus> {
        self.inner.status.subscribe()
    }

    pub fn counters(&self) -> BridgeCounters {
        let counters = &self.inner.counters;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        BridgeCounters {
            sent: read(&counters.sent),
            dropped_full: read(&counters.dropped_full),
            send_failed: read(&counters.send_failed),
            received: read(&counters.received),
            skipped_own: read(&counters.skipped_own),
            skipped_seen: read(&counters.skipped_seen),
            rejected: read(&counters.rejected),
            recovered: read(&counters.recovered),
        }
    }

    /// An `EventPublisher` that hands events to this instance's subscribers only, each event id once with what the
    /// bridge delivers: what the store says happened (a fire read from the mailbox) reaches the streams here even
    /// when Redis lost it, and not twice when Redis did not. It asks only about local subscribers.
    pub fn local_delivery(&self) -> LocalDelivery {
        LocalDelivery { bridge: self.clone() }
    }
}

/// See [`RedisBridge::local_delivery`].
#[derive(Debug, Clone)]
pub struct LocalDelivery {
    bridge: RedisBridge,
}

impl EventPublisher for LocalDelivery {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        let inner = &self.bridge.inner;
        if lock(&inner.recent).insert(topic, &event.id) {
            inner.counters.recovered.fetch_add(1, Ordering::Relaxed);
            inner.bus.publish(topic, event)?;
        }
        Ok(())
    }

    fn may_deliver(&self, topic: &Topic) -> bool {
        self.bridge.inner.bus.has_subscribers(topic)
    }
}

/// `may_deliver` keeps its default, `true`: a subscriber on another instance may be listening.
impl EventPublisher for RedisBridge {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        if let Some(published) = self.deliver_here(topic, event) {
            self.enqueue(Outbound { topic: topic.clone(), event: published, _paced: None });
        }
        Ok(())
    }

    fn publish_paced<'a>(&'a self, topic: &'a Topic, event: &'a Event) -> PacedPublish<'a> {
        Box::pin(async move {
            let Some(published) = self.deliver_here(topic, event) else { return Ok(()) };
            let outbound = Outbound { topic: topic.clone(), event: published, _paced: None };
            match self.paced_room().await {
                Some((paced, slot)) => slot.send(Outbound { _paced: Some(paced), ..outbound }),
                // Redis does not take what is sent (or the sending task is not running): waiting would hold the
                // producer for events that could not go anyway; they are dropped and counted like any other.
                None => self.enqueue(outbound),
            }
            Ok(())
        })
    }
}

impl RedisBridge {
    /// Hands `event` to this instance's subscribers, and returns it serialized for the other instances: `None`
    /// when it was published here already (under its id, on its topic) or cannot be framed.
    fn deliver_here(&self, topic: &Topic, event: &Event) -> Option<Arc<PublishedEvent>> {
        let inner = &self.inner;
        if !lock(&inner.recent).insert(topic, &event.id) {
            inner.counters.skipped_seen.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let published = Arc::new(PublishedEvent::of(event));
        inner.bus.deliver(topic, Arc::clone(&published));
        if published.id().contains(['\n', '\r']) {
            // Ids are ours and never hold one; such an event could not be framed, so it stays local.
            debug!(topic = %topic, "event id with a line break is not sent to other instances");
            return None;
        }
        Some(published)
    }

    /// Queues an event for Redis without waiting: dropped (for the other instances) and counted if the queue is
    /// full.
    fn enqueue(&self, outbound: Outbound) {
        let inner = &self.inner;
        match inner.outbound.try_send(outbound) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                inner.counters.dropped_full.fetch_add(1, Ordering::Relaxed);
                if !inner.overflowing.swap(true, Ordering::Relaxed) {
                    warn!(
                        capacity = inner.config.outbound_capacity,
                        "event bridge queue full: events are not reaching other instances"
                    );
                }
            }
            // The queue's receiver lives as long as the bridge: nothing to do.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// A place for a paced event: one of the paced share, and a slot in the queue. Waits while the sending task
    /// drains the queue into Redis; `None` at once when it does not (not running, or Redis refused or timed out
    /// its last batch), or if it stops doing so while this waits.
    async fn paced_room(&self) -> Option<(OwnedSemaphorePermit, mpsc::Permit<'_, Outbound>)> {
        let inner = &self.inner;
        // The common case, room at once, costs no timer and no watch.
        if let Ok(paced) = Arc::clone(&inner.paced_room).try_acquire_owned()
            && let Ok(slot) = inner.outbound.try_reserve()
        {
            return Some((paced, slot));
        }
        let mut sending = inner.sending.subscribe();
        let room = async {
            let paced = Arc::clone(&inner.paced_room).acquire_owned().await.ok()?;
            let slot = inner.outbound.reserve().await.ok()?;
            Some((paced, slot))
        };
        tokio::select! {
            biased;
            room = room => room,
            _ = sending.wait_for(|sending| !sending) => None,
            // A batch that Redis neither takes nor refuses ends within the command timeout, and the sending task
            // says so; this bound only keeps a waiter from trusting that.
            () = tokio::time::sleep(inner.config.command_timeout.saturating_mul(2)) => None,
        }
    }
}

impl BackgroundLoop for RedisBridge {
    fn name(&self) -> &'static str {
        "event_bridge"
    }

    /// Sends this instance's events to Redis and delivers the others' to the bus, reconnecting by itself, until
    /// `shutdown`.
    async fn run(&self, shutdown: CancellationToken) {
        tokio::join!(self.send(&shutdown), self.receive(&shutdown));
    }
}

impl RedisBridge {
    async fn send(&self, shutdown: &CancellationToken) {
        let inner = &self.inner;
        let mut queue = inner.outbound_queue.lock().await;
        // Paced publishers wait for room while this runs and Redis takes its batches; not once it has stopped
        // (shutdown, or a panic: the guard runs either way).
        inner.sending.send_replace(true);
        let _stopped = StopsSending(&inner.sending);
        let mut connection: Option<MultiplexedConnection> = None;
        let mut batch = Vec::with_capacity(BATCH);
        let mut failures: u32 = 0;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                received = queue.recv_many(&mut batch, BATCH) => if received == 0 { return },
            }
            if queue.is_empty() {
                inner.overflowing.store(false, Ordering::Relaxed);
            }
            let count = batch.len() as u64;
            let sent = tokio::time::timeout(inner.config.command_timeout, async {
                if connection.is_none() {
                    connection = Some(inner.redis.get_multiplexed_async_connection().await?);
                }
                let Some(connection) = connection.as_mut() else { return Ok(()) };
                let mut pipeline = redis::pipe();
                let sent_at = unix_millis(inner.clock.now());
                for Outbound { topic, event, .. } in batch.drain(..) {
                    let channel = format!("{}{topic}", inner.config.channel_prefix);
                    let message =
                        wire_message(&inner.config.keys, &channel, &inner.config.instance_id, sent_at, &event);
                    pipeline.publish(channel, message).ignore();
                }
                pipeline.query_async::<()>(connection).await
            })
            .await;
            batch.clear();
            match sent {
                Ok(Ok(())) => {
                    inner.counters.sent.fetch_add(count, Ordering::Relaxed);
                    failures = 0;
                    inner.sending.send_if_modified(|sending| !std::mem::replace(sending, true));
                }
                failed => {
                    inner.counters.send_failed.fetch_add(count, Ordering::Relaxed);
                    inner.sending.send_if_modified(|sending| std::mem::replace(sending, false));
                    connection = None;
                    failures = failures.saturating_add(1);
                    if failures == 1 {
                        let error = match failed {
                            Ok(Err(error)) => error.to_string(),
                            _ => "timed out".into(),
                        };
                        warn!(%error, "event bridge cannot send to redis: events are not reaching other instances");
                    }
                    let pause = capped_backoff(inner.config.reconnect_initial, inner.config.reconnect_max, failures);
                    tokio::select! {
                        biased;
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }

    async fn receive(&self, shutdown: &CancellationToken) {
        let inner = &self.inner;
        let pattern = format!("{}*", inner.config.channel_prefix);
        let mut failures: u32 = 0;
        // Whether events may have been missed: a subscription was lost, or could not be made, since the start.
        let mut gap = false;
        loop {
            let subscribed = tokio::time::timeout(inner.config.command_timeout, async {
                let mut pubsub = inner.redis.get_async_pubsub().await?;
                pubsub.psubscribe(&pattern).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await;
            match subscribed {
                Ok(Ok(pubsub)) => {
                    failures = 0;
                    self.subscribed(gap);
                    let ended = self.pump(pubsub, shutdown).await;
                    inner.status.send_modify(|status| status.subscribed = false);
                    if shutdown.is_cancelled() {
                        return;
                    }
                    warn!(reason = ended, "event bridge subscription lost; subscribing again");
                    gap = true;
                }
                failed => {
                    failures = failures.saturating_add(1);
                    if failures == 1 {
                        let error = match failed {
                            Ok(Err(error)) => error.to_string(),
                            _ => "timed out".into(),
                        };
                        warn!(%error, "event bridge cannot subscribe: events from other instances are not arriving");
                    }
                    gap = true;
                }
            }
            let pause = capped_backoff(inner.config.reconnect_initial, inner.config.reconnect_max, failures);
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    fn subscribed(&self, after_gap: bool) {
        let at = self.inner.clock.now();
        self.inner.status.send_modify(|status| {
            status.subscribed = true;
            if after_gap {
                status.reconnects += 1;
                status.last_reconnect_at = Some(at);
            }
        });
        if after_gap {
            info!("event bridge subscribed again; events from other instances published meanwhile were missed");
        } else {
            debug!("event bridge subscribed");
        }
    }

    /// Delivers what the subscription receives until it ends; returns why.
    async fn pump(&self, pubsub: PubSub, shutdown: &CancellationToken) -> &'static str {
        let (mut sink, mut messages) = pubsub.split();
        let mut keepalive = tokio::time::interval(self.inner.config.keepalive_interval);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        keepalive.tick().await;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return "shutdown",
                message = messages.next() => match message {
                    Some(message) => self.deliver(&message),
                    None => return "connection closed",
                },
                _ = keepalive.tick() => {
                    let ping = tokio::time::timeout(self.inner.config.command_timeout, sink.ping::<redis::Value>());
                    if !matches!(ping.await, Ok(Ok(_))) {
                        return "no answer to PING";
                    }
                }
            }
        }
    }

    fn deliver(&self, message: &redis::Msg) {
        self.deliver_raw(message.get_channel_name(), message.get_payload_bytes());
    }

    /// Checks one message from Redis and hands its event to the bus, or drops it.
    fn deliver_raw(&self, channel: &str, payload: &[u8]) {
        let inner = &self.inner;
        let counters = &inner.counters;
        let wire = match WireMessage::open(&inner.config.keys, channel, payload) {
            Ok(wire) => wire,
            Err(rejection) => return self.reject(rejection),
        };
        let age_ms = unix_millis(inner.clock.now()).abs_diff(wire.sent_at_ms);
        if u128::from(age_ms) > inner.config.max_message_age.as_millis() {
            return self.reject(Rejection::Stale);
        }
        let Some(topic) = channel.strip_prefix(inner.config.channel_prefix.as_str()).and_then(Topic::from_wire) else {
            // Signed by an instance of the cluster, on a topic this one does not know (a newer version's).
            return self.reject(Rejection::Malformed);
        };
        if wire.origin == inner.config.instance_id {
            counters.skipped_own.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !lock(&inner.recent).insert(&topic, wire.event.id()) {
            counters.skipped_seen.fetch_add(1, Ordering::Relaxed);
            return;
        }
        counters.received.fetch_add(1, Ordering::Relaxed);
        inner.bus.deliver(&topic, Arc::new(wire.event));
    }

    /// Counts a dropped message, and warns about the rejections at most once per [`REJECTION_WARNING_INTERVAL`]:
    /// someone who can publish on Redis must not be able to flood the log. Never with the message's content.
    fn reject(&self, rejection: Rejection) {
        let inner = &self.inner;
        inner.counters.rejected.fetch_add(1, Ordering::Relaxed);
        let mut rejections = lock(&inner.rejections);
        rejections.since_warning += 1;
        let now = tokio::time::Instant::now();
        if rejections.warned_at.is_none_or(|at| now.duration_since(at) >= REJECTION_WARNING_INTERVAL) {
            let rejected = std::mem::take(&mut rejections.since_warning);
            rejections.warned_at = Some(now);
            drop(rejections);
            warn!(
                rejected,
                last_reason = rejection.reason(),
                "event bridge dropped messages that failed verification: something other than this cluster's \
                 instances publishes on its Redis channels, or an instance runs with another --cluster-secret or \
                 version, or clocks disagree by more than {:?}",
                inner.config.max_message_age
            );
        }
    }
}

/// Tells paced publishers that the sending task stopped, when it is dropped.
struct StopsSending<'a>(&'a watch::Sender<bool>);

impl Drop for StopsSending<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// Why a message from Redis was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejection {
    TooLarge,
    Version,
    Signature,
    Stale,
    Malformed,
}

impl Rejection {
    fn reason(self) -> &'static str {
        match self {
            Self::TooLarge => "too large",
            Self::Version => "another wire version",
            Self::Signature => "MAC does not verify",
            Self::Stale => "sent too long ago (or clocks disagree)",
            Self::Malformed => "not an event",
        }
    }
}

fn unix_millis(at: OffsetDateTime) -> u64 {
    u64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// What a message's MAC covers: the version, the channel it is published on (so a message moved to another topic
/// fails), then the rest of the message after the MAC's line (origin, send time, event type, id, JSON).
fn mac_input<'a>(channel: &'a str, rest: &'a [u8]) -> [&'a [u8]; 4] {
    [WIRE_VERSION.as_bytes(), b"\n", channel.as_bytes(), rest]
}

fn sign(keys: &ClusterKeys, channel: &str, rest: &[u8]) -> hmac::Tag {
    let mut context = hmac::Context::with_key(&keys.signing);
    for part in mac_input(channel, rest) {
        context.update(part);
    }
    context.sign()
}

/// Whether `mac` is the MAC of the message under the signing key or the one still accepted (compared in constant
/// time; computed in pieces, so a large message is not copied to be checked).
fn verifies(keys: &ClusterKeys, channel: &str, rest: &[u8], mac: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    std::iter::once(&keys.signing).chain(keys.also_accepted.as_ref()).any(|key| {
        let mut context = hmac::Context::with_key(key);
        for part in mac_input(channel, rest) {
            context.update(part);
        }
        bool::from(context.sign().as_ref().ct_eq(mac))
    })
}

/// `2\n<mac>\n<origin>\n<sent_at_ms>\n<event_type>\n<id>\n<json>`: the event's JSON as it is, after six short
/// lines; `<mac>` is the hex HMAC-SHA256 of [`mac_input`].
fn wire_message(keys: &ClusterKeys, channel: &str, origin: &str, sent_at_ms: u64, event: &PublishedEvent) -> Vec<u8> {
    let json = event.json_bytes();
    let sent_at = sent_at_ms.to_string();
    let mut rest =
        Vec::with_capacity(origin.len() + sent_at.len() + event.event_type().len() + event.id().len() + json.len() + 4);
    for line in [origin, &sent_at, event.event_type(), event.id()] {
        rest.extend_from_slice(line.as_bytes());
        rest.push(b'\n');
    }
    rest.extend_from_slice(json);
    let mac = gateway_core::encoding::hex::encode(sign(keys, channel, &rest).as_ref());
    let mut message = Vec::with_capacity(WIRE_VERSION.len() + MAC_HEX_LEN + 2 + rest.len());
    for line in [WIRE_VERSION, &mac] {
        message.extend_from_slice(line.as_bytes());
        message.push(b'\n');
    }
    message.extend_from_slice(&rest);
    message
}

#[derive(Debug, PartialEq, Eq)]
struct WireMessage<'a> {
    origin: &'a str,
    sent_at_ms: u64,
    event: PublishedEvent,
}

impl<'a> WireMessage<'a> {
    /// Verifies a message received on `channel` and reads it. Nothing but its size, version line and MAC line is
    /// looked at before the MAC has verified.
    fn open(keys: &ClusterKeys, channel: &str, payload: &'a [u8]) -> Result<Self, Rejection> {
        if payload.len() > MAX_MESSAGE_BYTES {
            return Err(Rejection::TooLarge);
        }
        let (version, after_version) = split_line(payload).ok_or(Rejection::Version)?;
        if version != WIRE_VERSION.as_bytes() {
            return Err(Rejection::Version);
        }
        let (mac, rest) = split_line(after_version).ok_or(Rejection::Signature)?;
        let mac = std::str::from_utf8(mac).ok().filter(|mac| mac.len() == MAC_HEX_LEN);
        let mac = mac.and_then(gateway_core::encoding::hex::decode).ok_or(Rejection::Signature)?;
        if !verifies(keys, channel, rest, &mac) {
            return Err(Rejection::Signature);
        }
        Self::parse(rest).ok_or(Rejection::Malformed)
    }

    fn parse(rest: &'a [u8]) -> Option<Self> {
        let rest = std::str::from_utf8(rest).ok()?;
        let mut lines = rest.splitn(5, '\n');
        let (origin, sent_at, event_type, id, json) =
            (lines.next()?, lines.next()?, lines.next()?, lines.next()?, lines.next()?);
        if origin.is_empty() || id.is_empty() || !sent_at.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let sent_at_ms = sent_at.parse().ok()?;
        // Built into the same frame a local publish builds: the streams of this instance write it as they would
        // their own events.
        let event = PublishedEvent::from_json(id, known_event_type(event_type)?, json)?;
        Some(Self { origin, sent_at_ms, event })
    }
}

/// The bytes before the first line break, and those after it.
fn split_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = bytes.iter().position(|byte| *byte == b'\n')?;
    Some((&bytes[..end], &bytes[end + 1..]))
}

/// The contract's event types (docs/api.md) and the internal one, as the `&'static str` the bus carries; `None` for
/// any other.
fn known_event_type(name: &str) -> Option<&'static str> {
    const KNOWN: [&str; 9] = [
        "decision_log",
        "schema_violation",
        "reminder",
        "agent_evicted",
        "webhook_delivery_status",
        "webhook_dlq",
        "webhook_signature_failure",
        "job_scheduled",
        "credential_revoked",
    ];
    KNOWN.into_iter().find(|known| *known == name)
}

/// The last `capacity` (topic, event id) pairs delivered, oldest forgotten first.
#[derive(Debug)]
struct RecentIds {
    capacity: usize,
    order: VecDeque<(Topic, String)>,
    set: HashSet<(Topic, String)>,
}

impl RecentIds {
    fn new(capacity: usize) -> Self {
        Self { capacity, order: VecDeque::with_capacity(capacity), set: HashSet::with_capacity(capacity) }
    }

    /// `false` if the pair is remembered already; otherwise remembers it.
    fn insert(&mut self, topic: &Topic, id: &str) -> bool {
        let key = (topic.clone(), id.to_owned());
        if self.set.contains(&key) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
        self.order.push_back(key.clone());
        self.set.insert(key);
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use futures_util::FutureExt;
    use gateway_core::{AgentId, ClusterId, DecisionLog, EventPayload, ManualClock};
    use serde_json::json;
    use time::macros::datetime;

    use super::*;
    use crate::Received;

    fn event(id: &str) -> Event {
        Event::with_id(id, EventPayload::WebhookSignatureFailure { webhook_id: 7 }, datetime!(2026-02-22 12:00:00 UTC))
    }

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const CHANNEL: &str = "gateway:events:gateway:webhooks";

    fn keys() -> ClusterKeys {
        ClusterKeys::new(SECRET, None).unwrap()
    }

    fn config(instance_id: &str) -> BridgeConfig {
        BridgeConfig::new(instance_id, keys())
    }

    fn bridge(config: BridgeConfig) -> RedisBridge {
        // Nothing connects until `run`: the address is never used by these tests.
        let redis = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let ports = BridgePorts { bus: Bus::default(), redis, clock: Arc::new(ManualClock::at_fixed_start()) };
        RedisBridge::new(ports, config).unwrap()
    }

    fn now_ms() -> u64 {
        unix_millis(ManualClock::at_fixed_start().now())
    }

    fn signed(channel: &str, origin: &str, event: &PublishedEvent) -> Vec<u8> {
        wire_message(&keys(), channel, origin, now_ms(), event)
    }

    #[test]
    fn the_wire_format_carries_the_event_its_origin_and_time_under_a_mac() {
        let published = PublishedEvent::of(&event("e-1"));
        let message = signed(CHANNEL, "gw-a", &published);
        let text = String::from_utf8(message.clone()).unwrap();
        let lines: Vec<&str> = text.splitn(7, '\n').collect();
        assert_eq!(lines[0], "2");
        assert_eq!(lines[1].len(), 64, "the MAC, in hex");
        assert_eq!(&lines[2..6], ["gw-a", &now_ms().to_string(), "webhook_signature_failure", "e-1"]);
        assert_eq!(
            WireMessage::open(&keys(), CHANNEL, &message),
            Ok(WireMessage { origin: "gw-a", sent_at_ms: now_ms(), event: published })
        );
        // The JSON may hold anything after the sixth line break; a line break there is whitespace, and becomes a
        // space so that the event's frame keeps its data on one line.
        let parsed = WireMessage::parse(b"gw-a\n5\nreminder\ne-2\n{\"a\":\n1}").unwrap();
        assert_eq!(parsed.event.json(), "{\"a\": 1}");
        assert_eq!(parsed.event.frame(), PublishedEvent::from_json("e-2", "reminder", "{\"a\": 1}").unwrap().frame());
        for bad in [
            &b""[..],
            b"gw-a\n5\nwebhook_signature_failure\ne-1",
            b"gw-a\n5\nsomething_else\ne-1\n{}",
            b"\n5\nreminder\ne-1\n{}",
            b"gw-a\n5\nreminder\n\n{}",
            b"gw-a\n5\nreminder\ne\r1\n{}",
            b"gw-a\n-5\nreminder\ne-1\n{}",
            b"gw-a\n\nreminder\ne-1\n{}",
            b"gw-a\n5\nreminder\ne-1\n\xff",
        ] {
            assert_eq!(WireMessage::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_tampered_byte_a_wrong_secret_a_wrong_channel_or_an_old_version_is_rejected() {
        let published = PublishedEvent::of(&event("e-1"));
        let message = signed(CHANNEL, "gw-a", &published);
        let open = |keys: &ClusterKeys, channel: &str, bytes: &[u8]| WireMessage::open(keys, channel, bytes).err();
        assert_eq!(open(&keys(), CHANNEL, &message), None);
        for index in 0..message.len() {
            let mut tampered = message.clone();
            tampered[index] ^= 0x01;
            assert!(open(&keys(), CHANNEL, &tampered).is_some(), "byte {index} changed and still accepted");
        }
        let other = ClusterKeys::new(b"another secret, also 32 bytes long", None).unwrap();
        assert_eq!(open(&other, CHANNEL, &message), Some(Rejection::Signature));
        assert_eq!(open(&keys(), "gateway:events:gateway:messages", &message), Some(Rejection::Signature));
        let unsigned = b"1\ngw-a\nwebhook_signature_failure\ne-1\n{}";
        assert_eq!(open(&keys(), CHANNEL, unsigned), Some(Rejection::Version));
        let mut large = message.clone();
        large.resize(MAX_MESSAGE_BYTES + 1, b' ');
        assert_eq!(open(&keys(), CHANNEL, &large), Some(Rejection::TooLarge));
        // During a rotation: signed with the new secret, checked by an instance that has the old one as its own
        // and the new one as the previous, and the other way round.
        let new = b"the new secret, 32 bytes at least";
        let rotated = ClusterKeys::new(new, Some(SECRET)).unwrap();
        assert_eq!(open(&rotated, CHANNEL, &message), None, "the previous secret is still accepted");
        let rotating = ClusterKeys::new(SECRET, Some(new)).unwrap();
        let from_rotated = wire_message(&rotated, CHANNEL, "gw-b", now_ms(), &published);
        assert_eq!(open(&rotating, CHANNEL, &from_rotated), None);
        assert_eq!(open(&keys(), CHANNEL, &from_rotated), Some(Rejection::Signature), "the new one alone is not");
    }

    #[test]
    fn secrets_shorter_than_32_bytes_are_refused_and_never_shown() {
        assert!(ClusterKeys::new(&SECRET[..31], None).is_err());
        assert!(ClusterKeys::new(SECRET, Some(&SECRET[..31])).is_err());
        assert_eq!(format!("{:?}", keys()), "ClusterKeys(<redacted>)");
    }

    #[test]
    fn rejected_messages_are_counted_and_never_delivered() {
        let receiving = bridge(config("gw-b"));
        let mut local = receiving.bus().subscribe(&Topic::Webhooks);
        let published = PublishedEvent::of(&event("e-1"));
        let good = signed(CHANNEL, "gw-a", &published);
        let mut tampered = good.clone();
        let last = tampered.len() - 2;
        tampered[last] ^= 0x20;
        let forged_unsigned = b"1\ngw-a\nwebhook_signature_failure\ne-1\n{}".to_vec();
        let wrong_secret = wire_message(
            &ClusterKeys::new(b"another secret, also 32 bytes long", None).unwrap(),
            CHANNEL,
            "gw-a",
            now_ms(),
            &published,
        );
        let old = wire_message(&keys(), CHANNEL, "gw-a", now_ms() - 61_000, &published);
        let future = wire_message(&keys(), CHANNEL, "gw-a", now_ms() + 61_000, &published);
        for (channel, message) in [
            (CHANNEL, &tampered),
            (CHANNEL, &forged_unsigned),
            (CHANNEL, &wrong_secret),
            ("gateway:events:gateway:messages", &good),
            (CHANNEL, &old),
            (CHANNEL, &future),
            ("gateway:events:no-such-topic", &signed("gateway:events:no-such-topic", "gw-a", &published)),
        ] {
            receiving.deliver_raw(channel, message);
        }
        assert_eq!(receiving.counters().rejected, 7);
        assert_eq!(receiving.counters().received, 0);
        receiving.deliver_raw(CHANNEL, &good);
        let counters = receiving.counters();
        assert_eq!((counters.rejected, counters.received), (7, 1));
        assert_eq!(try_next(&mut local).as_deref(), Some("e-1"));
        assert_eq!(try_next(&mut local), None, "only the good one was delivered");
        // Its replay within the window is the same event, once.
        receiving.deliver_raw(CHANNEL, &good);
        assert_eq!(receiving.counters().skipped_seen, 1);
    }

    /// The id of the event waiting for `subscription`, if one is.
    fn try_next(subscription: &mut crate::Subscription) -> Option<String> {
        subscription.receiver.try_recv().ok().map(|event| event.id().to_owned())
    }

    #[test]
    fn local_delivery_hands_each_event_once_with_what_the_bridge_delivered() {
        let bridge = bridge(config("gw-b"));
        let local = bridge.local_delivery();
        assert!(!local.may_deliver(&Topic::Webhooks), "only this instance's subscribers count");
        let mut subscriber = bridge.bus().subscribe(&Topic::Webhooks);
        assert!(local.may_deliver(&Topic::Webhooks));
        // Delivered by the bridge first: the store's copy is not delivered again.
        bridge.deliver_raw(CHANNEL, &signed(CHANNEL, "gw-a", &PublishedEvent::of(&event("e-1"))));
        local.publish(&Topic::Webhooks, &event("e-1")).unwrap();
        // Lost on Redis: the store's copy is delivered, and the bridge's late one is not.
        local.publish(&Topic::Webhooks, &event("e-2")).unwrap();
        bridge.deliver_raw(CHANNEL, &signed(CHANNEL, "gw-a", &PublishedEvent::of(&event("e-2"))));
        assert_eq!([try_next(&mut subscriber), try_next(&mut subscriber)], [Some("e-1".into()), Some("e-2".into())]);
        assert_eq!(try_next(&mut subscriber), None);
        let counters = bridge.counters();
        assert_eq!((counters.received, counters.recovered, counters.skipped_seen), (1, 1, 1));
    }

    #[test]
    fn every_event_type_crosses_the_bridge() {
        let at = datetime!(2026-02-22 12:00:00 UTC);
        let agent_id = AgentId::new("a").unwrap();
        let payloads = [
            EventPayload::DecisionLog(Box::new(DecisionLog::from_json(&json!({})).unwrap())),
            EventPayload::SchemaViolation {
                agent_id: "a".into(),
                capability_version: "1".into(),
                violation_reason: "r".into(),
                raw_payload_hash: "sha256:00".into(),
            },
            EventPayload::Reminder {
                job_id: 1,
                agent_id: agent_id.clone(),
                scheduled_for: at,
                payload: serde_json::Map::new(),
                fire_id: "1:x".into(),
                epoch: 4,
            },
            EventPayload::AgentEvicted { agent_id, cluster_id: ClusterId::new("c").unwrap(), last_seen: at },
            EventPayload::WebhookDeliveryStatus {
                delivery_id: 1,
                webhook_id: 1,
                session_id: "s".into(),
                status: "pending".into(),
                attempt_count: 0,
                next_retry_at: None,
                error_detail: None,
            },
            EventPayload::WebhookDlq {
                delivery_id: 1,
                webhook_id: 1,
                session_id: "s".into(),
                attempt_count: 6,
                error_detail: None,
            },
            EventPayload::WebhookSignatureFailure { webhook_id: 1 },
            EventPayload::JobScheduled { job_id: 1, next_fire_at: at },
            EventPayload::CredentialRevoked { credential_id: "019c85388601a1b2c3d4e5f6".into() },
        ];
        for payload in payloads {
            let published = PublishedEvent::of(&Event::with_id("e", payload, at));
            let message = signed(CHANNEL, "gw", &published);
            assert_eq!(WireMessage::open(&keys(), CHANNEL, &message).unwrap().event, published);
        }
    }

    #[test]
    fn recent_ids_are_per_topic_and_bounded() {
        let mut recent = RecentIds::new(2);
        assert!(recent.insert(&Topic::Messages, "e-1"));
        assert!(!recent.insert(&Topic::Messages, "e-1"));
        assert!(recent.insert(&Topic::Webhooks, "e-1"), "another topic, another event");
        // The third entry pushes the oldest out: it would be delivered again.
        assert!(recent.insert(&Topic::Messages, "e-2"));
        assert!(recent.insert(&Topic::Messages, "e-1"));
        assert_eq!((recent.order.len(), recent.set.len()), (2, 2));
    }

    #[tokio::test]
    async fn publish_reaches_local_subscribers_at_once_never_blocks_and_counts_what_it_cannot_queue() {
        let bridge = bridge(BridgeConfig { outbound_capacity: 4, ..config("gw-a") });
        let mut local = bridge.bus().subscribe(&Topic::Webhooks);
        // Not running: nothing drains the queue, which holds 4.
        for n in 0..10 {
            bridge.publish(&Topic::Webhooks, &event(&format!("e-{n}"))).unwrap();
        }
        for n in 0..10 {
            assert!(matches!(local.recv().await, Received::Event(event) if event.id() == format!("e-{n}")));
        }
        assert_eq!(bridge.counters().dropped_full, 6);
        // The same id again is the same event: once per instance.
        bridge.publish(&Topic::Webhooks, &event("e-3")).unwrap();
        bridge.publish(&Topic::Webhooks, &event("e-10")).unwrap();
        assert!(matches!(local.recv().await, Received::Event(event) if event.id() == "e-10"));
        assert_eq!(bridge.counters().skipped_seen, 1);
    }

    /// A paced burst fills its share of the queue and then waits (instead of dropping) while Redis takes what is
    /// sent; requests' events still find room at once; and a waiter is let go, its event dropped and counted,
    /// once sending stops.
    #[tokio::test(start_paused = true)]
    async fn paced_events_wait_for_their_share_of_the_queue_while_sending_and_never_take_a_requests_room() {
        let bridge = bridge(BridgeConfig { outbound_capacity: 8, ..config("gw-a") });
        // What the sending task says while Redis takes its batches; it is not running, so nothing drains.
        bridge.inner.sending.send_replace(true);
        for n in 0..4 {
            bridge.publish_paced(&Topic::Agents, &event(&format!("paced-{n}"))).await.unwrap();
        }
        let (fifth_event, sixth_event) = (event("paced-4"), event("paced-5"));
        let mut fifth = bridge.publish_paced(&Topic::Agents, &fifth_event);
        assert!(fifth.as_mut().now_or_never().is_none(), "the paced share (half of 8) is full: it waits");
        for n in 0..4 {
            bridge.publish(&Topic::Agents, &event(&format!("request-{n}"))).unwrap();
        }
        assert_eq!(bridge.counters().dropped_full, 0, "requests' events had the other half");
        assert!(fifth.as_mut().now_or_never().is_none());
        // The sending task takes a batch: the waiter gets the place its share got back.
        let mut queue = bridge.inner.outbound_queue.lock().await;
        let mut taken = Vec::new();
        assert_eq!(queue.recv_many(&mut taken, 1).await, 1);
        drop(taken);
        fifth.await.unwrap();
        assert_eq!(bridge.counters().dropped_full, 0);
        // Once sending stops, a paced publisher does not wait for a queue that does not drain.
        let mut sixth = bridge.publish_paced(&Topic::Agents, &sixth_event);
        assert!(sixth.as_mut().now_or_never().is_none());
        bridge.inner.sending.send_replace(false);
        sixth.await.unwrap();
        assert_eq!(bridge.counters().dropped_full, 1);
        bridge.publish_paced(&Topic::Agents, &event("paced-6")).await.unwrap();
        assert_eq!(bridge.counters().dropped_full, 2);
        drop(queue);
    }

    /// Nobody listening here says nothing of the other instances: a publisher asking the bridge is always told
    /// to publish.
    #[tokio::test]
    async fn the_bridge_may_always_deliver_even_with_no_local_subscriber() {
        let bridge = bridge(config("gw-a"));
        assert!(!bridge.bus().has_subscribers(&Topic::Messages));
        assert!(bridge.may_deliver(&Topic::Messages));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let redis = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let make = |config: BridgeConfig| {
            let ports = BridgePorts {
                bus: Bus::default(),
                redis: redis.clone(),
                clock: Arc::new(ManualClock::at_fixed_start()),
            };
            RedisBridge::new(ports, config)
        };
        for bad in [
            config(""),
            config("two\nlines"),
            config("a b"),
            BridgeConfig { max_message_age: Duration::ZERO, ..config("a") },
            BridgeConfig { outbound_capacity: 0, ..config("a") },
            BridgeConfig { recent_ids: 0, ..config("a") },
            BridgeConfig { keepalive_interval: Duration::ZERO, ..config("a") },
        ] {
            assert!(make(bad).is_err());
        }
        assert!(make(config("gw-a")).is_ok());
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            /// Whatever Redis hands over, on whatever channel, the decoder answers without panicking, and what it
            /// accepts is only what was signed.
            #[test]
            fn any_bytes_on_any_channel_are_refused_or_read_never_a_panic(
                payload in proptest::collection::vec(any::<u8>(), 0..512),
                channel in ".{0,64}",
            ) {
                prop_assert!(WireMessage::open(&keys(), &channel, &payload).is_err());
                let _ = WireMessage::parse(&payload);
            }

            /// A signed message whose MAC is right but whose lines are anything: read or refused, never a panic.
            #[test]
            fn a_signed_message_with_any_content_is_read_or_refused(rest in proptest::collection::vec(any::<u8>(), 0..512)) {
                let mac = gateway_core::encoding::hex::encode(sign(&keys(), CHANNEL, &rest).as_ref());
                let message = [format!("{WIRE_VERSION}\n{mac}\n").into_bytes(), rest].concat();
                let _ = WireMessage::open(&keys(), CHANNEL, &message);
            }

            /// What the encoder prints, the decoder reads back: any id without a line break, any JSON text, any
            /// instance id, any time.
            #[test]
            fn encode_then_decode_is_the_same_event(
                id in "[^\r\n]{1,40}",
                json in ".{0,200}",
                origin in "[!-~]{1,40}",
                sent_at_ms in any::<u64>(),
                topic in prop::sample::select(vec!["gateway:messages", "agent:a b:scheduled", "internal:scheduled-jobs"]),
            ) {
                let channel = format!("{CHANNEL_PREFIX}{topic}");
                let published = PublishedEvent::from_json(&id, "reminder", &json).unwrap();
                let message = wire_message(&keys(), &channel, &origin, sent_at_ms, &published);
                let opened = WireMessage::open(&keys(), &channel, &message).unwrap();
                prop_assert_eq!(opened, WireMessage { origin: &origin, sent_at_ms, event: published });
            }
        }
    }
}
