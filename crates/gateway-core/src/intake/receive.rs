//! [`DecisionLogIntake`]: a body inspected (validated, nothing done), then settled (noted, its reminder scheduled,
//! published), and the [`ReminderDesk`] it schedules reminders through. The module documentation of
//! [`crate::intake`] says in what order and why.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::ids::AgentId;
use crate::intake::decision_log::{DecisionLog, DirectLog};
use crate::intake::interceptor::{
    AcceptedLog, ReadLog, RejectedLog, Rejection, ReminderRequest, ReminderRequestError, SchemaInterceptor,
};
use crate::ports::capability::CapabilityNotes;
use crate::ports::clock::Clock;
use crate::ports::cron::CronJob;
use crate::ports::event::{Event, EventPayload, EventPublisher, Topic};
use crate::ports::store::StoreError;

/// A boxed future that may move between threads: what a trait object's async method returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where agents' reminders are scheduled: gateway-cron's `CronScheduler`, which applies the limits (delay, payload
/// size, pending reminders per agent) and the idempotency key, the same for a DecisionLog's reminder and a tool
/// call's.
pub trait ReminderDesk: Send + Sync + Debug {
    /// Schedules `request` as a one-time job, or says why not; returns once the row is committed.
    fn schedule(&self, request: ReminderRequest) -> BoxFuture<'_, Result<ScheduledReminder, ReminderRefusal>>;
}

/// A reminder that is in the job table.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledReminder {
    pub job: CronJob,
    /// `true` when a pending job already held the request's idempotency key: nothing was written, and `job` is
    /// that job (a retry).
    pub already_scheduled: bool,
}

/// Why a reminder was not scheduled. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReminderRefusal {
    /// Zero, or more than the scheduler's longest delay (ten years). The text is the warning FR-10.7 names.
    #[error("invalid delay_ms for schedule_reminder: {0}")]
    InvalidDelay(u64),
    /// The payload, serialized as JSON, is longer than `limit` bytes (`--reminder-payload-max-bytes`).
    #[error("reminder payload over {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The agent has `limit` pending one-time jobs already (`--max-pending-reminders-per-agent`).
    #[error("the agent has {limit} pending reminders, the most allowed")]
    TooManyPending { limit: usize },
    /// Storing the reminder would take the agent's stored bytes past `limit` (`--agent-storage-quota-bytes`, see
    /// [`crate::ports::storage`]).
    #[error("the agent's stored bytes would pass its quota of {limit}")]
    QuotaExceeded { limit: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a DecisionLog's `schedule_reminder` call was not scheduled: the request itself, or the scheduler's refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReminderNotScheduled {
    #[error(transparent)]
    Invalid(#[from] ReminderRequestError),
    #[error(transparent)]
    Refused(#[from] ReminderRefusal),
}

/// What the intake works through.
#[derive(Debug, Clone)]
pub struct IntakePorts {
    pub reminders: Arc<dyn ReminderDesk>,
    /// The capability map, as the heartbeat manager keeps it (only live agents' entries).
    pub capabilities: Arc<dyn CapabilityNotes>,
    pub publisher: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
}

/// A log the intake accepted (202 over HTTP).
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedReceipt {
    /// `meta.trace_id`, when the log had one.
    pub trace_id: Option<String>,
    /// What became of the log's `schedule_reminder` call; `None` when it made none.
    pub reminder: Option<Result<ScheduledReminder, ReminderNotScheduled>>,
}

/// A DecisionLog body as the interceptor read it, with nothing done yet (see [`DecisionLogIntake::inspect`]); it
/// may borrow from the body.
#[derive(Debug)]
pub struct InspectedLog<'a>(Result<ReadLog<'a>, Rejection>);

impl InspectedLog<'_> {
    /// The agent an accepted log names (`identity.agent_id`); `None` for a log without an identity, and for a body
    /// that is refused (it names no agent the gateway has validated).
    pub fn agent_id(&self) -> Option<&AgentId> {
        self.0.as_ref().ok().and_then(ReadLog::agent_id)
    }

    /// Whether the log passed the schema (and will be accepted when settled).
    pub fn is_accepted(&self) -> bool {
        self.0.is_ok()
    }

    /// For a log refused by the schema, the `identity.agent_id` it gave when that is a valid id: who the refused
    /// request is counted against, and whose token it needs, with agent auth on (docs/api.md).
    pub fn rejected_agent_id(&self) -> Option<&str> {
        match &self.0 {
            // The interceptor's stand-in for an id it could not read; an agent really named "unknown" is then read
            // as unnamed, which only spares it the count of its own invalid logs.
            Err(Rejection::SchemaViolation(rejected)) if rejected.agent_id != "unknown" => Some(&rejected.agent_id),
            Ok(_) | Err(_) => None,
        }
    }
}

/// The future of [`DecisionLogIntake::settle`]: ready at once unless the log's reminder is being scheduled.
#[derive(Debug)]
pub struct Settling<'a>(SettlingState<'a>);

enum SettlingState<'a> {
    Done(Option<Result<AcceptedReceipt, Rejection>>),
    Scheduling(BoxFuture<'a, Result<AcceptedReceipt, Rejection>>),
}

impl Debug for SettlingState<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done(_) => f.write_str("Done"),
            Self::Scheduling(_) => f.write_str("Scheduling"),
        }
    }
}

impl Future for Settling<'_> {
    type Output = Result<AcceptedReceipt, Rejection>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            // Taken at the first poll; a future polled again after it completed stays pending, as it may.
            SettlingState::Done(outcome) => outcome.take().map_or(Poll::Pending, Poll::Ready),
            SettlingState::Scheduling(scheduling) => scheduling.as_mut().poll(cx),
        }
    }
}

/// The DecisionLog intake. Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct DecisionLogIntake {
    ports: Arc<IntakePorts>,
}

impl DecisionLogIntake {
    pub fn new(ports: IntakePorts) -> Self {
        Self { ports: Arc::new(ports) }
    }

    /// Takes one DecisionLog body: accepted (its reminder scheduled first, then the log published), or refused as
    /// not JSON, or refused for a schema violation (the `schema_violation` event already published). The same as
    /// [`Self::inspect`] then [`Self::settle`].
    pub async fn receive(&self, body: &[u8]) -> Result<AcceptedReceipt, Rejection> {
        self.settle(self.inspect(body)).await
    }

    /// Reads and validates a body, and does nothing else: a caller that must look at the log first (who sends it)
    /// does so between this and [`Self::settle`].
    ///
    /// This, `settle` and `accept` are `#[inline]`: called across the crate boundary, each moved the log (about
    /// 500 bytes) into another frame, some 250 instructions per DecisionLog (docs/benchmarks.md).
    #[inline]
    pub fn inspect<'a>(&self, body: &'a [u8]) -> InspectedLog<'a> {
        InspectedLog(SchemaInterceptor.read(body))
    }

    /// Does what an inspected log asks: for an accepted log, notes its identity, schedules its reminder (and waits
    /// for the row), then publishes it; for a schema violation, publishes the `schema_violation` event. A log
    /// without a reminder is settled at once, and the future is ready at its first poll.
    #[inline]
    pub fn settle(&self, inspected: InspectedLog<'_>) -> Settling<'_> {
        Settling(match inspected.0 {
            Ok(ReadLog::Direct(log)) => SettlingState::Done(Some(Ok(self.accept_direct(log)))),
            Ok(ReadLog::Accepted(AcceptedLog { log, reminder: None })) => {
                SettlingState::Done(Some(Ok(self.accept(log, None))))
            }
            // Boxed: the scheduler's future is large, and unboxed it would size every DecisionLog's future, which
            // hyper moves several times per request.
            Ok(ReadLog::Accepted(AcceptedLog { log, reminder: Some(reminder) })) => {
                SettlingState::Scheduling(Box::pin(self.accept_with_reminder(log, reminder)))
            }
            Err(Rejection::SchemaViolation(rejected)) => {
                self.report(&rejected);
                SettlingState::Done(Some(Err(Rejection::SchemaViolation(rejected))))
            }
            Err(refused @ (Rejection::InvalidJson | Rejection::StoreFailed(_))) => {
                SettlingState::Done(Some(Err(refused)))
            }
        })
    }

    /// FR-10.7: the reminder is handed to the scheduler, and its row committed, before the log is published; a
    /// reminder the scheduler refuses (its delay, size, the agent's limits) leaves the log accepted with a warning.
    /// A store that fails is not such a refusal: accepting the log then would acknowledge a reminder that is
    /// nowhere (DESIGN.md 14, nothing acknowledged lost), so the log is refused with the store's error, unpublished,
    /// for the agent to send again.
    async fn accept_with_reminder(
        &self,
        log: DecisionLog,
        reminder: Result<ReminderRequest, ReminderRequestError>,
    ) -> Result<AcceptedReceipt, Rejection> {
        let outcome = match reminder {
            Ok(request) => match self.schedule(request).await {
                Err(ReminderRefusal::Store(error)) => return Err(Rejection::StoreFailed(error)),
                scheduled => scheduled.map_err(ReminderNotScheduled::from),
            },
            Err(invalid) => {
                tracing::warn!("{invalid}");
                Err(invalid.into())
            }
        };
        Ok(self.accept(log, Some(outcome)))
    }

    /// Hands the request to the desk and logs the outcome. The payload (the agent's data) is never logged.
    async fn schedule(&self, request: ReminderRequest) -> Result<ScheduledReminder, ReminderRefusal> {
        let agent_id = request.agent_id.clone();
        let delay_ms = request.delay_ms;
        let scheduled = self.ports.reminders.schedule(request).await;
        match &scheduled {
            Ok(ScheduledReminder { job, already_scheduled: false }) => {
                tracing::info!(%agent_id, job_id = job.id, delay_ms, "reminder scheduled");
            }
            Ok(ScheduledReminder { job, already_scheduled: true }) => {
                tracing::info!(%agent_id, job_id = job.id, "reminder already scheduled");
            }
            // Same text as the interceptor's own refusals, naming the value the agent sent.
            Err(refused @ ReminderRefusal::InvalidDelay(_)) => tracing::warn!("{refused}"),
            Err(refused @ (ReminderRefusal::PayloadTooLarge { limit } | ReminderRefusal::TooManyPending { limit })) => {
                tracing::warn!(%agent_id, limit, reason = %refused, "reminder not scheduled");
            }
            Err(refused @ ReminderRefusal::QuotaExceeded { limit }) => {
                tracing::warn!(%agent_id, limit, reason = %refused, "reminder not scheduled");
            }
            Err(ReminderRefusal::Store(error)) => {
                tracing::warn!(%agent_id, %error, "reminder not scheduled: the store failed; the log is refused");
            }
        }
        scheduled
    }

    /// [`Self::accept`] for a log read straight from its body: the owned log is built only to be published.
    #[inline]
    fn accept_direct(&self, log: DirectLog<'_>) -> AcceptedReceipt {
        if self.ports.publisher.may_deliver(&Topic::Messages) {
            return self.accept(log.into_owned(), None);
        }
        if let Some((agent_id, agent_type, capability_version)) = log.identity() {
            self.ports.capabilities.note_capabilities(agent_id, agent_type, capability_version);
        }
        AcceptedReceipt { trace_id: log.trace_id().map(str::to_owned), reminder: None }
    }

    #[inline]
    fn accept(
        &self,
        log: DecisionLog,
        reminder: Option<Result<ScheduledReminder, ReminderNotScheduled>>,
    ) -> AcceptedReceipt {
        if let Some(identity) = &log.identity {
            self.ports.capabilities.note_capabilities(
                &identity.agent_id,
                &identity.agent_type,
                &identity.capability_version,
            );
        }
        // The event is built only for someone to receive it: its id, timestamp and boxed log were about 1,500
        // instructions of every DecisionLog.
        if !self.ports.publisher.may_deliver(&Topic::Messages) {
            return AcceptedReceipt { trace_id: log.meta.map(|meta| meta.trace_id), reminder };
        }
        let trace_id = log.trace_id().map(str::to_owned);
        let event = Event::new(EventPayload::DecisionLog(Box::new(log)), self.ports.clock.now());
        if let Err(error) = self.ports.publisher.publish(&Topic::Messages, &event) {
            tracing::warn!(%error, event_id = %event.id, "decision_log event not published");
        }
        AcceptedReceipt { trace_id, reminder }
    }

    /// A `schema_violation` event that carries the body's hash, never the body. The log line names the failing
    /// field path only.
    fn report(&self, rejected: &RejectedLog) {
        tracing::info!(field = %rejected.violation.path, raw_payload_hash = %rejected.raw_payload_hash, "decision log rejected");
        let event = Event::new(
            EventPayload::SchemaViolation {
                agent_id: rejected.agent_id.clone(),
                capability_version: rejected.capability_version.clone(),
                violation_reason: rejected.violation.to_string(),
                raw_payload_hash: rejected.raw_payload_hash.clone(),
            },
            self.ports.clock.now(),
        );
        if let Err(error) = self.ports.publisher.publish(&Topic::Violations, &event) {
            tracing::warn!(%error, event_id = %event.id, "schema_violation event not published");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};
    use time::macros::datetime;

    use super::*;
    use crate::intake::interceptor::reminder_idempotency_key;
    use crate::runtime::sync::lock;
    use crate::{CapabilityMap, InMemoryCapabilityMap, ManualClock, RecordingPublisher};

    /// A desk that answers with `refusal` (or schedules), and records each request together with how many events
    /// had been published when it arrived.
    #[derive(Debug, Default)]
    struct FakeDesk {
        publisher: Arc<RecordingPublisher>,
        refusal: Option<ReminderRefusal>,
        requests: Mutex<Vec<(ReminderRequest, usize)>>,
    }

    impl ReminderDesk for FakeDesk {
        fn schedule(&self, request: ReminderRequest) -> BoxFuture<'_, Result<ScheduledReminder, ReminderRefusal>> {
            Box::pin(async move {
                lock(&self.requests).push((request.clone(), self.publisher.events().len()));
                // A scheduler answers on another task: the intake must wait for it.
                tokio::task::yield_now().await;
                match &self.refusal {
                    Some(refusal) => Err(refusal.clone()),
                    None => Ok(ScheduledReminder {
                        job: CronJob {
                            id: 1,
                            agent_id: request.agent_id,
                            schedule: None,
                            next_fire_at: datetime!(2026-02-22 12:00:05 UTC),
                            payload: request.payload,
                            is_one_time: true,
                            paused: false,
                            timezone: crate::DEFAULT_TIMEZONE.to_owned(),
                            misfire_policy: crate::MisfirePolicy::FireOnce,
                            max_lateness_ms: request.max_lateness_ms,
                        },
                        already_scheduled: false,
                    }),
                }
            })
        }
    }

    /// Notes every capability, live or not (the heartbeat manager keeps only live agents'; that is its test).
    #[derive(Debug)]
    struct AllNoted(InMemoryCapabilityMap);

    impl CapabilityNotes for AllNoted {
        fn note_capabilities(&self, agent_id: &AgentId, agent_type: &str, capability_version: &str) {
            let entry = crate::CapabilityEntry {
                agent_type: agent_type.to_owned(),
                capability_version: capability_version.to_owned(),
                updated_at: datetime!(2026-02-22 12:00:00 UTC),
            };
            self.0.register(agent_id, entry);
        }
    }

    struct Harness {
        intake: DecisionLogIntake,
        desk: Arc<FakeDesk>,
        publisher: Arc<RecordingPublisher>,
        capabilities: Arc<AllNoted>,
    }

    fn harness(refusal: Option<ReminderRefusal>) -> Harness {
        let publisher = Arc::new(RecordingPublisher::default());
        let desk = Arc::new(FakeDesk { publisher: Arc::clone(&publisher), refusal, ..FakeDesk::default() });
        let capabilities = Arc::new(AllNoted(InMemoryCapabilityMap::new(10)));
        let intake = DecisionLogIntake::new(IntakePorts {
            reminders: desk.clone(),
            capabilities: capabilities.clone(),
            publisher: publisher.clone(),
            clock: Arc::new(ManualClock::at_fixed_start()),
        });
        Harness { intake, desk, publisher, capabilities }
    }

    fn log(action: Value) -> Vec<u8> {
        json!({
            "meta": {"trace_id": "trace-1", "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": "agent-7", "agent_type": "researcher", "capability_version": "1.4.0"},
            "action": action
        })
        .to_string()
        .into_bytes()
    }

    fn reminder_action(input: Value) -> Value {
        json!({"status": "pending", "tool_call": "schedule_reminder", "tool_input": input})
    }

    #[tokio::test(start_paused = true)]
    async fn the_reminder_is_scheduled_before_the_log_is_published() {
        let harness = harness(None);
        let body = log(reminder_action(json!({"delay_ms": 5000, "payload": {"task": "check_quota"}})));
        let receipt = harness.intake.receive(&body).await.unwrap();
        assert_eq!(receipt.trace_id.as_deref(), Some("trace-1"));
        let scheduled = receipt.reminder.unwrap().unwrap();
        assert_eq!(scheduled.job.payload["task"], "check_quota");

        let requests = lock(&harness.desk.requests).clone();
        let agent = AgentId::new("agent-7").unwrap();
        let (request, published_before) = &requests[0];
        assert_eq!(*published_before, 0, "nothing was published before the reminder was handed over");
        assert_eq!(request.delay_ms, 5000);
        assert_eq!(request.idempotency_key, reminder_idempotency_key(&agent, "trace-1", 0));
        let published = harness.publisher.on_topic(&Topic::Messages);
        assert_eq!(published.len(), 1, "then the log was published");
        assert!(matches!(&published[0].payload, EventPayload::DecisionLog(log) if log.trace_id() == Some("trace-1")));
        assert_eq!(harness.capabilities.0.get(&agent).unwrap().agent_type, "researcher");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_or_invalid_reminder_still_accepts_and_publishes_the_log() {
        let refusals = [
            ReminderRefusal::PayloadTooLarge { limit: 10 },
            ReminderRefusal::TooManyPending { limit: 3 },
            ReminderRefusal::QuotaExceeded { limit: 1_024 },
            ReminderRefusal::InvalidDelay(u64::MAX),
        ];
        for refusal in refusals {
            let harness = harness(Some(refusal.clone()));
            let body = log(reminder_action(json!({"delay_ms": 5, "payload": {}})));
            let receipt = harness.intake.receive(&body).await.unwrap();
            assert_eq!(receipt.reminder, Some(Err(ReminderNotScheduled::Refused(refusal))));
            assert_eq!(harness.publisher.on_topic(&Topic::Messages).len(), 1);
        }
        let harness = harness(None);
        let receipt = harness.intake.receive(&log(reminder_action(json!({"delay_ms": 0, "payload": {}})))).await;
        let receipt = receipt.unwrap();
        assert!(matches!(receipt.reminder, Some(Err(ReminderNotScheduled::Invalid(_)))));
        assert!(lock(&harness.desk.requests).is_empty(), "an invalid request never reaches the desk");
        assert_eq!(harness.publisher.on_topic(&Topic::Messages).len(), 1);
    }

    /// A store that fails while the reminder is written is no refusal of the reminder: the log is refused with the
    /// store's error and not published, so the agent sends it again (the idempotency key schedules it once).
    #[tokio::test(start_paused = true)]
    async fn a_store_failure_refuses_the_log_unpublished() {
        for error in [StoreError::Unavailable("down".into()), StoreError::Full("disk full".into())] {
            let harness = harness(Some(ReminderRefusal::Store(error.clone())));
            let body = log(reminder_action(json!({"delay_ms": 5, "payload": {}})));
            assert_eq!(harness.intake.receive(&body).await, Err(Rejection::StoreFailed(error)));
            assert!(harness.publisher.on_topic(&Topic::Messages).is_empty(), "not published");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn inspecting_does_nothing_until_the_log_is_settled() {
        let harness = harness(None);
        let body = log(reminder_action(json!({"delay_ms": 5, "payload": {}})));
        let inspected = harness.intake.inspect(&body);
        assert_eq!(inspected.agent_id().map(AgentId::as_str), Some("agent-7"));
        let refused = harness.intake.inspect(br#"{"identity":{"agent_id":"agent-7"}}"#);
        assert_eq!(refused.agent_id(), None, "a refused body names no validated agent");
        assert!(harness.publisher.events().is_empty() && lock(&harness.desk.requests).is_empty());
        assert!(harness.capabilities.0.is_empty());

        assert!(harness.intake.settle(inspected).await.unwrap().reminder.unwrap().is_ok());
        assert!(matches!(harness.intake.settle(refused).await, Err(Rejection::SchemaViolation(_))));
        assert_eq!(harness.publisher.on_topic(&Topic::Messages).len(), 1);
        assert_eq!(harness.publisher.on_topic(&Topic::Violations).len(), 1);
        assert_eq!(lock(&harness.desk.requests).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_log_without_a_reminder_is_accepted_and_nothing_is_scheduled() {
        let harness = harness(None);
        let receipt = harness.intake.receive(&log(json!({"status": "success", "tool_call": "search"}))).await;
        assert_eq!(receipt.unwrap(), AcceptedReceipt { trace_id: Some("trace-1".into()), reminder: None });
        assert!(lock(&harness.desk.requests).is_empty());
        let receipt = harness.intake.receive(b"{}").await.unwrap();
        assert_eq!(receipt.trace_id, None);
    }

    /// A publisher with no subscriber on any topic: what it is handed anyway is kept, so a test can see that nothing
    /// was.
    #[derive(Debug, Default)]
    struct Deaf(RecordingPublisher);

    impl EventPublisher for Deaf {
        fn publish(&self, topic: &Topic, event: &Event) -> Result<(), crate::PublishError> {
            self.0.publish(topic, event)
        }
        fn may_deliver(&self, _topic: &Topic) -> bool {
            false
        }
    }

    #[tokio::test(start_paused = true)]
    async fn nobody_listening_costs_no_event_but_the_trace_id_comes_back() {
        let publisher = Arc::new(Deaf::default());
        let intake = DecisionLogIntake::new(IntakePorts {
            reminders: Arc::new(FakeDesk::default()),
            capabilities: Arc::new(AllNoted(InMemoryCapabilityMap::new(10))),
            publisher: publisher.clone(),
            clock: Arc::new(ManualClock::at_fixed_start()),
        });
        let receipt = intake.receive(&log(json!({"status": "success"}))).await.unwrap();
        assert_eq!(receipt.trace_id.as_deref(), Some("trace-1"));
        assert!(publisher.0.events().is_empty());
    }

    /// Bodies each direct reading takes (the hand reading's plain log, serde's escaped one) and one only the value
    /// reading takes (a repeated key).
    fn logs_read_every_way() -> [String; 3] {
        [
            r#"{"meta":{"trace_id":"t-1","timestamp":"2026-02-22T12:00:00.25Z"},"identity":{"agent_id":"agent-7","agent_type":"researcher","capability_version":"1.4.0"},"cognition":{"intent":"i","reasoning_chain":["a"],"confidence_score":0.8},"action":{"status":"success","tool_call":"search","tool_input":{"q":"rust","n":[1.5,null]}},"state_delta":{"tokens_consumed":512},"control":{"interrupt_signal":{"k":[true]}}}"#.to_owned(),
            r#"{"meta":{"trace_id":"t-\u00e9\"","timestamp":"2026-02-22T12:00:00Z","cluster_id":"c\nd"},"identity":{"agent_id":"agent-\u0037","agent_type":"re\tsearcher","capability_version":"1"},"action":{"status":"pending","tool_call":"se\\arch","tool_input":"{\"q\":\"\u00e9\"}","tool_output_summary":"a\/b"},"control":{"interrupt_signal":"\ud83d\ude00"}}"#.to_owned(),
            r#"{"meta":null,"meta":{"trace_id":"t-2","timestamp":"2026-02-22T12:00:00Z"},"identity":{"agent_id":"agent-7","agent_type":"t","capability_version":"2"}}"#.to_owned(),
        ]
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_gets_the_log_the_value_reading_makes_however_the_body_was_read() {
        for body in logs_read_every_way() {
            let harness = harness(None);
            let receipt = harness.intake.receive(body.as_bytes()).await.unwrap();
            let expected = DecisionLog::from_json(&serde_json::from_str(&body).unwrap()).unwrap();
            assert_eq!(receipt.trace_id.as_deref(), expected.trace_id());
            let published = harness.publisher.on_topic(&Topic::Messages);
            let [event] = published.as_slice() else { panic!("one event for {body}") };
            let EventPayload::DecisionLog(log) = &event.payload else { panic!("a decision log for {body}") };
            assert_eq!(**log, expected, "{body}");
            assert_eq!(serde_json::to_vec(log).unwrap(), serde_json::to_vec(&expected).unwrap(), "{body}");
            let identity = expected.identity.unwrap();
            let noted = harness.capabilities.0.get(&identity.agent_id).unwrap();
            assert_eq!(
                (noted.agent_type, noted.capability_version),
                (identity.agent_type, identity.capability_version)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn nobody_listening_still_notes_the_identity_and_answers_the_trace_id_however_the_body_was_read() {
        for body in logs_read_every_way() {
            let publisher = Arc::new(Deaf::default());
            let capabilities = Arc::new(AllNoted(InMemoryCapabilityMap::new(10)));
            let intake = DecisionLogIntake::new(IntakePorts {
                reminders: Arc::new(FakeDesk::default()),
                capabilities: capabilities.clone(),
                publisher: publisher.clone(),
                clock: Arc::new(ManualClock::at_fixed_start()),
            });
            let expected = DecisionLog::from_json(&serde_json::from_str(&body).unwrap()).unwrap();
            let inspected = intake.inspect(body.as_bytes());
            assert_eq!(inspected.agent_id(), expected.agent_id(), "{body}");
            let receipt = intake.settle(inspected).await.unwrap();
            assert_eq!(receipt, AcceptedReceipt { trace_id: expected.trace_id().map(str::to_owned), reminder: None });
            assert!(publisher.0.events().is_empty());
            let identity = expected.identity.unwrap();
            let noted = capabilities.0.get(&identity.agent_id).unwrap();
            assert_eq!(
                (noted.agent_type, noted.capability_version),
                (identity.agent_type, identity.capability_version)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_violation_publishes_only_the_hash_and_notes_nothing() {
        let harness = harness(None);
        let secret = "sk-live-never-published";
        let body = json!({
            "identity": {"agent_id": "agent-7", "agent_type": "x".repeat(257), "capability_version": "1"},
            "cognition": {"intent": secret}
        })
        .to_string();
        let Err(Rejection::SchemaViolation(rejected)) = harness.intake.receive(body.as_bytes()).await else {
            panic!("expected a schema violation")
        };
        assert_eq!(rejected.violation.path, "identity.agent_type");
        let events = harness.publisher.on_topic(&Topic::Violations);
        assert_eq!(events.len(), 1);
        assert!(!serde_json::to_string(&events[0]).unwrap().contains(secret));
        assert!(harness.publisher.on_topic(&Topic::Messages).is_empty());
        assert!(harness.capabilities.0.is_empty(), "a refused log notes no capability");
        assert_eq!(harness.intake.receive(b"{").await, Err(Rejection::InvalidJson));
    }
}
