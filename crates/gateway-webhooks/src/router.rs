//! The WebhookRouter: configs, enqueue, inbound verification, the rate-limited dispatcher and "Retry now".
//!
//! ## Dispatch
//! Every attempt, whether the immediate one after an enqueue or one the poll found due, needs one of
//! `max_per_cycle` slots (a semaphore), so there are never more attempts in flight than that. The poll takes at
//! most `max_per_cycle` due rows per cycle, and only as many as it holds free slots for, so a claimed row
//! never waits for a slot while its claim runs out.
//!
//! ## Claims
//! An attempt first claims its row: one atomic update moves `next_retry_at` to the end of a lease (the attempt
//! timeout plus [`LEASE_MARGIN`]), which hides the row from the poll and from other immediate attempts. The
//! outcome is written, with the attempt's history row, only while the row still carries that lease, and
//! before the slot is released. A crash mid-attempt leaves the row due again when the lease ends.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gateway_core::{
    AttemptOutcome, Clock, ComponentHealth, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryStatus, DeliveryUpdate,
    DueDelivery, Event, EventPayload, EventPublisher, FailureClass, IdempotencyKey, Leadership, NewDelivery,
    NewWebhookConfig, OutboundRequest, RetryNowOutcome, StoreError, Topic, WebhookConfig, WebhookStore,
    WebhookTransport, run_blocking,
};
use time::OffsetDateTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::envelope::inbound_envelope;
use crate::error::WebhookError;
use crate::input::{WebhookConfigDraft, check_delivery};
use crate::retry::{RetrySchedule, after_attempt};
use crate::signature::{sign, verify};

/// How often the poll looks for due deliveries (FR-10.12; default of `--webhook-poll-interval-ms`).
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);
/// Most attempts the poll starts per cycle, and most attempts in flight at once (FR-10.12; default of
/// `--webhook-max-per-cycle`).
pub const MAX_PER_CYCLE: usize = 5;
/// One attempt's time limit (default of `--webhook-timeout-ms`).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// A new delivery's `next_retry_at` is this long after `created_at` (FR-10.8): the immediate attempt normally
/// claims it first; if the process dies before that, the poll finds it then.
pub const ENQUEUE_SAFETY_NET: time::Duration = time::Duration::seconds(30);
/// A claim lasts the attempt timeout plus this, which covers recording the outcome after the response.
pub const LEASE_MARGIN: time::Duration = time::Duration::seconds(5);
/// The poll reads up to this many times `max_per_cycle` of the oldest due rows and picks among them round-robin
/// by target URL, so one endpoint's backlog cannot take every slot of a cycle.
pub const CANDIDATE_WINDOW_FACTOR: usize = 10;
/// Upper bound of the candidate window (rows read per poll).
pub const MAX_CANDIDATE_WINDOW: usize = 1000;
/// Immediate attempts waiting for a slot, at most; past that, new deliveries are left to the poll (their
/// `next_retry_at` safety net), which bounds the memory a burst of enqueues can take.
pub const MAX_WAITING_IMMEDIATE: usize = 10_000;
/// Longest extra wait after consecutive failed polls.
pub const MAX_POLL_BACKOFF: Duration = Duration::from_secs(60);
/// Tries at recording an attempt's outcome before leaving the row to its lease.
const RECORD_TRIES: u32 = 5;
const RECORD_FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The router's tunables; the defaults are the seeds' constants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterSettings {
    pub poll_interval: Duration,
    pub max_per_cycle: usize,
    pub retry_schedule: RetrySchedule,
    /// Used for the claim's length; the transport enforces it on the request.
    pub attempt_timeout: Duration,
}

impl Default for RouterSettings {
    fn default() -> Self {
        Self {
            poll_interval: POLL_INTERVAL,
            max_per_cycle: MAX_PER_CYCLE,
            retry_schedule: RetrySchedule::default(),
            attempt_timeout: ATTEMPT_TIMEOUT,
        }
    }
}

/// The ports the router works through.
#[derive(Debug, Clone)]
pub struct RouterPorts {
    pub store: Arc<dyn WebhookStore>,
    pub transport: Arc<dyn WebhookTransport>,
    pub publisher: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
}

/// A delivery with its attempt history, oldest attempt first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryDetail {
    pub delivery: Delivery,
    pub attempts: Vec<DeliveryAttempt>,
}

#[derive(Debug)]
struct Inner {
    ports: RouterPorts,
    settings: RouterSettings,
    slots: Arc<Semaphore>,
    waiting_immediate: AtomicUsize,
    health: ComponentHealth,
    attempts: TaskTracker,
    shutdown: CancellationToken,
}

/// The webhook router. Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct WebhookRouter {
    inner: Arc<Inner>,
}

/// The host of a target URL, which is what logs show: paths and queries of webhook URLs often carry tokens.
fn target_host(url: &str) -> String {
    url.parse::<http::Uri>().ok().and_then(|uri| uri.host().map(str::to_owned)).unwrap_or_else(|| "<invalid>".into())
}

/// Picks up to `take` ids from `due` (oldest first), one per target URL in turn: URLs in the order of their
/// oldest due row, each URL's rows oldest first.
pub fn round_robin(due: &[DueDelivery], take: usize) -> Vec<i64> {
    let mut order: Vec<VecDeque<i64>> = Vec::new();
    let mut by_url: HashMap<&str, usize> = HashMap::new();
    for row in due {
        let index = *by_url.entry(row.target_url.as_str()).or_insert_with(|| {
            order.push(VecDeque::new());
            order.len() - 1
        });
        order[index].push_back(row.id);
    }
    let mut picked = Vec::with_capacity(take.min(due.len()));
    while picked.len() < take {
        let before = picked.len();
        for queue in &mut order {
            if picked.len() == take {
                break;
            }
            if let Some(id) = queue.pop_front() {
                picked.push(id);
            }
        }
        if picked.len() == before {
            break;
        }
    }
    picked
}

/// How many due rows a poll reads to choose `max_per_cycle` from.
pub fn candidate_window(max_per_cycle: usize) -> usize {
    max_per_cycle.saturating_mul(CANDIDATE_WINDOW_FACTOR).min(MAX_CANDIDATE_WINDOW).max(max_per_cycle)
}

fn duration_to_time(duration: Duration) -> time::Duration {
    time::Duration::try_from(duration).unwrap_or(time::Duration::MAX)
}

impl WebhookRouter {
    /// A router; `shutdown` stops immediate attempts that are still waiting for a slot. Spawn [`Self::run`]
    /// for the poll.
    pub fn new(ports: RouterPorts, mut settings: RouterSettings, shutdown: CancellationToken) -> Self {
        // The binary refuses zeros at start; these keep an embedding caller's mistake from hanging the poll.
        settings.max_per_cycle = settings.max_per_cycle.clamp(1, Semaphore::MAX_PERMITS);
        settings.poll_interval = settings.poll_interval.max(Duration::from_millis(1));
        let slots = Arc::new(Semaphore::new(settings.max_per_cycle));
        Self {
            inner: Arc::new(Inner {
                ports,
                settings,
                slots,
                waiting_immediate: AtomicUsize::new(0),
                health: ComponentHealth::new("webhook_dispatcher"),
                attempts: TaskTracker::new(),
                shutdown,
            }),
        }
    }

    /// The dispatcher's readiness: running while [`Self::run`] runs, degraded while it cannot reach the store.
    pub fn health(&self) -> ComponentHealth {
        self.inner.health.clone()
    }

    pub fn settings(&self) -> &RouterSettings {
        &self.inner.settings
    }

    /// The clock's time at millisecond precision: every instant the router stores round-trips exactly through
    /// any store, which the lease comparison relies on.
    fn now(&self) -> OffsetDateTime {
        let now = self.inner.ports.clock.now();
        now.replace_nanosecond(now.nanosecond() / 1_000_000 * 1_000_000).unwrap_or(now)
    }

    fn lease_end(&self, now: OffsetDateTime) -> OffsetDateTime {
        now + duration_to_time(self.inner.settings.attempt_timeout) + LEASE_MARGIN
    }

    async fn store<T, F>(&self, work: F) -> Result<T, WebhookError>
    where
        F: FnOnce(&dyn WebhookStore) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let store = Arc::clone(&self.inner.ports.store);
        Ok(run_blocking(move || work(store.as_ref())).await??)
    }

    fn publish(&self, payload: EventPayload) {
        let event = Event::new(payload, self.now());
        if let Err(error) = self.inner.ports.publisher.publish(&Topic::Webhooks, &event) {
            warn!(event_type = event.event_type(), %error, "could not publish a webhook event");
        }
    }

    fn publish_status(&self, delivery: &Delivery) {
        self.publish(EventPayload::WebhookDeliveryStatus {
            delivery_id: delivery.id,
            webhook_id: delivery.webhook_id,
            session_id: delivery.session_id.clone(),
            status: delivery.status.as_str().to_owned(),
            attempt_count: delivery.attempt_count,
            next_retry_at: delivery.next_retry_at,
            error_detail: delivery.error_detail.clone(),
        });
    }

    // ---- configs ----

    pub async fn create_config(&self, draft: WebhookConfigDraft) -> Result<WebhookConfig, WebhookError> {
        draft.validate()?;
        let new = NewWebhookConfig {
            source_identifier: draft.source_identifier,
            event_type: draft.event_type,
            agent_intent: draft.agent_intent,
            target_session: draft.target_session,
            target_url: draft.target_url,
            secret: draft.secret,
            created_at: self.now(),
        };
        let created = self.store(move |store| store.create_config(&new)).await.map_err(|error| match error {
            WebhookError::Store(StoreError::Conflict(_)) => WebhookError::DuplicateConfig,
            other => other,
        })?;
        info!(webhook_id = created.id, target_host = %target_host(&created.target_url), "webhook config created");
        Ok(created)
    }

    pub async fn configs(&self) -> Result<Vec<WebhookConfig>, WebhookError> {
        self.store(|store| store.list_configs()).await
    }

    pub async fn config(&self, id: i64) -> Result<WebhookConfig, WebhookError> {
        self.store(move |store| store.config(id)).await?.ok_or(WebhookError::UnknownWebhook(id))
    }

    /// Deletes a config and, with it, its deliveries and their history.
    pub async fn delete_config(&self, id: i64) -> Result<(), WebhookError> {
        if self.store(move |store| store.delete_config(id)).await? {
            info!(webhook_id = id, "webhook config deleted with its deliveries");
            Ok(())
        } else {
            Err(WebhookError::UnknownWebhook(id))
        }
    }

    // ---- deliveries ----

    /// Enqueues an outbound delivery of `payload` (JSON text, sent byte for byte) to the config's target.
    pub async fn enqueue(
        &self,
        webhook_id: i64,
        session_id: String,
        payload: String,
    ) -> Result<Delivery, WebhookError> {
        Ok(self.enqueue_idempotent(webhook_id, session_id, payload, None).await?.delivery)
    }

    /// [`Self::enqueue`] under an `Idempotency-Key`: the first request with a key creates the delivery; a later
    /// one with the same key and the same webhook, session and payload gets that delivery back (`replayed`)
    /// and enqueues nothing; with anything different it is refused.
    pub async fn enqueue_idempotent(
        &self,
        webhook_id: i64,
        session_id: String,
        payload: String,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<Enqueued, WebhookError> {
        check_delivery(&session_id, &payload)?;
        let Some(key) = idempotency_key else {
            let config = self.config(webhook_id).await?;
            let delivery = self.create_delivery(&config, session_id, payload, self.now(), None).await?;
            return Ok(Enqueued { delivery, replayed: false });
        };
        let request = (webhook_id, session_id, payload);
        if let Some(existing) = self.delivery_by_key(&key).await? {
            return replay(existing, &request);
        }
        let config = self.config(webhook_id).await?;
        let (_, session_id, payload) = request.clone();
        match self.create_delivery(&config, session_id, payload, self.now(), Some(key.clone())).await {
            Ok(delivery) => Ok(Enqueued { delivery, replayed: false }),
            // A conflict is a deleted config, or the key taken by a concurrent request: the row tells which.
            Err(WebhookError::UnknownWebhook(id)) => match self.delivery_by_key(&key).await? {
                Some(existing) => replay(existing, &request),
                None => Err(WebhookError::UnknownWebhook(id)),
            },
            Err(other) => Err(other),
        }
    }

    async fn delivery_by_key(&self, key: &IdempotencyKey) -> Result<Option<Delivery>, WebhookError> {
        let key = key.clone();
        self.store(move |store| store.delivery_by_idempotency_key(&key)).await
    }

    /// Handles `POST /gateway/webhooks/{webhook_id}`: verifies `signature_header` against the raw `body`, wraps
    /// the body in the DESIGN.md §8 envelope and enqueues it for the config's target and session.
    pub async fn receive_inbound(
        &self,
        webhook_id: i64,
        signature_header: Option<&[u8]>,
        body: &[u8],
    ) -> Result<Delivery, WebhookError> {
        let config = self.config(webhook_id).await?;
        if let Err(reason) = verify(&config.secret, body, signature_header) {
            warn!(webhook_id, %reason, "inbound webhook refused");
            self.publish(EventPayload::WebhookSignatureFailure { webhook_id });
            return Err(WebhookError::SignatureMismatch { webhook_id, reason });
        }
        let received_at = self.now();
        let payload = inbound_envelope(&config, received_at, body);
        let session_id = config.target_session.clone();
        self.create_delivery(&config, session_id, payload, received_at, None).await
    }

    async fn create_delivery(
        &self,
        config: &WebhookConfig,
        session_id: String,
        payload: String,
        created_at: OffsetDateTime,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<Delivery, WebhookError> {
        let signature = sign(&config.secret, payload.as_bytes());
        let new = NewDelivery {
            webhook_id: config.id,
            session_id,
            payload,
            target_url: config.target_url.clone(),
            signature,
            created_at,
            next_retry_at: created_at + ENQUEUE_SAFETY_NET,
            idempotency_key,
        };
        let webhook_id = config.id;
        let row = self.store(move |store| store.insert_delivery(&new)).await.map_err(|error| match error {
            // The config was deleted since it was read.
            WebhookError::Store(StoreError::Conflict(_)) => WebhookError::UnknownWebhook(webhook_id),
            other => other,
        })?;
        info!(delivery_id = row.id, webhook_id, target_host = %target_host(&row.target_url), "webhook delivery enqueued");
        self.publish_status(&row);
        if let Some(due_by) = row.next_retry_at {
            self.spawn_immediate_attempt(row.id, due_by);
        }
        Ok(row)
    }

    pub async fn delivery(&self, id: i64) -> Result<DeliveryDetail, WebhookError> {
        let found = self
            .store(move |store| {
                let Some(delivery) = store.delivery(id)? else { return Ok(None) };
                Ok(Some(DeliveryDetail { attempts: store.attempts(id)?, delivery }))
            })
            .await?;
        found.ok_or(WebhookError::UnknownDelivery(id))
    }

    pub async fn deliveries(&self, filter: DeliveryFilter) -> Result<Vec<Delivery>, WebhookError> {
        self.store(move |store| store.list_deliveries(&filter)).await
    }

    /// "Retry now" (FR-10.12): a failed or dead delivery goes back to pending with the full set of attempts,
    /// due at once, and is tried through the dispatcher's slots.
    pub async fn retry_now(&self, id: i64) -> Result<Delivery, WebhookError> {
        let now = self.now();
        match self.store(move |store| store.retry_now(id, now)).await? {
            RetryNowOutcome::NotFound => Err(WebhookError::UnknownDelivery(id)),
            RetryNowOutcome::NotAllowed(status) => Err(WebhookError::RetryNotAllowed { id, status }),
            RetryNowOutcome::Reset(row) => {
                info!(delivery_id = id, "webhook delivery reset by retry now");
                self.publish_status(&row);
                self.spawn_immediate_attempt(id, now);
                Ok(row)
            }
        }
    }

    // ---- dispatch ----

    /// Tries a delivery as soon as a slot is free, if it is still due by `due_by` then.
    fn spawn_immediate_attempt(&self, id: i64, due_by: OffsetDateTime) {
        let inner = &self.inner;
        if inner.shutdown.is_cancelled() {
            return;
        }
        if inner.waiting_immediate.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING_IMMEDIATE {
            inner.waiting_immediate.fetch_sub(1, Ordering::SeqCst);
            debug!(delivery_id = id, "every slot is taken and the wait list is full; the poll will pick it up");
            return;
        }
        let router = self.clone();
        inner.attempts.spawn(async move {
            let inner = &router.inner;
            let permit = tokio::select! {
                biased;
                () = inner.shutdown.cancelled() => None,
                permit = Arc::clone(&inner.slots).acquire_owned() => permit.ok(),
            };
            inner.waiting_immediate.fetch_sub(1, Ordering::SeqCst);
            let Some(permit) = permit else { return };
            let lease = router.lease_end(router.now());
            match router.store(move |store| store.claim(&[id], due_by, lease)).await {
                Ok(mut claimed) => {
                    if let Some(row) = claimed.pop() {
                        router.attempt(row, permit).await;
                    }
                }
                Err(error) => {
                    warn!(delivery_id = id, %error, "could not claim a delivery for its immediate attempt; the poll will retry it");
                }
            }
        });
    }

    /// Makes one attempt of a claimed row, then records it; `slot` is released only after that.
    async fn attempt(&self, mut row: Delivery, slot: OwnedSemaphorePermit) {
        let Some(lease) = row.next_retry_at else { return };
        let target_host = target_host(&row.target_url);
        // The payload is only needed by the request; the row itself only feeds the status event afterwards.
        let request = OutboundRequest {
            delivery_id: row.id,
            url: row.target_url.clone(),
            body: std::mem::take(&mut row.payload),
            signature: row.signature.clone(),
        };
        let started_at = self.now();
        let timer = tokio::time::Instant::now();
        let transport = Arc::clone(&self.inner.ports.transport);
        let outcome = run_blocking(move || transport.post(&request)).await.unwrap_or_else(|error| {
            AttemptOutcome::failed(FailureClass::Connect, format!("the attempt did not complete: {error}"))
        });
        let duration_ms = i64::try_from(timer.elapsed().as_millis()).unwrap_or(i64::MAX);
        let transition = after_attempt(&outcome, row.attempt_count, self.now(), &self.inner.settings.retry_schedule);
        let (error_class, error_detail) = match &outcome {
            AttemptOutcome::Delivered { .. } => (None, None),
            AttemptOutcome::Failed { class, detail } => (Some(class.label()), detail.clone()),
        };
        let attempt = DeliveryAttempt {
            delivery_id: row.id,
            attempt_number: transition.attempt_count,
            started_at,
            duration_ms,
            status_code: outcome.status_code(),
            error_class,
            error_detail,
        };
        let update = DeliveryUpdate {
            status: transition.status,
            attempt_count: transition.attempt_count,
            last_attempted_at: started_at,
            next_retry_at: transition.next_retry_at,
            error_detail: transition.error_detail.clone(),
        };
        let recorded = self.record(&attempt, lease, &update).await;
        let delivery = Delivery {
            status: update.status,
            attempt_count: update.attempt_count,
            last_attempted_at: Some(started_at),
            next_retry_at: update.next_retry_at,
            error_detail: update.error_detail,
            ..row
        };
        match recorded {
            Some(true) => {
                info!(
                    delivery_id = delivery.id,
                    webhook_id = delivery.webhook_id,
                    target_host = %target_host,
                    attempt = delivery.attempt_count,
                    status = %delivery.status,
                    error = delivery.error_detail.as_deref().unwrap_or(""),
                    duration_ms,
                    "webhook attempt"
                );
                self.publish_status(&delivery);
                if delivery.status == DeliveryStatus::Dead {
                    warn!(delivery_id = delivery.id, webhook_id = delivery.webhook_id, "webhook delivery is dead");
                    self.publish(EventPayload::WebhookDlq {
                        delivery_id: delivery.id,
                        webhook_id: delivery.webhook_id,
                        session_id: delivery.session_id.clone(),
                        attempt_count: delivery.attempt_count,
                        error_detail: delivery.error_detail.clone(),
                    });
                }
            }
            Some(false) => info!(
                delivery_id = delivery.id,
                "the delivery changed during its attempt (reset or deleted); the attempt is history only"
            ),
            None => {}
        }
        drop(slot);
    }

    /// Records an attempt, retrying a failing store a few times (never past the lease). `None` when it gave
    /// up: the row then becomes due again when its lease ends.
    async fn record(&self, attempt: &DeliveryAttempt, lease: OffsetDateTime, update: &DeliveryUpdate) -> Option<bool> {
        let mut backoff = RECORD_FIRST_BACKOFF;
        for tries in 1..=RECORD_TRIES {
            let (attempt_row, new_state) = (attempt.clone(), update.clone());
            match self.store(move |store| store.record_attempt(&attempt_row, lease, &new_state)).await {
                Ok(applied) => return Some(applied),
                Err(error) => {
                    self.inner.health.degraded(format!("cannot record webhook attempts: {error}"));
                    let out_of_time = self.now() + duration_to_time(backoff) >= lease;
                    if tries == RECORD_TRIES || out_of_time {
                        error!(
                            delivery_id = attempt.delivery_id,
                            %error,
                            retry_at = %lease,
                            "could not record a webhook attempt; the delivery is due again when its claim ends"
                        );
                        return None;
                    }
                    warn!(delivery_id = attempt.delivery_id, %error, tries, "recording a webhook attempt failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
        None
    }

    /// One poll cycle: waits for a free slot, takes up to `max_per_cycle` free slots, claims as many due rows
    /// (round-robin across targets) and starts their attempts. Returns how many started.
    pub async fn poll_once(&self, shutdown: &CancellationToken) -> Result<usize, WebhookError> {
        let inner = &self.inner;
        let cap = inner.settings.max_per_cycle;
        let first = tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(0),
            permit = Arc::clone(&inner.slots).acquire_owned() => permit,
        };
        let Ok(first) = first else { return Ok(0) };
        let mut slots = vec![first];
        while slots.len() < cap {
            match Arc::clone(&inner.slots).try_acquire_owned() {
                Ok(permit) => slots.push(permit),
                Err(_) => break,
            }
        }
        let now = self.now();
        let window = candidate_window(cap);
        let due = self.store(move |store| store.due_deliveries(now, window)).await?;
        let picked = round_robin(&due, slots.len());
        if picked.is_empty() {
            return Ok(0);
        }
        let lease = self.lease_end(now);
        let claimed = self.store(move |store| store.claim(&picked, now, lease)).await?;
        let started = claimed.len();
        for (row, slot) in claimed.into_iter().zip(slots) {
            let router = self.clone();
            inner.attempts.spawn(async move { router.attempt(row, slot).await });
        }
        Ok(started)
    }

    /// The poll loop: a cycle every poll interval (the first at once, so rows that came due while the process
    /// was down go in the first cycle), only while this process is leader. Store failures are logged, mark the
    /// dispatcher degraded and back off (capped); the loop keeps running until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let inner = &self.inner;
        let _running = inner.health.start();
        let mut ticks = tokio::time::interval(inner.settings.poll_interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut failures: u32 = 0;
        info!(
            poll_interval_ms = inner.settings.poll_interval.as_millis(),
            max_per_cycle = inner.settings.max_per_cycle,
            "webhook dispatcher started"
        );
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                _ = ticks.tick() => {}
            }
            if inner.ports.leadership.current().is_none() {
                continue;
            }
            match self.poll_once(&shutdown).await {
                Ok(started) => {
                    failures = 0;
                    inner.health.recovered();
                    if started > 0 {
                        debug!(started, "webhook poll cycle");
                    }
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    inner.health.degraded(format!("webhook poll failed: {error}"));
                    let backoff =
                        gateway_core::capped_backoff(inner.settings.poll_interval, MAX_POLL_BACKOFF, failures);
                    warn!(%error, failures, backoff_ms = backoff.as_millis(), "webhook poll failed; backing off");
                    tokio::select! {
                        biased;
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(backoff) => {}
                    }
                }
            }
        }
        info!("webhook dispatcher stopped");
    }

    /// Waits until no attempt is running or waiting for a slot (attempts record their outcome before they end).
    /// For a graceful shutdown, cancel the shutdown token first.
    pub async fn wait_idle(&self) {
        self.inner.attempts.close();
        self.inner.attempts.wait().await;
        self.inner.attempts.reopen();
    }
}

/// What an idempotent enqueue produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub delivery: Delivery,
    /// The delivery was created by an earlier request with the same `Idempotency-Key`.
    pub replayed: bool,
}

/// The earlier delivery of an `Idempotency-Key`, if the retried request asks for the same thing. Payloads
/// compare as JSON values, so a client that re-serializes its retry with other spacing is not refused.
fn replay(
    existing: Delivery,
    (webhook_id, session_id, payload): &(i64, String, String),
) -> Result<Enqueued, WebhookError> {
    let as_json = |text: &str| serde_json::from_str::<serde_json::Value>(text).ok();
    let same_payload = existing.payload == *payload
        || matches!((as_json(&existing.payload), as_json(payload)), (Some(stored), Some(sent)) if stored == sent);
    if existing.webhook_id == *webhook_id && existing.session_id == *session_id && same_payload {
        Ok(Enqueued { delivery: existing, replayed: true })
    } else {
        Err(WebhookError::IdempotencyKeyReused)
    }
}

#[cfg(test)]
mod tests;
