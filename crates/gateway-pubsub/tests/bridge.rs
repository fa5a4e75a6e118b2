//! The event bridge between two instances over a real Redis (a throwaway `redis-server` per test).
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use gateway_core::{AgentId, BackgroundLoop, ClusterId, Event, EventPayload, EventPublisher, ManualClock, Topic};
use gateway_pubsub::bridge::{BridgeConfig, BridgePorts, BridgeStatus, ClusterKeys, OUTBOUND_CAPACITY, RedisBridge};
use gateway_pubsub::{Bus, Received, Subscription};
use gateway_testkit::redis::RedisServer;
use time::macros::datetime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(15);
const SECRET: &[u8] = b"the cluster secret of these tests";

struct Instance {
    bridge: RedisBridge,
    clock: ManualClock,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Instance {
    fn start(name: &str, redis: &RedisServer) -> Self {
        Self::start_with_secret(name, redis, SECRET)
    }

    fn start_with_secret(name: &str, redis: &RedisServer, secret: &[u8]) -> Self {
        Self::start_with(name, redis, secret, Bus::default())
    }

    fn start_with(name: &str, redis: &RedisServer, secret: &[u8], bus: Bus) -> Self {
        let clock = ManualClock::at_fixed_start();
        let ports =
            BridgePorts { bus, redis: redis::Client::open(redis.url()).unwrap(), clock: Arc::new(clock.clone()) };
        let config = BridgeConfig {
            reconnect_initial: Duration::from_millis(20),
            reconnect_max: Duration::from_millis(200),
            keepalive_interval: Duration::from_millis(500),
            command_timeout: Duration::from_millis(500),
            ..BridgeConfig::new(name, ClusterKeys::new(secret, None).unwrap())
        };
        let bridge = RedisBridge::new(ports, config).unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let (bridge, shutdown) = (bridge.clone(), shutdown.clone());
            async move { bridge.run(shutdown).await }
        });
        Self { bridge, clock, shutdown, task }
    }

    fn subscribe(&self, topic: &Topic) -> Subscription {
        self.bridge.bus().subscribe(topic)
    }

    async fn status_until(&self, what: &str, wanted: impl Fn(&BridgeStatus) -> bool) -> BridgeStatus {
        let mut status = self.bridge.status();
        let waited = tokio::time::timeout(PATIENCE, status.wait_for(|status| wanted(status))).await;
        waited.unwrap_or_else(|_| panic!("{what}: not within {PATIENCE:?}")).unwrap().clone()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

fn event(id: &str) -> Event {
    Event::with_id(id, EventPayload::WebhookSignatureFailure { webhook_id: 1 }, datetime!(2026-02-22 12:00:00 UTC))
}

/// The next event's id, past any late copy of a warm-up marker.
async fn next_id(subscription: &mut Subscription) -> String {
    loop {
        match tokio::time::timeout(PATIENCE, subscription.recv()).await.unwrap() {
            Received::Event(event) if event.id().starts_with("warm-") => continue,
            Received::Event(event) => return event.id().to_owned(),
            other => panic!("expected an event, got {other:?}"),
        }
    }
}

/// Publishes `marker` on `from` until `subscription` receives it (pub/sub is at most once, and a subscription
/// may still be settling), and returns what it received before the marker.
async fn until_marker(from: &RedisBridge, topic: &Topic, subscription: &mut Subscription, marker: &str) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    let mut before = Vec::new();
    let mut attempt = 0;
    loop {
        assert!(Instant::now() < deadline, "{marker} never arrived");
        let id = format!("{marker}-{attempt}");
        from.publish(topic, &event(&id)).unwrap();
        attempt += 1;
        loop {
            match tokio::time::timeout(Duration::from_millis(200), subscription.recv()).await {
                Ok(Received::Event(event)) if event.id().starts_with(marker) => return before,
                Ok(Received::Event(event)) => before.push(event.id().to_owned()),
                Ok(other) => panic!("expected an event, got {other:?}"),
                Err(_) => break,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_published_on_one_instance_reaches_the_other_once_and_its_own_subscribers_once() {
    let Some(redis) = RedisServer::start_or_skip(
        "an_event_published_on_one_instance_reaches_the_other_once_and_its_own_subscribers_once",
    ) else {
        return;
    };
    let (a, b) = (Instance::start("gw-a", &redis), Instance::start("gw-b", &redis));
    let reminders = Topic::AgentScheduled(AgentId::new("agent-7").unwrap());
    let (mut on_a, mut on_b) = (a.subscribe(&reminders), b.subscribe(&reminders));
    a.status_until("a subscribed", |status| status.subscribed).await;
    b.status_until("b subscribed", |status| status.subscribed).await;
    // Both subscriptions work once a marker from each side went through.
    until_marker(&a.bridge, &reminders, &mut on_b, "warm-a").await;
    until_marker(&b.bridge, &reminders, &mut on_a, "warm-b").await;
    let (mut on_a, mut on_b) = (a.subscribe(&reminders), b.subscribe(&reminders));

    a.bridge.publish(&reminders, &event("e-1")).unwrap();
    assert_eq!(next_id(&mut on_a).await, "e-1");
    assert_eq!(next_id(&mut on_b).await, "e-1");
    // Nothing else came before the next event: one copy each, the local one not doubled by Redis's echo.
    a.bridge.publish(&reminders, &event("e-2")).unwrap();
    assert_eq!(next_id(&mut on_a).await, "e-2");
    assert_eq!(next_id(&mut on_b).await, "e-2");
    let echoes = a.bridge.counters().skipped_own;
    assert!(echoes >= 2, "its own events came back from Redis and were skipped ({echoes})");
    assert!(b.bridge.counters().received >= 2);
    // Topics stay apart across instances too.
    let mut messages_on_b = b.subscribe(&Topic::Messages);
    a.bridge.publish(&Topic::Webhooks, &event("other-topic")).unwrap();
    assert!(until_marker(&a.bridge, &Topic::Messages, &mut messages_on_b, "m").await.is_empty());
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_id_published_by_both_instances_is_delivered_once_on_each() {
    let Some(redis) = RedisServer::start_or_skip("an_event_id_published_by_both_instances_is_delivered_once_on_each")
    else {
        return;
    };
    let (a, b) = (Instance::start("gw-a", &redis), Instance::start("gw-b", &redis));
    let (mut on_a, mut on_b) = (a.subscribe(&Topic::Agents), b.subscribe(&Topic::Agents));
    until_marker(&a.bridge, &Topic::Agents, &mut on_b, "warm-a").await;
    until_marker(&b.bridge, &Topic::Agents, &mut on_a, "warm-b").await;
    // A reminder re-fired by a new leader keeps its id: both instances publish it.
    b.bridge.publish(&Topic::Agents, &event("fire-1")).unwrap();
    a.bridge.publish(&Topic::Agents, &event("fire-1")).unwrap();
    let seen_on_b = until_marker(&a.bridge, &Topic::Agents, &mut on_b, "after-b").await;
    let seen_on_a = until_marker(&b.bridge, &Topic::Agents, &mut on_a, "after-a").await;
    let fires = |seen: &[String]| seen.iter().filter(|id| *id == "fire-1").count();
    assert_eq!((fires(&seen_on_a), fires(&seen_on_b)), (1, 1), "{seen_on_a:?} {seen_on_b:?}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_reconnects_after_a_redis_restart_and_signals_it() {
    let Some(mut redis) = RedisServer::start_or_skip("the_bridge_reconnects_after_a_redis_restart_and_signals_it")
    else {
        return;
    };
    let (a, b) = (Instance::start("gw-a", &redis), Instance::start("gw-b", &redis));
    let mut on_b = b.subscribe(&Topic::Messages);
    until_marker(&a.bridge, &Topic::Messages, &mut on_b, "before").await;
    assert_eq!(b.bridge.status().borrow().reconnects, 0);
    let sent_before = a.bridge.counters().sent;
    redis.stop();
    b.status_until("the loss noticed", |status| !status.subscribed).await;
    let restarted_at = datetime!(2026-02-22 12:05:00 UTC);
    // Both clocks: messages sent more than a minute ago (by the sender's clock, against the receiver's) are refused.
    b.clock.set(restarted_at);
    a.clock.set(restarted_at);
    redis.start_again().unwrap();
    let status = b.status_until("subscribed again", |status| status.subscribed && status.reconnects >= 1).await;
    assert_eq!(status.reconnects, 1);
    assert_eq!(status.last_reconnect_at, Some(restarted_at));
    // And events flow again, from a publisher whose connection was reset too.
    until_marker(&a.bridge, &Topic::Messages, &mut on_b, "after").await;
    // (The counter moves once Redis has acknowledged the batch, which may be just after B received it.)
    let deadline = Instant::now() + PATIENCE;
    while a.bridge.counters().sent <= sent_before {
        assert!(Instant::now() < deadline, "the sender never counted a batch after the restart");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.stop().await;
    b.stop().await;
}

/// Someone who can publish on Redis but has no cluster secret: an unsigned message in the old format, a copy of a
/// signed one moved to another agent's channel, and a message signed with another secret all reach nobody, and are
/// counted; a message of the cluster still goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_messages_on_redis_reach_no_subscriber_and_are_counted() {
    let Some(redis) = RedisServer::start_or_skip("forged_messages_on_redis_reach_no_subscriber_and_are_counted") else {
        return;
    };
    let (a, b) = (Instance::start("gw-a", &redis), Instance::start("gw-b", &redis));
    let stranger = Instance::start_with_secret("gw-x", &redis, b"another secret that is long enough");
    let victim = Topic::AgentScheduled(AgentId::new("agent-7").unwrap());
    let mut on_b = b.subscribe(&victim);
    b.status_until("b subscribed", |status| status.subscribed).await;
    until_marker(&a.bridge, &victim, &mut on_b, "warm-a").await;
    let rejected_before = b.bridge.counters().rejected;

    let mut raw = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let channel = format!("gateway:events:{victim}");
    let unsigned = "1\ngw-a\nreminder\n1:2026-02-22T12:00:00Z\n{\"event_type\":\"reminder\"}";
    let _: i64 = redis::cmd("PUBLISH").arg(&channel).arg(unsigned).query_async(&mut raw).await.unwrap();
    stranger.bridge.publish(&victim, &event("from-a-stranger")).unwrap();
    // A genuine message captured on another agent's channel and published again on this one.
    let mut capture = redis::Client::open(redis.url()).unwrap().get_async_pubsub().await.unwrap();
    capture.subscribe("gateway:events:agent:agent-8:scheduled").await.unwrap();
    let other = Topic::AgentScheduled(AgentId::new("agent-8").unwrap());
    let mut captured = capture.on_message();
    let genuine = loop {
        a.bridge.publish(&other, &event(&format!("genuine-{}", Instant::now().elapsed().as_nanos()))).unwrap();
        if let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(200), captured.next()).await {
            break message.get_payload_bytes().to_vec();
        }
    };
    drop(captured);
    let _: i64 = redis::cmd("PUBLISH").arg(&channel).arg(genuine).query_async(&mut raw).await.unwrap();

    let seen = until_marker(&a.bridge, &victim, &mut on_b, "after").await;
    assert!(seen.is_empty(), "forged events reached a subscriber: {seen:?}");
    let deadline = Instant::now() + PATIENCE;
    while b.bridge.counters().rejected < rejected_before + 3 {
        assert!(Instant::now() < deadline, "rejected: {:?}", b.bridge.counters());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.stop().await;
    b.stop().await;
    stranger.stop().await;
}

/// An eviction pass announcing far more agents than the queue toward Redis holds (issue 18: 100,000 at once lost
/// most of them on the other instances): published paced, as the heartbeat manager does, every `agent_evicted`
/// reaches a subscriber on the other instance, and none is dropped on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_burst_far_larger_than_the_queue_reaches_the_other_instance_whole() {
    const BURST: usize = 5 * OUTBOUND_CAPACITY;
    let Some(redis) =
        RedisServer::start_or_skip("a_paced_burst_far_larger_than_the_queue_reaches_the_other_instance_whole")
    else {
        return;
    };
    // B's subscriber may fall behind by the whole burst: what is tested is what crosses the bridge, not how fast
    // one subscriber reads (a slow one is told what it missed, as on one instance).
    let a = Instance::start("gw-a", &redis);
    let b = Instance::start_with("gw-b", &redis, SECRET, Bus::new(BURST + 64));
    let mut on_b = b.subscribe(&Topic::Agents);
    until_marker(&a.bridge, &Topic::Agents, &mut on_b, "warm-a").await;

    let cluster = ClusterId::new("cluster-west").unwrap();
    let at = datetime!(2026-02-22 12:00:00 UTC);
    for n in 0..BURST {
        let payload = EventPayload::AgentEvicted {
            agent_id: AgentId::new(format!("agent-{n}")).unwrap(),
            cluster_id: cluster.clone(),
            last_seen: at,
        };
        a.bridge.publish_paced(&Topic::Agents, &Event::with_id(format!("evicted-{n}"), payload, at)).await.unwrap();
    }
    let mut received = HashSet::new();
    while received.len() < BURST {
        match tokio::time::timeout(PATIENCE, on_b.recv()).await {
            Ok(Received::Event(event)) if event.id().starts_with("evicted-") => {
                assert_eq!(event.event_type(), "agent_evicted");
                assert!(received.insert(event.id().to_owned()), "{} twice", event.id());
            }
            Ok(Received::Event(_)) => {}
            Ok(other) => panic!("expected an event, got {other:?}"),
            Err(_) => panic!(
                "{} of {BURST} agent_evicted reached the other instance; the sender: {:?}",
                received.len(),
                a.bridge.counters()
            ),
        }
    }
    assert_eq!(a.bridge.counters().dropped_full, 0);
    a.stop().await;
    b.stop().await;
}
