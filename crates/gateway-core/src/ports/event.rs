//! Topics, the events published on them (docs/api.md, "Events"), the [`EventPublisher`] port that publishes
//! them, and [`RecordingPublisher`], its in-memory implementation.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::ids::{AgentId, ClusterId};
use crate::intake::decision_log::DecisionLog;
use crate::ports::failure::FailureSwitch;
use crate::runtime::sync::lock;

/// A pub/sub topic. The names are part of the contract (docs/api.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Topic {
    /// `gateway:messages`: accepted DecisionLogs.
    Messages,
    /// `gateway:violations`: refused DecisionLogs (hash only).
    Violations,
    /// `gateway:webhooks`: delivery status, dead letters, signature failures.
    Webhooks,
    /// `gateway:agents`: evictions.
    Agents,
    /// `agent:<agent_id>:scheduled`: one agent's reminders.
    AgentScheduled(AgentId),
    /// `internal:scheduled-jobs`: jobs an instance that does not lead has just scheduled, for the leader to arm at
    /// once rather than at its next refill. Between instances only: no client may subscribe to it.
    ScheduledJobs,
    /// `internal:credential-revocations`: agent credentials just revoked, for every instance to drop from its cache
    /// of verified credentials at once. Between instances only: no client may subscribe to it.
    CredentialRevocations,
}

impl Topic {
    /// Parses a topic name; `None` for anything that is not one of the contract's topics.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "gateway:messages" => Some(Self::Messages),
            "gateway:violations" => Some(Self::Violations),
            "gateway:webhooks" => Some(Self::Webhooks),
            "gateway:agents" => Some(Self::Agents),
            _ => {
                let agent = name.strip_prefix("agent:")?.strip_suffix(":scheduled")?;
                AgentId::new(agent).ok().map(Self::AgentScheduled)
            }
        }
    }

    /// A topic name as instances exchange it: the contract's topics, and the internal ones.
    pub fn from_wire(name: &str) -> Option<Self> {
        match name {
            "internal:scheduled-jobs" => Some(Self::ScheduledJobs),
            "internal:credential-revocations" => Some(Self::CredentialRevocations),
            _ => Self::parse(name),
        }
    }

    /// `gateway:*` topics are the operator's; an agent's own reminder topic is not.
    pub fn is_operator_only(&self) -> bool {
        !matches!(self, Self::AgentScheduled(_))
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Messages => f.write_str("gateway:messages"),
            Self::Violations => f.write_str("gateway:violations"),
            Self::Webhooks => f.write_str("gateway:webhooks"),
            Self::Agents => f.write_str("gateway:agents"),
            Self::AgentScheduled(agent_id) => write!(f, "agent:{agent_id}:scheduled"),
            Self::ScheduledJobs => f.write_str("internal:scheduled-jobs"),
            Self::CredentialRevocations => f.write_str("internal:credential-revocations"),
        }
    }
}

/// One published event: `{"event_type", "id", "timestamp", ...fields}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Unique and stable: a redelivered event keeps its id, so consumers can deduplicate on it.
    pub id: String,
    #[serde(with = "crate::encoding::rfc3339::serde")]
    pub timestamp: OffsetDateTime,
    #[serde(flatten)]
    pub payload: EventPayload,
}

impl Event {
    /// An event with a fresh random id.
    pub fn new(payload: EventPayload, timestamp: OffsetDateTime) -> Self {
        Self { id: random_event_id(), timestamp, payload }
    }

    /// An event whose id is derived from what it reports, so publishing it twice yields the same id.
    pub fn with_id(id: impl Into<String>, payload: EventPayload, timestamp: OffsetDateTime) -> Self {
        Self { id: id.into(), timestamp, payload }
    }

    pub fn event_type(&self) -> &'static str {
        self.payload.event_type()
    }

    pub fn to_json(&self) -> String {
        // Serializing these plain structs cannot fail: every map key is a string and no Serialize impl errors.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

/// 128 random bits as hex.
/// 32 hex digits: 8 random bytes drawn once per process, then a per-process counter. Unique across processes and
/// restarts (a fresh random half each time) and within one (the counter), without a getrandom call per event:
/// drawing 16 random bytes per event was 40 % of a mass eviction's cost and 3 % of a DecisionLog's.
fn random_event_id() -> String {
    static PREFIX: std::sync::OnceLock<[u8; 8]> = std::sync::OnceLock::new();
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 8];
        // SystemRandom only fails when the OS has no entropy source at all; the clock then tells processes apart.
        if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_nanos());
            bytes.copy_from_slice(&(nanos as u64 ^ u64::from(std::process::id())).to_be_bytes());
        }
        bytes
    });
    let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(prefix);
    bytes[8..].copy_from_slice(&count.to_be_bytes());
    crate::encoding::hex::encode(&bytes)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event_type", rename_all = "snake_case")]
pub enum EventPayload {
    DecisionLog(Box<DecisionLog>),
    SchemaViolation {
        agent_id: String,
        capability_version: String,
        violation_reason: String,
        raw_payload_hash: String,
    },
    Reminder {
        job_id: i64,
        agent_id: AgentId,
        #[serde(with = "crate::encoding::rfc3339::serde")]
        scheduled_for: OffsetDateTime,
        payload: Map<String, Value>,
        fire_id: String,
        /// The leadership term the fire was published under (docs/agents.md, "Fencing").
        epoch: u64,
    },
    AgentEvicted {
        agent_id: AgentId,
        cluster_id: ClusterId,
        #[serde(with = "crate::encoding::rfc3339::serde")]
        last_seen: OffsetDateTime,
    },
    WebhookDeliveryStatus {
        delivery_id: i64,
        webhook_id: i64,
        session_id: String,
        status: String,
        attempt_count: i32,
        #[serde(with = "crate::encoding::rfc3339::serde::option")]
        next_retry_at: Option<OffsetDateTime>,
        error_detail: Option<String>,
    },
    WebhookDlq {
        delivery_id: i64,
        webhook_id: i64,
        session_id: String,
        attempt_count: i32,
        error_detail: Option<String>,
    },
    WebhookSignatureFailure {
        webhook_id: i64,
    },
    /// A config disabled after too many failed attempts in a row (issue 20): its deliveries are held.
    WebhookEndpointDisabled {
        webhook_id: i64,
        consecutive_failures: i64,
        disabled_reason: String,
    },
    /// On [`Topic::ScheduledJobs`] only: a job stored by an instance that does not lead, due at `next_fire_at`.
    JobScheduled {
        job_id: i64,
        #[serde(with = "crate::encoding::rfc3339::serde")]
        next_fire_at: OffsetDateTime,
    },
    /// On [`Topic::CredentialRevocations`] only: an agent credential that no longer authenticates anything.
    CredentialRevoked {
        credential_id: String,
    },
}

impl EventPayload {
    pub fn event_type(&self) -> &'static str {
        match self {
            Self::DecisionLog(_) => "decision_log",
            Self::SchemaViolation { .. } => "schema_violation",
            Self::Reminder { .. } => "reminder",
            Self::AgentEvicted { .. } => "agent_evicted",
            Self::WebhookDeliveryStatus { .. } => "webhook_delivery_status",
            Self::WebhookDlq { .. } => "webhook_dlq",
            Self::WebhookSignatureFailure { .. } => "webhook_signature_failure",
            Self::WebhookEndpointDisabled { .. } => "webhook_endpoint_disabled",
            Self::JobScheduled { .. } => "job_scheduled",
            Self::CredentialRevoked { .. } => "credential_revoked",
        }
    }
}

/// Why an event could not be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("publish failed: {0}")]
pub struct PublishError(pub String);

/// What [`EventPublisher::publish_paced`] returns.
pub type PacedPublish<'a> = Pin<Box<dyn Future<Output = Result<(), PublishError>> + Send + 'a>>;

/// Publishes events on topics. Publishing never waits for subscribers; having none is not an error.
pub trait EventPublisher: Send + Sync + fmt::Debug {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError>;

    /// [`publish`](Self::publish) for a background producer that can publish a burst (an eviction pass announcing
    /// a hundred thousand agents at once): where `publish` would drop the event for lack of room on its way (the
    /// bridge's bounded queue to the other instances), this waits until there is room, for a bounded time, and
    /// so paces the producer to what the way out carries. Only where waiting holds nobody up: never on a
    /// request's path, which calls `publish`. The default publishes at once: nothing here drops for lack of room.
    fn publish_paced<'a>(&'a self, topic: &'a Topic, event: &'a Event) -> PacedPublish<'a> {
        Box::pin(std::future::ready(self.publish(topic, event)))
    }

    /// Whether an event published on `topic` now could reach anyone: a publisher that would have to build its
    /// event first may skip that when this is `false`. `true` unless the publisher knows better (the in-process
    /// bus with no subscriber on the topic; never a bridge to other instances, where someone may listen).
    fn may_deliver(&self, _topic: &Topic) -> bool {
        true
    }
}

/// Records every published event in order. [`Self::failure`] makes publishing fail.
#[derive(Debug, Default)]
pub struct RecordingPublisher {
    events: Mutex<Vec<(Topic, Event)>>,
    pub failure: FailureSwitch,
}

impl RecordingPublisher {
    pub fn events(&self) -> Vec<(Topic, Event)> {
        lock(&self.events).clone()
    }

    pub fn on_topic(&self, topic: &Topic) -> Vec<Event> {
        lock(&self.events).iter().filter(|(on, _)| on == topic).map(|(_, event)| event.clone()).collect()
    }
}

impl EventPublisher for RecordingPublisher {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        self.failure.check().map_err(|error| PublishError(error.to_string()))?;
        lock(&self.events).push((topic.clone(), event.clone()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use time::macros::datetime;

    use super::*;
    use crate::conformance::event::{EventPublisherFixture, EventSubscriber, Heard};

    /// The recorder: a subscriber reads what was recorded on its topic since it subscribed, and misses nothing.
    #[derive(Debug, Default)]
    struct Recorder(Arc<RecordingPublisher>);

    #[derive(Debug)]
    struct Reader {
        recorder: Arc<RecordingPublisher>,
        topic: Topic,
        read: usize,
    }

    impl EventPublisherFixture for Recorder {
        type Subscriber = Reader;

        fn publisher(&self) -> &dyn EventPublisher {
            &*self.0
        }

        fn subscribe(&self, topic: &Topic) -> Reader {
            let read = self.0.on_topic(topic).len();
            Reader { recorder: Arc::clone(&self.0), topic: topic.clone(), read }
        }

        fn capacity(&self) -> Option<usize> {
            None
        }

        async fn settle(&self) {}
    }

    impl EventSubscriber for Reader {
        async fn next(&mut self, _patience: Duration) -> Option<Heard> {
            let event = self.recorder.on_topic(&self.topic).into_iter().nth(self.read)?;
            self.read += 1;
            Some(Heard::event(&event))
        }
    }

    crate::event_publisher_conformance!(Some(Box::<Recorder>::default()));

    #[test]
    fn event_ids_are_unique_32_hex_digits() {
        let ids: Vec<String> = (0..10_000).map(|_| random_event_id()).collect();
        assert!(ids.iter().all(|id| id.len() == 32 && id.bytes().all(|byte| byte.is_ascii_hexdigit())));
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ids.len());
        // One random half per process: what tells two processes' events apart.
        assert!(ids.iter().all(|id| id[..16] == ids[0][..16]));
    }

    #[test]
    fn topics_parse_and_print_the_contract_names() {
        for name in
            ["gateway:messages", "gateway:violations", "gateway:webhooks", "gateway:agents", "agent:a-1:scheduled"]
        {
            assert_eq!(Topic::parse(name).unwrap().to_string(), name);
        }
        assert_eq!(Topic::parse("agent:ns:x:scheduled"), Some(Topic::AgentScheduled(AgentId::new("ns:x").unwrap())));
        for bad in ["", "gateway:other", "agent::scheduled", "agent:x", "x:scheduled"] {
            assert_eq!(Topic::parse(bad), None, "{bad}");
        }
        assert!(Topic::Messages.is_operator_only());
        assert!(!Topic::parse("agent:a:scheduled").unwrap().is_operator_only());
    }

    #[test]
    fn internal_topics_cross_between_instances_but_no_client_can_name_them() {
        assert_eq!(Topic::parse("internal:scheduled-jobs"), None);
        assert_eq!(Topic::from_wire("internal:scheduled-jobs"), Some(Topic::ScheduledJobs));
        assert_eq!(Topic::ScheduledJobs.to_string(), "internal:scheduled-jobs");
        assert_eq!(Topic::from_wire("gateway:agents"), Some(Topic::Agents));
        assert!(Topic::ScheduledJobs.is_operator_only());
        assert_eq!(Topic::parse("internal:credential-revocations"), None);
        let revocations = Topic::from_wire("internal:credential-revocations");
        assert_eq!(revocations, Some(Topic::CredentialRevocations));
        assert_eq!(Topic::CredentialRevocations.to_string(), "internal:credential-revocations");
        assert!(Topic::CredentialRevocations.is_operator_only());
    }

    #[test]
    fn event_json_is_flat_with_type_id_and_timestamp() {
        let event = Event::with_id(
            "e-1",
            EventPayload::AgentEvicted {
                agent_id: AgentId::new("agent-99").unwrap(),
                cluster_id: ClusterId::new("west").unwrap(),
                last_seen: datetime!(2026-02-22 12:00:00 UTC),
            },
            datetime!(2026-02-22 12:01:31 UTC),
        );
        let value: Value = serde_json::from_str(&event.to_json()).unwrap();
        assert_eq!(
            value,
            json!({"event_type": "agent_evicted", "id": "e-1", "timestamp": "2026-02-22T12:01:31Z",
                   "agent_id": "agent-99", "cluster_id": "west", "last_seen": "2026-02-22T12:00:00Z"})
        );
        assert_eq!(event.event_type(), "agent_evicted");
    }

    #[test]
    fn the_recording_publisher_keeps_events_in_order_by_topic_and_can_fail() {
        let publisher = RecordingPublisher::default();
        let at = datetime!(2026-02-22 12:00:00 UTC);
        let event = |id: &str| Event::with_id(id, EventPayload::WebhookSignatureFailure { webhook_id: 1 }, at);
        publisher.publish(&Topic::Webhooks, &event("a")).unwrap();
        publisher.publish(&Topic::Agents, &event("b")).unwrap();
        publisher.publish(&Topic::Webhooks, &event("c")).unwrap();
        let ids = |events: Vec<Event>| events.into_iter().map(|event| event.id).collect::<Vec<_>>();
        assert_eq!(ids(publisher.on_topic(&Topic::Webhooks)), ["a", "c"]);
        assert_eq!(publisher.events().len(), 3);
        publisher.failure.set_failing(true);
        assert!(publisher.publish(&Topic::Agents, &event("d")).is_err());
        assert_eq!(publisher.events().len(), 3, "a failed publish records nothing");
    }
}
