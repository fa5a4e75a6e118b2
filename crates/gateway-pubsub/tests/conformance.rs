//! The bus and the Redis bridge against gateway-core's conformance suite of `EventPublisher` (the same suite runs
//! against `RecordingPublisher` in gateway-core's tests):
//!
//! - `bus`: the in-process `Bus`, its subscribers the bus's subscriptions (what an event stream reads);
//! - `bridge_local`: a `RedisBridge` whose subscribers are on its own instance's bus: every event reaches them at
//!   once and its copy coming back from Redis is skipped;
//! - `bridge_remote`: the same bridge, its subscribers on a second instance sharing the Redis: every event crosses
//!   Redis to reach them, once;
//! - `local_delivery`: a bridge's `local_delivery()`, which hands what the store vouches for to the instance's own
//!   subscribers (it needs no Redis).
//!
//! The bridge's fixtures start a throwaway `redis-server` per test (skipped with one line where it is not installed;
//! a failure under CI). What only the bridge does (signatures, reconnecting, catching up) is tested in
//! tests/bridge.rs.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use gateway_core::conformance::event::{EventPublisherFixture, EventSubscriber, Heard};
use gateway_core::{EventPublisher, Topic};
use gateway_pubsub::{Bus, Received, Subscription};

/// What the fixtures' buses hold per subscriber: small, so that falling behind takes a few events.
const CAPACITY: usize = 4;

/// A subscription of a bus, as the suite reads it.
struct Listener(Subscription);

impl EventSubscriber for Listener {
    async fn next(&mut self, patience: Duration) -> Option<Heard> {
        match tokio::time::timeout(patience, self.0.recv()).await.ok()? {
            Received::Event(event) => Some(Heard::Event { id: event.id().to_owned(), json: event.json().to_owned() }),
            Received::Lagged(missed) => Some(Heard::Missed(missed)),
            Received::Closed => panic!("the bus of a subscription closed"),
        }
    }
}

/// The in-process bus: what it publishes is in its subscribers' queues before `publish` returns.
struct InProcess(Bus);

impl EventPublisherFixture for InProcess {
    type Subscriber = Listener;

    fn publisher(&self) -> &dyn EventPublisher {
        &self.0
    }

    fn subscribe(&self, topic: &Topic) -> Listener {
        Listener(self.0.subscribe(topic))
    }

    fn capacity(&self) -> Option<usize> {
        Some(CAPACITY)
    }

    async fn settle(&self) {}
}

mod bus {
    use super::*;

    gateway_core::event_publisher_conformance!(Some(Box::new(InProcess(Bus::new(CAPACITY)))));
}

#[cfg(feature = "redis")]
mod bridged {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use gateway_core::conformance::event::PATIENCE;
    use gateway_core::{AgentId, BackgroundLoop, Event, EventPayload, PublishError, SystemClock};
    use gateway_pubsub::bridge::{BridgeConfig, BridgeCounters, BridgePorts, ClusterKeys, RedisBridge};
    use gateway_testkit::redis::RedisServer;
    use time::OffsetDateTime;
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use super::*;

    const SECRET: &[u8] = b"the cluster secret of the conformance tests";
    /// How long the counters must stay still before the bridges count as settled.
    const QUIET: Duration = Duration::from_millis(100);

    /// Where the fixture's subscribers are.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum Side {
        /// On the instance that publishes.
        Local,
        /// On the other instance.
        Remote,
    }

    /// Two instances' bridges on one Redis; the rules publish through the first.
    pub(crate) struct Bridged {
        publisher: Counted,
        other: RedisBridge,
        side: Side,
        /// Events the first instance sent that never came back to it, and that never reached the other: the warm-up
        /// markers sent before the subscriptions took hold.
        lost: (u64, u64),
        shutdown: CancellationToken,
        _redis: RedisServer,
    }

    /// The bridge under test, counting what is published through it, so that `settle` knows when its queue is
    /// empty.
    #[derive(Debug)]
    struct Counted {
        bridge: RedisBridge,
        published: AtomicU64,
    }

    impl EventPublisher for Counted {
        fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
            self.published.fetch_add(1, Ordering::SeqCst);
            self.bridge.publish(topic, event)
        }

        fn may_deliver(&self, topic: &Topic) -> bool {
            self.bridge.may_deliver(topic)
        }
    }

    fn start(name: &str, redis: &RedisServer, shutdown: &CancellationToken) -> RedisBridge {
        let ports = BridgePorts {
            bus: Bus::new(CAPACITY),
            redis: redis::Client::open(redis.url()).unwrap(),
            clock: Arc::new(SystemClock),
        };
        let config = BridgeConfig {
            reconnect_initial: Duration::from_millis(20),
            reconnect_max: Duration::from_millis(200),
            ..BridgeConfig::new(name, ClusterKeys::new(SECRET, None).unwrap())
        };
        let bridge = RedisBridge::new(ports, config).unwrap();
        tokio::spawn({
            let (bridge, shutdown) = (bridge.clone(), shutdown.clone());
            async move { bridge.run(shutdown).await }
        });
        bridge
    }

    /// Two bridges, subscribed, that have passed a marker from the first to the second and back to the first; `None`
    /// where `redis-server` is not installed.
    pub(crate) async fn bridged(test: &str, side: Side) -> Option<Bridged> {
        let redis = RedisServer::start_or_skip(test)?;
        let shutdown = CancellationToken::new();
        let bridge = start("gw-a", &redis, &shutdown);
        let other = start("gw-b", &redis, &shutdown);
        for instance in [&bridge, &other] {
            let mut status = instance.status();
            tokio::time::timeout(PATIENCE, status.wait_for(|status| status.subscribed)).await.unwrap().unwrap();
        }
        let publisher = Counted { bridge, published: AtomicU64::new(0) };
        let warm_up = Topic::AgentScheduled(AgentId::new("warm-up").unwrap());
        let mut arrived = other.bus().subscribe(&warm_up);
        let deadline = Instant::now() + PATIENCE;
        for n in 0.. {
            assert!(Instant::now() < deadline, "no marker crossed the bridge within {PATIENCE:?}");
            let marker = Event::new(EventPayload::WebhookSignatureFailure { webhook_id: n }, OffsetDateTime::now_utc());
            publisher.publish(&warm_up, &marker).unwrap();
            let crossed = tokio::time::timeout(QUIET, arrived.recv()).await.is_ok();
            if crossed && publisher.bridge.counters().skipped_own > 0 {
                break;
            }
        }
        let mut fixture = Bridged { publisher, other, side, lost: (0, 0), shutdown, _redis: redis };
        fixture.quiet().await;
        let (sender, receiver) = fixture.counters();
        fixture.lost = (sender.sent - sender.skipped_own, sender.sent - receiver.received - receiver.skipped_seen);
        Some(fixture)
    }

    impl Bridged {
        fn counters(&self) -> (BridgeCounters, BridgeCounters) {
            (self.publisher.bridge.counters(), self.other.counters())
        }

        /// Waits until everything published went out to Redis and the counters stayed still for [`QUIET`].
        async fn quiet(&self) {
            let deadline = Instant::now() + PATIENCE;
            let mut last = None;
            loop {
                let now = self.counters();
                let (sender, _) = &now;
                let published = self.publisher.published.load(Ordering::SeqCst);
                let drained = sender.sent + sender.dropped_full + sender.send_failed == published;
                if drained && last.as_ref() == Some(&now) {
                    return;
                }
                assert!(Instant::now() < deadline, "the bridges did not settle within {PATIENCE:?}: {now:?}");
                last = Some(now);
                tokio::time::sleep(QUIET).await;
            }
        }
    }

    impl Drop for Bridged {
        fn drop(&mut self) {
            self.shutdown.cancel();
        }
    }

    impl EventPublisherFixture for Bridged {
        type Subscriber = Listener;

        fn publisher(&self) -> &dyn EventPublisher {
            &self.publisher
        }

        fn subscribe(&self, topic: &Topic) -> Listener {
            let instance = match self.side {
                Side::Local => &self.publisher.bridge,
                Side::Remote => &self.other,
            };
            Listener(instance.bus().subscribe(topic))
        }

        fn capacity(&self) -> Option<usize> {
            Some(CAPACITY)
        }

        /// Everything sent came back to the sender (and was skipped as its own) and reached the other instance.
        async fn settle(&self) {
            let deadline = Instant::now() + PATIENCE;
            loop {
                self.quiet().await;
                let (sender, receiver) = self.counters();
                let echoed = sender.sent - sender.skipped_own == self.lost.0;
                let crossed = sender.sent - receiver.received - receiver.skipped_seen == self.lost.1;
                if echoed && crossed {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "not everything crossed within {PATIENCE:?}: {sender:?}, {receiver:?}"
                );
            }
        }
    }
}

/// A bridge's local delivery, its subscribers on the bridge's bus. The bridge's loop does not run: local delivery
/// never touches Redis.
#[cfg(feature = "redis")]
struct LocalDelivery(gateway_pubsub::bridge::LocalDelivery, Bus);

#[cfg(feature = "redis")]
impl LocalDelivery {
    fn new() -> Box<Self> {
        use gateway_pubsub::bridge::{BridgeConfig, BridgePorts, ClusterKeys, RedisBridge};
        let bus = Bus::new(CAPACITY);
        let ports = BridgePorts {
            bus: bus.clone(),
            // Nothing listens there, and nothing connects: the loop that would is not run.
            redis: redis::Client::open("redis://127.0.0.1:1/").unwrap(),
            clock: std::sync::Arc::new(gateway_core::SystemClock),
        };
        let keys = ClusterKeys::new(b"the cluster secret of the conformance tests", None).unwrap();
        let bridge = RedisBridge::new(ports, BridgeConfig::new("gw-a", keys)).unwrap();
        Box::new(Self(bridge.local_delivery(), bus))
    }
}

#[cfg(feature = "redis")]
impl EventPublisherFixture for LocalDelivery {
    type Subscriber = Listener;

    fn publisher(&self) -> &dyn EventPublisher {
        &self.0
    }

    fn subscribe(&self, topic: &Topic) -> Listener {
        Listener(self.1.subscribe(topic))
    }

    fn capacity(&self) -> Option<usize> {
        Some(CAPACITY)
    }

    async fn settle(&self) {}
}

#[cfg(feature = "redis")]
mod local_delivery {
    use super::*;

    gateway_core::event_publisher_conformance!(Some(LocalDelivery::new()));
}

#[cfg(feature = "redis")]
mod bridge_local {
    use super::bridged::{Side, bridged};

    gateway_core::event_publisher_conformance!(bridged(module_path!(), Side::Local).await.map(Box::new));
}

#[cfg(feature = "redis")]
mod bridge_remote {
    use super::bridged::{Side, bridged};

    gateway_core::event_publisher_conformance!(bridged(module_path!(), Side::Remote).await.map(Box::new));
}
