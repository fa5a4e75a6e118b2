//! The dispatcher: every outbound attempt, whatever started it, goes through here.
//!
//! An attempt needs, in this order: one of `max_per_cycle` in-flight slots (a semaphore), a start allowed by the
//! [`gateway_core::DispatchRate`] (at most `--webhook-max-per-second` starts in any one-second window, cluster-wide when the
//! adapter is), and the claim of its row. Waiters are served first come, first served at each step, so a burst
//! goes out oldest first; while they wait, their rows stay durable in the store.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gateway_core::runtime::stats::TalliedAttempt;
use gateway_core::{
    AttemptOutcome, AttemptRecord, BackgroundLoop, Delivery, DeliveryAttempt, DeliveryStatus, DeliveryUpdate,
    DueDelivery, EndpointDisabled, EventPayload, FailureClass, FencingToken, LeaderLoop, OutboundRequest, RateTicket,
    WebhookSecret, WebhookStore, run_blocking,
};
use time::OffsetDateTime;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::endpoint_rates::EndpointStart;
use super::groups::with_secrets;
use super::{
    EPOCH_REFRESH, MAX_DUE_READS_PER_POLL, MAX_POLL_BACKOFF, MAX_WAITING_IMMEDIATE, RECORD_FIRST_BACKOFF, RECORD_TRIES,
    WebhookRouter, candidate_window, duration_to_time, round_robin, target_host,
};
use crate::error::WebhookError;
use crate::retry::after_attempt;
use crate::signature::sign;
use crate::standard;

impl WebhookRouter {
    /// Tries a delivery as soon as a slot and the rate allow (its endpoint's too, `webhook_id`'s), if it is still
    /// due by `due_by` then.
    pub(super) fn spawn_immediate_attempt(&self, id: i64, webhook_id: i64, due_by: OffsetDateTime) {
        let inner = &self.inner;
        if inner.stopping.is_cancelled() {
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
            let ready = tokio::select! {
                biased;
                () = inner.stopping.cancelled() => None,
                ready = router.ready_for(webhook_id) => ready,
            };
            inner.waiting_immediate.fetch_sub(1, Ordering::SeqCst);
            let Some((slot, ticket, endpoint_start)) = ready else { return };
            let claimed = inner.claims.submit((id, due_by)).await;
            if !matches!(claimed, Ok(Some(_))) {
                router.cancel_start(ticket);
                if let Some(endpoint_start) = endpoint_start {
                    router.cancel_endpoint_start(endpoint_start);
                }
            }
            match claimed {
                Ok(Some((row, secret))) => router.attempt(row, secret, slot, None).await,
                // Attempted by someone else meanwhile (the poll, another instance), or gone.
                Ok(None) => {}
                Err(error) => {
                    warn!(delivery_id = id, %error, "could not claim a delivery for its immediate attempt; the poll will retry it");
                }
            }
        });
    }

    /// A slot and a start, if both are free right now and no earlier attempt is waiting for them (so taking them
    /// keeps first come, first served), for a delivery of `webhook_id` known to have no rate of its own (one with
    /// a rate, or not known, goes through the line, which paces it by its endpoint too).
    pub(super) fn start_now(&self, webhook_id: i64) -> Option<(OwnedSemaphorePermit, RateTicket)> {
        let inner = &self.inner;
        let waiting_for_endpoint = inner.endpoint_rates.waiting_for_endpoint.load(Ordering::SeqCst);
        let in_line = inner.waiting_immediate.load(Ordering::SeqCst).saturating_sub(waiting_for_endpoint);
        if inner.stopping.is_cancelled() || in_line > 0 {
            return None;
        }
        if inner.endpoint_rates.fresh(webhook_id, self.now()) != Some(None) {
            return None;
        }
        // A shared rate is a round trip, which a request does not wait for: its attempt goes through the line.
        if inner.ports.rate.is_shared() {
            return None;
        }
        let slot = Arc::clone(&inner.slots).try_acquire_owned().ok()?;
        // Not through the line of waiters (`next_start`): there is none, and the rate keeps its own count.
        let ticket = inner.ports.rate.try_start(tokio::time::Instant::now().into_std()).ok()?;
        Some((slot, ticket))
    }

    /// Takes back a start that did not happen; a shared rate's round trip is made on the blocking pool, and
    /// nobody waits for it.
    pub(super) fn cancel_start(&self, ticket: RateTicket) {
        let rate = Arc::clone(&self.inner.ports.rate);
        if rate.is_shared() {
            drop(tokio::task::spawn_blocking(move || rate.cancel(ticket)));
        } else {
            rate.cancel(ticket);
        }
    }

    /// One try at the rate, off the runtime's workers when it is a round trip.
    async fn try_start(&self) -> Result<RateTicket, Duration> {
        let now = tokio::time::Instant::now().into_std();
        let rate = Arc::clone(&self.inner.ports.rate);
        if !rate.is_shared() {
            return rate.try_start(now);
        }
        // A lost blocking task counts as "not now": the caller tries again after the pause.
        run_blocking(move || rate.try_start(now)).await.unwrap_or(Err(Duration::from_millis(100)))
    }

    /// Makes the attempt of a row this router has claimed, in the background; `claimed_under` is the term of the
    /// poll that claimed it, `None` for an immediate attempt's claim.
    pub(super) fn spawn_attempt(
        &self,
        row: Delivery,
        secret: WebhookSecret,
        slot: OwnedSemaphorePermit,
        claimed_under: Option<FencingToken>,
    ) {
        let router = self.clone();
        self.inner.attempts.spawn(async move { router.attempt(row, secret, slot, claimed_under).await });
    }

    /// The leadership term an attempt carries (`X-Gateway-Epoch`, docs/webhooks.md "Fencing"). A poll's attempt
    /// carries the term whose fenced claim it made, even if that term has ended since: that is what lets a
    /// receiver refuse a deposed leader's work. An immediate attempt is no leader's work (any instance makes them;
    /// the row claim keeps them exclusive): it carries this instance's term while it leads, else the newest term
    /// the store has seen, read at most every [`EPOCH_REFRESH`] (a term that began since may be missed for that
    /// long: a receiver that refuses the attempt then gets it again, with the newer term, at its retry).
    async fn epoch_of(&self, claimed_under: Option<FencingToken>) -> u64 {
        if let Some(FencingToken(term)) = claimed_under.or_else(|| self.inner.ports.leadership.current()) {
            return term;
        }
        // Held across the read: the attempts that find it stale meanwhile wait for this read instead of each
        // making its own.
        let mut known = self.inner.known_epoch.lock().await;
        let now = tokio::time::Instant::now();
        if known.is_none_or(|(read_at, _)| now.duration_since(read_at) >= EPOCH_REFRESH) {
            match self.store(|store| store.newest_token()).await {
                Ok(FencingToken(newest)) => *known = Some((now, newest)),
                // The last one read, if any, still stands (0 before any): the attempt goes out all the same.
                Err(error) => debug!(%error, "could not read the fencing epoch for an attempt's X-Gateway-Epoch"),
            }
        }
        known.map_or(0, |(_, epoch)| epoch)
    }

    /// The next start the rate allows, first come first served among everything that waits for one. With `wait`
    /// false, `None` at once when no start is free now; otherwise it waits until one is.
    pub(super) async fn next_start(&self, wait: bool) -> Option<RateTicket> {
        let inner = &self.inner;
        let _turn = if wait { inner.next_start.lock().await } else { inner.next_start.try_lock().ok()? };
        loop {
            match self.try_start().await {
                Ok(ticket) => return Some(ticket),
                Err(_) if !wait => return None,
                Err(pause) => tokio::time::sleep(pause).await,
            }
        }
    }

    /// Makes one attempt of a claimed row, signed with `secret` (its config's, read when the row was claimed),
    /// then records it; `slot` is released only after that.
    async fn attempt(
        &self,
        mut row: Delivery,
        secret: WebhookSecret,
        slot: OwnedSemaphorePermit,
        claimed_under: Option<FencingToken>,
    ) {
        let Some(lease) = row.next_retry_at else { return };
        let target_host = target_host(&row.target_url);
        let epoch = self.epoch_of(claimed_under).await;
        let started_at = self.now();
        // Signed at send time: the secret may have been rotated since the row was stored, and the Standard
        // Webhooks signature covers the send time. Its timestamp is the attempt's `started_at` (in seconds), which
        // the attempt history shows, so an operator can recompute both signatures from the inspector.
        let timestamp = started_at.unix_timestamp();
        let signature = sign(&secret, row.payload.as_bytes());
        let standard_signature = standard::sign(&secret, &row.id.to_string(), timestamp, row.payload.as_bytes());
        let epoch_signature = crate::epoch::sign(&secret, &row.id.to_string(), timestamp, epoch);
        let resigned = (signature != row.signature).then(|| signature.clone());
        // The payload is only needed by the request; the row itself only feeds the status event afterwards.
        let request = OutboundRequest {
            delivery_id: row.id,
            url: row.target_url.clone(),
            body: std::mem::take(&mut row.payload),
            signature,
            timestamp,
            standard_signature,
            epoch,
            epoch_signature,
        };
        let timer = tokio::time::Instant::now();
        let transport = Arc::clone(&self.inner.ports.transport);
        let outcome = run_blocking(move || transport.post(&request)).await.unwrap_or_else(|error| {
            AttemptOutcome::failed(FailureClass::Connect, format!("the attempt did not complete: {error}"))
        });
        let duration_ms = i64::try_from(timer.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.inner.stats.attempts.increment();
        let transition = after_attempt(&outcome, row.attempt_count, self.now(), &self.inner.config.retry_schedule);
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
            signature: resigned,
        };
        let recorded = self.record(row.webhook_id, &attempt, lease, &update).await;
        let delivery = Delivery {
            signature: update.signature.clone().unwrap_or(row.signature.clone()),
            status: update.status,
            attempt_count: update.attempt_count,
            last_attempted_at: Some(started_at),
            next_retry_at: update.next_retry_at,
            error_detail: update.error_detail,
            ..row
        };
        match recorded {
            Some(true) => {
                let stats = &self.inner.stats;
                match delivery.status {
                    DeliveryStatus::Delivered => stats.delivered.increment(),
                    DeliveryStatus::Dead => stats.dead.increment(),
                    DeliveryStatus::Failed | DeliveryStatus::Pending => stats.failed_retrying.increment(),
                }
                stats.by_config.count(
                    delivery.webhook_id,
                    match delivery.status {
                        DeliveryStatus::Delivered => TalliedAttempt::Delivered,
                        DeliveryStatus::Dead => TalliedAttempt::Dead,
                        DeliveryStatus::Failed | DeliveryStatus::Pending => TalliedAttempt::FailedRetrying,
                    },
                );
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

    /// The `webhook_endpoint_disabled` event of the disable an attempt's record made: the store reports each disable
    /// once, to the one record that made it, so the event goes out once whichever instance recorded it.
    fn announce_disabled(&self, disabled: &EndpointDisabled) {
        warn!(
            webhook_id = disabled.webhook_id,
            consecutive_failures = disabled.consecutive_failures,
            "webhook config disabled after failed attempts in a row; its deliveries are held until it is enabled"
        );
        self.publish(EventPayload::WebhookEndpointDisabled {
            webhook_id: disabled.webhook_id,
            consecutive_failures: disabled.consecutive_failures,
            disabled_reason: disabled.reason.as_str().to_owned(),
        });
    }

    /// Records an attempt, retrying a failing store a few times (never past the lease). `None` when it gave
    /// up: the row then becomes due again when its lease ends.
    async fn record(
        &self,
        webhook_id: i64,
        attempt: &DeliveryAttempt,
        lease: OffsetDateTime,
        update: &DeliveryUpdate,
    ) -> Option<bool> {
        let mut backoff = RECORD_FIRST_BACKOFF;
        for tries in 1..=RECORD_TRIES {
            let record = AttemptRecord { webhook_id, attempt: attempt.clone(), lease, update: update.clone() };
            match self.inner.records.submit(record).await {
                Ok(recorded) => {
                    if let Some(disabled) = recorded.disabled {
                        self.announce_disabled(&disabled);
                    }
                    return Some(recorded.applied);
                }
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

    /// Up to `take` of the due rows (round-robin across targets, as [`round_robin`]) whose endpoints allow a start
    /// now: a row of a limited endpoint takes one of its endpoint's starts, without waiting; a refusal marks the
    /// endpoint spent (its other rows are passed over, this cycle and in the reads of the next cycles until its
    /// wait is over). When rows were passed over and fewer than `take` are picked, the due rows are read again
    /// without the spent endpoints (at most [`MAX_DUE_READS_PER_POLL`] reads), so that one endpoint's backlog,
    /// oldest of all, cannot fill every read and starve the other endpoints.
    async fn pick_within_endpoint_rates(
        &self,
        mut due: Vec<DueDelivery>,
        window: usize,
        take: usize,
    ) -> Vec<(i64, Option<EndpointStart>)> {
        let rates = &self.inner.endpoint_rates;
        let mut picks: Vec<(i64, Option<EndpointStart>)> = Vec::with_capacity(take);
        let mut spent: HashSet<i64> = HashSet::new();
        for read in 1..=MAX_DUE_READS_PER_POLL {
            let now = self.now();
            let mut passed_over = false;
            let by_id: HashMap<i64, &DueDelivery> = due.iter().map(|row| (row.id, row)).collect();
            for id in round_robin(&due, due.len()) {
                if picks.len() == take {
                    break;
                }
                let Some(row) = by_id.get(&id) else { continue };
                rates.note(row.webhook_id, row.rate_limit_per_second, now);
                if picks.iter().any(|(picked, _)| *picked == id) {
                    continue;
                }
                let Some(limit) = row.rate_limit_per_second else {
                    picks.push((id, None));
                    continue;
                };
                if spent.contains(&row.webhook_id) {
                    passed_over = true;
                    continue;
                }
                match self.try_endpoint_start(row.webhook_id, limit).await {
                    Ok(ticket) => picks.push((id, Some((row.webhook_id, ticket)))),
                    Err(wait) => {
                        spent.insert(row.webhook_id);
                        rates.spend(row.webhook_id, tokio::time::Instant::now() + wait);
                        passed_over = true;
                    }
                }
            }
            if picks.len() == take || !passed_over || read == MAX_DUE_READS_PER_POLL {
                break;
            }
            let skip: Vec<i64> = spent.iter().copied().collect();
            let due_by = self.now();
            match self.store(move |store| store.due_deliveries_skipping(due_by, window, &skip)).await {
                Ok(more) => due = more,
                Err(error) => {
                    debug!(%error, "could not read more due deliveries past spent endpoints; the next cycle will");
                    break;
                }
            }
        }
        picks
    }

    /// One poll cycle: first in a new leadership term, releases the claims the polls of older terms left (a leader
    /// that died mid-attempt: its deliveries are due again at once, not when their claims end); then waits for a
    /// free slot, takes up to `max_per_cycle` free slots, reads the due rows, waits for a start the rate allows
    /// and takes as many more as are free, claims that many rows (round-robin across targets) and starts their
    /// attempts. Returns how many started.
    pub async fn poll_once(&self, token: FencingToken, shutdown: &CancellationToken) -> Result<usize, WebhookError> {
        let inner = &self.inner;
        if *gateway_core::runtime::sync::lock(&inner.released_for) != Some(token) {
            let now = self.now();
            let released = self.store(move |store| store.release_deposed_claims(token, now)).await?;
            if released > 0 {
                info!(released, term = token.0, "took over webhook deliveries claimed by a deposed leader");
            }
            *gateway_core::runtime::sync::lock(&inner.released_for) = Some(token);
        }
        let cap = inner.config.max_per_cycle;
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
        let window = candidate_window(cap);
        let now = self.now();
        let skip = inner.endpoint_rates.spent(tokio::time::Instant::now());
        let due = self.store(move |store| store.due_deliveries_skipping(now, window, &skip)).await?;
        let wanted = slots.len().min(due.len());
        if wanted == 0 {
            return Ok(0);
        }
        let first_start = tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(0),
            ticket = self.next_start(true) => ticket,
        };
        let mut tickets: Vec<RateTicket> = first_start.into_iter().collect();
        while tickets.len() < wanted {
            match self.next_start(false).await {
                Some(ticket) => tickets.push(ticket),
                None => break,
            }
        }
        let picks = self.pick_within_endpoint_rates(due, window, tickets.len()).await;
        for ticket in tickets.split_off(picks.len()) {
            self.cancel_start(ticket);
        }
        let picked: Vec<i64> = picks.iter().map(|(id, _)| *id).collect();
        // The clock has moved while waiting for the rate; rows due by the read are still due now.
        let now = self.now();
        let lease = self.lease_end(now);
        let claim =
            move |store: &dyn WebhookStore| with_secrets(store, store.claim_fenced(&picked, now, lease, token)?);
        let claimed = match self.store(claim).await {
            Ok(claimed) => claimed,
            Err(error) => {
                tickets.into_iter().for_each(|ticket| self.cancel_start(ticket));
                picks.into_iter().filter_map(|(_, start)| start).for_each(|start| self.cancel_endpoint_start(start));
                return Err(error);
            }
        };
        let started = claimed.len();
        for ticket in tickets.split_off(started) {
            self.cancel_start(ticket);
        }
        let claimed_ids: HashSet<i64> = claimed.iter().map(|(row, _)| row.id).collect();
        for (_, start) in picks.into_iter().filter(|(id, _)| !claimed_ids.contains(id)) {
            if let Some(start) = start {
                self.cancel_endpoint_start(start);
            }
        }
        for ((row, secret), slot) in claimed.into_iter().zip(slots) {
            self.spawn_attempt(row, secret, slot, Some(token));
        }
        Ok(started)
    }

    /// Waits until no attempt is running or waiting for a slot (attempts record their outcome before they end).
    /// For a graceful shutdown, cancel the shutdown token first.
    pub async fn wait_idle(&self) {
        self.inner.attempts.close();
        self.inner.attempts.wait().await;
        self.inner.attempts.reopen();
    }
}

impl BackgroundLoop for WebhookRouter {
    fn name(&self) -> &'static str {
        "webhook_dispatcher"
    }

    /// The poll loop: a cycle every poll interval (the first at once, so rows that came due while the process
    /// was down go in the first cycle), only while this process is leader. Store failures are logged, mark the
    /// dispatcher degraded and back off (capped); the loop keeps running until `shutdown`.
    async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        info!(
            poll_interval_ms = inner.config.poll_interval.as_millis(),
            max_per_cycle = inner.config.max_per_cycle,
            "webhook dispatcher started"
        );
        let poll = LeaderLoop {
            pass: "webhook poll",
            interval: inner.config.poll_interval,
            first_backoff: inner.config.poll_interval,
            max_backoff: MAX_POLL_BACKOFF,
            health: &inner.health,
            leadership: inner.ports.leadership.as_ref(),
        };
        let stop = &shutdown;
        poll.run(&shutdown, |token| async move {
            let started = self.poll_once(token, stop).await?;
            if started > 0 {
                debug!(started, "webhook poll cycle");
            }
            Ok::<_, WebhookError>(())
        })
        .await;
        // Immediate attempts still waiting for a slot or a start give up; their rows stay due in the store.
        inner.stopping.cancel();
        info!("webhook dispatcher stopped");
    }
}
