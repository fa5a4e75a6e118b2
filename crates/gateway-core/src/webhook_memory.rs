//! In-memory implementations of the webhook ports: [`InMemoryWebhookStore`] (same semantics as the SQL
//! adapter, including the claim protocol) and [`FakeTransport`] (scripted outcomes, recorded requests, and a
//! gate that holds attempts in flight so tests can observe concurrency).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use time::OffsetDateTime;

use crate::fencing::EpochGate;
use crate::ids::IdempotencyKey;
use crate::memory::{FailureSwitch, lock};
use crate::ports::{FencingEpoch, FencingToken, StoreError, StoreHealth};
use crate::webhook::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryStatus, DeliveryUpdate, DueDelivery,
    NewDelivery, NewWebhookConfig, OutboundRequest, RetryNowOutcome, WebhookConfig, WebhookStore, WebhookTransport,
};

#[derive(Debug, Default)]
struct Tables {
    configs: BTreeMap<i64, WebhookConfig>,
    deliveries: BTreeMap<i64, Delivery>,
    attempts: Vec<DeliveryAttempt>,
    last_config_id: i64,
    last_delivery_id: i64,
    delivery_by_key: BTreeMap<IdempotencyKey, i64>,
}

#[derive(Debug, Default)]
pub struct InMemoryWebhookStore {
    tables: Mutex<Tables>,
    pub failure: FailureSwitch,
    /// The fencing epoch of the poll's claims.
    pub epoch: EpochGate,
}

impl InMemoryWebhookStore {
    /// Every delivery, by id (test inspection).
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.tables).deliveries.values().cloned().collect()
    }

    /// Overwrites a delivery row as is (test set-up: a row as a crashed process left it).
    pub fn put_delivery(&self, delivery: Delivery) {
        let mut tables = lock(&self.tables);
        tables.last_delivery_id = tables.last_delivery_id.max(delivery.id);
        tables.deliveries.insert(delivery.id, delivery);
    }
}

/// The claim itself, under the caller's lock.
fn claim_rows(tables: &mut Tables, ids: &[i64], due_by: OffsetDateTime, lease_until: OffsetDateTime) -> Vec<Delivery> {
    let mut claimed = Vec::new();
    for id in ids {
        if let Some(delivery) = tables.deliveries.get_mut(id)
            && is_due(delivery, due_by)
        {
            delivery.next_retry_at = Some(lease_until);
            claimed.push(delivery.clone());
        }
    }
    claimed.sort_by_key(|delivery| delivery.id);
    claimed
}

fn is_due(delivery: &Delivery, due_by: OffsetDateTime) -> bool {
    delivery.status.is_awaiting_attempt() && delivery.next_retry_at.is_some_and(|at| at <= due_by)
}

impl WebhookStore for InMemoryWebhookStore {
    fn create_config(&self, config: &NewWebhookConfig) -> Result<WebhookConfig, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let duplicate = tables.configs.values().any(|existing| {
            existing.source_identifier == config.source_identifier && existing.event_type == config.event_type
        });
        if duplicate {
            return Err(StoreError::Conflict("webhook_configs (source_identifier, event_type) exists".into()));
        }
        tables.last_config_id += 1;
        let created = WebhookConfig {
            id: tables.last_config_id,
            source_identifier: config.source_identifier.clone(),
            event_type: config.event_type.clone(),
            agent_intent: config.agent_intent.clone(),
            target_session: config.target_session.clone(),
            target_url: config.target_url.clone(),
            secret: config.secret.clone(),
            created_at: config.created_at,
        };
        tables.configs.insert(created.id, created.clone());
        Ok(created)
    }

    fn config(&self, id: i64) -> Result<Option<WebhookConfig>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.tables).configs.get(&id).cloned())
    }

    fn list_configs(&self) -> Result<Vec<WebhookConfig>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.tables).configs.values().cloned().collect())
    }

    fn delete_config(&self, id: i64) -> Result<bool, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        if tables.configs.remove(&id).is_none() {
            return Ok(false);
        }
        let Tables { deliveries, attempts, delivery_by_key, .. } = &mut *tables;
        deliveries.retain(|_, delivery| delivery.webhook_id != id);
        delivery_by_key.retain(|_, delivery_id| deliveries.contains_key(delivery_id));
        attempts.retain(|attempt| deliveries.contains_key(&attempt.delivery_id));
        Ok(true)
    }

    fn prune_finished_deliveries(&self, created_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let finished: Vec<i64> = tables
            .deliveries
            .values()
            .filter(|delivery| !delivery.status.is_awaiting_attempt() && delivery.created_at < created_before)
            .map(|delivery| delivery.id)
            .take(limit)
            .collect();
        let Tables { deliveries, attempts, delivery_by_key, .. } = &mut *tables;
        for id in &finished {
            deliveries.remove(id);
        }
        delivery_by_key.retain(|_, delivery_id| deliveries.contains_key(delivery_id));
        attempts.retain(|attempt| deliveries.contains_key(&attempt.delivery_id));
        Ok(finished.len())
    }

    fn insert_delivery(&self, delivery: &NewDelivery) -> Result<Delivery, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        if !tables.configs.contains_key(&delivery.webhook_id) {
            return Err(StoreError::Conflict(format!("no webhook config {}", delivery.webhook_id)));
        }
        if let Some(key) = &delivery.idempotency_key
            && tables.delivery_by_key.contains_key(key)
        {
            return Err(StoreError::Conflict("idempotency key already used".to_owned()));
        }
        tables.last_delivery_id += 1;
        if let Some(key) = &delivery.idempotency_key {
            let id = tables.last_delivery_id;
            tables.delivery_by_key.insert(key.clone(), id);
        }
        let row = Delivery {
            id: tables.last_delivery_id,
            webhook_id: delivery.webhook_id,
            session_id: delivery.session_id.clone(),
            payload: delivery.payload.clone(),
            target_url: delivery.target_url.clone(),
            signature: delivery.signature.clone(),
            status: DeliveryStatus::Pending,
            attempt_count: 0,
            last_attempted_at: None,
            next_retry_at: Some(delivery.next_retry_at),
            created_at: delivery.created_at,
            error_detail: None,
        };
        tables.deliveries.insert(row.id, row.clone());
        Ok(row)
    }

    fn delivery_by_idempotency_key(&self, key: &IdempotencyKey) -> Result<Option<Delivery>, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        Ok(tables.delivery_by_key.get(key).and_then(|id| tables.deliveries.get(id)).cloned())
    }

    fn delivery(&self, id: i64) -> Result<Option<Delivery>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.tables).deliveries.get(&id).cloned())
    }

    fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        let after = filter.after_id.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        Ok(tables
            .deliveries
            .range((after, std::ops::Bound::Unbounded))
            .map(|(_, delivery)| delivery)
            .filter(|delivery| filter.session_id.as_ref().is_none_or(|session| &delivery.session_id == session))
            .filter(|delivery| filter.status.is_none_or(|status| delivery.status == status))
            .filter(|delivery| filter.created_from.is_none_or(|from| delivery.created_at >= from))
            .filter(|delivery| filter.created_before.is_none_or(|before| delivery.created_at < before))
            .take(filter.limit)
            .cloned()
            .collect())
    }

    fn attempts(&self, delivery_id: i64) -> Result<Vec<DeliveryAttempt>, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        Ok(tables.attempts.iter().filter(|attempt| attempt.delivery_id == delivery_id).cloned().collect())
    }

    fn due_deliveries(&self, now: OffsetDateTime, limit: usize) -> Result<Vec<DueDelivery>, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        let mut due: Vec<DueDelivery> = tables
            .deliveries
            .values()
            .filter(|delivery| is_due(delivery, now))
            .filter_map(|delivery| {
                Some(DueDelivery {
                    id: delivery.id,
                    target_url: delivery.target_url.clone(),
                    next_retry_at: delivery.next_retry_at?,
                })
            })
            .collect();
        due.sort_by_key(|row| (row.next_retry_at, row.id));
        due.truncate(limit);
        Ok(due)
    }

    fn claim(
        &self,
        ids: &[i64],
        due_by: OffsetDateTime,
        lease_until: OffsetDateTime,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.failure.check()?;
        Ok(claim_rows(&mut lock(&self.tables), ids, due_by, lease_until))
    }

    fn claim_fenced(
        &self,
        ids: &[i64],
        due_by: OffsetDateTime,
        lease_until: OffsetDateTime,
        token: FencingToken,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.failure.check()?;
        if ids.is_empty() {
            // Nothing to write, nothing to admit: as a database adapter skips the transaction.
            return Ok(Vec::new());
        }
        let mut tables = lock(&self.tables);
        self.epoch.admit(token)?;
        Ok(claim_rows(&mut tables, ids, due_by, lease_until))
    }

    fn record_attempt(
        &self,
        attempt: &DeliveryAttempt,
        lease: OffsetDateTime,
        update: &DeliveryUpdate,
    ) -> Result<bool, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let Some(delivery) = tables.deliveries.get_mut(&attempt.delivery_id) else {
            // The config (and with it the delivery) was deleted mid-attempt: nothing to record against.
            return Ok(false);
        };
        let still_ours = delivery.next_retry_at == Some(lease) && delivery.attempt_count == attempt.attempt_number - 1;
        if still_ours {
            delivery.status = update.status;
            delivery.attempt_count = update.attempt_count;
            delivery.last_attempted_at = Some(update.last_attempted_at);
            delivery.next_retry_at = update.next_retry_at;
            delivery.error_detail.clone_from(&update.error_detail);
        }
        tables.attempts.push(attempt.clone());
        Ok(still_ours)
    }

    fn retry_now(&self, id: i64, now: OffsetDateTime) -> Result<RetryNowOutcome, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let Some(delivery) = tables.deliveries.get_mut(&id) else {
            return Ok(RetryNowOutcome::NotFound);
        };
        if !delivery.status.allows_retry_now() {
            return Ok(RetryNowOutcome::NotAllowed(delivery.status));
        }
        delivery.status = DeliveryStatus::Pending;
        delivery.attempt_count = 0;
        delivery.next_retry_at = Some(now);
        Ok(RetryNowOutcome::Reset(delivery.clone()))
    }
}

impl FencingEpoch for InMemoryWebhookStore {
    fn newest_token(&self) -> Result<FencingToken, StoreError> {
        self.failure.check()?;
        Ok(self.epoch.newest())
    }
}

impl StoreHealth for InMemoryWebhookStore {
    fn ping(&self) -> Result<(), StoreError> {
        self.failure.check()
    }
}

#[derive(Debug, Default)]
struct Script {
    outcomes: VecDeque<AttemptOutcome>,
    fallback: Option<AttemptOutcome>,
    requests: Vec<OutboundRequest>,
    held: bool,
    in_flight: usize,
}

/// A transport that records every request and answers from a script: queued outcomes first, then the
/// fallback (a 200 unless changed). While [`Self::hold`] is on, attempts block inside `post` until
/// [`Self::release`], so a test can count how many are in flight at once.
#[derive(Debug, Default)]
pub struct FakeTransport {
    script: Mutex<Script>,
    changed: Condvar,
    max_in_flight: AtomicUsize,
}

impl FakeTransport {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues the outcome of the next attempt not yet scripted.
    pub fn push_outcome(&self, outcome: AttemptOutcome) {
        lock(&self.script).outcomes.push_back(outcome);
    }

    /// The outcome of every attempt once the queue is empty.
    pub fn set_fallback(&self, outcome: AttemptOutcome) {
        lock(&self.script).fallback = Some(outcome);
    }

    /// Every request received so far, in arrival order (an attempt is recorded when it starts).
    pub fn requests(&self) -> Vec<OutboundRequest> {
        lock(&self.script).requests.clone()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.script).requests.len()
    }

    /// The most attempts that were inside `post` at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        lock(&self.script).in_flight
    }

    /// Makes attempts block inside `post` until [`Self::release`].
    pub fn hold(&self) {
        lock(&self.script).held = true;
    }

    pub fn release(&self) {
        lock(&self.script).held = false;
        self.changed.notify_all();
    }

    /// Blocks the calling thread until at least `count` requests have started, or `limit` passes (a safety
    /// net so a broken test fails instead of hanging). Returns whether the count was reached. Call it from a
    /// blocking task, never on an async runtime worker.
    pub fn wait_for_requests(&self, count: usize, limit: Duration) -> bool {
        let script = lock(&self.script);
        let (script, _) = self
            .changed
            .wait_timeout_while(script, limit, |script| script.requests.len() < count)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        script.requests.len() >= count
    }
}

impl WebhookTransport for FakeTransport {
    fn post(&self, request: &OutboundRequest) -> AttemptOutcome {
        let mut script = lock(&self.script);
        script.requests.push(request.clone());
        script.in_flight += 1;
        self.max_in_flight.fetch_max(script.in_flight, Ordering::SeqCst);
        self.changed.notify_all();
        let mut script =
            self.changed.wait_while(script, |script| script.held).unwrap_or_else(std::sync::PoisonError::into_inner);
        script.in_flight -= 1;
        let fallback = script.fallback.clone().unwrap_or(AttemptOutcome::Delivered { status_code: 200 });
        script.outcomes.pop_front().unwrap_or(fallback)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use time::Duration as TimeDuration;
    use time::macros::datetime;

    use super::*;
    use crate::webhook::{FailureClass, WebhookSecret};

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    fn store_with_config() -> (InMemoryWebhookStore, WebhookConfig) {
        let store = InMemoryWebhookStore::default();
        let config = store
            .create_config(&NewWebhookConfig {
                source_identifier: "github".into(),
                event_type: "push".into(),
                agent_intent: "review".into(),
                target_session: "s-1".into(),
                target_url: "https://example.com/a".into(),
                secret: WebhookSecret::new("s"),
                created_at: START,
            })
            .unwrap();
        (store, config)
    }

    fn new_delivery(webhook_id: i64, session: &str, created_at: OffsetDateTime) -> NewDelivery {
        NewDelivery {
            webhook_id,
            session_id: session.into(),
            payload: "{}".into(),
            target_url: "https://example.com/a".into(),
            signature: "sha256=00".into(),
            created_at,
            next_retry_at: created_at + TimeDuration::seconds(30),
            idempotency_key: None,
            claimed: false,
        }
    }

    #[test]
    fn duplicate_source_and_event_type_conflict() {
        let (store, config) = store_with_config();
        let again = NewWebhookConfig {
            source_identifier: config.source_identifier.clone(),
            event_type: config.event_type.clone(),
            agent_intent: "x".into(),
            target_session: "y".into(),
            target_url: "https://example.com/b".into(),
            secret: WebhookSecret::new("t"),
            created_at: START,
        };
        assert!(matches!(store.create_config(&again), Err(StoreError::Conflict(_))));
        assert_eq!(store.list_configs().unwrap().len(), 1);
    }

    #[test]
    fn a_claim_hides_the_row_until_the_lease_ends_and_only_the_lease_holder_records() {
        let (store, config) = store_with_config();
        let row = store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
        let due_at = START + TimeDuration::seconds(30);
        assert!(store.due_deliveries(due_at - TimeDuration::seconds(1), 10).unwrap().is_empty());
        assert_eq!(store.due_deliveries(due_at, 10).unwrap().len(), 1);

        let lease = due_at + TimeDuration::seconds(40);
        let claimed = store.claim(&[row.id], due_at, lease).unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].next_retry_at, Some(lease));
        assert!(store.claim(&[row.id], due_at, lease).unwrap().is_empty(), "claimed twice");
        assert!(store.due_deliveries(lease - TimeDuration::seconds(1), 10).unwrap().is_empty());

        let attempt = DeliveryAttempt {
            delivery_id: row.id,
            attempt_number: 1,
            started_at: due_at,
            duration_ms: 5,
            status_code: Some(500),
            error_class: Some(FailureClass::Http(500).label()),
            error_detail: None,
        };
        let update = DeliveryUpdate {
            status: DeliveryStatus::Failed,
            attempt_count: 1,
            last_attempted_at: due_at,
            next_retry_at: Some(due_at + TimeDuration::seconds(30)),
            error_detail: Some("http_500".into()),
        };
        assert!(!store.record_attempt(&attempt, lease + TimeDuration::seconds(1), &update).unwrap());
        assert_eq!(store.delivery(row.id).unwrap().unwrap().attempt_count, 0, "a stale lease wrote");
        assert!(store.record_attempt(&attempt, lease, &update).unwrap());
        let stored = store.delivery(row.id).unwrap().unwrap();
        assert_eq!((stored.status, stored.attempt_count), (DeliveryStatus::Failed, 1));
        assert_eq!(store.attempts(row.id).unwrap().len(), 2, "both attempts are history");
    }

    #[test]
    fn retry_now_only_resets_failed_or_dead_rows() {
        let (store, config) = store_with_config();
        let row = store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
        assert_eq!(store.retry_now(row.id, START).unwrap(), RetryNowOutcome::NotAllowed(DeliveryStatus::Pending));
        assert_eq!(store.retry_now(999, START).unwrap(), RetryNowOutcome::NotFound);
        store.put_delivery(Delivery { status: DeliveryStatus::Dead, attempt_count: 6, next_retry_at: None, ..row });
        let later = START + TimeDuration::hours(9);
        let RetryNowOutcome::Reset(reset) = store.retry_now(1, later).unwrap() else { panic!("not reset") };
        assert_eq!((reset.status, reset.attempt_count, reset.next_retry_at), (DeliveryStatus::Pending, 0, Some(later)));
    }

    #[test]
    fn listing_filters_and_pages_by_id() {
        let (store, config) = store_with_config();
        for second in 0..6 {
            let session = if second % 2 == 0 { "even" } else { "odd" };
            store.insert_delivery(&new_delivery(config.id, session, START + TimeDuration::seconds(second))).unwrap();
        }
        let page = |after_id, limit| DeliveryFilter {
            session_id: Some("even".into()),
            status: Some(DeliveryStatus::Pending),
            created_from: Some(START),
            created_before: Some(START + TimeDuration::seconds(5)),
            after_id,
            limit,
        };
        let first: Vec<i64> = store.list_deliveries(&page(None, 2)).unwrap().iter().map(|d| d.id).collect();
        assert_eq!(first, [1, 3]);
        let second: Vec<i64> = store.list_deliveries(&page(Some(3), 2)).unwrap().iter().map(|d| d.id).collect();
        assert_eq!(second, [5]);
    }

    #[test]
    fn deleting_a_config_deletes_its_deliveries() {
        let (store, config) = store_with_config();
        store.insert_delivery(&new_delivery(config.id, "s", START)).unwrap();
        assert!(store.delete_config(config.id).unwrap());
        assert!(!store.delete_config(config.id).unwrap());
        assert!(store.deliveries().is_empty());
        assert!(matches!(store.insert_delivery(&new_delivery(config.id, "s", START)), Err(StoreError::Conflict(_))));
    }

    #[test]
    fn fake_transport_scripts_outcomes_and_counts_concurrency() {
        let transport = Arc::new(FakeTransport::new());
        transport.push_outcome(AttemptOutcome::Failed { class: FailureClass::Timeout, detail: None });
        let request = OutboundRequest { delivery_id: 1, url: "u".into(), body: "{}".into(), signature: "s".into() };
        assert_eq!(transport.post(&request), AttemptOutcome::Failed { class: FailureClass::Timeout, detail: None });
        assert_eq!(transport.post(&request), AttemptOutcome::Delivered { status_code: 200 });

        transport.hold();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let transport = Arc::clone(&transport);
                let request = request.clone();
                std::thread::spawn(move || transport.post(&request))
            })
            .collect();
        assert!(transport.wait_for_requests(5, Duration::from_secs(10)));
        assert_eq!(transport.in_flight(), 3);
        transport.release();
        for worker in workers {
            assert_eq!(worker.join().unwrap(), AttemptOutcome::Delivered { status_code: 200 });
        }
        assert_eq!(transport.max_in_flight(), 3);
        assert_eq!(transport.request_count(), 5);
    }
}
