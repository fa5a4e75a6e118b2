//! Deliveries: enqueued by an operator, routed from a verified inbound webhook, reset by "Retry now", and
//! read back by the forensic inspector. Each new or reset delivery is handed to the dispatcher at once.

use gateway_core::{Delivery, DeliveryFilter, EventPayload, IdempotencyKey, RetryNowOutcome};
use tracing::{info, warn};

use super::groups::DeliveryDraft;
use super::{DeliveryDetail, WebhookRouter, target_host};
use crate::envelope::inbound_envelope;
use crate::error::WebhookError;
use crate::input::check_delivery;
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

    /// Handles `POST /gateway/webhooks/{webhook_id}`: verifies the signature headers against the raw `body` (either
    /// scheme; the previous secret too during its grace after a rotation), wraps the body in the inbound envelope
    /// (docs/webhooks.md) and enqueues it for the config's target and session.
    pub async fn receive_inbound(
        &self,
        webhook_id: i64,
        signature: &InboundSignature,
        body: &[u8],
    ) -> Result<Delivery, WebhookError> {
        let config = self.config(webhook_id).await?;
        let now = self.now();
        if let Err(reason) = signature.verify(&accepted_secrets(&config, now), body, now) {
            if let Some(suppressed) = self.inner.signature_failures.failure(webhook_id, self.now()) {
                warn!(webhook_id, %reason, suppressed, "inbound webhook refused (signature)");
                self.publish(EventPayload::WebhookSignatureFailure { webhook_id });
            }
            return Err(WebhookError::SignatureMismatch { webhook_id, reason });
        }
        let received_at = self.now();
        let payload = inbound_envelope(&config, received_at, body);
        let session_id = config.target_session.clone();
        let draft =
            DeliveryDraft { config: Some(config), ..DeliveryDraft::new(webhook_id, session_id, payload, received_at) };
        self.create_delivery(draft).await
    }

    /// Writes a delivery (sharing the commit with concurrent ones) and hands it to the dispatcher. When a slot and a
    /// start are free right now and nobody waits for them, the row is written already claimed and its attempt
    /// starts at once: one store write fewer than claiming it afterwards.
    async fn create_delivery(&self, mut draft: DeliveryDraft) -> Result<Delivery, WebhookError> {
        let ready = self.start_now();
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
        info!(delivery_id = row.id, webhook_id = row.webhook_id, target_host = %target_host(&row.target_url), "webhook delivery enqueued");
        self.publish_status(&row);
        match (ready, row.next_retry_at) {
            (Some((slot, _started)), _) => self.spawn_attempt(row.clone(), secret, slot),
            (None, Some(due_by)) => self.spawn_immediate_attempt(row.id, due_by),
            (None, None) => {}
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
