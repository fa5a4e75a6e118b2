//! The WebhookRouter: configs (`configs.rs`), deliveries and "Retry now" (`deliveries.rs`), and the dispatcher
//! that makes every outbound attempt, with its poll loop (`dispatch.rs`).
//!
//! ## Dispatch
//! Every attempt, whether the immediate one after an enqueue, an inbound webhook or "Retry now", or one the
//! poll found due, needs one of `max_per_cycle` in-flight slots and a start allowed by the [`DispatchRate`]
//! port (FR-10.12: at most `--webhook-max-per-second` requests start in any one-second window). The poll takes
//! at most `max_per_cycle` due rows per cycle, and only as many as it holds free slots and starts for, so a
//! claimed row never waits while its claim runs out. A config may have a rate of its own
//! (`rate_limit_per_second`), kept by the [`EndpointRate`] port inside the global one: see `endpoint_rates.rs`.
//!
//! ## Claims
//! An attempt first claims its row: one atomic update moves `next_retry_at` to the end of a lease (the attempt
//! timeout plus [`LEASE_MARGIN`]), which hides the row from the poll and from other immediate attempts. The
//! outcome is written, with the attempt's history row, only while the row still carries that lease, and
//! before the slot is released. A crash mid-attempt leaves the row due again when the lease ends.

mod configs;
mod deliveries;
mod dispatch;
mod endpoint_rates;
mod events;
mod failure_reports;
mod groups;
mod known_configs;
mod resend;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use gateway_core::runtime::stats::DeliveryStats;
use gateway_core::{
    Clock, ComponentHealth, Delivery, DeliveryAttempt, DispatchRate, DueDelivery, EndpointRate, Event, EventPayload,
    EventPublisher, InProcessEndpointRate, Leadership, StoreError, Topic, WebhookStore, WebhookTransport, run_blocking,
};
use time::OffsetDateTime;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

pub use deliveries::Enqueued;
pub use deliveries::Inbound;
pub use endpoint_rates::ENDPOINT_RATE_REFRESH_INTERVAL;
pub use events::{EventDraft, MAX_DELIVERIES_PER_EVENT, Published};
pub use failure_reports::SIGNATURE_FAILURE_REPORT_INTERVAL;
pub use known_configs::CONFIG_IDS_REFRESH_INTERVAL;
pub use resend::{RECOVER_BATCH, TEST_EVENT_TYPE};

use self::failure_reports::SignatureFailureReports;
use self::known_configs::KnownConfigs;

use crate::error::WebhookError;
use crate::retry::RetrySchedule;

/// How often the poll looks for due deliveries (FR-10.11; default of `--webhook-poll-interval-ms`).
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);
/// Most attempts the poll starts per cycle, and most attempts in flight at once (FR-10.12; default of
/// `--webhook-max-per-cycle`).
pub const DEFAULT_MAX_PER_CYCLE: usize = 5;
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
/// Reads of due rows one poll cycle makes at most: the first, then again without the endpoints whose own rate
/// (`rate_limit_per_second`) turned out spent, while slots and starts are left over.
pub const MAX_DUE_READS_PER_POLL: usize = 3;
/// Immediate attempts waiting for a slot, at most; past that, new deliveries are left to the poll (their
/// `next_retry_at` safety net), which bounds the memory a burst of enqueues can take.
pub const MAX_WAITING_IMMEDIATE: usize = 10_000;
/// Longest extra wait after consecutive failed polls: once the store answers again, retries resume (and the
/// dispatcher is ready again) within this, whatever the outage's length.
pub const MAX_POLL_BACKOFF: Duration = Duration::from_secs(5);
/// How stale the fencing epoch an instance that does not lead puts on its immediate attempts may be
/// (`X-Gateway-Epoch`): it reads the store's at most this often.
pub const EPOCH_REFRESH: Duration = Duration::from_secs(1);
/// Tries at recording an attempt's outcome before leaving the row to its lease.
pub(crate) const RECORD_TRIES: u32 = 5;
pub(crate) const RECORD_FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Outbound requests that may start in any one second, all causes together (FR-10.12; default of
/// `--webhook-max-per-second`). The binary hands it to the [`DispatchRate`] adapter it wires.
pub const DEFAULT_MAX_PER_SECOND: usize = 5;

/// Failed attempts in a row after which a config is disabled (`--webhook-disable-after-failures`; 0: never), as
/// Outpost does after 100.
pub const DEFAULT_DISABLE_AFTER_FAILURES: u32 = 100;

/// The router's tunables; the defaults are the constants of docs/requirements.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    pub poll_interval: Duration,
    pub max_per_cycle: usize,
    pub retry_schedule: RetrySchedule,
    /// Used for the claim's length; the transport enforces it on the request.
    pub attempt_timeout: Duration,
    /// Failed attempts in a row that disable a config (0: never).
    pub disable_after_failures: u32,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            poll_interval: POLL_INTERVAL,
            max_per_cycle: DEFAULT_MAX_PER_CYCLE,
            retry_schedule: RetrySchedule::default(),
            attempt_timeout: ATTEMPT_TIMEOUT,
            disable_after_failures: DEFAULT_DISABLE_AFTER_FAILURES,
        }
    }
}

/// What the router works through: the durable configs and deliveries, the HTTP client, the bus its events go
/// out on, the time, whether this process may poll (leadership), and the outbound rate.
#[derive(Debug, Clone)]
pub struct RouterPorts {
    pub store: Arc<dyn WebhookStore>,
    pub transport: Arc<dyn WebhookTransport>,
    pub publisher: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
    pub rate: Arc<dyn DispatchRate>,
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
    config: RouterConfig,
    slots: Arc<Semaphore>,
    /// Held by the attempt that is next to start: waiters for the rate queue here, first come first served.
    next_start: tokio::sync::Mutex<()>,
    waiting_immediate: AtomicUsize,
    /// Shared commits of enqueues, immediate claims and attempt outcomes.
    inserts: Arc<groups::Inserts>,
    claims: Arc<groups::Claims>,
    records: Arc<groups::Records>,
    signature_failures: SignatureFailureReports,
    /// The ids of the configs that exist, checked before an inbound body is read.
    known_configs: KnownConfigs,
    health: ComponentHealth,
    /// Attempts and their outcomes, for metrics.
    stats: DeliveryStats,
    attempts: TaskTracker,
    /// Cancelled when the poll loop ([`run`](gateway_core::BackgroundLoop::run)) stops: immediate attempts still
    /// waiting for a slot or the rate give up (their rows stay due for the next process).
    stopping: CancellationToken,
    /// The leadership term whose poll has released the claims of older terms (see [`WebhookRouter::poll_once`]).
    released_for: std::sync::Mutex<Option<gateway_core::FencingToken>>,
    /// The store's newest fencing epoch and when it was read: what an attempt made while this instance does not
    /// lead carries ([`WebhookRouter::epoch_of`]).
    known_epoch: tokio::sync::Mutex<Option<(tokio::time::Instant, u64)>>,
    /// Each endpoint's own rate (`rate_limit_per_second`), inside `ports.rate`.
    endpoint_rate: Arc<dyn EndpointRate>,
    endpoint_rates: endpoint_rates::EndpointRates,
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

/// The clock's time at millisecond precision.
fn millisecond_now(clock: &dyn Clock) -> OffsetDateTime {
    let now = clock.now();
    now.replace_nanosecond(now.nanosecond() / 1_000_000 * 1_000_000).unwrap_or(now)
}

fn duration_to_time(duration: Duration) -> time::Duration {
    time::Duration::try_from(duration).unwrap_or(time::Duration::MAX)
}

impl WebhookRouter {
    /// A router. Deliveries are attempted as soon as they are enqueued; run its loop
    /// ([`run`](gateway_core::BackgroundLoop::run)) once for the poll that retries them.
    pub fn new(ports: RouterPorts, config: RouterConfig) -> Self {
        Self::with_endpoint_rate(ports, config, Arc::new(InProcessEndpointRate::per_second()))
    }

    /// [`Self::new`] with the per-endpoint rates kept by `endpoint_rate` (cluster-wide when the global rate is)
    /// instead of in this process.
    pub fn with_endpoint_rate(
        ports: RouterPorts,
        mut config: RouterConfig,
        endpoint_rate: Arc<dyn EndpointRate>,
    ) -> Self {
        // The binary refuses zeros at start; these keep an embedding caller's mistake from hanging the poll.
        config.max_per_cycle = config.max_per_cycle.clamp(1, Semaphore::MAX_PERMITS);
        config.poll_interval = config.poll_interval.max(Duration::from_millis(1));
        let slots = Arc::new(Semaphore::new(config.max_per_cycle));
        let inserts =
            Arc::new(groups::inserts(Arc::clone(&ports.store), Arc::clone(&ports.clock), config.attempt_timeout));
        let claims =
            Arc::new(groups::claims(Arc::clone(&ports.store), Arc::clone(&ports.clock), config.attempt_timeout));
        let records = Arc::new(groups::records(Arc::clone(&ports.store), config.disable_after_failures));
        Self {
            inner: Arc::new(Inner {
                ports,
                config,
                slots,
                next_start: tokio::sync::Mutex::new(()),
                waiting_immediate: AtomicUsize::new(0),
                inserts,
                claims,
                records,
                signature_failures: SignatureFailureReports::default(),
                known_configs: KnownConfigs::default(),
                health: ComponentHealth::new("webhook_dispatcher"),
                stats: DeliveryStats::default(),
                attempts: TaskTracker::new(),
                stopping: CancellationToken::new(),
                released_for: std::sync::Mutex::new(None),
                known_epoch: tokio::sync::Mutex::new(None),
                endpoint_rate,
                endpoint_rates: endpoint_rates::EndpointRates::default(),
            }),
        }
    }

    /// The dispatcher's readiness: running while its loop ([`run`](gateway_core::BackgroundLoop::run)) runs, degraded
    /// while it cannot reach the store.
    pub fn health(&self) -> ComponentHealth {
        self.inner.health.clone()
    }

    /// The attempts this instance made, and where they left their deliveries.
    pub fn stats(&self) -> &DeliveryStats {
        &self.inner.stats
    }

    pub fn router_config(&self) -> &RouterConfig {
        &self.inner.config
    }

    /// The clock's time at millisecond precision: every instant the router stores round-trips exactly through
    /// any store, which the lease comparison relies on.
    fn now(&self) -> OffsetDateTime {
        millisecond_now(self.inner.ports.clock.as_ref())
    }

    fn lease_end(&self, now: OffsetDateTime) -> OffsetDateTime {
        now + duration_to_time(self.inner.config.attempt_timeout) + LEASE_MARGIN
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
}

#[cfg(test)]
mod tests;
