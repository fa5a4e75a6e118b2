//! Agents' reminders through the scheduler's one scheduling function: the reminder tools (`ReminderTools`) and the
//! DecisionLog intake (`gateway_core::DecisionLogIntake` over `CronScheduler`), on gateway-core's in-memory stores
//! and tokio's paused time. The scheduler's clock is tokio's (START plus the paused time elapsed), so a running
//! loop fires a reminder when paused time reaches it.
#![allow(clippy::unwrap_used)] // Test helpers may panic: that is how a test fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gateway_core::{
    AgentId, BackgroundLoop, CapabilityNotes, Clock, CronJobStore, DecisionLogIntake, Event, EventPayload,
    EventPublisher, InMemoryCronJobStore, InMemoryToolCallStore, IntakePorts, PublishError, ReminderNotScheduled,
    ReminderRefusal, SingleProcessLeadership, StoreError, ToolCallId, ToolCallRecord, ToolCallStore, Topic,
};
use gateway_cron::{
    CronConfig, CronError, CronPorts, CronScheduler, MAX_LISTED_REMINDERS, ReminderTool, ReminderTools, ToolConfig,
    ToolPorts,
};
use serde_json::{Map, Value, json};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

/// START plus the paused tokio time elapsed since the clock was made.
#[derive(Debug, Clone, Copy)]
struct TokioClock {
    started: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> OffsetDateTime {
        START + (Instant::now() - self.started)
    }
}

/// Publishes into a channel; on each `decision_log` it also notes how many job rows existed at that moment.
#[derive(Debug)]
struct Published {
    sender: mpsc::UnboundedSender<(Topic, Event, usize)>,
    jobs: Arc<InMemoryCronJobStore>,
}

impl EventPublisher for Published {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        let _ = self.sender.send((topic.clone(), event.clone(), self.jobs.len()));
        Ok(())
    }
}

/// The tool-call store, with a switch that fails only the recording of answers: a gateway that dies after
/// scheduling a reminder and before recording the answer looks like this to the agent.
#[derive(Debug, Default)]
struct Calls {
    store: Arc<InMemoryToolCallStore>,
    fail_records: AtomicBool,
}

impl ToolCallStore for Calls {
    fn tool_call(&self, agent_id: &AgentId, tool_call_id: &ToolCallId) -> Result<Option<ToolCallRecord>, StoreError> {
        self.store.tool_call(agent_id, tool_call_id)
    }

    fn record_tool_call(&self, call: &ToolCallRecord) -> Result<(ToolCallRecord, bool), StoreError> {
        if self.fail_records.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the gateway died".into()));
        }
        self.store.record_tool_call(call)
    }

    fn prune_tool_calls(&self, created_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        self.store.prune_tool_calls(created_before, limit)
    }
}

#[derive(Debug)]
struct NoNotes;

impl CapabilityNotes for NoNotes {
    fn note_capabilities(&self, _agent_id: &AgentId, _agent_type: &str, _capability_version: &str) {}
}

struct Harness {
    jobs: Arc<InMemoryCronJobStore>,
    calls: Arc<Calls>,
    scheduler: CronScheduler,
    tools: ReminderTools,
    intake: DecisionLogIntake,
    events: mpsc::UnboundedReceiver<(Topic, Event, usize)>,
    clock: TokioClock,
}

fn harness(config: CronConfig) -> Harness {
    let jobs = Arc::new(InMemoryCronJobStore::default());
    let calls = Arc::new(Calls::default());
    let (sender, events) = mpsc::unbounded_channel();
    let publisher = Arc::new(Published { sender, jobs: Arc::clone(&jobs) });
    let clock = TokioClock { started: Instant::now() };
    let storage = gateway_core::InMemoryAgentStorage { jobs: jobs.clone(), calls: calls.store.clone() };
    let scheduler = CronScheduler::new(
        CronPorts {
            store: jobs.clone(),
            storage: Arc::new(storage),
            publisher: publisher.clone(),
            clock: Arc::new(clock),
            leadership: Arc::new(SingleProcessLeadership),
        },
        config,
    );
    let tools = ReminderTools::new(
        ToolPorts {
            scheduler: scheduler.clone(),
            calls: calls.clone(),
            clock: Arc::new(clock),
            leadership: Arc::new(SingleProcessLeadership),
        },
        ToolConfig::default(),
    );
    let intake = DecisionLogIntake::new(IntakePorts {
        reminders: Arc::new(scheduler.clone()),
        capabilities: Arc::new(NoNotes),
        publisher,
        clock: Arc::new(clock),
    });
    Harness { jobs, calls, scheduler, tools, intake, events, clock }
}

fn agent(id: &str) -> AgentId {
    AgentId::new(id).unwrap()
}

fn call_id(id: &str) -> ToolCallId {
    ToolCallId::new(id).unwrap()
}

fn schedule(delay_ms: u64, payload: Value) -> ReminderTool {
    ReminderTool::ScheduleReminder { delay_ms, payload: payload.as_object().cloned().unwrap(), max_lateness_ms: None }
}

impl Harness {
    async fn call(&self, agent_id: &str, id: &str, tool: ReminderTool) -> Result<Value, CronError> {
        self.tools.call(agent(agent_id), call_id(id), tool).await.map(|answer| answer.result)
    }

    async fn listed(&self, agent_id: &str, id: &str) -> Value {
        self.call(agent_id, id, ReminderTool::ListReminders).await.unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_scheduled_reminder_fires_at_its_instant_and_a_retry_is_answered_from_the_record() {
    let mut harness = harness(CronConfig::default());
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let (scheduler, shutdown) = (harness.scheduler.clone(), shutdown.clone());
        async move { scheduler.run(shutdown).await }
    });
    let tool = schedule(5_000, json!({"task": "check_quota"}));
    let answer = harness.tools.call(agent("agent-7"), call_id("call-1"), tool.clone()).await.unwrap();
    assert!(!answer.replayed);
    let job_id = answer.result["job_id"].as_i64().unwrap();
    assert_eq!(answer.result["fire_at"], "2026-02-22T12:00:05Z");

    let again = harness.tools.call(agent("agent-7"), call_id("call-1"), tool.clone()).await.unwrap();
    assert_eq!((again.result, again.replayed), (answer.result.clone(), true));
    assert_eq!(harness.jobs.len(), 1, "the retry scheduled nothing");

    let (topic, event, _) = harness.events.recv().await.unwrap();
    assert_eq!(topic, Topic::AgentScheduled(agent("agent-7")));
    let EventPayload::Reminder { job_id: fired, scheduled_for, payload, .. } = event.payload else {
        panic!("expected a reminder, got {event:?}")
    };
    assert_eq!((fired, scheduled_for), (job_id, START + Duration::seconds(5)));
    assert_eq!(payload["task"], "check_quota");
    assert!(harness.clock.now() >= scheduled_for, "never early");

    // Fired and gone: a retry still gets the recorded answer and schedules nothing.
    while !harness.jobs.is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let late = harness.tools.call(agent("agent-7"), call_id("call-1"), tool).await.unwrap();
    assert_eq!((late.result, late.replayed), (answer.result, true));
    assert!(harness.jobs.is_empty());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn one_id_with_another_tool_or_other_params_is_a_conflict_and_does_nothing() {
    let harness = harness(CronConfig::default());
    harness.call("agent-7", "call-1", schedule(60_000, json!({"n": 1}))).await.unwrap();
    let conflicting = [
        schedule(60_000, json!({"n": 2})),
        schedule(60_001, json!({"n": 1})),
        ReminderTool::CancelReminder { job_id: 1 },
        ReminderTool::ListReminders,
    ];
    for tool in conflicting {
        assert_eq!(harness.call("agent-7", "call-1", tool.clone()).await, Err(CronError::ToolCallConflict), "{tool:?}");
    }
    assert_eq!(harness.jobs.len(), 1, "the conflicting cancel cancelled nothing, the others scheduled nothing");
    harness.call("agent-8", "call-1", schedule(60_000, json!({"n": 2}))).await.unwrap();
    assert_eq!(harness.jobs.len(), 2, "another agent's id is its own");
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_scheduling_and_recording_is_healed_by_the_retry_with_the_same_job() {
    let harness = harness(CronConfig::default());
    let tool = schedule(60_000, json!({"task": "once"}));
    harness.calls.fail_records.store(true, Ordering::SeqCst);
    let lost = harness.call("agent-7", "call-1", tool.clone()).await;
    assert!(matches!(lost, Err(CronError::Store(StoreError::Unavailable(_)))), "{lost:?}");
    let scheduled = harness.jobs.list_cron_jobs(None, 10).unwrap();
    assert_eq!(scheduled.len(), 1, "the reminder was scheduled before the answer was lost");

    harness.calls.fail_records.store(false, Ordering::SeqCst);
    let answer = harness.call("agent-7", "call-1", tool.clone()).await.unwrap();
    assert_eq!(answer["job_id"], scheduled[0].id, "the retry found the first attempt's job");
    assert_eq!(harness.jobs.len(), 1, "and scheduled nothing more");
    assert_eq!(harness.calls.store.len(), 1);
    // A DecisionLog's reminder key never meets a tool call's, even with the agent's trace id equal to the call id.
    let log = reminder_log("agent-7", "call-1", json!({"task": "once"}));
    let receipt = harness.intake.receive(log.as_bytes()).await.unwrap();
    assert!(!receipt.reminder.unwrap().unwrap().already_scheduled);
    assert_eq!(harness.jobs.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_agent_cancels_only_its_own_pending_reminders_and_lists_them_soonest_first() {
    let harness = harness(CronConfig::default());
    let later = harness.call("agent-7", "s-1", schedule(120_000, json!({"n": 1}))).await.unwrap();
    let sooner = harness.call("agent-7", "s-2", schedule(60_000, json!({"n": 2}))).await.unwrap();
    let others = harness.call("agent-8", "s-1", schedule(60_000, json!({"n": 3}))).await.unwrap();
    let listed = harness.listed("agent-7", "l-1").await;
    assert_eq!(
        listed,
        json!({"reminders": [
            {"job_id": sooner["job_id"], "fire_at": sooner["fire_at"], "payload": {"n": 2}},
            {"job_id": later["job_id"], "fire_at": later["fire_at"], "payload": {"n": 1}},
        ], "truncated": false})
    );

    let cancel = |job: &Value| ReminderTool::CancelReminder { job_id: job["job_id"].as_i64().unwrap() };
    assert_eq!(harness.call("agent-7", "c-1", cancel(&others)).await.unwrap(), json!({"cancelled": false}));
    assert_eq!(harness.call("agent-7", "c-2", cancel(&sooner)).await.unwrap(), json!({"cancelled": true}));
    assert_eq!(harness.call("agent-7", "c-3", cancel(&sooner)).await.unwrap(), json!({"cancelled": false}));

    // Claimed under a live lease: being fired, not cancellable.
    let job_id = later["job_id"].as_i64().unwrap();
    let now = START + Duration::seconds(120);
    let lease = gateway_core::ClaimLease {
        owner: "someone".into(),
        token: gateway_core::FencingToken(1),
        now,
        due_by: now,
        expires_at: now + Duration::seconds(10),
    };
    assert_eq!(harness.jobs.claim_fires(&[job_id], &lease).unwrap().len(), 1);
    assert_eq!(harness.call("agent-7", "c-4", cancel(&later)).await.unwrap(), json!({"cancelled": false}));
    assert_eq!(harness.jobs.len(), 2, "the claimed job and the other agent's are still there");
}

/// A read-only tool's answer is never recorded (issue 16: forty 1 MiB lists stored 41.6 MB): its retry lists again,
/// and sees what changed meanwhile. An id a writing call recorded is still that call's.
#[tokio::test(start_paused = true)]
async fn a_list_is_not_recorded_and_its_retry_lists_again() {
    let harness = harness(CronConfig::default());
    let first = harness.listed("agent-7", "l-1").await;
    assert_eq!(first, json!({"reminders": [], "truncated": false}));
    assert_eq!(harness.calls.store.len(), 0, "nothing recorded");
    let scheduled = harness.call("agent-7", "s-1", schedule(60_000, json!({"n": 1}))).await.unwrap();
    assert_eq!(harness.calls.store.len(), 1, "the writing call is recorded");
    let retry = harness.tools.call(agent("agent-7"), call_id("l-1"), ReminderTool::ListReminders).await.unwrap();
    assert!(!retry.replayed);
    assert_eq!(retry.result["reminders"][0]["job_id"], scheduled["job_id"], "the retry ran again");
    assert_eq!(harness.calls.store.len(), 1);
    assert_eq!(
        harness.call("agent-7", "s-1", ReminderTool::ListReminders).await,
        Err(CronError::ToolCallConflict),
        "an id recorded by another tool stays that call's"
    );
}

#[tokio::test(start_paused = true)]
async fn a_list_is_bounded_in_count_and_in_payload_bytes() {
    let harness = harness(CronConfig { max_pending_reminders_per_agent: 10_000, ..CronConfig::default() });
    for n in 0..(MAX_LISTED_REMINDERS + 1) {
        harness.scheduler.schedule_once(agent("agent-7"), 1_000 + n as i64, Map::new()).await.unwrap();
    }
    let listed = harness.listed("agent-7", "l-1").await;
    assert_eq!(listed["reminders"].as_array().unwrap().len(), MAX_LISTED_REMINDERS);
    assert_eq!(listed["truncated"], true);

    let blob = json!({"blob": "x".repeat(60_000)}).as_object().cloned().unwrap();
    for n in 0..20 {
        harness.scheduler.schedule_once(agent("agent-8"), 1_000 + n, blob.clone()).await.unwrap();
    }
    let listed = harness.listed("agent-8", "l-1").await;
    // 17 payloads of 60,012 bytes fit in 1 MiB, 18 do not.
    assert_eq!(listed["reminders"].as_array().unwrap().len(), 17);
    assert_eq!(listed["truncated"], true);
}

fn reminder_log(agent_id: &str, trace_id: &str, payload: Value) -> String {
    json!({
        "meta": {"trace_id": trace_id, "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": agent_id, "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder",
                   "tool_input": {"delay_ms": 60_000, "payload": payload}}
    })
    .to_string()
}

#[tokio::test(start_paused = true)]
async fn the_limits_refuse_a_tool_call_and_leave_a_decision_log_accepted_with_nothing_scheduled() {
    let config =
        CronConfig { reminder_payload_max_bytes: 32, max_pending_reminders_per_agent: 2, ..CronConfig::default() };
    let mut harness = harness(config);
    let big = json!({"blob": "b".repeat(40)});
    assert_eq!(
        harness.call("agent-7", "big", schedule(1_000, big.clone())).await,
        Err(CronError::InvalidToolParams("params.payload: must be at most 32 bytes as JSON".into()))
    );
    let receipt = harness.intake.receive(reminder_log("agent-7", "t-big", big).as_bytes()).await.unwrap();
    assert_eq!(
        receipt.reminder,
        Some(Err(ReminderNotScheduled::Refused(ReminderRefusal::PayloadTooLarge { limit: 32 })))
    );
    assert!(harness.jobs.is_empty(), "nothing was scheduled");

    for id in ["s-1", "s-2"] {
        harness.call("agent-7", id, schedule(60_000, json!({}))).await.unwrap();
    }
    assert_eq!(
        harness.call("agent-7", "s-3", schedule(60_000, json!({}))).await,
        Err(CronError::TooManyReminders { limit: 2 })
    );
    assert!(harness.call("agent-7", "s-2", schedule(60_000, json!({}))).await.is_ok(), "a recorded answer");
    let log = reminder_log("agent-7", "t-cap", json!({}));
    let receipt = harness.intake.receive(log.as_bytes()).await.unwrap();
    assert_eq!(
        receipt.reminder,
        Some(Err(ReminderNotScheduled::Refused(ReminderRefusal::TooManyPending { limit: 2 })))
    );
    assert_eq!(harness.jobs.len(), 2);
    // The refused log was published all the same, after its refusal.
    let mut logs = Vec::new();
    while let Ok((topic, event, _)) = harness.events.try_recv() {
        if topic == Topic::Messages {
            logs.push(event);
        }
    }
    assert_eq!(logs.len(), 2, "both refused logs were accepted and published");
    harness.call("agent-8", "s-1", schedule(60_000, json!({}))).await.unwrap();
    assert_eq!(harness.jobs.len(), 3, "the cap is per agent");
}

#[tokio::test(start_paused = true)]
async fn a_retried_decision_log_at_the_cap_finds_its_pending_reminder() {
    let harness = harness(CronConfig { max_pending_reminders_per_agent: 1, ..CronConfig::default() });
    let log = reminder_log("agent-7", "t-1", json!({"n": 1}));
    let first = harness.intake.receive(log.as_bytes()).await.unwrap().reminder.unwrap().unwrap();
    let retry = harness.intake.receive(log.as_bytes()).await.unwrap().reminder.unwrap().unwrap();
    assert!(retry.already_scheduled);
    assert_eq!(retry.job, first.job);
    assert_eq!(harness.jobs.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_decision_logs_reminder_is_committed_before_the_log_is_published() {
    let mut harness = harness(CronConfig::default());
    let log = reminder_log("agent-7", "t-1", json!({"task": "check_quota"}));
    let receipt = harness.intake.receive(log.as_bytes()).await.unwrap();
    assert_eq!(receipt.trace_id.as_deref(), Some("t-1"));
    let (topic, event, jobs_then) = harness.events.recv().await.unwrap();
    assert_eq!(topic, Topic::Messages);
    assert!(matches!(event.payload, EventPayload::DecisionLog(_)));
    assert_eq!(jobs_then, 1, "the job row existed when the log was published");
}

#[tokio::test(start_paused = true)]
async fn answered_calls_are_pruned_after_the_retention_oldest_first_and_then_are_new_calls() {
    let jobs = Arc::new(InMemoryCronJobStore::default());
    let calls = Arc::new(InMemoryToolCallStore::default());
    let clock = gateway_core::ManualClock::new(START);
    let (sender, _events) = mpsc::unbounded_channel();
    let scheduler = CronScheduler::new(
        CronPorts {
            store: jobs.clone(),
            storage: Arc::new(gateway_core::InMemoryAgentStorage { jobs: jobs.clone(), calls: calls.clone() }),
            publisher: Arc::new(Published { sender, jobs: jobs.clone() }),
            clock: Arc::new(clock.clone()),
            leadership: Arc::new(SingleProcessLeadership),
        },
        CronConfig::default(),
    );
    let tools = ReminderTools::new(
        ToolPorts {
            scheduler,
            calls: calls.clone(),
            clock: Arc::new(clock.clone()),
            leadership: Arc::new(SingleProcessLeadership),
        },
        ToolConfig { retention: std::time::Duration::from_secs(86_400), prune_batch: 2, ..ToolConfig::default() },
    );
    let cancel = ReminderTool::CancelReminder { job_id: 999 };
    for id in ["a", "b", "c"] {
        tools.call(agent("agent-7"), call_id(id), cancel.clone()).await.unwrap();
    }
    clock.advance(Duration::hours(12));
    tools.call(agent("agent-7"), call_id("d"), cancel).await.unwrap();
    clock.advance(Duration::hours(13));
    let shutdown = CancellationToken::new();
    assert_eq!(tools.prune_once(&shutdown).await.unwrap(), 3, "two batches");
    assert_eq!(calls.len(), 1, "the younger call stays");
    let again = tools.call(agent("agent-7"), call_id("a"), schedule(1_000, json!({}))).await.unwrap();
    assert!(!again.replayed, "a pruned id is a new call");

    // The loop prunes at once, and is healthy.
    let running = tokio::spawn({
        let (tools, shutdown) = (tools.clone(), shutdown.clone());
        async move { tools.run(shutdown).await }
    });
    clock.advance(Duration::days(2));
    while !calls.is_empty() || !tools.health().report().healthy {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_agents_reminders_at_the_same_moment_at_its_cap_stop_exactly_at_the_cap() {
    let harness = harness(CronConfig { max_pending_reminders_per_agent: 5, ..CronConfig::default() });
    let attempts: Vec<_> = (0..40)
        .map(|n| {
            let scheduler = harness.scheduler.clone();
            tokio::spawn(async move {
                let request = gateway_core::ReminderRequest {
                    agent_id: AgentId::new("agent-7").unwrap(),
                    delay_ms: 60_000,
                    payload: Map::from_iter([("n".to_owned(), json!(n))]),
                    idempotency_key: None,
                    max_lateness_ms: None,
                };
                scheduler.schedule_reminder(request).await
            })
        })
        .collect();
    let mut refused = 0;
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok(_) => {}
            Err(ReminderRefusal::TooManyPending { limit: 5 }) => refused += 1,
            Err(other) => panic!("unexpected refusal {other:?}"),
        }
    }
    assert_eq!((harness.jobs.len(), refused), (5, 35), "five scheduled, the rest refused");
}

impl Harness {
    fn stored(&self, agent_id: &str) -> u64 {
        use gateway_core::AgentStorage;
        let storage = gateway_core::InMemoryAgentStorage { jobs: self.jobs.clone(), calls: self.calls.store.clone() };
        storage.agent_storage_bytes(&agent(agent_id)).unwrap()
    }

    fn run_loop(&self) -> CancellationToken {
        let shutdown = CancellationToken::new();
        tokio::spawn({
            let (scheduler, shutdown) = (self.scheduler.clone(), shutdown.clone());
            async move { scheduler.run(shutdown).await }
        });
        shutdown
    }
}

/// The storage quota (issue 16): reminders are accepted until the agent's stored bytes would pass the quota, then
/// refused (`QuotaExceeded`, nothing written), a DecisionLog's reminder is not scheduled though the log is accepted,
/// a retry of an answered call still gets its answer, and another agent is not held back. A cancel is never refused:
/// it is how the agent makes room (one that cancels nothing is then not recorded, or such answers could fill the
/// disk). The reminders accepted before all fire into the mailbox, whose entries keep the usage where it was:
/// nothing accepted is dropped for being over the quota.
#[tokio::test(start_paused = true)]
async fn the_storage_quota_refuses_new_reminders_and_never_drops_accepted_ones() {
    const QUOTA: u64 = 2_000;
    let mut harness = harness(CronConfig { agent_storage_quota_bytes: QUOTA, ..CronConfig::default() });
    let mut accepted = 0;
    let refused = loop {
        match harness.call("agent-7", &format!("s-{accepted}"), schedule(60_000, json!({"n": accepted}))).await {
            Ok(_) => accepted += 1,
            Err(refusal) => break refusal,
        }
        assert!(accepted < 50, "never refused");
    };
    assert_eq!(refused, CronError::QuotaExceeded { limit: QUOTA });
    assert!(accepted >= 3, "{accepted} accepted");
    let at_quota = harness.stored("agent-7");
    assert!(at_quota <= QUOTA, "{at_quota} stored");
    assert_eq!(harness.jobs.len(), accepted, "the refused call wrote nothing");

    assert!(harness.call("agent-7", "s-0", schedule(60_000, json!({"n": 0}))).await.is_ok(), "a recorded answer");
    let nothing = ReminderTool::CancelReminder { job_id: 999_999 };
    assert_eq!(harness.call("agent-7", "c-0", nothing).await, Ok(json!({"cancelled": false})));
    assert_eq!(harness.stored("agent-7"), at_quota, "a cancel of nothing at the quota is not recorded");
    let first = harness.call("agent-7", "s-0", schedule(60_000, json!({"n": 0}))).await.unwrap()["job_id"].as_i64();
    let cancel = ReminderTool::CancelReminder { job_id: first.unwrap() };
    assert_eq!(harness.call("agent-7", "c-1", cancel.clone()).await, Ok(json!({"cancelled": true})));
    assert_eq!(harness.call("agent-7", "c-1", cancel).await, Ok(json!({"cancelled": true})), "recorded for its retry");
    let accepted = accepted - 1;
    let at_quota = harness.stored("agent-7");
    assert_eq!(harness.jobs.len(), accepted);
    // A log stores no answer, so a reminder of its own needs more than the tool's last one left over.
    let log = reminder_log("agent-7", "t-quota", json!({"blob": "x".repeat(400)}));
    let receipt = harness.intake.receive(log.as_bytes()).await.unwrap();
    assert_eq!(
        receipt.reminder,
        Some(Err(ReminderNotScheduled::Refused(ReminderRefusal::QuotaExceeded { limit: QUOTA })))
    );
    assert_eq!(harness.jobs.len(), accepted, "nothing scheduled for the log");
    assert_eq!(harness.stored("agent-7"), at_quota);
    harness.call("agent-8", "s-0", schedule(60_000, json!({"n": 0}))).await.unwrap();

    let shutdown = harness.run_loop();
    tokio::time::sleep(std::time::Duration::from_secs(61)).await;
    let mut fired = 0;
    while let Ok((topic, _, _)) = harness.events.try_recv() {
        if topic == Topic::AgentScheduled(agent("agent-7")) {
            fired += 1;
        }
    }
    assert_eq!(fired, accepted, "every accepted reminder fired");
    assert_eq!(harness.jobs.count_one_time_jobs(&agent("agent-7")).unwrap(), 0);
    assert_eq!(harness.stored("agent-7"), at_quota, "each moved from pending to the mailbox, charged the same");
    shutdown.cancel();
}

/// Reminders that fire at once (`delay_ms: 1`) never stay pending, so the pending cap never sees them: their
/// mailbox entries count against the quota like any other, and the agent is refused once they fill it.
#[tokio::test(start_paused = true)]
async fn reminders_that_fire_at_once_fill_the_quota_through_the_mailbox() {
    const QUOTA: u64 = 4_000;
    let harness = harness(CronConfig {
        agent_storage_quota_bytes: QUOTA,
        max_pending_reminders_per_agent: 1,
        ..Default::default()
    });
    let shutdown = harness.run_loop();
    let mut accepted = 0;
    let refused = loop {
        let id = format!("s-{accepted}");
        match harness.call("agent-7", &id, schedule(1, json!({"blob": "x".repeat(100)}))).await {
            Ok(_) => accepted += 1,
            Err(refusal) => break refusal,
        }
        // Let it fire before the next one: the pending cap of one is never what refuses.
        while harness.jobs.count_one_time_jobs(&agent("agent-7")).unwrap() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(accepted < 100, "never refused");
    };
    assert_eq!(refused, CronError::QuotaExceeded { limit: QUOTA });
    assert!(accepted >= 5, "{accepted}");
    assert!(harness.jobs.is_empty(), "they all fired");
    assert!(harness.stored("agent-7") <= QUOTA);
    shutdown.cancel();
}

fn recurring(schedule: &str, timezone: &str, payload: Value) -> ReminderTool {
    ReminderTool::ScheduleRecurring {
        schedule: schedule.to_owned(),
        timezone: timezone.to_owned(),
        payload: payload.as_object().cloned().unwrap(),
    }
}

/// `schedule_recurring` under a crash between the insert and the record: the retry finds the job the first attempt
/// wrote (the key derived from the call), records its answer, and creates nothing more. The answer gives the first
/// fire in UTC and in the zone.
#[tokio::test(start_paused = true)]
async fn a_recurring_tool_call_survives_a_crash_before_its_record_and_answers_in_its_zone() {
    let harness = harness(CronConfig::default());
    let tool = recurring("0 9 * * *", "Asia/Tokyo", json!({"task": "daily"}));
    harness.calls.fail_records.store(true, Ordering::SeqCst);
    let lost = harness.call("agent-7", "rec-1", tool.clone()).await;
    assert!(matches!(lost, Err(CronError::Store(StoreError::Unavailable(_)))), "{lost:?}");
    let written = harness.jobs.list_cron_jobs(None, 10).unwrap();
    assert_eq!(written.len(), 1);
    assert_eq!((written[0].is_one_time, written[0].timezone.as_str()), (false, "Asia/Tokyo"));

    harness.calls.fail_records.store(false, Ordering::SeqCst);
    let answer = harness.call("agent-7", "rec-1", tool.clone()).await.unwrap();
    assert_eq!(answer["job_id"], written[0].id, "the retry found the first attempt's job");
    assert_eq!(harness.jobs.len(), 1);
    let local = answer["fire_at_local"].as_str().unwrap();
    assert!(local.ends_with("T09:00:00+09:00"), "{answer}");
    // The same call with other params is a conflict, and writes nothing.
    let other = recurring("0 10 * * *", "Asia/Tokyo", json!({"task": "daily"}));
    assert_eq!(harness.call("agent-7", "rec-1", other).await, Err(CronError::ToolCallConflict));
    assert_eq!(harness.jobs.len(), 1);
}

/// The limits of `schedule_reminder` hold for `schedule_recurring`: the cap (counted over recurring jobs), the
/// payload limit, the storage quota; a cancel frees its room. Refused calls write nothing.
#[tokio::test(start_paused = true)]
async fn a_recurring_tool_call_is_held_to_the_agents_cap_payload_limit_and_quota() {
    let harness = harness(CronConfig {
        max_pending_reminders_per_agent: 2,
        reminder_payload_max_bytes: 100,
        ..CronConfig::default()
    });
    let first = harness.call("agent-7", "r-1", recurring("@daily", "UTC", json!({}))).await.unwrap();
    harness.call("agent-7", "r-2", recurring("@hourly", "Europe/Paris", json!({}))).await.unwrap();
    assert_eq!(
        harness.call("agent-7", "r-3", recurring("@daily", "UTC", json!({}))).await,
        Err(CronError::TooManyRecurringJobs { limit: 2 })
    );
    assert!(harness.call("agent-7", "r-2", recurring("@hourly", "Europe/Paris", json!({}))).await.is_ok(), "a retry");
    // Reminders are counted apart: the agent may still ask for them.
    harness.call("agent-7", "s-1", schedule(60_000, json!({}))).await.unwrap();
    let big = recurring("@daily", "UTC", json!({"blob": "x".repeat(200)}));
    let refused = harness.call("agent-8", "r-1", big).await.unwrap_err();
    assert!(refused.to_string().starts_with("params.payload: must be at most 100 bytes"), "{refused}");
    let cancel = ReminderTool::CancelReminder { job_id: first["job_id"].as_i64().unwrap() };
    assert_eq!(harness.call("agent-7", "c-1", cancel).await, Ok(json!({"cancelled": true})));
    harness.call("agent-7", "r-3", recurring("@daily", "UTC", json!({}))).await.unwrap();
    assert_eq!(harness.jobs.count_recurring_jobs(&agent("agent-7")).unwrap(), 2);

    const QUOTA: u64 = 1_000;
    let harness = harness_with_quota(QUOTA);
    let mut accepted = 0;
    let refused = loop {
        let payload = json!({"n": accepted, "pad": "x".repeat(40)});
        match harness.call("agent-7", &format!("r-{accepted}"), recurring("@daily", "UTC", payload)).await {
            Ok(_) => accepted += 1,
            Err(refusal) => break refusal,
        }
        assert!(accepted < 50, "never refused");
    };
    assert_eq!(refused, CronError::QuotaExceeded { limit: QUOTA });
    assert!(accepted >= 1, "{accepted} accepted");
    assert_eq!(harness.jobs.len(), accepted, "the refused call wrote nothing");
}

fn harness_with_quota(quota: u64) -> Harness {
    harness(CronConfig { agent_storage_quota_bytes: quota, ..CronConfig::default() })
}
