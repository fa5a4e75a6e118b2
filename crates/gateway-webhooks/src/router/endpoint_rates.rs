//! Per-endpoint rates (a config's `rate_limit_per_second`, docs/webhooks.md "Per-endpoint rate"): what the
//! dispatcher remembers of them, and the waits of an attempt to a limited endpoint.
//!
//! An attempt to a limited endpoint needs a start of its endpoint's rate as well as a slot and a global start.
//! It must not hold a slot or a global start while it waits for its endpoint (a slow endpoint would hold back every
//! other), and its endpoint start must be recorded when the request really goes out (a start recorded early, then
//! a long wait for the global rate, would let the next window's starts follow it closer than the limit allows).
//! So an immediate attempt first waits for an endpoint start without anything else in hand (a reservation: at most
//! `limit` attempts per window of one endpoint go on to queue for slots), then takes a slot and a global start,
//! and then records its endpoint start anew at that instant (the reservation given back); should that be refused
//! (another instance took the place meanwhile) it gives the slot and the global start back and waits again. The
//! poll takes its endpoint starts right after its global ones, without waiting, and skips what is refused.
//!
//! Which configs are limited: the poll's due rows carry it; an immediate attempt asks this cache, which reads the
//! config when its entry is older than [`ENDPOINT_RATE_REFRESH_INTERVAL`], so a rate changed on another instance
//! applies here within that interval (one changed here applies at once).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gateway_core::runtime::sync::lock;
use gateway_core::{RateTicket, run_blocking};
use time::OffsetDateTime;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::debug;

use super::WebhookRouter;

/// Longest a config's rate changed on another instance goes unseen by this one's immediate attempts; also the
/// fewest seconds between two reads of one config's rate.
pub const ENDPOINT_RATE_REFRESH_INTERVAL: time::Duration = time::Duration::seconds(1);

/// Most configs whose rate is remembered before the stale entries are dropped.
const KEPT_RATES: usize = 10_000;

/// The longest an immediate attempt sleeps before it tries its endpoint again: a shared rate's refusal may name a
/// long wait that a cancelled start elsewhere shortens.
const LONGEST_ENDPOINT_PAUSE: Duration = Duration::from_secs(1);

/// A start of an endpoint's own rate, to give back if its request does not happen.
pub(crate) type EndpointStart = (i64, RateTicket);

#[derive(Debug, Default)]
pub(crate) struct EndpointRates {
    /// Each config's `rate_limit_per_second` and when it was read.
    known: Mutex<HashMap<i64, (Option<u32>, OffsetDateTime)>>,
    /// Endpoints whose rate refused the poll, until when: the poll's next read skips their rows.
    spent_until: Mutex<HashMap<i64, Instant>>,
    /// Held by the one attempt that reads a config's rate: a burst of attempts to one endpoint whose entry went
    /// stale makes one read, not one each.
    reading: tokio::sync::Mutex<()>,
    /// Immediate attempts waiting for their endpoint's rate: counted among the waiting immediate attempts (the
    /// bound of their memory) but not in the line for slots and global starts, so they do not keep other
    /// endpoints' deliveries off the fast path.
    pub(crate) waiting_for_endpoint: AtomicUsize,
}

impl EndpointRates {
    /// The config's rate if it was read within the refresh interval.
    pub(crate) fn fresh(&self, webhook_id: i64, now: OffsetDateTime) -> Option<Option<u32>> {
        let known = lock(&self.known);
        let (rate, read_at) = known.get(&webhook_id)?;
        (now < *read_at + ENDPOINT_RATE_REFRESH_INTERVAL && now >= *read_at).then_some(*rate)
    }

    fn remembered(&self, webhook_id: i64) -> Option<u32> {
        lock(&self.known).get(&webhook_id).and_then(|(rate, _)| *rate)
    }

    pub(crate) fn note(&self, webhook_id: i64, rate: Option<u32>, now: OffsetDateTime) {
        let mut known = lock(&self.known);
        if known.len() >= KEPT_RATES {
            known.retain(|_, (_, read_at)| now < *read_at + ENDPOINT_RATE_REFRESH_INTERVAL);
        }
        known.insert(webhook_id, (rate, now));
    }

    pub(crate) fn forget(&self, webhook_id: i64) {
        lock(&self.known).remove(&webhook_id);
        lock(&self.spent_until).remove(&webhook_id);
    }

    /// The endpoints whose rate is spent at `now`, as the poll last found them.
    pub(crate) fn spent(&self, now: Instant) -> Vec<i64> {
        let mut spent = lock(&self.spent_until);
        spent.retain(|_, until| *until > now);
        spent.keys().copied().collect()
    }

    pub(crate) fn spend(&self, webhook_id: i64, until: Instant) {
        lock(&self.spent_until).insert(webhook_id, until);
    }
}

impl WebhookRouter {
    /// The config's own rate: remembered if fresh, else read (a config that is gone, or a failed read, answers
    /// what was remembered, or none: the claim that follows finds out).
    pub(crate) async fn endpoint_limit(&self, webhook_id: i64) -> Option<u32> {
        let rates = &self.inner.endpoint_rates;
        if let Some(rate) = rates.fresh(webhook_id, self.now()) {
            return rate;
        }
        let _reading = rates.reading.lock().await;
        // Whoever held the lock before may have read it meanwhile.
        let now = self.now();
        if let Some(rate) = rates.fresh(webhook_id, now) {
            return rate;
        }
        match self.store(move |store| store.config(webhook_id)).await {
            Ok(Some(config)) => {
                rates.note(webhook_id, config.rate_limit_per_second, now);
                config.rate_limit_per_second
            }
            Ok(None) => None,
            Err(error) => {
                // Remembered as read now: a failing store is asked once per interval, not by every attempt.
                debug!(webhook_id, %error, "could not read a config's rate; the remembered one applies");
                let rate = rates.remembered(webhook_id);
                rates.note(webhook_id, rate, now);
                rate
            }
        }
    }

    /// One try at an endpoint's rate, off the runtime's workers when it is a round trip.
    pub(crate) async fn try_endpoint_start(&self, webhook_id: i64, limit: u32) -> Result<RateTicket, Duration> {
        let now = Instant::now().into_std();
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let rate = std::sync::Arc::clone(&self.inner.endpoint_rate);
        if !rate.is_shared() {
            return rate.try_start(webhook_id, limit, now);
        }
        // A lost blocking task counts as "not now": the caller tries again after the pause.
        run_blocking(move || rate.try_start(webhook_id, limit, now)).await.unwrap_or(Err(Duration::from_millis(100)))
    }

    /// Takes back an endpoint start that did not happen; a shared rate's round trip is made on the blocking pool,
    /// and nobody waits for it.
    pub(crate) fn cancel_endpoint_start(&self, (webhook_id, ticket): EndpointStart) {
        let rate = std::sync::Arc::clone(&self.inner.endpoint_rate);
        if rate.is_shared() {
            drop(tokio::task::spawn_blocking(move || rate.cancel(webhook_id, ticket)));
        } else {
            rate.cancel(webhook_id, ticket);
        }
    }

    /// [`Self::cancel_endpoint_start`], waiting until the place is free again.
    async fn give_back_endpoint_start(&self, webhook_id: i64, ticket: RateTicket) {
        let rate = std::sync::Arc::clone(&self.inner.endpoint_rate);
        if rate.is_shared() {
            // A lost blocking task leaves the start to leave the window by itself.
            let _ = run_blocking(move || rate.cancel(webhook_id, ticket)).await;
        } else {
            rate.cancel(webhook_id, ticket);
        }
    }

    /// Waits for a start of the endpoint's rate, holding nothing else meanwhile.
    async fn wait_for_endpoint(&self, webhook_id: i64, limit: u32) -> RateTicket {
        let waiting = &self.inner.endpoint_rates.waiting_for_endpoint;
        waiting.fetch_add(1, Ordering::SeqCst);
        // Counted down however the wait ends, also when the attempt is dropped at shutdown.
        let _counted = scopeguard(|| {
            waiting.fetch_sub(1, Ordering::SeqCst);
        });
        loop {
            match self.try_endpoint_start(webhook_id, limit).await {
                Ok(ticket) => return ticket,
                Err(pause) => tokio::time::sleep(pause.min(LONGEST_ENDPOINT_PAUSE)).await,
            }
        }
    }

    /// What an immediate attempt needs before it claims its row: a slot, a global start and, for a limited
    /// endpoint, an endpoint start recorded now (see the module documentation). `None` when the dispatcher is
    /// stopping or the slots are closed.
    pub(crate) async fn ready_for(
        &self,
        webhook_id: i64,
    ) -> Option<(OwnedSemaphorePermit, RateTicket, Option<EndpointStart>)> {
        let inner = &self.inner;
        let Some(limit) = self.endpoint_limit(webhook_id).await else {
            let slot = std::sync::Arc::clone(&inner.slots).acquire_owned().await.ok()?;
            let ticket = self.next_start(true).await?;
            return Some((slot, ticket, None));
        };
        loop {
            let reservation = self.wait_for_endpoint(webhook_id, limit).await;
            let slot = std::sync::Arc::clone(&inner.slots).acquire_owned().await.ok();
            let ticket = match slot {
                Some(_) => self.next_start(true).await,
                None => None,
            };
            self.give_back_endpoint_start(webhook_id, reservation).await;
            let (Some(slot), Some(ticket)) = (slot, ticket) else { return None };
            match self.try_endpoint_start(webhook_id, limit).await {
                Ok(started) => return Some((slot, ticket, Some((webhook_id, started)))),
                Err(pause) => {
                    self.cancel_start(ticket);
                    drop(slot);
                    tokio::time::sleep(pause.min(LONGEST_ENDPOINT_PAUSE)).await;
                }
            }
        }
    }
}

/// Runs `done` when dropped.
fn scopeguard<F: FnOnce()>(done: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(done) = self.0.take() {
                done();
            }
        }
    }
    Guard(Some(done))
}
