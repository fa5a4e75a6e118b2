//! [`RedisBridge`]: events across instances over Redis pub/sub (docs/architecture.md, "The event bridge").
//!
//! The bridge is the `EventPublisher` the components of an instance publish through. Each event goes to the
//! local [`Bus`] at once and into a bounded queue that a background task `PUBLISH`es to Redis on the channel
//! `gateway:events:<topic>`; publishing never waits (a full queue drops the event for the other instances and
//! counts it). Every instance holds one pattern subscription, `gateway:events:*`, and hands what it receives to
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
//! so the streams of durable events (reminders) can catch up from the mailbox.

use std::collections::{HashSet, VecDeque};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use gateway_core::sync::lock;
use gateway_core::{BackgroundLoop, Clock, Event, EventPublisher, PublishError, Topic, capped_backoff};
use redis::aio::{MultiplexedConnection, PubSub};
use time::OffsetDateTime;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{Bus, PublishedEvent};

/// Prefix of the Redis channels: an event on topic `T` goes to `gateway:events:T`.
pub const CHANNEL_PREFIX: &str = "gateway:events:";
/// Events waiting to be sent to Redis before publishing starts dropping them (for the other instances only).
pub const OUTBOUND_CAPACITY: usize = 4096;
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
/// The message format's version, first line of every message.
const WIRE_VERSION: &str = "1";

/// Why a bridge could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error("invalid bridge configuration: {0}")]
    Config(String),
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
    pub channel_prefix: String,
    pub outbound_capacity: usize,
    pub recent_ids: usize,
    pub reconnect_initial: Duration,
    pub reconnect_max: Duration,
    pub keepalive_interval: Duration,
    pub command_timeout: Duration,
}

impl BridgeConfig {
    pub fn new(instance_id: impl Into<String>) -> Self {
        Self {
            instance_id: instance_id.into(),
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
    /// Messages on the bridge's channels that are not events of this version (skipped).
    pub malformed: u64,
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
    /// Taken by the sending task for as long as it runs (and back after a panic, for the restarted one).
    outbound_queue: tokio::sync::Mutex<mpsc::Receiver<Outbound>>,
    recent: Mutex<RecentIds>,
    status: watch::Sender<BridgeStatus>,
    /// Set when an event was dropped for a full queue, until the queue drains: one warning per overflow.
    overflowing: AtomicBool,
    counters: Counters,
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    dropped_full: AtomicU64,
    send_failed: AtomicU64,
    received: AtomicU64,
    skipped_own: AtomicU64,
    skipped_seen: AtomicU64,
    malformed: AtomicU64,
}

#[derive(Debug)]
struct Outbound {
    topic: Topic,
    event: Arc<PublishedEvent>,
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
        let durations =
            [config.reconnect_initial, config.reconnect_max, config.keepalive_interval, config.command_timeout];
        if durations.iter().any(Duration::is_zero) {
            return Err(BridgeError::Config("durations must be positive".into()));
        }
        let (outbound, queue) = mpsc::channel(config.outbound_capacity);
        let inner = Inner {
            bus: ports.bus,
            redis: ports.redis,
            clock: ports.clock,
            recent: Mutex::new(RecentIds::new(config.recent_ids)),
            config,
            outbound,
            outbound_queue: tokio::sync::Mutex::new(queue),
            status: watch::Sender::new(BridgeStatus::default()),
            overflowing: AtomicBool::new(false),
            counters: Counters::default(),
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
            malformed: read(&counters.malformed),
        }
    }
}

/// `may_deliver` keeps its default, `true`: a subscriber on another instance may be listening.
impl EventPublisher for RedisBridge {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        let inner = &self.inner;
        if !lock(&inner.recent).insert(topic, &event.id) {
            inner.counters.skipped_seen.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let published = Arc::new(PublishedEvent::of(event));
        inner.bus.deliver(topic, Arc::clone(&published));
        if published.id().contains(['\n', '\r']) {
            // Ids are ours and never hold one; such an event could not be framed, so it stays local.
            debug!(topic = %topic, "event id with a line break is not sent to other instances");
            return Ok(());
        }
        match inner.outbound.try_send(Outbound { topic: topic.clone(), event: published }) {
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
        Ok(())
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
                for Outbound { topic, event } in batch.drain(..) {
                    let channel = format!("{}{topic}", inner.config.channel_prefix);
                    pipeline.publish(channel, wire_message(&inner.config.instance_id, &event)).ignore();
                }
                pipeline.query_async::<()>(connection).await
            })
            .await;
            batch.clear();
            match sent {
                Ok(Ok(())) => {
                    inner.counters.sent.fetch_add(count, Ordering::Relaxed);
                    failures = 0;
                }
                failed => {
                    inner.counters.send_failed.fetch_add(count, Ordering::Relaxed);
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
        let inner = &self.inner;
        let counters = &inner.counters;
        let topic =
            message.get_channel_name().strip_prefix(inner.config.channel_prefix.as_str()).and_then(Topic::from_wire);
        let wire = std::str::from_utf8(message.get_payload_bytes()).ok().and_then(WireMessage::parse);
        let (Some(topic), Some(wire)) = (topic, wire) else {
            counters.malformed.fetch_add(1, Ordering::Relaxed);
            return;
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
}

/// `1\n<origin>\n<event_type>\n<id>\n<json>`: the event's JSON as it is, after four short lines.
fn wire_message(origin: &str, event: &PublishedEvent) -> Vec<u8> {
    let json = event.json_bytes();
    let mut message = Vec::with_capacity(
        WIRE_VERSION.len() + origin.len() + event.event_type().len() + event.id().len() + json.len() + 4,
    );
    for line in [WIRE_VERSION, origin, event.event_type(), event.id()] {
        message.extend_from_slice(line.as_bytes());
        message.push(b'\n');
    }
    message.extend_from_slice(json);
    message
}

#[derive(Debug, PartialEq, Eq)]
struct WireMessage<'a> {
    origin: &'a str,
    event: PublishedEvent,
}

impl<'a> WireMessage<'a> {
    fn parse(message: &'a str) -> Option<Self> {
        let mut lines = message.splitn(5, '\n');
        let (version, origin, event_type, id, json) =
            (lines.next()?, lines.next()?, lines.next()?, lines.next()?, lines.next()?);
        if version != WIRE_VERSION || origin.is_empty() || id.is_empty() {
            return None;
        }
        // Built into the same frame a local publish builds: the streams of this instance write it as they would
        // their own events.
        let event = PublishedEvent::from_json(id, known_event_type(event_type)?, json)?;
        Some(Self { origin, event })
    }
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

    use gateway_core::{AgentId, ClusterId, DecisionLog, EventPayload, ManualClock};
    use serde_json::json;
    use time::macros::datetime;

    use super::*;
    use crate::Received;

    fn event(id: &str) -> Event {
        Event::with_id(id, EventPayload::WebhookSignatureFailure { webhook_id: 7 }, datetime!(2026-02-22 12:00:00 UTC))
    }

    fn bridge(config: BridgeConfig) -> RedisBridge {
        // Nothing connects until `run`: the address is never used by these tests.
        let redis = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let ports = BridgePorts { bus: Bus::default(), redis, clock: Arc::new(ManualClock::at_fixed_start()) };
        RedisBridge::new(ports, config).unwrap()
    }

    #[test]
    fn the_wire_format_carries_the_event_and_its_origin_and_refuses_anything_else() {
        let published = PublishedEvent::of(&event("e-1"));
        let message = String::from_utf8(wire_message("gw-a", &published)).unwrap();
        assert!(message.starts_with("1\ngw-a\nwebhook_signature_failure\ne-1\n{"));
        assert_eq!(WireMessage::parse(&message), Some(WireMessage { origin: "gw-a", event: published }));
        for bad in [
            "",
            "1\ngw-a\nwebhook_signature_failure\ne-1",
            "2\ngw-a\nwebhook_signature_failure\ne-1\n{}",
            "1\ngw-a\nsomething_else\ne-1\n{}",
            "1\n\nreminder\ne-1\n{}",
            "1\ngw-a\nreminder\n\n{}",
            "1\ngw-a\nreminder\ne\r1\n{}",
        ] {
            assert_eq!(WireMessage::parse(bad), None, "{bad:?}");
        }
        // The JSON may hold anything after the fourth line break; a line break there is whitespace, and becomes a
        // space so that the event's frame keeps its data on one line.
        let parsed = WireMessage::parse("1\ngw-a\nreminder\ne-2\n{\"a\":\n1}").unwrap();
        assert_eq!(parsed.event.json(), "{\"a\": 1}");
        assert_eq!(parsed.event.frame(), PublishedEvent::from_json("e-2", "reminder", "{\"a\": 1}").unwrap().frame());
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
            let message = String::from_utf8(wire_message("gw", &published)).unwrap();
            assert_eq!(WireMessage::parse(&message).unwrap().event, published);
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
        let bridge = bridge(BridgeConfig { outbound_capacity: 4, ..BridgeConfig::new("gw-a") });
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

    /// Nobody listening here says nothing of the other instances: a publisher asking the bridge is always told
    /// to publish.
    #[tokio::test]
    async fn the_bridge_may_always_deliver_even_with_no_local_subscriber() {
        let bridge = bridge(BridgeConfig::new("gw-a"));
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
            BridgeConfig::new(""),
            BridgeConfig::new("two\nlines"),
            BridgeConfig::new("a b"),
            BridgeConfig { outbound_capacity: 0, ..BridgeConfig::new("a") },
            BridgeConfig { recent_ids: 0, ..BridgeConfig::new("a") },
            BridgeConfig { keepalive_interval: Duration::ZERO, ..BridgeConfig::new("a") },
        ] {
            assert!(make(bad).is_err());
        }
        assert!(make(BridgeConfig::new("gw-a")).is_ok());
    }
}
