//! What an operator does to an endpoint's deliveries besides "Retry now" (DESIGN.md §18): recover a window of dead
//! deliveries, resend any delivery as a new one, and send a test event. Each new or reset delivery goes to the
//! dispatcher like every other, so it is signed, rate-limited and retried the same way.

use std::time::Duration;

use gateway_core::{Delivery, RecoverWindow};
use time::OffsetDateTime;
use tracing::info;

use super::groups::DeliveryDraft;
use super::{WebhookRouter, duration_to_time};
use crate::envelope::test_envelope;
use crate::error::WebhookError;

/// Most dead deliveries one recover transaction resets: a window of a week's failures is many short transactions,
/// none holding SQLite's write lock long enough to make another writer wait past its busy timeout.
pub const RECOVER_BATCH: usize = 500;

/// The `event_type` of the envelope a test delivery carries (docs/webhooks.md, "Test an endpoint").
pub const TEST_EVENT_TYPE: &str = "gateway.test";

impl WebhookRouter {
    /// Recover: every dead delivery of the config created in `[since, until]` (`until` defaults to now) goes back
    /// to pending with a full set of attempts, as "Retry now" resets one, [`RECOVER_BATCH`] at a time. Returns how
    /// many. The reset rows are handed to the dispatcher as "Retry now" hands one, so they go out through its slots
    /// and under the global rate (FR-10.12), oldest first, never all at once; past what the dispatcher keeps
    /// waiting in memory, the poll picks them up. A window longer than `longest_window` (the retention: dead
    /// deliveries older than it are pruned) or one that ends before it begins is refused, naming `since`.
    pub async fn recover(
        &self,
        webhook_id: i64,
        since: OffsetDateTime,
        until: Option<OffsetDateTime>,
        longest_window: Duration,
    ) -> Result<usize, WebhookError> {
        let now = self.now();
        let until = until.unwrap_or(now);
        if since > until {
            return Err(WebhookError::InvalidDelivery {
                field: "since",
                problem: "must not be after until (which defaults to now)".into(),
            });
        }
        if until - since > duration_to_time(longest_window) {
            return Err(WebhookError::InvalidDelivery {
                field: "since",
                problem: format!(
                    "the window is longer than the retention of finished deliveries ({} days): older dead deliveries \
                     are pruned",
                    longest_window.as_secs() / 86_400
                ),
            });
        }
        // 404 for an unknown config, rather than "0 recovered".
        self.config(webhook_id).await?;
        let window = RecoverWindow { since, until };
        let mut recovered = 0;
        let mut after_id = 0;
        loop {
            let batch =
                self.store(move |store| store.recover_dead(webhook_id, &window, after_id, now, RECOVER_BATCH)).await?;
            for row in &batch {
                self.hand_over_reset(row, now);
            }
            recovered += batch.len();
            match batch.last() {
                Some(last) if batch.len() == RECOVER_BATCH => after_id = last.id,
                _ => break,
            }
        }
        info!(webhook_id, recovered, "dead webhook deliveries recovered");
        Ok(recovered)
    }

    /// Resend: a new delivery of the same payload, to the same config and session, whatever the status of the
    /// original (delivered and dead included); signed with the config's current secret, to its current target.
    pub async fn resend(&self, id: i64) -> Result<Delivery, WebhookError> {
        let original = self.store(move |store| store.delivery(id)).await?.ok_or(WebhookError::UnknownDelivery(id))?;
        let draft = DeliveryDraft::new(original.webhook_id, original.session_id, original.payload, self.now());
        match self.create_delivery(draft).await {
            Ok(resent) => {
                info!(delivery_id = resent.id, resent_from = id, "webhook delivery resent");
                Ok(resent)
            }
            // The config went, with the original, since it was read.
            Err(WebhookError::UnknownWebhook(_)) => Err(WebhookError::UnknownDelivery(id)),
            Err(other) => Err(other),
        }
    }

    /// Test: a new delivery to the config's target and session whose envelope has `"event_type": "gateway.test"`
    /// ([`test_envelope`]), attempted and retried like any other.
    pub async fn send_test(&self, webhook_id: i64) -> Result<Delivery, WebhookError> {
        let config = self.config(webhook_id).await?;
        let now = self.now();
        let payload = test_envelope(webhook_id, now);
        self.create_delivery(DeliveryDraft::new(webhook_id, config.target_session, payload, now)).await
    }
}
