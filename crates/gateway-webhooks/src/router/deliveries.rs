//! Deliveries: enqueued by an operator, routed from a verified inbound webhook, reset by "Retry now", and
//! read back by the forensic inspector. Each new or reset delivery is handed to the dispatcher at once.

use gateway_core::{
    Delivery, DeliveryFilter, EventPayload, IdempotencyKey, InboundInsert, RateTicket, RetryNowOutcome, StoreError,
    WebhookConfig, WebhookSecret,
};
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info, warn};

use super::groups::{DeliveryDraft, new_row, signed};
use super::known_configs::Lookup;
use super::{DeliveryDetail, WebhookRouter, target_host};
use crate::envelope::inbound_envelope;
use crate::error::WebhookError;
use crate::input::check_delivery;
use crate::replay::{INBOUND_REPLAY_WINDOW, receipt_keys};
use crate::signature::{InboundSignature, accepted_secrets};

impl WebhookRouter {
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
            let delivery =
                self.create_delivery(DeliveryDraft::new(webhook_id, session_id, payload, self.now())).await?;
            return Ok(Enqueued { delivery, replayed: false });
        };
        let request = (webhook_id, session_id, payload);
        if let Some(existing) = self.delivery_by_key(&key).await? {
            return replay(existing, &request);
        }
        let (_, session_id, payload) = request.clone();
        let draft = DeliveryDraft {
            idempotency_key: Some(key.clone()),
            ..DeliveryDraft::new(webhook_id, session_id, payload, self.now())
        };
        match self.create_delivery(draft).await {
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

    /// The config of an inbound webhook, looked up before its body is read (DESIGN.md §14): an id that is not in
    /// the set of known config ids is [`WebhookError::UnknownWebhook`] without a store read (the set is read again
    /// at most once per [`super::CONFIG_IDS_REFRESH_INTERVAL`], `known_configs`); a known one is read from the store,
    /// so its secrets are current.
    pub async fn inbound_config(&self, webhook_id: i64) -> Result<WebhookConfig, WebhookError> {
        if !self.is_known_config(webhook_id).await? {
            return Err(WebhookError::UnknownWebhook(webhook_id));
        }
        match self.store(move |store| store.config(webhook_id)).await? {
            Some(config) => Ok(config),
            None => {
                // Deleted on another instance since this one read the ids.
                self.inner.known_configs.remove(webhook_id);
                Err(WebhookError::UnknownWebhook(webhook_id))
            }
        }
    }

    async fn is_known_config(&self, id: i64) -> Result<bool, WebhookError> {
        let known = &self.inner.known_configs;
        let not_loaded =
            || WebhookError::Store(StoreError::Unavailable("the webhook config ids are not read yet".into()));
        match known.lookup(id, self.now()) {
            Lookup::Known => return Ok(true),
            Lookup::Unknown => return Ok(false),
            // Never read: the first read may be under way (its reader holds the lock), so wait for its outcome
            // rather than answer as if the store were down.
            Lookup::NotLoaded | Lookup::ReadDue => {}
        }
        let _writing = known.writing.lock().await;
        // Whoever held the lock before may have read the list meanwhile.
        let now = self.now();
        match known.lookup(id, now) {
            Lookup::Known => return Ok(true),
            Lookup::Unknown => return Ok(false),
            Lookup::NotLoaded => return Err(not_loaded()),
            Lookup::ReadDue => {}
        }
        known.reading(now);
        self.inner.stats.config_id_reads.increment();
        let ids = self.store(|store| store.config_ids()).await?;
        known.replace(ids);
        Ok(known.lookup(id, now) == Lookup::Known)
    }

    /// Handles `POST /gateway/webhooks/{webhook_id}`: [`Self::inbound_config`], then [`Self::receive_inbound_for`].
    /// A caller that must not read the body of a request for an unknown id calls the two itself.
    pub async fn receive_inbound(
        &self,
        webhook_id: i64,
        signature: &InboundSignature,
        body: &[u8],
    ) -> Result<Inbound, WebhookError> {
        let config = self.inbound_config(webhook_id).await?;
        self.receive_inbound_for(config, signature, body).await
    }

    /// Verifies the signature headers against the raw `body` (either scheme, or only Standard Webhooks with
    /// `inbound_require_timestamp`; the inbound secret when the config has one, else the secret; the previous one
    /// too during its grace), then either answers [`Inbound::Duplicate`] (the same request was accepted within
    /// [`INBOUND_REPLAY_WINDOW`], `crate::replay`) or wraps the body in the inbound envelope (docs/webhooks.md) and
    /// enqueues it for the config's target and session, with its receipts, in one store transaction.
    pub async fn receive_inbound_for(
        &self,
        config: WebhookConfig,
        signature: &InboundSignature,
        body: &[u8],
    ) -> Result<Inbound, WebhookError> {
        let webhook_id = config.id;
        let now = self.now();
        let secrets = accepted_secrets(&config, now);
        let verified = match signature.verify(&secrets, config.inbound_require_timestamp, body, now) {
            Ok(verified) => verified,
            Err(reason) => {
                if let Some(suppressed) = self.inner.signature_failures.failure(webhook_id, self.now()) {
                    warn!(webhook_id, %reason, suppressed, "inbound webhook refused (signature)");
                    self.publish(EventPayload::WebhookSignatureFailure { webhook_id });
                }
                return Err(WebhookError::SignatureMismatch { webhook_id, reason });
            }
        };
        let keys = receipt_keys(&verified);
        let received_at = self.now();
        let payload = inbound_envelope(&config, received_at, body);
        let session_id = config.target_session.clone();
        self.inner.endpoint_rates.note(webhook_id, config.rate_limit_per_second, received_at);
        let ready = self.start_now(webhook_id);
        let draft = DeliveryDraft {
            claimed: ready.is_some(),
            ..DeliveryDraft::new(webhook_id, session_id, payload, received_at)
        };
        let row = new_row(&config, draft, self.lease_end(received_at));
        let fresh_since = received_at - INBOUND_REPLAY_WINDOW;
        let inserted = self.store(move |store| store.insert_inbound_delivery(&row, &keys, fresh_since)).await;
        let refused = match inserted {
            Ok(InboundInsert::Inserted(row)) => {
                self.hand_over(&row, config.secret, ready);
                return Ok(Inbound::Accepted(row));
            }
            Ok(InboundInsert::Duplicate { delivery_id }) => {
                self.inner.stats.inbound_duplicates.increment();
                debug!(webhook_id, delivery_id, "inbound webhook is a duplicate; nothing stored");
                Ok(Inbound::Duplicate { delivery_id })
            }
            // The config was deleted since it was read.
            Err(WebhookError::Store(StoreError::Conflict(_))) => Err(WebhookError::UnknownWebhook(webhook_id)),
            Err(error) => Err(error),
        };
        if let Some((_, ticket)) = ready {
            self.cancel_start(ticket);
        }
        refused
    }

    /// Writes a delivery (sharing the commit with concurrent ones) and hands it to the dispatcher. When a slot and a
    /// start are free right now and nobody waits for them, the row is written already claimed and its attempt
    /// starts at once: one store write fewer than claiming it afterwards.
    pub(super) async fn create_delivery(&self, mut draft: DeliveryDraft) -> Result<Delivery, WebhookError> {
        let ready = self.start_now(draft.webhook_id);
        draft.claimed = ready.is_some();
        let inserted = self.inner.inserts.submit(draft).await.map_err(WebhookError::from).and_then(|outcome| outcome);
        let (row, secret) = match inserted {
            Ok(inserted) => inserted,
            Err(error) => {
                if let Some((_, ticket)) = ready {
                    self.cancel_start(ticket);
                }
                return Err(error);
            }
        };
        self.hand_over(&row, secret.clone(), ready);
        Ok(signed(row, &secret))
    }

    /// A new row goes to the dispatcher: its attempt starts at once when it was inserted claimed with a slot and a
    /// start in hand (`ready`), else it waits for them.
    fn hand_over(&self, row: &Delivery, secret: WebhookSecret, ready: Option<(OwnedSemaphorePermit, RateTicket)>) {
        info!(delivery_id = row.id, webhook_id = row.webhook_id, target_host = %target_host(&row.target_url), "webhook delivery enqueued");
        self.publish_status(row);
        // Written claimed: inserted with a slot and a start, and not held.
        let stats = &self.inner.stats;
        if ready.is_some() && row.next_retry_at.is_some() {
            &stats.enqueued_claimed
        } else {
            &stats.enqueued_unclaimed
        }
        .increment();
        match (ready, row.next_retry_at) {
            // Held (its config is disabled): the store refused the claim it was inserted with.
            (Some((_slot, ticket)), None) => self.cancel_start(ticket),
            (Some((slot, _started)), _) => self.spawn_attempt(row.clone(), secret, slot, None),
            (None, Some(due_by)) => self.spawn_immediate_attempt(row.id, row.webhook_id, due_by),
            (None, None) => {}
        }
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
                self.hand_over_reset(&row, now);
                Ok(row)
            }
        }
    }

    /// A row reset by "Retry now" or recover, due at `now`, goes to the dispatcher: it is tried as soon as a slot
    /// and the rate allow.
    pub(super) fn hand_over_reset(&self, row: &Delivery, now: time::OffsetDateTime) {
        self.publish_status(row);
        self.spawn_immediate_attempt(row.id, row.webhook_id, now);
    }
}

/// What an accepted inbound webhook came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// A new delivery.
    Accepted(Delivery),
    /// The same request was accepted within [`INBOUND_REPLAY_WINDOW`]: nothing was stored; this is the first
    /// one's delivery.
    Duplicate { delivery_id: i64 },
}

impl Inbound {
    pub fn delivery_id(&self) -> i64 {
        match self {
            Self::Accepted(delivery) => delivery.id,
            Self::Duplicate { delivery_id } => *delivery_id,
        }
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
