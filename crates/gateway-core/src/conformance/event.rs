//! Rules every [`EventPublisher`] must keep towards the subscribers it serves: publishing with no subscriber is no
//! error; a subscriber of a topic receives each event published on it after it subscribed, once, in order, as it
//! was published (its id and its JSON), and nothing of other topics; every subscriber of the topic receives it; a
//! subscriber that falls behind is told how many events it missed and then receives the newest; publishing never
//! waits for a subscriber that does not read; and `may_deliver` never says no while someone listens.
//!
//! The port has no `subscribe`: subscribers are the implementation's (the bus's subscriptions, which the event
//! streams read), so the fixture makes them ([`EventPublisherFixture::subscribe`]), where its consumers would; for a
//! bridge between instances that may be another instance, where an event arrives a moment later
//! ([`EventPublisherFixture::settle`]). The rules are async: the suite's macro runs each on a runtime of its own.
//!
//! Not a rule of the port: publishing an event id a second time. The bus delivers it again and the bridge once per
//! id (it deduplicates what crosses instances); consumers deduplicate on ids ([`crate::Event::id`]).

use std::future::Future;
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::{AgentId, Event, EventPayload, EventPublisher, Topic};

/// How a rule gets the implementation under test and its subscribers.
pub trait EventPublisherFixture {
    type Subscriber: EventSubscriber;

    /// The implementation under test.
    fn publisher(&self) -> &dyn EventPublisher;

    /// A subscriber of `topic` from now on, made where the implementation's consumers subscribe.
    fn subscribe(&self, topic: &Topic) -> Self::Subscriber;

    /// How many events a subscriber may fall behind by without missing any (at least 2); `None` when it never
    /// misses any (a recorder).
    fn capacity(&self) -> Option<usize>;

    /// Returns once every event published so far has reached every subscriber it will reach (at once in one
    /// process; an event that crosses to another instance takes a moment).
    fn settle(&self) -> impl Future<Output = ()>;
}

/// One subscriber, as a rule reads it.
pub trait EventSubscriber {
    /// What the subscriber gets next, waiting at most `patience` for it (zero: only what has arrived); `None` when
    /// nothing came.
    fn next(&mut self, patience: Duration) -> impl Future<Output = Option<Heard>>;
}

/// What a subscriber gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// An event: its id and its JSON ([`Event::to_json`], what the streams write).
    Event { id: String, json: String },
    /// The subscriber fell behind and this many events were dropped for it.
    Missed(u64),
}

impl Heard {
    /// What a subscriber gets for `event` when it receives it.
    pub fn event(event: &Event) -> Self {
        Self::Event { id: event.id.clone(), json: event.to_json() }
    }
}

/// How long a rule waits for an event it expects.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Events that differ by `n`, each with an id of its own (the same id again is not a rule, see the module).
fn event(n: i64) -> Event {
    let at = OffsetDateTime::from_unix_timestamp(1_771_761_600 + n).expect("a valid instant");
    Event::with_id(format!("conformance-{n}-{}", unique()), EventPayload::WebhookSignatureFailure { webhook_id: n }, at)
}

/// Tells apart the events of rules running at once against one shared implementation (a bridge's Redis).
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn agent_topic(id: &str) -> Topic {
    Topic::AgentScheduled(AgentId::new(id).expect("a valid agent id"))
}

fn publish<F: EventPublisherFixture + ?Sized>(fixture: &F, topic: &Topic, event: &Event) {
    fixture.publisher().publish(topic, event).unwrap_or_else(|error| panic!("publishing {}: {error}", event.id));
}

/// Expects `events`, in order, then nothing more once everything published has arrived.
async fn expect_exactly<F: EventPublisherFixture + ?Sized>(
    fixture: &F,
    subscriber: &mut F::Subscriber,
    events: &[&Event],
    who: &str,
) {
    for (n, expected) in events.iter().enumerate() {
        let heard = subscriber.next(PATIENCE).await;
        assert_eq!(heard, Some(Heard::event(expected)), "{who}: event {} of {}", n + 1, events.len());
    }
    fixture.settle().await;
    let more = subscriber.next(Duration::ZERO).await;
    assert_eq!(more, None, "{who}: after the {} expected events", events.len());
}

/// Publishing on a topic nobody listens to succeeds (and reaches nobody).
pub async fn publishing_without_subscribers_is_no_error<F: EventPublisherFixture + ?Sized>(fixture: &F) {
    for n in 0..3 {
        publish(fixture, &Topic::Agents, &event(n));
    }
    fixture.settle().await;
    let mut late = fixture.subscribe(&Topic::Agents);
    expect_exactly(fixture, &mut late, &[], "a subscriber that came after").await;
}

/// A subscriber receives every event of its topic once, in the order published, as published.
pub async fn a_subscriber_receives_each_event_of_its_topic_once_in_order<F: EventPublisherFixture + ?Sized>(
    fixture: &F,
) {
    let mut subscriber = fixture.subscribe(&Topic::Webhooks);
    // As many as it holds without falling behind, which is another rule.
    let count = fixture.capacity().map_or(5, |capacity| capacity.min(5));
    let events: Vec<Event> = (1..=i64::try_from(count).expect("a small count")).map(event).collect();
    for published in &events {
        publish(fixture, &Topic::Webhooks, published);
    }
    expect_exactly(fixture, &mut subscriber, &events.iter().collect::<Vec<_>>(), "the subscriber").await;
}

/// A subscriber receives nothing of the topics it did not subscribe to, however close their names.
pub async fn subscribers_hear_only_their_topic<F: EventPublisherFixture + ?Sized>(fixture: &F) {
    let (agent_a, agent_b) = (agent_topic("agent-a"), agent_topic("agent-b"));
    let mut of_a = fixture.subscribe(&agent_a);
    let mut of_webhooks = fixture.subscribe(&Topic::Webhooks);
    let (for_a, for_webhooks, for_b) = (event(1), event(2), event(3));
    publish(fixture, &agent_a, &for_a);
    publish(fixture, &Topic::Webhooks, &for_webhooks);
    publish(fixture, &agent_b, &for_b);
    expect_exactly(fixture, &mut of_a, &[&for_a], "agent-a's subscriber").await;
    expect_exactly(fixture, &mut of_webhooks, &[&for_webhooks], "the webhooks subscriber").await;
}

/// Every subscriber of a topic receives every event of it.
pub async fn every_subscriber_of_a_topic_receives_every_event<F: EventPublisherFixture + ?Sized>(fixture: &F) {
    let mut subscribers: Vec<_> = (0..3).map(|_| fixture.subscribe(&Topic::Messages)).collect();
    let events = [event(1), event(2)];
    for published in &events {
        publish(fixture, &Topic::Messages, published);
    }
    for (n, subscriber) in subscribers.iter_mut().enumerate() {
        expect_exactly(fixture, subscriber, &[&events[0], &events[1]], &format!("subscriber {n}")).await;
    }
}

/// A subscriber receives what is published after it subscribed, not what was published before (what it needs of
/// the past, a stream replays from the store).
pub async fn a_subscriber_hears_only_what_is_published_after_it_subscribed<F: EventPublisherFixture + ?Sized>(
    fixture: &F,
) {
    let mut early = fixture.subscribe(&Topic::Agents);
    let before = event(1);
    publish(fixture, &Topic::Agents, &before);
    fixture.settle().await;
    let mut late = fixture.subscribe(&Topic::Agents);
    let after = event(2);
    publish(fixture, &Topic::Agents, &after);
    expect_exactly(fixture, &mut late, &[&after], "the subscriber that came between").await;
    expect_exactly(fixture, &mut early, &[&before, &after], "the subscriber that was there first").await;
}

/// A subscriber that does not read while more events than its capacity are published is told how many it missed,
/// then receives the newest ones in order (at least its capacity of them), and then keeps up again. One without a
/// capacity misses nothing.
pub async fn a_subscriber_that_falls_behind_is_told_how_many_it_missed<F: EventPublisherFixture + ?Sized>(fixture: &F) {
    let capacity = fixture.capacity();
    let mut slow = fixture.subscribe(&Topic::Messages);
    let count = capacity.map_or(20, |capacity| capacity * 4);
    let events: Vec<Event> = (0..count).map(|n| event(i64::try_from(n).expect("a small count"))).collect();
    for published in &events {
        publish(fixture, &Topic::Messages, published);
    }
    fixture.settle().await;
    let Some(capacity) = capacity else {
        return expect_exactly(fixture, &mut slow, &events.iter().collect::<Vec<_>>(), "a subscriber of a recorder")
            .await;
    };
    let missed = match slow.next(PATIENCE).await {
        Some(Heard::Missed(missed)) => usize::try_from(missed).expect("a small count"),
        other => panic!("{count} events past a capacity of {capacity}: the subscriber first heard {other:?}"),
    };
    assert!(missed > 0 && missed <= count - capacity, "missed {missed} of {count} with a capacity of {capacity}");
    let newest: Vec<&Event> = events[missed..].iter().collect();
    expect_exactly(fixture, &mut slow, &newest, "the subscriber that fell behind").await;
    let next = event(-1);
    publish(fixture, &Topic::Messages, &next);
    expect_exactly(fixture, &mut slow, &[&next], "the subscriber once it caught up").await;
}

/// Publishing to a subscriber that never reads returns at once, however many events it falls behind by: no
/// publisher (a request handler, a timed loop) ever waits for a stream.
pub async fn publishing_never_waits_for_a_subscriber_that_does_not_read<F: EventPublisherFixture + ?Sized>(
    fixture: &F,
) {
    let _idle = fixture.subscribe(&Topic::Messages);
    let started = Instant::now();
    for n in 0..5_000 {
        publish(fixture, &Topic::Messages, &event(n));
    }
    let took = started.elapsed();
    assert!(took < PATIENCE, "5,000 events to a subscriber that does not read took {took:?}");
}

/// `may_deliver` is `true` while anyone subscribes to the topic: a publisher that skips building an event on
/// `false` must never skip one a subscriber waits for.
pub async fn may_deliver_is_true_while_a_subscriber_listens<F: EventPublisherFixture + ?Sized>(fixture: &F) {
    let topic = agent_topic("agent-listened-to");
    let _subscriber = fixture.subscribe(&topic);
    assert!(fixture.publisher().may_deliver(&topic), "may_deliver with a subscriber of the topic");
}
