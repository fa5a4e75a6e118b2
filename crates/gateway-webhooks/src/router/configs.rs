//! Webhook configs: where a `{source_identifier, event_type}` pair is routed, and the secret that signs its
//! traffic both ways.

use std::collections::BTreeMap;

use gateway_core::{EndpointStats, NewWebhookConfig, StoreError, WebhookConfig, WebhookConfigChange};
use tracing::info;

use super::{WebhookRouter, target_host};
use crate::error::WebhookError;
use crate::input::{WebhookConfigDraft, check_config_change, check_rate_limit, check_secrets_differ};

/// The window of a config's `stats_24h`.
pub const STATS_WINDOW: time::Duration = time::Duration::hours(24);

impl WebhookRouter {
    pub async fn create_config(&self, draft: WebhookConfigDraft) -> Result<WebhookConfig, WebhookError> {
        draft.validate()?;
        let rate_limit_per_second = draft.rate_limit_per_second.map(check_rate_limit).transpose()?;
        let new = NewWebhookConfig {
            source_identifier: draft.source_identifier,
            event_type: draft.event_type,
            agent_intent: draft.agent_intent,
            target_session: draft.target_session,
            target_url: draft.target_url,
            secret: draft.secret,
            created_at: self.now(),
            inbound_secret: draft.inbound_secret,
            inbound_require_timestamp: draft.inbound_require_timestamp,
            rate_limit_per_second,
        };
        // Held until the new id is in the known set: a read of the id list that started before this create
        // committed must not replace the set after it and drop the id again.
        let _writing = self.inner.known_configs.writing.lock().await;
        let created = self.store(move |store| store.create_config(&new)).await.map_err(|error| match error {
            WebhookError::Store(StoreError::Conflict(_)) => WebhookError::DuplicateConfig,
            other => other,
        })?;
        self.inner.known_configs.insert(created.id);
        self.inner.endpoint_rates.note(created.id, created.rate_limit_per_second, self.now());
        info!(
            webhook_id = created.id,
            target_host = %target_host(&created.target_url),
            inbound_secret = created.inbound_secret.is_some(),
            inbound_require_timestamp = created.inbound_require_timestamp,
            rate_limit_per_second = created.rate_limit_per_second,
            "webhook config created"
        );
        Ok(created)
    }

    pub async fn configs(&self) -> Result<Vec<WebhookConfig>, WebhookError> {
        self.store(|store| store.list_configs()).await
    }

    /// Each config's `stats_24h`: its attempts and dead letters of the last 24 hours (a config without any is left
    /// out). One query for every config, whose cost is bounded by the window's attempts (docs/webhooks.md).
    pub async fn endpoint_stats(&self) -> Result<BTreeMap<i64, EndpointStats>, WebhookError> {
        let since = self.now() - STATS_WINDOW;
        self.store(move |store| store.endpoint_stats(since)).await
    }

    pub async fn config(&self, id: i64) -> Result<WebhookConfig, WebhookError> {
        self.store(move |store| store.config(id)).await?.ok_or(WebhookError::UnknownWebhook(id))
    }

    /// Changes a config in place (its id, which is its inbound URL, and its deliveries stay). A new secret signs
    /// every attempt that starts after this returns, pending retries of older deliveries included (the secret is
    /// read when an attempt claims its row); inbound signatures made with the replaced secret are accepted for
    /// [`crate::SECRET_ROTATION_GRACE`] more. A second rotation within that time ends the first one's grace: only
    /// the latest previous secret is kept. The inbound secret rotates the same way, apart; the first one set has
    /// no grace (the outbound secret stops verifying inbound at once). `revoke_previous` ends every grace at once.
    pub async fn update_config(&self, id: i64, change: WebhookConfigChange) -> Result<WebhookConfig, WebhookError> {
        check_config_change(&change)?;
        if change.secret.is_some() || change.inbound_secret.is_some() {
            // Judged on the config as it is now; a concurrent PATCH of the other secret could still make them
            // equal, which an operator would have to do on purpose, twice at once.
            let current = self.config(id).await?;
            let after = current.changed(&change, self.now());
            check_secrets_differ(&after.secret, after.inbound_secret.as_ref())?;
        }
        let now = self.now();
        let fields: Vec<&str> = [
            ("target_url", change.target_url.is_some()),
            ("agent_intent", change.agent_intent.is_some()),
            ("target_session", change.target_session.is_some()),
            ("secret", change.secret.is_some()),
            ("inbound_secret", change.inbound_secret.is_some()),
            ("inbound_require_timestamp", change.inbound_require_timestamp.is_some()),
            ("revoke_previous", change.revoke_previous),
            ("rate_limit_per_second", change.rate_limit_per_second.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, given)| given.then_some(field))
        .collect();
        let updated = self
            .store(move |store| store.update_config(id, &change, now))
            .await?
            .ok_or(WebhookError::UnknownWebhook(id))?;
        self.inner.endpoint_rates.note(id, updated.rate_limit_per_second, now);
        let rotated = updated.secret_rotated_at == Some(now);
        info!(
            webhook_id = id,
            fields = %fields.join(","),
            secret_rotated = rotated,
            target_host = %target_host(&updated.target_url),
            "webhook config updated"
        );
        Ok(updated)
    }

    /// Deletes a config and, with it, its deliveries and their history.
    pub async fn delete_config(&self, id: i64) -> Result<(), WebhookError> {
        if self.store(move |store| store.delete_config(id)).await? {
            self.inner.known_configs.remove(id);
            self.inner.signature_failures.forget(id);
            self.inner.endpoint_rates.forget(id);
            info!(webhook_id = id, "webhook config deleted with its deliveries");
            Ok(())
        } else {
            Err(WebhookError::UnknownWebhook(id))
        }
    }
}
