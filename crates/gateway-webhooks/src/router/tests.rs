//! The router against gateway-core's fakes: ManualClock for the schedule, tokio's paused time for the loop.

use gateway_core::{
    AttemptOutcome, BackgroundLoop, DeliveryStatus, FailureClass, FakeTransport, FencingToken, InMemoryWebhookStore,
    ManualClock, NewDelivery, RecordingPublisher, SlidingWindowRate, SwitchableLeadership, WebhookConfig,
    WebhookConfigChange, WebhookSecret,
};
use serde_json::Value;
use time::Duration as TimeDuration;

use super::*;
use crate::input::WebhookConfigDraft;
use crate::replay::INBOUND_REPLAY_WINDOW;
use crate::signature::{InboundSignature, SECRET_ROTATION_GRACE, SignatureError, sign};
use crate::standard;

/// The delivery an inbound webhook created; panics on a duplicate or a refusal.
fn accepted(outcome: Result<Inbound, WebhookError>) -> Delivery {
    match outcome {
        Ok(Inbound::Accepted(delivery)) => delivery,
        other => panic!("expected a new delivery, got {other:?}"),
    }
}

/// Inbound signature headers with only `X-Observatory-Signature`.
fn observatory(header: &[u8]) -> InboundSignature {
    InboundSignature { observatory: Some(header.to_vec()), ..InboundSignature::default() }
}

const SECRET: &str = "It's a Secret to Everybody";

struct Harness {
    router: WebhookRouter,
    store: Arc<InMemoryWebhookStore>,
    transport: Arc<FakeTransport>,
    publisher: Arc<RecordingPublisher>,
    leadership: Arc<SwitchableLeadership>,
    clock: ManualClock,
    shutdown: CancellationToken,
}

impl Harness {
    fn new(settings: RouterConfig) -> Self {
        let store = Arc::new(InMemoryWebhookStore::default());
        let transport = Arc::new(FakeTransport::new());
        let publisher = Arc::new(RecordingPublisher::default());
        let leadership = Arc::new(SwitchableLeadership::leading());
        let clock = ManualClock::at_fixed_start();
        let shutdown = CancellationToken::new();
        let ports = RouterPorts {
            store: store.clone(),
            transport: transport.clone(),
            publisher: publisher.clone(),
            clock: Arc::new(clock.clone()),
            leadership: leadership.clone(),
            rate: Arc::new(SlidingWindowRate::per_second(DEFAULT_MAX_PER_SECOND)),
        };
        let router = WebhookRouter::new(ports, settings);
        Self { router, store, transport, publisher, leadership, clock, shutdown }
    }

    fn with_defaults() -> Self {
        Self::new(RouterConfig::default())
    }

    async fn config_for(&self, source: &str, target_url: &str) -> WebhookConfig {
        self.router
            .create_config(WebhookConfigDraft {
                source_identifier: source.into(),
                event_type: "push".into(),
                agent_intent: "review".into(),
                target_session: format!("{source}-session"),
                target_url: target_url.into(),
                secret: WebhookSecret::new(SECRET),
                inbound_secret: None,
                inbound_require_timestamp: false,
                rate_limit_per_second: None,
            })
            .await
            .unwrap()
    }

    async fn config(&self) -> WebhookConfig {
        self.config_for("github", "https://receiver.example/hook").await
    }

    /// A row inserted straight into the store (no immediate attempt), due at `due_at`.
    fn due_row(&self, config: &WebhookConfig, target_url: &str, due_at: OffsetDateTime) -> Delivery {
        self.store
            .insert_delivery(&NewDelivery {
                webhook_id: config.id,
                session_id: "s".into(),
                payload: "{}".into(),
                target_url: target_url.into(),
                signature: sign(&config.secret, b"{}"),
                created_at: due_at - ENQUEUE_SAFETY_NET,
                next_retry_at: due_at,
                idempotency_key: None,
                claimed: false,
            })
            .unwrap()
    }

    fn row(&self, id: i64) -> Delivery {
        self.store.delivery(id).unwrap().unwrap()
    }

    async fn poll(&self) -> usize {
        let started = self.router.poll_once(FencingToken(1), &self.shutdown).await.unwrap();
        self.router.wait_idle().await;
        started
    }

    fn statuses(&self) -> Vec<(String, i32)> {
        self.publisher
            .on_topic(&Topic::Webhooks)
            .into_iter()
            .filter_map(|event| match event.payload {
                EventPayload::WebhookDeliveryStatus { status, attempt_count, .. } => Some((status, attempt_count)),
                _ => None,
            })
            .collect()
    }

    fn dlq_events(&self) -> Vec<EventPayload> {
        self.publisher
            .on_topic(&Topic::Webhooks)
            .into_iter()
            .map(|event| event.payload)
            .filter(|payload| matches!(payload, EventPayload::WebhookDlq { .. }))
            .collect()
    }

    fn signature_failure_events(&self, webhook_id: i64) -> usize {
        let failure = EventPayload::WebhookSignatureFailure { webhook_id };
        self.publisher.on_topic(&Topic::Webhooks).into_iter().filter(|event| event.payload == failure).count()
    }

    /// Spawns the poll loop until `self.shutdown`.
    fn spawn_poll(&self) -> tokio::task::JoinHandle<()> {
        let (router, shutdown) = (self.router.clone(), self.shutdown.clone());
        tokio::spawn(async move { router.run(shutdown).await })
    }

    /// Sleeps poll intervals (paused time) until `done` holds; fails the test after `rounds`.
    async fn until(&self, rounds: usize, mut done: impl FnMut() -> bool) {
        for _ in 0..rounds {
            if done() {
                return;
            }
            tokio::time::sleep(self.router.router_config().poll_interval).await;
        }
        assert!(done(), "condition not reached after {rounds} poll intervals");
    }
}

fn http_failure(code: u16) -> AttemptOutcome {
    AttemptOutcome::Failed { class: FailureClass::Http(code), detail: None }
}

fn seconds(count: i64) -> TimeDuration {
    TimeDuration::seconds(count)
}

#[tokio::test(start_paused = true)]
async fn an_enqueued_delivery_is_attempted_at_once_signed_and_delivered() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let payload = r#"{"task":"done","n":1}"#;
    let row = h.router.enqueue(config.id, "session-9".into(), payload.into()).await.unwrap();
    assert_eq!((row.status, row.attempt_count), (DeliveryStatus::Pending, 0));
    assert_eq!(row.next_retry_at, Some(row.created_at + seconds(30)), "the FR-10.8 safety net");
    h.router.wait_idle().await;

    let requests = h.transport.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].delivery_id, row.id);
    assert_eq!(requests[0].url, "https://receiver.example/hook");
    assert_eq!(requests[0].body, payload);
    assert_eq!(requests[0].signature, sign(&WebhookSecret::new(SECRET), payload.as_bytes()));
    // The row was written unsigned (its config's secret came back from the insert); the answer showed the signature
    // the attempt sends, and the attempt's record stored it.
    assert_eq!(row.signature, requests[0].signature, "the answer's signature is the one sent");

    let detail = h.router.delivery(row.id).await.unwrap();
    assert_eq!(detail.delivery.signature, requests[0].signature, "recorded by the first attempt");
    assert_eq!(detail.delivery.status, DeliveryStatus::Delivered);
    assert_eq!(detail.delivery.attempt_count, 1);
    assert_eq!(detail.delivery.next_retry_at, None);
    assert_eq!(detail.delivery.last_attempted_at, Some(h.clock.now()));
    assert_eq!(detail.attempts.len(), 1);
    assert_eq!((detail.attempts[0].attempt_number, detail.attempts[0].status_code), (1, Some(200)));
    assert_eq!(detail.attempts[0].error_class, None);
    assert_eq!(h.statuses(), [("pending".into(), 0), ("delivered".into(), 1)]);
    let stats = h.router.stats();
    assert_eq!([stats.attempts.get(), stats.delivered.get(), stats.failed_retrying.get()], [1, 1, 0]);
    assert_eq!([stats.enqueued_claimed.get(), stats.enqueued_unclaimed.get()], [1, 0], "written claimed");
}

#[tokio::test(start_paused = true)]
async fn a_failing_target_is_retried_on_the_exact_schedule_then_dead() {
    let h = Harness::with_defaults();
    h.transport.set_fallback(http_failure(500));
    let config = h.config().await;
    let row = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    let after_first = h.row(row.id);
    assert_eq!((after_first.status, after_first.attempt_count), (DeliveryStatus::Failed, 1));
    assert_eq!(after_first.next_retry_at, Some(h.clock.now() + seconds(30)));
    assert_eq!(after_first.error_detail.as_deref(), Some("http_500"));

    let mut due = after_first.next_retry_at.unwrap();
    for (attempt, wait) in [(2, 120), (3, 600), (4, 3600), (5, 21600)] {
        h.clock.set(due - seconds(1));
        assert_eq!(h.poll().await, 0, "attempt {attempt} went a second early");
        h.clock.set(due);
        assert_eq!(h.poll().await, 1, "attempt {attempt} did not go when due");
        let stored = h.row(row.id);
        assert_eq!((stored.status, stored.attempt_count), (DeliveryStatus::Failed, attempt));
        assert_eq!(stored.next_retry_at, Some(due + seconds(wait)), "after attempt {attempt}");
        due = stored.next_retry_at.unwrap();
    }
    h.clock.set(due);
    assert_eq!(h.poll().await, 1);
    let dead = h.row(row.id);
    assert_eq!((dead.status, dead.attempt_count, dead.next_retry_at), (DeliveryStatus::Dead, 6, None));
    assert_eq!(
        h.dlq_events(),
        [EventPayload::WebhookDlq {
            delivery_id: row.id,
            webhook_id: config.id,
            session_id: "s".into(),
            attempt_count: 6,
            error_detail: Some("http_500".into()),
        }]
    );

    h.clock.advance(TimeDuration::days(100));
    assert_eq!(h.poll().await, 0, "a dead delivery was retried automatically");
    assert_eq!(h.transport.request_count(), 6);
    let history = h.router.delivery(row.id).await.unwrap().attempts;
    assert_eq!(history.iter().map(|attempt| attempt.attempt_number).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    assert!(history.iter().all(|attempt| attempt.error_class.as_deref() == Some("http_500")));
    let statuses: Vec<_> = h.statuses().into_iter().map(|(status, _)| status).collect();
    assert_eq!(statuses, ["pending", "failed", "failed", "failed", "failed", "failed", "dead"]);
    let stats = h.router.stats();
    assert_eq!(
        [stats.attempts.get(), stats.failed_retrying.get(), stats.dead.get(), stats.delivered.get()],
        [6, 5, 1, 0],
        "counted for metrics: six attempts, five that left a retry scheduled, one that left the delivery dead"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_now_resets_a_dead_delivery_to_the_full_envelope() {
    let settings = RouterConfig { retry_schedule: RetrySchedule::from_seconds(&[1]).unwrap(), ..Default::default() };
    let h = Harness::new(settings);
    h.transport.push_outcome(http_failure(502));
    h.transport.push_outcome(AttemptOutcome::failed(FailureClass::Timeout, "global"));
    let config = h.config().await;
    let row = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    h.clock.advance(seconds(1));
    assert_eq!(h.poll().await, 1);
    assert_eq!(h.row(row.id).status, DeliveryStatus::Dead);

    h.clock.advance(seconds(600));
    let reset = h.router.retry_now(row.id).await.unwrap();
    assert_eq!((reset.status, reset.attempt_count), (DeliveryStatus::Pending, 0));
    assert_eq!(reset.next_retry_at, Some(h.clock.now()));
    h.router.wait_idle().await;
    let delivered = h.row(row.id);
    assert_eq!((delivered.status, delivered.attempt_count), (DeliveryStatus::Delivered, 1));
    assert_eq!(h.transport.request_count(), 3);

    assert_eq!(
        h.router.retry_now(row.id).await,
        Err(WebhookError::RetryNotAllowed { id: row.id, status: DeliveryStatus::Delivered })
    );
    assert_eq!(h.router.retry_now(999).await, Err(WebhookError::UnknownDelivery(999)));
}

#[tokio::test(start_paused = true)]
async fn retry_now_refuses_pending_deliveries_and_accepts_failed_ones() {
    let h = Harness::with_defaults();
    h.transport.set_fallback(http_failure(500));
    let config = h.config().await;
    let pending = h.due_row(&config, &config.target_url, h.clock.now() + seconds(30));
    assert_eq!(
        h.router.retry_now(pending.id).await,
        Err(WebhookError::RetryNotAllowed { id: pending.id, status: DeliveryStatus::Pending })
    );
    let failing = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(h.row(failing.id).status, DeliveryStatus::Failed);
    let reset = h.router.retry_now(failing.id).await.unwrap();
    assert_eq!((reset.status, reset.attempt_count), (DeliveryStatus::Pending, 0));
}

#[tokio::test(start_paused = true)]
async fn twelve_due_rows_with_a_cap_of_five_go_five_five_two_oldest_first() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let start = h.clock.now();
    let ids: Vec<i64> =
        (0..12).map(|index| h.due_row(&config, &config.target_url, start + seconds(index)).id).collect();
    h.clock.set(start + seconds(60));
    let mut per_cycle = Vec::new();
    for _ in 0..4 {
        let before = h.transport.request_count();
        h.poll().await;
        per_cycle.push(h.transport.request_count() - before);
    }
    assert_eq!(per_cycle, [5, 5, 2, 0]);
    let order: Vec<i64> = h.transport.requests().iter().map(|request| request.delivery_id).collect();
    let mut first_cycle = order[..5].to_vec();
    first_cycle.sort_unstable();
    assert_eq!(first_cycle, ids[..5], "the oldest five go first");
    assert!(ids.iter().all(|id| h.row(*id).status == DeliveryStatus::Delivered));
}

#[tokio::test(start_paused = true)]
async fn never_more_attempts_in_flight_than_the_cap() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    for index in 0..4 {
        h.due_row(&config, &config.target_url, h.clock.now() - seconds(index + 1));
    }
    h.transport.hold();
    let poll = h.spawn_poll();
    let mut enqueued = Vec::new();
    for index in 0..8 {
        enqueued.push(h.router.enqueue(config.id, format!("s{index}"), "{}".into()).await.unwrap().id);
    }
    let transport = h.transport.clone();
    let reached = run_blocking(move || transport.wait_for_requests(5, Duration::from_secs(30))).await.unwrap();
    assert!(reached, "five attempts never started");
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(h.transport.in_flight(), 5);
    assert_eq!(h.transport.request_count(), 5, "a sixth attempt started while five were in flight");

    h.transport.release();
    h.until(20, || h.store.deliveries().iter().all(|row| row.status == DeliveryStatus::Delivered)).await;
    assert_eq!(h.transport.max_in_flight(), 5);
    assert_eq!(h.transport.request_count(), 12, "each delivery exactly once");
    h.shutdown.cancel();
    poll.await.unwrap();
}

#[test]
fn round_robin_takes_one_per_target_in_turn() {
    let start = time::macros::datetime!(2026-02-22 12:00:00 UTC);
    let due: Vec<DueDelivery> = [(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "a"), (6, "c"), (7, "b"), (8, "a")]
        .into_iter()
        .enumerate()
        .map(|(index, (id, url))| DueDelivery {
            id,
            target_url: url.into(),
            next_retry_at: start + seconds(index as i64),
            webhook_id: 1,
            rate_limit_per_second: None,
        })
        .collect();
    assert_eq!(round_robin(&due, 5), [1, 4, 6, 2, 7]);
    assert_eq!(round_robin(&due, 100), [1, 4, 6, 2, 7, 3, 5, 8]);
    assert_eq!(round_robin(&due, 0), Vec::<i64>::new());
    assert_eq!(round_robin(&[], 5), Vec::<i64>::new());
    assert_eq!(candidate_window(5), 50);
    assert_eq!(candidate_window(500), MAX_CANDIDATE_WINDOW);
    assert_eq!(candidate_window(5000), 5000);
}

#[tokio::test(start_paused = true)]
async fn a_backlog_for_one_dead_endpoint_does_not_starve_a_healthy_one() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let start = h.clock.now();
    for index in 0..20 {
        h.due_row(&config, "https://dead.example/hook", start + seconds(index));
    }
    let healthy: Vec<i64> = (0..2)
        .map(|index| h.due_row(&config, "https://healthy.example/hook", start + seconds(100 + index)).id)
        .collect();
    h.clock.set(start + seconds(200));
    assert_eq!(h.poll().await, 5);
    let first_cycle: Vec<i64> = h.transport.requests().iter().map(|request| request.delivery_id).collect();
    assert!(healthy.iter().all(|id| first_cycle.contains(id)), "{first_cycle:?}");
}

#[tokio::test(start_paused = true)]
async fn at_start_due_rows_go_in_the_first_cycle_future_ones_wait_and_dead_ones_never() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let now = h.clock.now();
    // As a previous run left them: a failed row past due, a pending row whose immediate attempt never ran,
    // a row due later, and a dead row.
    let failed = h.due_row(&config, &config.target_url, now - seconds(300));
    h.store.put_delivery(Delivery { status: DeliveryStatus::Failed, attempt_count: 2, ..failed.clone() });
    let stranded = h.due_row(&config, &config.target_url, now - seconds(1));
    let future = h.due_row(&config, &config.target_url, now + seconds(90));
    let dead = h.due_row(&config, &config.target_url, now - seconds(900));
    h.store.put_delivery(Delivery { status: DeliveryStatus::Dead, attempt_count: 6, ..dead.clone() });

    let poll = h.spawn_poll();
    h.until(1, || h.transport.request_count() == 2).await;
    let mut first: Vec<i64> = h.transport.requests().iter().map(|request| request.delivery_id).collect();
    first.sort_unstable();
    assert_eq!(first, [failed.id, stranded.id]);
    assert_eq!(h.row(failed.id).attempt_count, 3);

    h.clock.set(future.next_retry_at.unwrap());
    h.until(3, || h.transport.request_count() == 3).await;
    h.clock.advance(TimeDuration::days(30));
    for _ in 0..3 {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    assert_eq!(h.transport.request_count(), 3, "the dead row was picked up");
    assert_eq!(h.row(dead.id).status, DeliveryStatus::Dead);
    h.shutdown.cancel();
    poll.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crash_mid_attempt_leaves_the_row_due_again_when_its_claim_ends() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let row = h.due_row(&config, &config.target_url, h.clock.now());
    // A process claims the row and dies before recording anything.
    let lease = h.router.lease_end(h.clock.now());
    assert_eq!(h.store.claim(&[row.id], h.clock.now(), lease).unwrap().len(), 1);
    assert_eq!(lease, h.clock.now() + seconds(10) + LEASE_MARGIN);

    h.clock.set(lease - seconds(1));
    assert_eq!(h.poll().await, 0, "picked up while another attempt may still be running");
    h.clock.set(lease);
    assert_eq!(h.poll().await, 1);
    assert_eq!(h.row(row.id).status, DeliveryStatus::Delivered);
}

/// A leader's poll claimed a row and was killed before recording anything; the next term's first poll releases that
/// claim and attempts the row at once, not when the claim ends. A claim of its own term (here: made by an immediate
/// attempt, which records no term) still waits for its lease.
#[tokio::test(start_paused = true)]
async fn a_new_terms_poll_attempts_a_deposed_leaders_claimed_row_at_once() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let deposed = h.due_row(&config, &config.target_url, h.clock.now());
    let immediate = h.due_row(&config, &config.target_url, h.clock.now());
    let lease = h.router.lease_end(h.clock.now());
    assert_eq!(h.store.claim_fenced(&[deposed.id], h.clock.now(), lease, FencingToken(1)).unwrap().len(), 1);
    assert_eq!(h.store.claim(&[immediate.id], h.clock.now(), lease).unwrap().len(), 1);

    h.clock.advance(seconds(1));
    let started = h.router.poll_once(FencingToken(2), &h.shutdown).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(started, 1, "the deposed leader's row, {:?} before its claim ends", lease - h.clock.now());
    assert_eq!(h.row(deposed.id).status, DeliveryStatus::Delivered);
    assert_eq!(h.row(immediate.id).status, DeliveryStatus::Pending, "the immediate attempt's claim still holds");
    assert_eq!(h.transport.request_count(), 1);
    h.clock.set(lease);
    assert_eq!(h.router.poll_once(FencingToken(2), &h.shutdown).await.unwrap(), 1, "then its lease ends");
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_lost_its_claim_does_not_overwrite_the_row() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let row = h.due_row(&config, &config.target_url, h.clock.now());
    h.store.put_delivery(Delivery { status: DeliveryStatus::Failed, attempt_count: 2, ..row.clone() });
    h.transport.hold();
    h.transport.set_fallback(http_failure(500));
    let started = h.router.poll_once(FencingToken(1), &h.shutdown).await.unwrap();
    assert_eq!(started, 1);
    let transport = h.transport.clone();
    assert!(run_blocking(move || transport.wait_for_requests(1, Duration::from_secs(30))).await.unwrap());

    // The operator resets the row while its attempt is in flight; the reset's own attempt starts too.
    h.router.retry_now(row.id).await.unwrap();
    let transport = h.transport.clone();
    assert!(run_blocking(move || transport.wait_for_requests(2, Duration::from_secs(30))).await.unwrap());
    h.transport.release();
    h.router.wait_idle().await;

    // Both attempts failed; only the one made under the reset's claim counts: attempt 1, not attempt 3.
    let stored = h.row(row.id);
    assert_eq!((stored.status, stored.attempt_count), (DeliveryStatus::Failed, 1), "the stale attempt wrote");
    assert_eq!(stored.next_retry_at, Some(h.clock.now() + seconds(30)));
    assert_eq!(h.router.delivery(row.id).await.unwrap().attempts.len(), 2, "both attempts are history");
}

#[tokio::test(start_paused = true)]
async fn inbound_webhooks_are_verified_on_raw_bytes_and_routed_as_an_envelope() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let body = br#"{"action":"opened","number": 1.50}"#;
    let header = sign(&WebhookSecret::new(SECRET), body);

    let row = accepted(h.router.receive_inbound(config.id, &observatory(header.as_bytes()), body).await);
    assert_eq!(row.session_id, "github-session");
    assert_eq!(row.target_url, config.target_url);
    assert_eq!(row.next_retry_at, Some(row.created_at + seconds(30)));
    let envelope: Value = serde_json::from_str(&row.payload).unwrap();
    assert_eq!(envelope["webhook_id"], config.id);
    assert_eq!(envelope["agent_intent"], "review");
    assert_eq!(envelope["received_at"], "2026-02-22T12:00:00Z");
    assert!(row.payload.contains(r#""number": 1.50"#), "the body was re-serialized: {}", row.payload);
    h.router.wait_idle().await;
    let sent = h.transport.requests();
    assert_eq!(sent[0].body, row.payload);
    assert_eq!(sent[0].signature, sign(&config.secret, row.payload.as_bytes()));

    let tampered = br#"{"action":"opened","number": 1.51}"#;
    assert_eq!(
        h.router.receive_inbound(config.id, &observatory(header.as_bytes()), tampered).await,
        Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason: SignatureError::Mismatch })
    );
    assert_eq!(
        h.router.receive_inbound(config.id, &InboundSignature::default(), body).await,
        Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason: SignatureError::Missing })
    );
    assert_eq!(h.signature_failure_events(config.id), 1, "the second failure within the interval is counted only");
    assert_eq!(
        h.router.receive_inbound(404, &observatory(header.as_bytes()), body).await,
        Err(WebhookError::UnknownWebhook(404))
    );
    assert_eq!(h.store.deliveries().len(), 1, "a refused webhook created a delivery");
}

/// Standard Webhooks headers signed with `secret` at `timestamp` (unix seconds).
fn standard_headers(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> InboundSignature {
    InboundSignature {
        webhook_id: Some(id.as_bytes().to_vec()),
        webhook_timestamp: Some(timestamp.to_string().into_bytes()),
        webhook_signature: Some(standard::sign(&WebhookSecret::new(secret), id, timestamp, body).into_bytes()),
        ..InboundSignature::default()
    }
}

fn rotate(secret: &str) -> WebhookConfigChange {
    WebhookConfigChange { secret: Some(WebhookSecret::new(secret)), ..WebhookConfigChange::default() }
}

#[tokio::test(start_paused = true)]
async fn inbound_webhooks_may_be_signed_the_standard_webhooks_way_within_five_minutes() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let body = br#"{"n": 1.50}"#;
    let now = h.clock.now().unix_timestamp();
    let accepted = h.router.receive_inbound(config.id, &standard_headers(SECRET, "msg_1", now, body), body).await;
    assert!(accepted.is_ok(), "{accepted:?}");
    let recent = standard_headers(SECRET, "msg_2", now - 300, body);
    assert!(h.router.receive_inbound(config.id, &recent, body).await.is_ok());
    for (id, timestamp) in [("msg_3", now - 301), ("msg_4", now + 301)] {
        let stale = standard_headers(SECRET, id, timestamp, body);
        assert_eq!(
            h.router.receive_inbound(config.id, &stale, body).await,
            Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason: SignatureError::Stale })
        );
    }
    let wrong = standard_headers("another secret", "msg_5", now, body);
    assert_eq!(
        h.router.receive_inbound(config.id, &wrong, body).await,
        Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason: SignatureError::Mismatch })
    );
    // Either scheme is enough: a wrong X-Observatory-Signature beside a valid Standard Webhooks one is accepted.
    let both =
        InboundSignature { observatory: Some(b"sha256=00".to_vec()), ..standard_headers(SECRET, "msg_6", now, body) };
    assert!(h.router.receive_inbound(config.id, &both, body).await.is_ok());
    assert_eq!(h.signature_failure_events(config.id), 1, "refusals publish the failure event (throttled)");
    assert_eq!(h.store.deliveries().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_rotated_secret_signs_outbound_at_once_and_the_old_one_is_accepted_inbound_for_the_grace() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    h.transport.set_fallback(AttemptOutcome::Failed { class: FailureClass::Http(503), detail: None });
    let pending = h.router.enqueue(config.id, "s-1".into(), r#"{"n": 1.50}"#.into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(h.transport.requests()[0].signature, sign(&WebhookSecret::new(SECRET), pending.payload.as_bytes()));

    h.clock.advance(seconds(1));
    let rotated_at = h.clock.now();
    let updated = h.router.update_config(config.id, rotate("the new secret")).await.unwrap();
    assert_eq!((updated.id, updated.secret_rotated_at), (config.id, Some(rotated_at)));
    assert_eq!(updated.previous_secret, Some(WebhookSecret::new(SECRET)));

    // The older delivery's retry goes out signed with the new secret, both ways, and the row shows what was sent.
    h.clock.advance(seconds(30));
    h.transport.set_fallback(AttemptOutcome::Delivered { status_code: 204 });
    assert_eq!(h.poll().await, 1);
    let retry = h.transport.requests().pop().unwrap();
    let new_secret = WebhookSecret::new("the new secret");
    assert_eq!(retry.signature, sign(&new_secret, pending.payload.as_bytes()));
    let started = h.clock.now().unix_timestamp();
    assert_eq!(retry.timestamp, started);
    let message_id = pending.id.to_string();
    assert_eq!(retry.standard_signature, standard::sign(&new_secret, &message_id, started, pending.payload.as_bytes()));
    assert_eq!(h.row(pending.id).signature, retry.signature);
    assert_eq!(h.row(pending.id).status, DeliveryStatus::Delivered);

    let body = b"{}";
    let old = observatory(sign(&WebhookSecret::new(SECRET), body).as_bytes());
    let new = observatory(sign(&new_secret, body).as_bytes());
    assert!(h.router.receive_inbound(config.id, &old, body).await.is_ok(), "the old secret within the grace");
    assert!(h.router.receive_inbound(config.id, &new, body).await.is_ok());
    h.clock.set(rotated_at + SECRET_ROTATION_GRACE - TimeDuration::milliseconds(1));
    assert!(h.router.receive_inbound(config.id, &old, body).await.is_ok(), "the last instant of the grace");
    let now = h.clock.now().unix_timestamp();
    let old_standard = standard_headers(SECRET, "msg_1", now, body);
    assert!(h.router.receive_inbound(config.id, &old_standard, body).await.is_ok(), "either scheme");
    h.clock.set(rotated_at + SECRET_ROTATION_GRACE);
    assert_eq!(
        h.router.receive_inbound(config.id, &old, body).await,
        Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason: SignatureError::Mismatch })
    );
    assert!(h.router.receive_inbound(config.id, &new, body).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_second_rotation_within_the_grace_keeps_only_the_latest_previous_secret() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    h.router.update_config(config.id, rotate("second")).await.unwrap();
    h.clock.advance(seconds(60));
    let again = h.router.update_config(config.id, rotate("third")).await.unwrap();
    assert_eq!(again.secret_rotated_at, Some(h.clock.now()));
    let body = b"{}";
    let signed = |secret: &str| observatory(sign(&WebhookSecret::new(secret), body).as_bytes());
    assert!(h.router.receive_inbound(config.id, &signed("third"), body).await.is_ok());
    assert!(h.router.receive_inbound(config.id, &signed("second"), body).await.is_ok());
    assert!(h.router.receive_inbound(config.id, &signed(SECRET), body).await.is_err(), "the first secret is gone");
}

#[tokio::test(start_paused = true)]
async fn an_update_changes_only_what_it_names_and_refuses_what_create_refuses() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let change = WebhookConfigChange {
        target_url: Some("https://elsewhere.example/hook".into()),
        target_session: Some("s-2".into()),
        ..WebhookConfigChange::default()
    };
    let updated = h.router.update_config(config.id, change).await.unwrap();
    let expected = WebhookConfig {
        target_url: "https://elsewhere.example/hook".into(),
        target_session: "s-2".into(),
        ..config.clone()
    };
    assert_eq!(updated, expected);
    let row = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    assert_eq!(row.target_url, "https://elsewhere.example/hook", "new deliveries go to the new target");
    let invalid = WebhookConfigChange { target_url: Some("ftp://x".into()), ..WebhookConfigChange::default() };
    assert!(matches!(
        h.router.update_config(config.id, invalid).await,
        Err(WebhookError::InvalidConfig { field: "target_url", .. })
    ));
    assert!(matches!(
        h.router.update_config(config.id, WebhookConfigChange::default()).await,
        Err(WebhookError::InvalidConfig { field: "body", .. })
    ));
    assert_eq!(
        h.router.update_config(config.id + 1, rotate("x")).await,
        Err(WebhookError::UnknownWebhook(config.id + 1))
    );
    // The enqueued delivery's attempt succeeded: the config's health moved, which no refused change touches.
    let stored = h.router.config(config.id).await.unwrap();
    let expected = WebhookConfig { last_success_at: stored.last_success_at, ..expected };
    assert_eq!(stored, expected, "refused changes wrote nothing");
}

#[tokio::test(start_paused = true)]
async fn configs_are_validated_unique_and_deleted_with_their_deliveries() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let duplicate = WebhookConfigDraft {
        source_identifier: "github".into(),
        event_type: "push".into(),
        agent_intent: "other".into(),
        target_session: "other".into(),
        target_url: "https://other.example/".into(),
        secret: WebhookSecret::new("x"),
        inbound_secret: None,
        inbound_require_timestamp: false,
        rate_limit_per_second: None,
    };
    assert_eq!(h.router.create_config(duplicate.clone()).await, Err(WebhookError::DuplicateConfig));
    let invalid = WebhookConfigDraft { event_type: "other".into(), target_url: "ftp://x/".into(), ..duplicate };
    assert!(matches!(
        h.router.create_config(invalid).await,
        Err(WebhookError::InvalidConfig { field: "target_url", .. })
    ));
    assert_eq!(h.router.configs().await.unwrap(), std::slice::from_ref(&config));

    h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert!(matches!(
        h.router.enqueue(config.id, "s".into(), "not json".into()).await,
        Err(WebhookError::InvalidDelivery { field: "payload", .. })
    ));
    h.router.delete_config(config.id).await.unwrap();
    assert_eq!(h.router.config(config.id).await, Err(WebhookError::UnknownWebhook(config.id)));
    assert_eq!(h.router.delete_config(config.id).await, Err(WebhookError::UnknownWebhook(config.id)));
    assert_eq!(
        h.router.enqueue(config.id, "s".into(), "{}".into()).await,
        Err(WebhookError::UnknownWebhook(config.id))
    );
    assert!(h.store.deliveries().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_poll_survives_store_failures_reports_them_and_recovers() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let row = h.due_row(&config, &config.target_url, h.clock.now());
    h.store.failure.set_failing(true);
    let health = h.router.health();
    let poll = h.spawn_poll();
    h.until(3, || health.report().problem.is_some()).await;
    let report = health.report();
    assert!(report.running && !report.healthy, "{report:?}");

    h.store.failure.set_failing(false);
    h.until(30, || health.report().healthy).await;
    h.until(3, || h.row(row.id).status == DeliveryStatus::Delivered).await;
    h.shutdown.cancel();
    poll.await.unwrap();
    assert!(!health.report().running, "the loop stopped but still reports running");
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_polls() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    h.due_row(&config, &config.target_url, h.clock.now());
    h.leadership.set_leading(false);
    let poll = h.spawn_poll();
    for _ in 0..3 {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    assert_eq!(h.transport.request_count(), 0, "a follower polled");
    h.leadership.set_leading(true);
    h.until(3, || h.transport.request_count() == 1).await;
    h.shutdown.cancel();
    poll.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn after_shutdown_no_new_attempt_starts() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let poll = h.spawn_poll();
    h.shutdown.cancel();
    poll.await.unwrap();
    let row = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(h.transport.request_count(), 0);
    assert_eq!(h.row(row.id).next_retry_at, Some(row.created_at + seconds(30)), "left for the next start");
}

/// Records when each request started, on tokio's (paused) clock.
#[derive(Debug, Default)]
struct TimedTransport {
    starts: std::sync::Mutex<Vec<(i64, tokio::time::Instant)>>,
}

impl WebhookTransport for TimedTransport {
    fn post(&self, request: &gateway_core::OutboundRequest) -> AttemptOutcome {
        self.starts.lock().unwrap().push((request.delivery_id, tokio::time::Instant::now()));
        AttemptOutcome::Delivered { status_code: 200 }
    }
}

impl TimedTransport {
    fn starts(&self) -> Vec<(i64, tokio::time::Instant)> {
        let mut starts = self.starts.lock().unwrap().clone();
        starts.sort_by_key(|(id, at)| (*at, *id));
        starts
    }
}

/// No `limit + 1` starts within any one second.
fn assert_within_rate(starts: &[(i64, tokio::time::Instant)], limit: usize) {
    for pair in starts.windows(limit + 1) {
        let (first, last) = (pair[0].1, pair[limit].1);
        assert!(last - first >= Duration::from_secs(1), "{} starts within {:?}", limit + 1, last - first);
    }
}

fn timed_harness() -> (Harness, Arc<TimedTransport>) {
    timed_harness_with(DEFAULT_MAX_PER_SECOND, RouterConfig::default().max_per_cycle)
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_twelve_enqueues_goes_five_then_five_then_two_oldest_first() {
    let (h, transport) = timed_harness();
    let config = h.config().await;
    let began = tokio::time::Instant::now();
    let mut ids = Vec::new();
    for index in 0..12 {
        ids.push(h.router.enqueue(config.id, format!("s{index}"), "{}".into()).await.unwrap().id);
    }
    h.router.wait_idle().await;
    let starts = transport.starts();
    assert_eq!(starts.len(), 12);
    let second_of = |at: tokio::time::Instant| (at - began).as_secs();
    let per_second: Vec<usize> =
        (0..3).map(|second| starts.iter().filter(|(_, at)| second_of(*at) == second).count()).collect();
    assert_eq!(per_second, [5, 5, 2]);
    let mut order: Vec<i64> = starts.iter().map(|(id, _)| *id).collect();
    for group in [0..5, 5..10] {
        order[group].sort_unstable();
    }
    assert_eq!(order, ids, "oldest first");
    assert_within_rate(&starts, DEFAULT_MAX_PER_SECOND);
    assert!(h.store.deliveries().iter().all(|row| row.status == DeliveryStatus::Delivered));
    // Those past the second's starts were written unclaimed, for a claim once a start is free.
    let stats = h.router.stats();
    let (claimed, unclaimed) = (stats.enqueued_claimed.get(), stats.enqueued_unclaimed.get());
    assert_eq!(claimed + unclaimed, 12);
    assert!(claimed <= 5 && unclaimed >= 7, "claimed {claimed}, unclaimed {unclaimed}");
}

#[tokio::test(start_paused = true)]
async fn the_poll_retry_now_and_immediate_attempts_share_one_rate() {
    let (h, transport) = timed_harness();
    let config = h.config().await;
    for index in 0..7 {
        h.due_row(&config, &config.target_url, h.clock.now() - seconds(index + 1));
    }
    let poll = h.spawn_poll();
    for index in 0..6 {
        h.router.enqueue(config.id, format!("s{index}"), "{}".into()).await.unwrap();
    }
    let dead = h.due_row(&config, &config.target_url, h.clock.now() + seconds(3600));
    h.store.put_delivery(Delivery { status: DeliveryStatus::Dead, next_retry_at: None, ..h.row(dead.id) });
    h.router.retry_now(dead.id).await.unwrap();
    h.until(20, || transport.starts().len() == 14).await;
    h.shutdown.cancel();
    poll.await.unwrap();
    h.router.wait_idle().await;
    let starts = transport.starts();
    assert_within_rate(&starts, DEFAULT_MAX_PER_SECOND);
    let mut delivered: Vec<i64> = starts.iter().map(|(id, _)| *id).collect();
    delivered.sort_unstable();
    delivered.dedup();
    assert_eq!(delivered.len(), 14, "each delivery exactly once");
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_bad_signatures_is_reported_once_per_interval_per_webhook() {
    let h = Harness::with_defaults();
    let flooded = h.config().await;
    let other = h.config_for("gitlab", "https://receiver.example/other").await;
    for _ in 0..100 {
        assert!(h.router.receive_inbound(flooded.id, &observatory(b"sha256=00"), b"{}").await.is_err());
    }
    assert!(h.router.receive_inbound(other.id, &InboundSignature::default(), b"{}").await.is_err());
    assert_eq!(h.signature_failure_events(flooded.id), 1);
    assert_eq!(h.signature_failure_events(other.id), 1, "each webhook is throttled on its own");

    h.clock.advance(SIGNATURE_FAILURE_REPORT_INTERVAL);
    assert!(h.router.receive_inbound(flooded.id, &InboundSignature::default(), b"{}").await.is_err());
    assert_eq!(h.signature_failure_events(flooded.id), 2, "the next interval reports again");
    assert!(h.store.deliveries().is_empty());
}

/// Leadership under term 1 until the store fences it.
#[derive(Debug, Default)]
struct DeposedLeadership(std::sync::Mutex<Vec<FencingToken>>);

impl Leadership for DeposedLeadership {
    fn current(&self) -> Option<FencingToken> {
        self.0.lock().unwrap().is_empty().then_some(FencingToken(1))
    }
    fn fenced(&self, token: FencingToken) {
        self.0.lock().unwrap().push(token);
    }
}

#[tokio::test(start_paused = true)]
async fn a_poll_fenced_by_a_newer_leader_claims_nothing_and_steps_down() {
    let mut h = Harness::with_defaults();
    let leadership = Arc::new(DeposedLeadership::default());
    let ports = RouterPorts {
        store: h.store.clone(),
        transport: h.transport.clone(),
        publisher: h.publisher.clone(),
        clock: Arc::new(h.clock.clone()),
        leadership: leadership.clone(),
        rate: Arc::new(SlidingWindowRate::per_second(DEFAULT_MAX_PER_SECOND)),
    };
    h.router = WebhookRouter::new(ports, RouterConfig::default());
    let config = h.config().await;
    let row = h.due_row(&config, &config.target_url, h.clock.now() - seconds(1));
    // Another instance leads under term 2 and has claimed a row of its own.
    let other = h.due_row(&config, &config.target_url, h.clock.now() - seconds(2));
    let lease = h.clock.now() + seconds(15);
    assert_eq!(h.store.claim_fenced(&[other.id], h.clock.now(), lease, FencingToken(2)).unwrap().len(), 1);
    let poll = h.spawn_poll();
    for _ in 0..3 {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    h.shutdown.cancel();
    poll.await.unwrap();
    assert_eq!(*leadership.0.lock().unwrap(), [FencingToken(1)], "the poll told its leadership");
    assert_eq!(h.transport.request_count(), 0, "a deposed leader made an attempt");
    assert_eq!(h.row(row.id).next_retry_at, row.next_retry_at, "and claimed nothing");
    assert!(h.router.health().report().problem.is_none());
}

/// `X-Observatory-Signature` of `body` under `secret`.
fn signed(secret: &str, body: &[u8]) -> InboundSignature {
    observatory(sign(&WebhookSecret::new(secret), body).as_bytes())
}

#[tokio::test(start_paused = true)]
async fn the_same_signed_body_is_one_delivery_and_its_repeats_name_it_until_the_window_ends() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let body = br#"{"action":"opened"}"#;
    let first = accepted(h.router.receive_inbound(config.id, &signed(SECRET, body), body).await);
    h.clock.advance(seconds(60));
    // The same signature written otherwise (upper-case hex, spaces) is the same signature.
    let header = sign(&WebhookSecret::new(SECRET), body);
    let shouted = format!(" sha256={} ", header["sha256=".len()..].to_uppercase());
    for repeat in [signed(SECRET, body), observatory(shouted.as_bytes())] {
        let again = h.router.receive_inbound(config.id, &repeat, body).await;
        assert_eq!(again, Ok(Inbound::Duplicate { delivery_id: first.id }));
    }
    assert_eq!(h.store.deliveries().len(), 1, "a duplicate stored something");
    assert_eq!(h.router.stats().inbound_duplicates.get(), 2);
    let other_body = br#"{"action":"closed"}"#;
    accepted(h.router.receive_inbound(config.id, &signed(SECRET, other_body), other_body).await);
    let other_config = h.config_for("gitlab", "https://receiver.example/other").await;
    accepted(h.router.receive_inbound(other_config.id, &signed(SECRET, body), body).await);

    h.clock.set(first.created_at + INBOUND_REPLAY_WINDOW);
    let last_moment = h.router.receive_inbound(config.id, &signed(SECRET, body), body).await;
    assert_eq!(last_moment, Ok(Inbound::Duplicate { delivery_id: first.id }));
    h.clock.advance(TimeDuration::milliseconds(1));
    let after = accepted(h.router.receive_inbound(config.id, &signed(SECRET, body), body).await);
    assert_ne!(after.id, first.id, "a day later the body is accepted again (the replay window, documented)");
    assert_eq!(h.store.deliveries().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_standard_webhooks_id_is_one_delivery_and_dropping_a_header_does_not_make_a_replay_new() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let body = br#"{"n":1}"#;
    let now = h.clock.now().unix_timestamp();
    let first =
        accepted(h.router.receive_inbound(config.id, &standard_headers(SECRET, "msg_1", now, body), body).await);
    // A retry by the sender: same id, a later timestamp, signed again.
    h.clock.advance(seconds(10));
    let retry = standard_headers(SECRET, "msg_1", now + 10, body);
    assert_eq!(
        h.router.receive_inbound(config.id, &retry, body).await,
        Ok(Inbound::Duplicate { delivery_id: first.id })
    );

    // Signed both ways: recorded under both keys, so either header alone replays into the same delivery.
    let both_body = br#"{"n":2}"#;
    let both = InboundSignature {
        observatory: Some(sign(&WebhookSecret::new(SECRET), both_body).into_bytes()),
        ..standard_headers(SECRET, "msg_2", now + 10, both_body)
    };
    let second = accepted(h.router.receive_inbound(config.id, &both, both_body).await);
    let standard_only = InboundSignature { observatory: None, ..both.clone() };
    let observatory_only = InboundSignature { observatory: both.observatory.clone(), ..InboundSignature::default() };
    for replay in [standard_only, observatory_only] {
        let outcome = h.router.receive_inbound(config.id, &replay, both_body).await;
        assert_eq!(outcome, Ok(Inbound::Duplicate { delivery_id: second.id }), "{replay:?}");
    }
    // A valid X-Observatory-Signature beside a Standard Webhooks one that no longer verifies: still the replay.
    h.clock.advance(seconds(600));
    let outcome = h.router.receive_inbound(config.id, &both, both_body).await;
    assert_eq!(outcome, Ok(Inbound::Duplicate { delivery_id: second.id }));
    assert_eq!(h.store.deliveries().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_config_that_requires_a_timestamp_refuses_the_observatory_scheme_and_stale_standard_signatures() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let require = WebhookConfigChange { inbound_require_timestamp: Some(true), ..WebhookConfigChange::default() };
    assert!(h.router.update_config(config.id, require).await.unwrap().inbound_require_timestamp);
    let body = br#"{"n":1}"#;
    let refused = |reason| Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason });
    assert_eq!(
        h.router.receive_inbound(config.id, &signed(SECRET, body), body).await,
        refused(SignatureError::TimestampRequired),
        "a valid X-Observatory-Signature alone"
    );
    let now = h.clock.now().unix_timestamp();
    let stale = InboundSignature {
        observatory: Some(sign(&WebhookSecret::new(SECRET), body).into_bytes()),
        ..standard_headers(SECRET, "msg_old", now - 600, body)
    };
    assert_eq!(h.router.receive_inbound(config.id, &stale, body).await, refused(SignatureError::Stale));
    let fresh = InboundSignature {
        observatory: Some(sign(&WebhookSecret::new(SECRET), body).into_bytes()),
        ..standard_headers(SECRET, "msg_new", now, body)
    };
    let first = accepted(h.router.receive_inbound(config.id, &fresh, body).await);
    assert_eq!(
        h.router.receive_inbound(config.id, &fresh, body).await,
        Ok(Inbound::Duplicate { delivery_id: first.id })
    );
    assert_eq!(h.store.deliveries().len(), 1);
    let relax = WebhookConfigChange { inbound_require_timestamp: Some(false), ..WebhookConfigChange::default() };
    h.router.update_config(config.id, relax).await.unwrap();
    accepted(h.router.receive_inbound(config.id, &signed(SECRET, b"[1]"), b"[1]").await);
}

#[tokio::test(start_paused = true)]
async fn with_an_inbound_secret_the_outbound_secret_never_verifies_inbound() {
    let h = Harness::with_defaults();
    let draft = WebhookConfigDraft {
        source_identifier: "github".into(),
        event_type: "push".into(),
        agent_intent: "review".into(),
        target_session: "s".into(),
        target_url: "https://receiver.example/hook".into(),
        secret: WebhookSecret::new(SECRET),
        inbound_secret: Some(WebhookSecret::new("inbound one")),
        inbound_require_timestamp: false,
        rate_limit_per_second: None,
    };
    let config = h.router.create_config(draft).await.unwrap();
    // An outbound delivery as its receiver got it, posted back in.
    let outbound = h.router.enqueue(config.id, "s".into(), r#"{"n":1}"#.into()).await.unwrap();
    h.router.wait_idle().await;
    let sent = h.transport.requests().pop().unwrap();
    let reflected = InboundSignature {
        observatory: Some(sent.signature.clone().into_bytes()),
        webhook_id: Some(outbound.id.to_string().into_bytes()),
        webhook_timestamp: Some(sent.timestamp.to_string().into_bytes()),
        webhook_signature: Some(sent.standard_signature.clone().into_bytes()),
    };
    let mismatch = Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason: SignatureError::Mismatch });
    assert_eq!(h.router.receive_inbound(config.id, &reflected, sent.body.as_bytes()).await, mismatch);
    let body = b"{}";
    accepted(h.router.receive_inbound(config.id, &signed("inbound one", body), body).await);

    // Rotated: the previous inbound secret keeps its grace; the outbound secret still never verifies inbound.
    let rotate_inbound = |secret: &str, revoke_previous| WebhookConfigChange {
        inbound_secret: Some(WebhookSecret::new(secret)),
        revoke_previous,
        ..WebhookConfigChange::default()
    };
    h.clock.advance(seconds(1));
    h.router.update_config(config.id, rotate_inbound("inbound two", false)).await.unwrap();
    for (secret, body) in [("inbound one", b"[1]"), ("inbound two", b"[2]")] {
        accepted(h.router.receive_inbound(config.id, &signed(secret, body), body).await);
    }
    assert_eq!(h.router.receive_inbound(config.id, &signed(SECRET, b"[3]"), b"[3]").await, mismatch);
    h.router.update_config(config.id, rotate_inbound("inbound three", true)).await.unwrap();
    assert_eq!(h.router.receive_inbound(config.id, &signed("inbound two", b"[4]"), b"[4]").await, mismatch);
    accepted(h.router.receive_inbound(config.id, &signed("inbound three", b"[5]"), b"[5]").await);
    // An inbound secret equal to the outbound one would let reflection back in.
    let same =
        WebhookConfigChange { secret: Some(WebhookSecret::new("inbound three")), ..WebhookConfigChange::default() };
    assert!(matches!(
        h.router.update_config(config.id, same).await,
        Err(WebhookError::InvalidConfig { field: "inbound_secret", .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn setting_the_first_inbound_secret_stops_the_outbound_secret_verifying_inbound_at_once() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    accepted(h.router.receive_inbound(config.id, &signed(SECRET, b"[1]"), b"[1]").await);
    let set =
        WebhookConfigChange { inbound_secret: Some(WebhookSecret::new("inbound")), ..WebhookConfigChange::default() };
    let updated = h.router.update_config(config.id, set).await.unwrap();
    assert_eq!(updated.previous_inbound_secret, None);
    let refused = h.router.receive_inbound(config.id, &signed(SECRET, b"[2]"), b"[2]").await;
    assert_eq!(
        refused,
        Err(WebhookError::SignatureMismatch { webhook_id: config.id, reason: SignatureError::Mismatch })
    );
    accepted(h.router.receive_inbound(config.id, &signed("inbound", b"[3]"), b"[3]").await);
}

#[tokio::test(start_paused = true)]
async fn revoke_previous_ends_the_grace_of_a_rotated_secret_at_once() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    h.router.update_config(config.id, rotate("second")).await.unwrap();
    accepted(h.router.receive_inbound(config.id, &signed(SECRET, b"[1]"), b"[1]").await);
    let revoke = WebhookConfigChange {
        secret: Some(WebhookSecret::new("third")),
        revoke_previous: true,
        ..WebhookConfigChange::default()
    };
    let revoked = h.router.update_config(config.id, revoke).await.unwrap();
    assert_eq!(revoked.previous_secret, None);
    for gone in [SECRET, "second"] {
        let refused = h.router.receive_inbound(config.id, &signed(gone, b"[2]"), b"[2]").await;
        assert!(matches!(refused, Err(WebhookError::SignatureMismatch { .. })), "{gone}: {refused:?}");
    }
    accepted(h.router.receive_inbound(config.id, &signed("third", b"[3]"), b"[3]").await);
    // Without a new secret, it ends the grace of the last rotation.
    h.router.update_config(config.id, rotate("fourth")).await.unwrap();
    accepted(h.router.receive_inbound(config.id, &signed("third", b"[4]"), b"[4]").await);
    let revoke_only = WebhookConfigChange { revoke_previous: true, ..WebhookConfigChange::default() };
    h.router.update_config(config.id, revoke_only).await.unwrap();
    assert!(h.router.receive_inbound(config.id, &signed("third", b"[5]"), b"[5]").await.is_err());
}

#[tokio::test(start_paused = true)]
async fn unknown_ids_cost_one_read_of_the_id_list_per_interval_and_a_config_created_elsewhere_is_found_after_it() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let reads = || h.router.stats().config_id_reads.get();
    assert_eq!(h.router.inbound_config(config.id).await.unwrap().id, config.id, "its own create is known at once");
    assert_eq!(reads(), 0);
    for id in 1_000..1_200 {
        assert_eq!(h.router.inbound_config(id).await, Err(WebhookError::UnknownWebhook(id)));
    }
    assert_eq!(reads(), 1, "two hundred made-up ids, one read");

    // Another instance (the same store) creates a config: unknown here until the interval has passed.
    let elsewhere = h
        .store
        .create_config(&gateway_core::NewWebhookConfig {
            source_identifier: "elsewhere".into(),
            event_type: "push".into(),
            agent_intent: "review".into(),
            target_session: "s".into(),
            target_url: "https://receiver.example/elsewhere".into(),
            secret: WebhookSecret::new(SECRET),
            created_at: h.clock.now(),
            inbound_secret: None,
            inbound_require_timestamp: false,
            rate_limit_per_second: None,
        })
        .unwrap();
    assert_eq!(h.router.inbound_config(elsewhere.id).await, Err(WebhookError::UnknownWebhook(elsewhere.id)));
    h.clock.advance(CONFIG_IDS_REFRESH_INTERVAL);
    assert_eq!(h.router.inbound_config(elsewhere.id).await.unwrap().id, elsewhere.id);
    assert_eq!(reads(), 2);
    // Deleted elsewhere: the read of the config finds nothing, and the id is forgotten.
    assert!(h.store.delete_config(elsewhere.id).unwrap());
    assert_eq!(h.router.inbound_config(elsewhere.id).await, Err(WebhookError::UnknownWebhook(elsewhere.id)));
    assert_eq!(h.router.inbound_config(elsewhere.id).await, Err(WebhookError::UnknownWebhook(elsewhere.id)));
    assert_eq!(reads(), 2, "a forgotten id within the interval reads nothing");
    h.router.delete_config(config.id).await.unwrap();
    assert_eq!(h.router.inbound_config(config.id).await, Err(WebhookError::UnknownWebhook(config.id)));
}

/// Requests that arrive while the first read of the id list is under way wait for it: none is answered as if the
/// store were down (a 503 `store_unavailable` under the issue's memory repro, from hundreds of first requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_the_first_read_of_the_id_list_wait_for_it() {
    let h = Harness::with_defaults();
    let router = Arc::new(h.router.clone());
    let lookups: Vec<_> = (0..64)
        .map(|n| {
            let router = Arc::clone(&router);
            tokio::spawn(async move { router.inbound_config(5_000 + n).await })
        })
        .collect();
    for lookup in lookups {
        let id = match lookup.await.unwrap() {
            Err(WebhookError::UnknownWebhook(id)) => id,
            other => panic!("an unknown id while the list was first read: {other:?}"),
        };
        assert!((5_000..5_064).contains(&id));
    }
    assert_eq!(router.stats().config_id_reads.get(), 1, "one read for all of them");
}

#[tokio::test(start_paused = true)]
async fn an_id_list_that_cannot_be_read_is_a_store_error_not_an_unknown_webhook() {
    let h = Harness::with_defaults();
    h.store.failure.set_failing(true);
    assert!(matches!(h.router.inbound_config(7).await, Err(WebhookError::Store(StoreError::Unavailable(_)))));
    assert!(
        matches!(h.router.inbound_config(8).await, Err(WebhookError::Store(StoreError::Unavailable(_)))),
        "within the interval, a set never read answers nothing"
    );
    h.store.failure.set_failing(false);
    h.clock.advance(CONFIG_IDS_REFRESH_INTERVAL);
    assert_eq!(h.router.inbound_config(7).await, Err(WebhookError::UnknownWebhook(7)));
}

/// The `X-Gateway-Epoch` of one recorded request, checked against its signature.
fn epoch_sent(request: &gateway_core::OutboundRequest) -> u64 {
    let id = request.delivery_id.to_string();
    let secret = WebhookSecret::new(SECRET);
    let verified =
        crate::epoch::verify(&secret, &id, request.timestamp, &request.epoch.to_string(), &request.epoch_signature);
    assert_eq!(verified, Ok(request.epoch), "the epoch's signature");
    request.epoch
}

/// Every attempt carries a leadership term (issue 19, fencing visible to receivers): a poll's attempt the term of
/// the fenced claim that took it (not whatever the instance's term is by then); an immediate attempt the
/// instance's term while it leads, else the newest the store has seen, read again once it is a second old.
#[tokio::test(start_paused = true)]
async fn each_attempt_carries_the_term_that_made_it_signed() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    // Leading under term 1: an immediate attempt carries it.
    h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(epoch_sent(&h.transport.requests()[0]), 1);

    // A poll under term 5 (a term the leadership fake does not know: the claim's own is what counts).
    h.due_row(&config, &config.target_url, h.clock.now());
    h.router.poll_once(FencingToken(5), &h.shutdown).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(epoch_sent(&h.transport.requests()[1]), 5);

    // A follower's immediate attempt: the store's newest term (5, raised by that poll's claim).
    h.leadership.set_leading(false);
    h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(epoch_sent(&h.transport.requests()[2]), 5);
    // A new term elsewhere is seen once the term read is a second old.
    h.store.epoch.admit(FencingToken(6)).unwrap();
    h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(epoch_sent(&h.transport.requests()[3]), 5, "read less than a second ago");
    tokio::time::advance(EPOCH_REFRESH).await;
    h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(epoch_sent(&h.transport.requests()[4]), 6);
}

#[tokio::test(start_paused = true)]
async fn recover_takes_more_than_a_batch_of_dead_rows_and_sends_them_within_the_rate() {
    let (h, transport) = timed_harness();
    let config = h.config().await;
    let other = h.config_for("gitlab", "https://other.example/hook").await;
    let window_start = h.clock.now() - seconds(3600);
    let dead_row = |config: &WebhookConfig| {
        let row = h.due_row(config, &config.target_url, h.clock.now() - seconds(60));
        h.store.put_delivery(Delivery {
            status: DeliveryStatus::Dead,
            attempt_count: 6,
            next_retry_at: None,
            ..h.row(row.id)
        });
        row.id
    };
    let recovered: Vec<i64> = (0..RECOVER_BATCH + 7).map(|_| dead_row(&config)).collect();
    let untouched = dead_row(&other);

    let count = h.router.recover(config.id, window_start, None, Duration::from_secs(86_400)).await.unwrap();
    assert_eq!(count, RECOVER_BATCH + 7, "every batch, not only the first");
    // Nothing attempted them yet but the dispatcher: they wait for its slots and the rate, not for the poll.
    h.until(600, || transport.starts().len() == RECOVER_BATCH + 7).await;
    h.router.wait_idle().await;
    let starts = transport.starts();
    assert_within_rate(&starts, DEFAULT_MAX_PER_SECOND);
    let mut attempted: Vec<i64> = starts.iter().map(|(id, _)| *id).collect();
    attempted.sort_unstable();
    assert_eq!(attempted, recovered, "each recovered delivery exactly once, the other config's none");
    assert!(recovered.iter().all(|id| h.row(*id).status == DeliveryStatus::Delivered));
    assert_eq!(h.row(untouched).status, DeliveryStatus::Dead);

    let refused = h.router.recover(config.id, h.clock.now(), Some(window_start), Duration::from_secs(86_400)).await;
    assert!(matches!(refused, Err(WebhookError::InvalidDelivery { field: "since", .. })), "{refused:?}");
    let too_long = h.router.recover(config.id, window_start, None, Duration::from_secs(60)).await;
    assert!(matches!(too_long, Err(WebhookError::InvalidDelivery { field: "since", .. })), "{too_long:?}");
    let unknown = h.router.recover(config.id + 100, window_start, None, Duration::from_secs(86_400)).await;
    assert_eq!(unknown, Err(WebhookError::UnknownWebhook(config.id + 100)));
}

/// A router whose requests are timed (tokio's paused clock), with `global` starts per second and `slots` in flight.
fn timed_harness_with(global: usize, slots: usize) -> (Harness, Arc<TimedTransport>) {
    let mut h = Harness::with_defaults();
    let transport = Arc::new(TimedTransport::default());
    let ports = RouterPorts {
        store: h.store.clone(),
        transport: transport.clone(),
        publisher: h.publisher.clone(),
        clock: Arc::new(h.clock.clone()),
        leadership: h.leadership.clone(),
        rate: Arc::new(SlidingWindowRate::per_second(global)),
    };
    h.router = WebhookRouter::new(ports, RouterConfig { max_per_cycle: slots, ..RouterConfig::default() });
    (h, transport)
}

impl Harness {
    /// A config of its own target, with `rate` starts per second of its own (or none).
    async fn config_with_rate(&self, source: &str, rate: Option<i64>) -> WebhookConfig {
        self.router
            .create_config(WebhookConfigDraft {
                source_identifier: source.into(),
                event_type: "push".into(),
                agent_intent: "review".into(),
                target_session: format!("{source}-session"),
                target_url: format!("https://{source}.example/hook"),
                secret: WebhookSecret::new(SECRET),
                inbound_secret: None,
                inbound_require_timestamp: false,
                rate_limit_per_second: rate,
            })
            .await
            .unwrap()
    }
}

/// The starts of the deliveries in `ids`, in order.
fn starts_of(starts: &[(i64, tokio::time::Instant)], ids: &[i64]) -> Vec<(i64, tokio::time::Instant)> {
    starts.iter().filter(|(id, _)| ids.contains(id)).copied().collect()
}

#[tokio::test(start_paused = true)]
async fn a_limited_endpoint_starts_at_most_its_rate_and_does_not_slow_an_unlimited_one() {
    let (h, transport) = timed_harness_with(100, 10);
    let limited = h.config_with_rate("slow", Some(2)).await;
    let open = h.config_with_rate("fast", None).await;
    let began = tokio::time::Instant::now();
    let (mut slow, mut fast) = (Vec::new(), Vec::new());
    for index in 0..20 {
        slow.push(h.router.enqueue(limited.id, format!("s{index}"), "{}".into()).await.unwrap().id);
        fast.push(h.router.enqueue(open.id, format!("f{index}"), "{}".into()).await.unwrap().id);
    }
    h.router.wait_idle().await;
    let starts = transport.starts();
    assert_eq!(starts.len(), 40, "every delivery attempted once");
    let slow_starts = starts_of(&starts, &slow);
    assert_within_rate(&slow_starts, 2);
    let last_slow = slow_starts.last().unwrap().1 - began;
    assert!(last_slow >= Duration::from_secs(9), "20 at 2/s take 9 s at least, took {last_slow:?}");
    assert!(last_slow < Duration::from_secs(11), "and the endpoint's rate is used: {last_slow:?}");
    let fast_starts = starts_of(&starts, &fast);
    assert!(
        fast_starts.iter().all(|(_, at)| *at - began < Duration::from_millis(100)),
        "the unlimited endpoint went at once: {:?}",
        fast_starts.iter().map(|(_, at)| *at - began).collect::<Vec<_>>()
    );
    assert!(h.store.deliveries().iter().all(|row| row.status == DeliveryStatus::Delivered));
}

#[tokio::test(start_paused = true)]
async fn an_endpoints_rate_holds_inside_a_busy_global_cap() {
    // The global cap (3/s) is the bottleneck: the limited endpoint's attempts wait long for a global start after
    // their endpoint allowed them, and its starts must still never come closer than its rate allows.
    let (h, transport) = timed_harness_with(3, 2);
    let limited = h.config_with_rate("slow", Some(2)).await;
    let open = h.config_with_rate("fast", None).await;
    let (mut slow, mut fast) = (Vec::new(), Vec::new());
    for index in 0..12 {
        slow.push(h.router.enqueue(limited.id, format!("s{index}"), "{}".into()).await.unwrap().id);
        fast.push(h.router.enqueue(open.id, format!("f{index}"), "{}".into()).await.unwrap().id);
    }
    h.router.wait_idle().await;
    let starts = transport.starts();
    assert_eq!(starts.len(), 24);
    assert_within_rate(&starts, 3);
    assert_within_rate(&starts_of(&starts, &slow), 2);
    assert_eq!(starts_of(&starts, &fast).len(), 12);
}

#[tokio::test(start_paused = true)]
async fn the_poll_passes_over_a_spent_endpoints_backlog_to_the_other_endpoints_due_rows() {
    let (h, transport) = timed_harness_with(100, 10);
    let limited = h.config_with_rate("slow", Some(2)).await;
    let open = h.config_with_rate("fast", None).await;
    // More of the limited endpoint's rows than one read of the poll takes, all older than the other's.
    let backlog = candidate_window(10) + 20;
    let now = h.clock.now();
    for index in 0..backlog {
        h.due_row(&limited, &limited.target_url, now - seconds(1000 - index as i64));
    }
    let others: Vec<i64> =
        (0..5).map(|index| h.due_row(&open, &open.target_url, now - seconds(10 - index)).id).collect();
    assert_eq!(h.poll().await, 7, "2 of the limited endpoint, then the 5 others");
    let attempted: Vec<i64> = transport.starts().iter().map(|(id, _)| *id).collect();
    assert!(others.iter().all(|id| attempted.contains(id)), "{attempted:?}");
    assert_eq!(h.poll().await, 0, "the limited endpoint is spent for this second");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(h.poll().await, 2, "its next second");
    assert_within_rate(&transport.starts(), 2 + others.len());
}

#[tokio::test(start_paused = true)]
async fn a_rate_set_removed_or_changed_applies_to_the_next_attempts() {
    let (h, transport) = timed_harness_with(100, 10);
    let config = h.config_with_rate("hook", None).await;
    let change = |rate| WebhookConfigChange { rate_limit_per_second: Some(rate), ..WebhookConfigChange::default() };
    let limited = h.router.update_config(config.id, change(Some(1))).await.unwrap();
    assert_eq!(limited.rate_limit_per_second, Some(1));
    let began = tokio::time::Instant::now();
    for index in 0..3 {
        h.router.enqueue(config.id, format!("s{index}"), "{}".into()).await.unwrap();
    }
    h.router.wait_idle().await;
    let last = transport.starts().last().unwrap().1 - began;
    assert!(last >= Duration::from_secs(2), "3 at 1/s: {last:?}");
    let open = h.router.update_config(config.id, change(None)).await.unwrap();
    assert_eq!(open.rate_limit_per_second, None);
    let again = tokio::time::Instant::now();
    for index in 0..3 {
        h.router.enqueue(config.id, format!("t{index}"), "{}".into()).await.unwrap();
    }
    h.router.wait_idle().await;
    assert!(transport.starts().iter().skip(3).all(|(_, at)| *at - again < Duration::from_millis(100)));
    let invalid = h.router.update_config(config.id, change(Some(0))).await.unwrap_err();
    assert!(matches!(invalid, WebhookError::InvalidConfig { field: "rate_limit_per_second", .. }), "{invalid:?}");
}

#[tokio::test(start_paused = true)]
async fn failures_in_a_row_disable_a_config_once_hold_its_deliveries_and_enabling_resumes_them() {
    let settings = RouterConfig {
        retry_schedule: RetrySchedule::from_seconds(&[1, 1, 1, 1, 1]).unwrap(),
        disable_after_failures: 3,
        ..Default::default()
    };
    let h = Harness::new(settings);
    h.transport.set_fallback(http_failure(500));
    let config = h.config().await;
    let first = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    let second = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    h.clock.advance(seconds(1));
    h.poll().await;
    let disabled_events = || {
        h.publisher
            .on_topic(&Topic::Webhooks)
            .into_iter()
            .filter(|event| matches!(event.payload, EventPayload::WebhookEndpointDisabled { .. }))
            .map(|event| event.payload)
            .collect::<Vec<_>>()
    };
    let stored = h.router.config(config.id).await.unwrap();
    assert!(!stored.enabled, "three failures in a row disable it");
    assert_eq!(stored.disabled_reason, Some(gateway_core::DisabledReason::Failing));
    let event = EventPayload::WebhookEndpointDisabled {
        webhook_id: config.id,
        // The poll's two attempts were recorded together: the third failure disabled it, the fourth still counts.
        consecutive_failures: 3,
        disabled_reason: "failing".into(),
    };
    assert_eq!(disabled_events(), [event], "announced once");
    let attempts = h.transport.request_count();
    for _ in 0..10 {
        h.clock.advance(seconds(60));
        h.poll().await;
    }
    let third = h.router.enqueue(config.id, "s".into(), "{}".into()).await.unwrap();
    h.router.wait_idle().await;
    assert_eq!(h.transport.request_count(), attempts, "nothing is attempted while it is disabled");
    for id in [first.id, second.id, third.id] {
        let row = h.row(id);
        assert!(row.status.is_awaiting_attempt() && row.next_retry_at.is_none(), "held: {row:?}");
    }
    h.transport.set_fallback(AttemptOutcome::Delivered { status_code: 200 });
    let enable = WebhookConfigChange { enabled: Some(true), ..WebhookConfigChange::default() };
    let resumed = h.router.update_config(config.id, enable).await.unwrap();
    assert!(resumed.enabled && resumed.consecutive_failures == 0);
    // The rate's window (tokio time) still holds the attempts made before the disable.
    tokio::time::advance(Duration::from_secs(1)).await;
    h.poll().await;
    for id in [first.id, second.id, third.id] {
        assert_eq!(h.row(id).status, DeliveryStatus::Delivered, "resumed and delivered");
    }
    assert_eq!(disabled_events().len(), 1);
    assert!(h.router.config(config.id).await.unwrap().last_success_at.is_some());
}

#[tokio::test(start_paused = true)]
async fn resumed_deliveries_go_out_oldest_first_under_the_cap_not_all_at_once() {
    let h = Harness::with_defaults();
    let config = h.config().await;
    let disable = WebhookConfigChange { enabled: Some(false), ..WebhookConfigChange::default() };
    assert!(!h.router.update_config(config.id, disable).await.unwrap().enabled);
    let start = h.clock.now();
    let ids: Vec<i64> =
        (0..12).map(|index| h.due_row(&config, &config.target_url, start + seconds(index)).id).collect();
    h.clock.set(start + seconds(3_600));
    assert_eq!(h.poll().await, 0, "held while disabled");
    let enable = WebhookConfigChange { enabled: Some(true), ..WebhookConfigChange::default() };
    h.router.update_config(config.id, enable).await.unwrap();
    let mut per_cycle = Vec::new();
    for _ in 0..4 {
        let before = h.transport.request_count();
        h.poll().await;
        per_cycle.push(h.transport.request_count() - before);
    }
    assert_eq!(per_cycle, [5, 5, 2, 0], "the backlog of a resumed config is paced like any other");
    let order: Vec<i64> = h.transport.requests().iter().map(|request| request.delivery_id).collect();
    let mut first_cycle = order[..5].to_vec();
    first_cycle.sort_unstable();
    assert_eq!(first_cycle, ids[..5], "the oldest five go first");
}
