#![doc = include_str!("../README.md")]

#[cfg(feature = "redis")]
pub mod bridge;
#[cfg(feature = "stream")]
pub mod stream;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use gateway_core::runtime::sync::lock;
use gateway_core::{Event, EventPublisher, PublishError, Topic};
use tokio::sync::broadcast;

/// Events a subscriber may fall behind by before it starts losing them.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;

/// An event as subscribers receive it: serialized once, straight into its Server-Sent Events frame
/// (`id: …\nevent: …\ndata: <json>\n\n`), which every stream of the event then writes as it is: the frame is a
/// [`Bytes`], and handing it to another stream is a reference count, not a copy (docs/architecture.md, "Stream
/// memory"). The JSON is the frame's `data` line, so the event's text exists once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedEvent {
    id: String,
    event_type: &'static str,
    frame: Bytes,
    /// Where the JSON lies in `frame`.
    json: Range<usize>,
}

impl PublishedEvent {
    /// Serializes `event` into its frame.
    pub fn of(event: &Event) -> Self {
        let event_type = event.event_type();
        let mut frame = frame_head(&event.id, event_type, 256);
        let start = frame.len();
        // Serializing these plain structs cannot fail: every map key is a string and no Serialize impl errors.
        if serde_json::to_writer(&mut frame, event).is_err() {
            frame.truncate(start);
            frame.extend_from_slice(b"{}");
        }
        Self::finish(event.id.clone(), event_type, frame, start)
    }

    /// An event serialized elsewhere (another instance, through the bridge). `None` for an id with a line break,
    /// which no frame could carry. A line break in `json` can only be whitespace between tokens (JSON escapes
    /// those in strings): it becomes a space, so that the data stays one line.
    pub fn from_json(id: &str, event_type: &'static str, json: &str) -> Option<Self> {
        if id.contains(['\n', '\r']) {
            return None;
        }
        let mut frame = frame_head(id, event_type, json.len());
        let start = frame.len();
        frame.extend(json.bytes().map(|byte| if byte == b'\n' || byte == b'\r' { b' ' } else { byte }));
        Some(Self::finish(id.to_owned(), event_type, frame, start))
    }

    fn finish(id: String, event_type: &'static str, mut frame: Vec<u8>, start: usize) -> Self {
        let end = frame.len();
        frame.extend_from_slice(b"\n\n");
        Self { id, event_type, frame: Bytes::from(frame), json: start..end }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn event_type(&self) -> &'static str {
        self.event_type
    }

    /// The event as a JSON object.
    pub fn json(&self) -> &str {
        // Always valid: the frame was built from a `&str` or by serde_json, and ASCII framing around it.
        std::str::from_utf8(self.json_bytes()).unwrap_or_default()
    }

    pub fn json_bytes(&self) -> &[u8] {
        &self.frame[self.json.clone()]
    }

    /// The whole Server-Sent Events frame, shared by every stream that writes it (clone it: a reference count).
    pub fn frame(&self) -> &Bytes {
        &self.frame
    }
}

/// `id: <id>\nevent: <type>\ndata: `, with room for `json_len` more bytes and the closing blank line.
fn frame_head(id: &str, event_type: &str, json_len: usize) -> Vec<u8> {
    let mut frame = Vec::with_capacity(id.len() + event_type.len() + json_len + 24);
    for part in [b"id: ", id.as_bytes(), b"\nevent: ", event_type.as_bytes(), b"\ndata: "] {
        frame.extend_from_slice(part);
    }
    frame
}

/// What a subscriber gets next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    Event(Arc<PublishedEvent>),
    /// The subscriber was too slow and this many events were dropped for it.
    Lagged(u64),
    /// The bus is gone.
    Closed,
}

#[derive(Debug)]
struct BusInner {
    /// Keyed by the topic itself, so that publishing looks a topic up without formatting its name.
    topics: Mutex<HashMap<Topic, broadcast::Sender<Arc<PublishedEvent>>>>,
    capacity: usize,
}

/// The in-process bus. Cheap to clone; clones share topics.
#[derive(Debug, Clone)]
pub struct Bus {
    inner: Arc<BusInner>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new(DEFAULT_QUEUE_CAPACITY)
    }
}

impl Bus {
    /// A bus whose subscribers may each fall `capacity` events behind (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self { inner: Arc::new(BusInner { topics: Mutex::new(HashMap::new()), capacity: capacity.max(1) }) }
    }

    pub fn subscribe(&self, topic: &Topic) -> Subscription {
        let mut topics = lock(&self.inner.topics);
        let receiver = match topics.get(topic) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = broadcast::channel(self.inner.capacity);
                topics.insert(topic.clone(), sender);
                receiver
            }
        };
        Subscription { receiver, name: topic.to_string(), topic: topic.clone(), bus: Arc::clone(&self.inner) }
    }

    /// Subscribers of `topic` right now.
    pub fn subscriber_count(&self, topic: &Topic) -> usize {
        lock(&self.inner.topics).get(topic).map_or(0, broadcast::Sender::receiver_count)
    }

    /// Whether anyone listens on `topic` right now: a publisher that has to build its event first can skip
    /// that when nobody would receive it. (Someone subscribing just after gets the events after that, as ever.)
    pub fn has_subscribers(&self, topic: &Topic) -> bool {
        lock(&self.inner.topics).contains_key(topic)
    }

    /// Topics with at least one subscriber.
    pub fn topic_count(&self) -> usize {
        lock(&self.inner.topics).len()
    }

    /// Hands an event serialized already (by another instance, through the bridge) to `topic`'s subscribers.
    pub fn deliver(&self, topic: &Topic, event: Arc<PublishedEvent>) {
        let Some(sender) = lock(&self.inner.topics).get(topic).cloned() else { return };
        // An error only means the last subscriber left since the lookup; the event had no one to reach.
        let _ = sender.send(event);
    }
}

impl EventPublisher for Bus {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        let Some(sender) = lock(&self.inner.topics).get(topic).cloned() else {
            return Ok(());
        };
        // An error only means the last subscriber left since the lookup; the event had no one to reach.
        let _ = sender.send(Arc::new(PublishedEvent::of(event)));
        Ok(())
    }

    fn may_deliver(&self, topic: &Topic) -> bool {
        self.has_subscribers(topic)
    }
}

/// One subscriber's view of one topic. Dropping it unsubscribes.
#[derive(Debug)]
pub struct Subscription {
    receiver: broadcast::Receiver<Arc<PublishedEvent>>,
    name: String,
    topic: Topic,
    bus: Arc<BusInner>,
}

impl Subscription {
    pub async fn recv(&mut self) -> Received {
        match self.receiver.recv().await {
            Ok(event) => Received::Event(event),
            Err(broadcast::error::RecvError::Lagged(missed)) => Received::Lagged(missed),
            Err(broadcast::error::RecvError::Closed) => Received::Closed,
        }
    }

    pub fn topic(&self) -> &str {
        &self.name
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut topics = lock(&self.bus.topics);
        // Our own receiver is still alive here, so "only us" is a count of one. Checked under the map lock, so a
        // concurrent subscribe either happened before (count > 1) or will create a fresh topic after.
        if topics.get(&self.topic).is_some_and(|sender| sender.receiver_count() <= 1) {
            topics.remove(&self.topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use gateway_core::{AgentId, EventPayload};
    use time::macros::datetime;

    use super::*;

    fn event(n: i64) -> Event {
        Event::with_id(
            format!("e-{n}"),
            EventPayload::WebhookSignatureFailure { webhook_id: n },
            datetime!(2026-02-22 12:00:00 UTC),
        )
    }

    fn id_of(received: Received) -> String {
        match received {
            Received::Event(event) => event.id().to_owned(),
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn fans_out_to_every_subscriber_of_a_topic() {
        let bus = Bus::default();
        let mut first = bus.subscribe(&Topic::Webhooks);
        let mut second = bus.subscribe(&Topic::Webhooks);
        bus.publish(&Topic::Webhooks, &event(1)).unwrap();
        assert_eq!(id_of(first.recv().await), "e-1");
        assert_eq!(id_of(second.recv().await), "e-1");
    }

    #[tokio::test]
    async fn topics_are_isolated() {
        let bus = Bus::default();
        let agent = Topic::AgentScheduled(AgentId::new("a").unwrap());
        let mut webhooks = bus.subscribe(&Topic::Webhooks);
        let mut reminders = bus.subscribe(&agent);
        bus.publish(&agent, &event(1)).unwrap();
        bus.publish(&Topic::Webhooks, &event(2)).unwrap();
        assert_eq!(id_of(webhooks.recv().await), "e-2");
        assert_eq!(id_of(reminders.recv().await), "e-1");
        let other = Topic::AgentScheduled(AgentId::new("b").unwrap());
        assert_eq!(bus.subscriber_count(&other), 0);
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_what_it_missed_and_does_not_hold_back_others() {
        let bus = Bus::new(4);
        let mut slow = bus.subscribe(&Topic::Messages);
        let mut fast = bus.subscribe(&Topic::Messages);
        for n in 1..=10 {
            bus.publish(&Topic::Messages, &event(n)).unwrap();
            assert_eq!(id_of(fast.recv().await), format!("e-{n}"));
        }
        assert_eq!(slow.recv().await, Received::Lagged(6));
        for n in 7..=10 {
            assert_eq!(id_of(slow.recv().await), format!("e-{n}"));
        }
    }

    #[tokio::test]
    async fn events_are_serialized_once_with_their_type_and_id() {
        let bus = Bus::default();
        let mut subscription = bus.subscribe(&Topic::Webhooks);
        bus.publish(&Topic::Webhooks, &event(7)).unwrap();
        let Received::Event(published) = subscription.recv().await else { panic!("expected an event") };
        assert_eq!(published.event_type(), "webhook_signature_failure");
        assert!(published.json().contains(r#""webhook_id":7"#));
        let frame = std::str::from_utf8(published.frame()).unwrap();
        assert_eq!(frame, format!("id: e-7\nevent: webhook_signature_failure\ndata: {}\n\n", published.json()));
    }

    #[tokio::test]
    async fn every_subscriber_gets_the_same_frame_not_a_copy() {
        let bus = Bus::default();
        let mut subscriptions: Vec<_> = (0..8).map(|_| bus.subscribe(&Topic::Messages)).collect();
        bus.publish(&Topic::Messages, &event(1)).unwrap();
        let mut frames = Vec::new();
        for subscription in &mut subscriptions {
            let Received::Event(published) = subscription.recv().await else { panic!("expected an event") };
            frames.push(published.frame().clone());
        }
        assert!(frames.iter().all(|frame| frame.as_ptr() == frames[0].as_ptr() && frame.len() == frames[0].len()));
    }

    #[test]
    fn an_event_from_elsewhere_gets_a_one_line_data_field() {
        let published = PublishedEvent::from_json("e-1", "reminder", "{\"a\":\r\n1}").unwrap();
        assert_eq!(published.json(), "{\"a\":  1}");
        assert_eq!(&published.frame()[..], b"id: e-1\nevent: reminder\ndata: {\"a\":  1}\n\n");
        assert_eq!(PublishedEvent::from_json("e\r1", "reminder", "{}"), None);
        assert_eq!(PublishedEvent::from_json("e\n1", "reminder", "{}"), None);
    }

    #[test]
    fn publishing_without_subscribers_is_fine_and_unsubscribing_removes_the_topic() {
        let bus = Bus::default();
        bus.publish(&Topic::Agents, &event(1)).unwrap();
        assert_eq!(bus.topic_count(), 0);
        assert!(!bus.has_subscribers(&Topic::Agents));
        let first = bus.subscribe(&Topic::Agents);
        let second = bus.subscribe(&Topic::Agents);
        assert_eq!(bus.subscriber_count(&Topic::Agents), 2);
        assert!(bus.has_subscribers(&Topic::Agents) && !bus.has_subscribers(&Topic::Messages));
        assert!(bus.may_deliver(&Topic::Agents) && !bus.may_deliver(&Topic::Messages), "what publishers ask");
        drop(first);
        assert_eq!(bus.topic_count(), 1);
        drop(second);
        assert_eq!(bus.topic_count(), 0);
        assert!(!bus.has_subscribers(&Topic::Agents));
    }
}
