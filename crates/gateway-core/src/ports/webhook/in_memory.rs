//! [`InMemoryWebhookStore`]: the webhook store in memory, with the database adapter's semantics, the claim
//! protocol included (`conformance::webhook` holds both to the same rules).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use time::OffsetDateTime;

use super::{
    AttemptRecord, AttemptRecorded, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryMaker, DeliveryStatus,
    DeliveryUpdate, DueDelivery, EndpointStats, FanOut, InboundInsert, NewDelivery, NewWebhookConfig, NewWebhookEvent,
    ReceiptKey, RecoverWindow, RetryNowOutcome, WebhookConfig, WebhookConfigChange, WebhookEvent, WebhookStore,
};
use crate::ids::IdempotencyKey;
use crate::ports::failure::FailureSwitch;
use crate::ports::leadership::{EpochGate, FencingEpoch, FencingToken};
use crate::ports::store::{StoreError, StoreHealth};
use crate::runtime::sync::lock;

#[derive(Debug, Default)]
struct Tables {
    configs: BTreeMap<i64, WebhookConfig>,
    deliveries: BTreeMap<i64, Delivery>,
    attempts: Vec<DeliveryAttempt>,
    last_config_id: i64,
    last_delivery_id: i64,
    delivery_by_key: BTreeMap<IdempotencyKey, i64>,
    /// Inbound receipts: `(webhook_id, key)` → `(delivery_id, received_at)`.
    receipts: BTreeMap<(i64, ReceiptKey), (i64, OffsetDateTime)>,
    /// Rows claimed by a poll, with the term of its claim, until an attempt's outcome or "Retry now" (or an
    /// unfenced claim) ends that claim.
    poll_claims: BTreeMap<i64, FencingToken>,
    events: BTreeMap<i64, WebhookEvent>,
    last_event_id: i64,
    /// Rows under any claim (a poll's, an immediate attempt's, an insert's), as a database's `claimed_until`:
    /// holding a disabled config's deliveries leaves them to their attempt's outcome.
    claimed: BTreeSet<i64>,
}

/// `webhook_configs`, `webhook_deliveries` and `webhook_delivery_attempts` in memory. [`Self::failure`] makes every
/// operation report [`StoreError::Unavailable`].
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

/// The claim itself, under the caller's lock: a poll's claim records its term (`token`), another claim none.
fn claim_rows(
    tables: &mut Tables,
    ids: &[i64],
    due_by: OffsetDateTime,
    lease_until: OffsetDateTime,
    token: Option<FencingToken>,
) -> Vec<Delivery> {
    let mut claimed = Vec::new();
    for id in ids {
        let Some(delivery) = tables.deliveries.get_mut(id) else { continue };
        if !is_due(delivery, due_by) {
            continue;
        }
        if !tables.configs.get(&delivery.webhook_id).is_some_and(|config| config.enabled) {
            // Due yet its config is disabled: a claim that lapsed (its process died) after the disable. Held now.
            delivery.next_retry_at = None;
            tables.claimed.remove(id);
            tables.poll_claims.remove(id);
            continue;
        }
        {
            delivery.next_retry_at = Some(lease_until);
            tables.claimed.insert(*id);
            claimed.push(delivery.clone());
            match token {
                Some(token) => tables.poll_claims.insert(*id, token),
                None => tables.poll_claims.remove(id),
            };
        }
    }
    claimed.sort_by_key(|delivery| delivery.id);
    claimed
}

fn is_due(delivery: &Delivery, due_by: OffsetDateTime) -> bool {
    delivery.status.is_awaiting_attempt() && delivery.next_retry_at.is_some_and(|at| at <= due_by)
}

/// Inserts a delivery under the caller's lock.
fn insert_row(tables: &mut Tables, delivery: &NewDelivery) -> Result<Delivery, StoreError> {
    if !tables.configs.contains_key(&delivery.webhook_id) {
        return Err(StoreError::Conflict(format!("no webhook config {}", delivery.webhook_id)));
    }
    if let Some(key) = &delivery.idempotency_key
        && tables.delivery_by_key.contains_key(key)
    {
        return Err(StoreError::Conflict("idempotency key already used".to_owned()));
    }
    let enabled = tables.configs.get(&delivery.webhook_id).is_some_and(|config| config.enabled);
    tables.last_delivery_id += 1;
    if enabled && delivery.claimed {
        let id = tables.last_delivery_id;
        tables.claimed.insert(id);
    }
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
        // A disabled config's new delivery is held from the start, whatever claim was asked for.
        next_retry_at: enabled.then_some(delivery.next_retry_at),
        created_at: delivery.created_at,
        error_detail: None,
    };
    tables.deliveries.insert(row.id, row.clone());
    Ok(row)
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
            previous_secret: None,
            secret_rotated_at: None,
            inbound_secret: config.inbound_secret.clone(),
            previous_inbound_secret: None,
            inbound_secret_rotated_at: None,
            inbound_require_timestamp: config.inbound_require_timestamp,
            rate_limit_per_second: config.rate_limit_per_second,
            enabled: true,
            disabled_reason: None,
            consecutive_failures: 0,
            last_success_at: None,
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

    fn config_ids(&self) -> Result<Vec<i64>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.tables).configs.keys().copied().collect())
    }

    fn update_config(
        &self,
        id: i64,
        change: &WebhookConfigChange,
        at: OffsetDateTime,
    ) -> Result<Option<WebhookConfig>, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let Some(config) = tables.configs.get_mut(&id) else { return Ok(None) };
        let was_enabled = config.enabled;
        *config = config.clone().changed(change, at);
        let changed = config.clone();
        match (was_enabled, changed.enabled) {
            (true, false) => hold(&mut tables, id),
            (false, true) => resume(&mut tables, id, at),
            _ => {}
        }
        for delivery in tables.deliveries.values_mut() {
            if delivery.webhook_id == id && delivery.status != DeliveryStatus::Delivered {
                delivery.target_url.clone_from(&changed.target_url);
            }
        }
        Ok(Some(changed))
    }

    fn delete_config(&self, id: i64) -> Result<bool, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        if tables.configs.remove(&id).is_none() {
            return Ok(false);
        }
        let Tables { deliveries, attempts, delivery_by_key, receipts, .. } = &mut *tables;
        receipts.retain(|(webhook_id, _), _| *webhook_id != id);
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

    fn insert_inbound_delivery(
        &self,
        delivery: &NewDelivery,
        keys: &[ReceiptKey],
        fresh_since: OffsetDateTime,
    ) -> Result<InboundInsert, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let held = keys.iter().find_map(|key| {
            let (delivery_id, received_at) = tables.receipts.get(&(delivery.webhook_id, key.clone()))?;
            (*received_at >= fresh_since).then_some(*delivery_id)
        });
        if let Some(delivery_id) = held {
            return Ok(InboundInsert::Duplicate { delivery_id });
        }
        let inserted = insert_row(&mut tables, delivery)?;
        for key in keys {
            tables.receipts.insert((delivery.webhook_id, key.clone()), (inserted.id, delivery.created_at));
        }
        Ok(InboundInsert::Inserted(inserted))
    }

    fn prune_inbound_receipts(&self, received_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let old: Vec<(i64, ReceiptKey)> = tables
            .receipts
            .iter()
            .filter(|(_, (_, received_at))| *received_at < received_before)
            .map(|(key, _)| key.clone())
            .take(limit)
            .collect();
        for key in &old {
            tables.receipts.remove(key);
        }
        Ok(old.len())
    }

    fn fan_out(
        &self,
        event: &NewWebhookEvent,
        max_deliveries: usize,
        delivery_for: &DeliveryMaker<'_>,
    ) -> Result<FanOut, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        if let Some(key) = &event.idempotency_key
            && let Some(existing) = tables.events.values().find(|stored| stored.idempotency_key.as_ref() == Some(key))
        {
            return Ok(FanOut::Existing(existing.clone()));
        }
        let matching: Vec<WebhookConfig> =
            tables.configs.values().filter(|config| event.reaches(config)).take(max_deliveries + 1).cloned().collect();
        if matching.len() > max_deliveries {
            return Ok(FanOut::TooWide { matching: matching.len() });
        }
        let event_id = tables.last_event_id + 1;
        // All or nothing: every row is checked before any is written.
        let rows: Vec<NewDelivery> = matching.iter().map(|config| delivery_for(config, event_id)).collect();
        for row in &rows {
            if let Some(key) = &row.idempotency_key
                && tables.delivery_by_key.contains_key(key)
            {
                return Err(StoreError::Conflict("idempotency key already used".to_owned()));
            }
        }
        let mut deliveries = Vec::with_capacity(rows.len());
        for row in &rows {
            deliveries.push(insert_row(&mut tables, row)?);
        }
        tables.last_event_id = event_id;
        let stored = WebhookEvent {
            id: event_id,
            event_type: event.event_type.clone(),
            source_identifier: event.source_identifier.clone(),
            request_digest: event.request_digest.clone(),
            idempotency_key: event.idempotency_key.clone(),
            delivery_ids: deliveries.iter().map(|delivery| delivery.id).collect(),
            created_at: event.created_at,
        };
        tables.events.insert(event_id, stored.clone());
        Ok(FanOut::Published { event: stored, deliveries })
    }

    fn webhook_event_by_key(&self, key: &IdempotencyKey) -> Result<Option<WebhookEvent>, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        Ok(tables.events.values().find(|event| event.idempotency_key.as_ref() == Some(key)).cloned())
    }

    fn insert_delivery(&self, delivery: &NewDelivery) -> Result<Delivery, StoreError> {
        self.failure.check()?;
        insert_row(&mut lock(&self.tables), delivery)
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

    fn count_deliveries(&self, status: DeliveryStatus) -> Result<u64, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        let count = tables.deliveries.values().filter(|delivery| delivery.status == status).count();
        Ok(u64::try_from(count).unwrap_or(u64::MAX))
    }

    fn count_due_deliveries(&self, now: OffsetDateTime) -> Result<u64, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        let count = tables.deliveries.values().filter(|delivery| is_due(delivery, now)).count();
        Ok(u64::try_from(count).unwrap_or(u64::MAX))
    }

    fn due_deliveries_skipping(
        &self,
        now: OffsetDateTime,
        limit: usize,
        skip_configs: &[i64],
    ) -> Result<Vec<DueDelivery>, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        let mut due: Vec<DueDelivery> = tables
            .deliveries
            .values()
            .filter(|delivery| is_due(delivery, now) && !skip_configs.contains(&delivery.webhook_id))
            .filter_map(|delivery| {
                Some(DueDelivery {
                    id: delivery.id,
                    target_url: delivery.target_url.clone(),
                    next_retry_at: delivery.next_retry_at?,
                    webhook_id: delivery.webhook_id,
                    rate_limit_per_second: tables
                        .configs
                        .get(&delivery.webhook_id)
                        .and_then(|config| config.rate_limit_per_second),
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
        Ok(claim_rows(&mut lock(&self.tables), ids, due_by, lease_until, None))
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
        Ok(claim_rows(&mut tables, ids, due_by, lease_until, Some(token)))
    }

    fn release_deposed_claims(&self, token: FencingToken, now: OffsetDateTime) -> Result<usize, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        self.epoch.admit(token)?;
        let Tables { deliveries, poll_claims, .. } = &mut *tables;
        let mut released = 0;
        poll_claims.retain(|id, claimed_under| {
            if *claimed_under >= token {
                return true;
            }
            if let Some(delivery) = deliveries.get_mut(id)
                && delivery.status.is_awaiting_attempt()
            {
                delivery.next_retry_at = Some(now);
                released += 1;
            }
            false
        });
        Ok(released)
    }

    fn record_attempts_counting(
        &self,
        records: &[AttemptRecord],
        disable_after_failures: u32,
    ) -> Result<Vec<AttemptRecorded>, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let mut recorded = Vec::with_capacity(records.len());
        let mut touched = BTreeSet::new();
        for record in records {
            let applied = record_one(&mut tables, &record.attempt, record.lease, &record.update);
            let disabled = match applied {
                None => None,
                Some(_) => {
                    let config = tables.configs.get_mut(&record.webhook_id);
                    config.and_then(|config| {
                        touched.insert(config.id);
                        config.count_attempt(&record.attempt, disable_after_failures)
                    })
                }
            };
            recorded.push(AttemptRecorded { applied: applied.unwrap_or(false), disabled });
        }
        for webhook_id in touched {
            if tables.configs.get(&webhook_id).is_some_and(|config| !config.enabled) {
                hold(&mut tables, webhook_id);
            }
        }
        Ok(recorded)
    }

    fn endpoint_stats(&self, since: OffsetDateTime) -> Result<BTreeMap<i64, EndpointStats>, StoreError> {
        self.failure.check()?;
        let tables = lock(&self.tables);
        let mut stats: BTreeMap<i64, EndpointStats> = BTreeMap::new();
        for attempt in tables.attempts.iter().filter(|attempt| attempt.started_at >= since) {
            let Some(delivery) = tables.deliveries.get(&attempt.delivery_id) else { continue };
            let entry = stats.entry(delivery.webhook_id).or_default();
            match attempt.error_class {
                None => entry.delivered += 1,
                Some(_) => entry.failed_attempts += 1,
            }
        }
        for delivery in tables.deliveries.values() {
            if delivery.status == DeliveryStatus::Dead && delivery.last_attempted_at.is_some_and(|at| at >= since) {
                stats.entry(delivery.webhook_id).or_default().dead += 1;
            }
        }
        Ok(stats)
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
        delivery.reset_for_retry(now);
        let webhook_id = delivery.webhook_id;
        tables.poll_claims.remove(&id);
        tables.claimed.remove(&id);
        if tables.configs.get(&webhook_id).is_some_and(|config| !config.enabled) {
            // Reset, but held like every delivery of its config until the config is enabled.
            hold(&mut tables, webhook_id);
        }
        let reset = tables.deliveries.get(&id).cloned().ok_or_else(|| StoreError::Internal("reset row gone".into()))?;
        Ok(RetryNowOutcome::Reset(reset))
    }

    fn recover_dead(
        &self,
        webhook_id: i64,
        window: &RecoverWindow,
        after_id: i64,
        now: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.failure.check()?;
        let mut tables = lock(&self.tables);
        let Tables { deliveries, poll_claims, claimed, .. } = &mut *tables;
        let mut recovered = Vec::new();
        for delivery in deliveries.range_mut(after_id.saturating_add(1)..).map(|(_, delivery)| delivery) {
            if recovered.len() == limit {
                break;
            }
            if delivery.webhook_id == webhook_id
                && delivery.status == DeliveryStatus::Dead
                && window.contains(delivery.created_at)
            {
                delivery.reset_for_retry(now);
                poll_claims.remove(&delivery.id);
                claimed.remove(&delivery.id);
                recovered.push(delivery.id);
            }
        }
        if tables.configs.get(&webhook_id).is_some_and(|config| !config.enabled) {
            // Recovered, but held like every delivery of its config until the config is enabled.
            hold(&mut tables, webhook_id);
        }
        Ok(recovered.iter().filter_map(|id| tables.deliveries.get(id).cloned()).collect())
    }
}

/// Holds a disabled config's deliveries awaiting an attempt, except those under a claim (their outcome decides).
fn hold(tables: &mut Tables, webhook_id: i64) {
    let Tables { deliveries, claimed, .. } = tables;
    for delivery in deliveries.values_mut() {
        if delivery.webhook_id == webhook_id && delivery.status.is_awaiting_attempt() && !claimed.contains(&delivery.id)
        {
            delivery.next_retry_at = None;
        }
    }
}

/// A resumed config's held deliveries are due at `now`.
fn resume(tables: &mut Tables, webhook_id: i64, now: OffsetDateTime) {
    for delivery in tables.deliveries.values_mut() {
        if delivery.webhook_id == webhook_id
            && delivery.status.is_awaiting_attempt()
            && delivery.next_retry_at.is_none()
        {
            delivery.next_retry_at = Some(now);
        }
    }
}

/// One attempt recorded under the caller's lock: `None` when the delivery is gone (nothing recorded), else whether
/// its outcome was applied.
fn record_one(
    tables: &mut Tables,
    attempt: &DeliveryAttempt,
    lease: OffsetDateTime,
    update: &DeliveryUpdate,
) -> Option<bool> {
    {
        let Tables { deliveries, attempts, poll_claims, claimed, .. } = tables;
        let Some(delivery) = deliveries.get_mut(&attempt.delivery_id) else {
            // The config (and with it the delivery) was deleted mid-attempt: nothing to record against.
            return None;
        };
        let still_ours = delivery.next_retry_at == Some(lease) && delivery.attempt_count == attempt.attempt_number - 1;
        if still_ours {
            claimed.remove(&attempt.delivery_id);
            poll_claims.remove(&attempt.delivery_id);
            delivery.status = update.status;
            delivery.attempt_count = update.attempt_count;
            delivery.last_attempted_at = Some(update.last_attempted_at);
            delivery.next_retry_at = update.next_retry_at;
            delivery.error_detail.clone_from(&update.error_detail);
            if let Some(signature) = &update.signature {
                delivery.signature.clone_from(signature);
            }
        }
        attempts.push(attempt.clone());
        Some(still_ours)
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

#[cfg(test)]
mod tests {
    use time::Duration;

    use super::*;
    use crate::conformance::START;
    use crate::ports::webhook::WebhookSecret;

    crate::webhook_store_conformance!(Some(Box::<InMemoryWebhookStore>::default()));

    #[test]
    fn a_put_row_is_served_as_is_and_the_switch_fails_every_call() {
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
                inbound_secret: None,
                inbound_require_timestamp: false,
                rate_limit_per_second: None,
            })
            .unwrap();
        // A row as a crashed process left it: claimed (due at the end of its lease) with one attempt made.
        let stranded = Delivery {
            id: 40,
            webhook_id: config.id,
            session_id: "s".into(),
            payload: "{}".into(),
            target_url: "https://example.com/a".into(),
            signature: "sha256=00".into(),
            status: DeliveryStatus::Failed,
            attempt_count: 1,
            last_attempted_at: Some(START),
            next_retry_at: Some(START + Duration::seconds(45)),
            created_at: START,
            error_detail: Some("timeout".into()),
        };
        store.put_delivery(stranded.clone());
        assert_eq!(store.deliveries(), std::slice::from_ref(&stranded));
        assert_eq!(store.due_deliveries(START + Duration::seconds(45), 10).unwrap()[0].id, 40);
        let next = store
            .insert_delivery(&NewDelivery {
                webhook_id: config.id,
                session_id: "s".into(),
                payload: "{}".into(),
                target_url: "https://example.com/a".into(),
                signature: "sha256=00".into(),
                created_at: START,
                next_retry_at: START,
                idempotency_key: None,
                claimed: false,
            })
            .unwrap();
        assert_eq!(next.id, 41, "ids continue after a put row");

        store.failure.set_failing(true);
        assert!(matches!(store.delivery(40), Err(StoreError::Unavailable(_))));
        assert!(store.claim_fenced(&[40], START + Duration::minutes(1), START, FencingToken(1)).is_err());
        assert!(store.newest_token().is_err());
        assert!(store.ping().is_err());
        store.failure.set_failing(false);
        assert_eq!(store.delivery(40).unwrap(), Some(stranded), "the refused claim changed nothing");
    }
}
