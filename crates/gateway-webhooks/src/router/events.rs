//! Fan-out: an event published once (`POST /gateway/webhook-events`) becomes one delivery per config subscribed to
//! its type, each signed with its config's secret and tried on its own schedule by the same dispatcher as every
//! other delivery.

use gateway_core::{Delivery, FanOut, IdempotencyKey, NewWebhookEvent, StoreError, WebhookEvent};
use ring::digest;
use tracing::info;

use super::WebhookRouter;
use super::groups::{DeliveryDraft, new_row};
use crate::envelope::event_envelope;
use crate::error::WebhookError;
use crate::input::check_event;

/// Most deliveries one published event makes. An event that more configs match is refused whole (422, naming
/// `event_type`), nothing written: the fan-out is one transaction, and this bounds how long it holds the store's
/// write lock (and how many attempts one request can queue). `source_identifier` narrows an event that needs to.
pub const MAX_DELIVERIES_PER_EVENT: usize = 1_000;

/// An event to publish, as the operator sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDraft {
    pub event_type: String,
    pub source_identifier: Option<String>,
    /// JSON text, delivered byte for byte inside each envelope.
    pub payload: String,
    pub idempotency_key: Option<IdempotencyKey>,
}

/// What publishing an event came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub event: WebhookEvent,
    /// The event was published by an earlier request with the same `Idempotency-Key`: nothing new was written.
    pub replayed: bool,
}

/// The digest that tells a retry of a request from another one reusing its key: over the type, the narrowing source
/// and the payload as a JSON value (so a client that re-serializes its retry with other spacing is not refused).
fn request_digest(draft: &EventDraft) -> String {
    let payload = serde_json::from_str::<serde_json::Value>(&draft.payload)
        .map_or_else(|_| draft.payload.clone(), |value| value.to_string());
    let mut context = digest::Context::new(&digest::SHA256);
    for part in [draft.event_type.as_str(), draft.source_identifier.as_deref().unwrap_or("\u{0}"), payload.as_str()] {
        context.update(&(part.len() as u64).to_be_bytes());
        context.update(part.as_bytes());
    }
    gateway_core::encoding::hex::encode(context.finish().as_ref())
}

impl WebhookRouter {
    /// Publishes an event: one delivery per config whose `event_type` is the event's or `*` (of the narrowing source
    /// only, when one is given), written in one store transaction, all or none, each then attempted at once through
    /// the dispatcher's slots and the rate. No matching config: the event is stored with no delivery. A repeated
    /// `Idempotency-Key` answers the first event (`replayed`) when the request is the same, and is refused when not.
    pub async fn publish_event(&self, draft: EventDraft) -> Result<Published, WebhookError> {
        check_event(&draft.event_type, draft.source_identifier.as_deref(), &draft.payload)?;
        let digest = request_digest(&draft);
        let now = self.now();
        let event = NewWebhookEvent {
            event_type: draft.event_type.clone(),
            source_identifier: draft.source_identifier.clone(),
            request_digest: digest.clone(),
            idempotency_key: draft.idempotency_key.clone(),
            created_at: now,
        };
        let payload = draft.payload;
        let outcome = self
            .store(move |store| {
                store.fan_out(&event, MAX_DELIVERIES_PER_EVENT, &|config, event_id| {
                    let envelope = event_envelope(event_id, &event.event_type, config.id, now, &payload);
                    let draft = DeliveryDraft::new(config.id, config.target_session.clone(), envelope, now);
                    new_row(config, draft, now)
                })
            })
            .await;
        let existing = match outcome {
            Ok(FanOut::Published { event, deliveries }) => {
                info!(event_id = event.id, deliveries = deliveries.len(), "webhook event published");
                self.hand_over_all(&deliveries);
                return Ok(Published { event, replayed: false });
            }
            Ok(FanOut::Existing(existing)) => existing,
            Ok(FanOut::TooWide { matching }) => {
                return Err(WebhookError::InvalidDelivery {
                    field: "event_type",
                    problem: format!(
                        "more than {MAX_DELIVERIES_PER_EVENT} webhook configs receive it ({matching} or more); narrow \
                         it with source_identifier"
                    ),
                });
            }
            // A concurrent request with the same key published first: its event is the answer.
            Err(WebhookError::Store(StoreError::Conflict(conflict))) => {
                let Some(key) = draft.idempotency_key else {
                    return Err(WebhookError::Store(StoreError::Conflict(conflict)));
                };
                let found = self.store(move |store| store.webhook_event_by_key(&key)).await?;
                found.ok_or(WebhookError::Store(StoreError::Conflict(conflict)))?
            }
            Err(error) => return Err(error),
        };
        if existing.request_digest == digest {
            Ok(Published { event: existing, replayed: true })
        } else {
            Err(WebhookError::IdempotencyKeyReused)
        }
    }

    /// New rows written unclaimed go to the dispatcher, each waiting for a slot and a start of its own.
    fn hand_over_all(&self, deliveries: &[Delivery]) {
        for row in deliveries {
            self.publish_status(row);
            if let Some(due_by) = row.next_retry_at {
                self.spawn_immediate_attempt(row.id, row.webhook_id, due_by);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(payload: &str) -> EventDraft {
        EventDraft {
            event_type: "order.paid".into(),
            source_identifier: None,
            payload: payload.into(),
            idempotency_key: None,
        }
    }

    #[test]
    fn the_digest_ignores_spacing_but_not_what_is_asked() {
        let first = request_digest(&draft(r#"{"order": 17}"#));
        assert_eq!(first, request_digest(&draft(r#"{"order":17}"#)));
        assert_ne!(first, request_digest(&draft(r#"{"order":18}"#)));
        let narrowed = EventDraft { source_identifier: Some("shop".into()), ..draft(r#"{"order":17}"#) };
        assert_ne!(first, request_digest(&narrowed));
        let other_type = EventDraft { event_type: "order.refunded".into(), ..draft(r#"{"order":17}"#) };
        assert_ne!(first, request_digest(&other_type));
    }
}
