//! Webhook configs: where a `{source_identifier, event_type}` pair is routed, and the secret that signs its
//! traffic both ways.

use gateway_core::{NewWebhookConfig, StoreError, WebhookConfig, WebhookConfigChange};
use tracing::info;

use super::{WebhookRouter, target_host};
use crate::error::WebhookError;
use crate::input::{WebhookConfigDraft, check_config_change};

impl WebhookRouter {
    pub async fn create_config(&self, draft: WebhookConfigDraft) -> Result<WebhookConfig, WebhookError> {
        draft.validate()?;
        let new = NewWebhookConfig {
            source_identifier: draft.source_identifier,
            event_type: draft.event_type,
            agent_intent: draft.agent_intent,
            target_session: draft.target_session,
            target_url: draft.target_url,
            secret: draft.secret,
            created_at: self.now(),
        };
        let created = self.store(move |store| store.create_config(&new)).await.map_err(|error| match error {
            WebhookError::Store(StoreError::Conflict(_)) => WebhookError::DuplicateConfig,
            other => other,
        })?;
        info!(webhook_id = created.id, target_host = %target_host(&created.target_url), "webhook config created");
        Ok(created)
    }

    pub async fn configs(&self) -> Result<Vec<WebhookConfig>, WebhookError> {
        self.store(|store| store.list_configs()).await
    }

    pub async fn config(&self, id: i64) -> Result<WebhookConfig, WebhookError> {
        self.store(move |store| store.config(id)).await?.ok_or(WebhookError::UnknownWebhook(id))
    }

    /// Changes a config in place (its id, which is its inbound URL, and its deliveries stay). A new secret signs
    /// every attempt that starts after this returns, pending retries of older deliveries included (the secret is
    /// read when an attempt claims its row); inbound signatures made with the replaced secret are accepted for
    /// [`crate::SECRET_ROTATION_GRACE`] more. A second rotation within that time ends the first one's grace: only
    /// the latest previous secret is kept.
    pub async fn update_config(&self, id: i64, change: WebhookConfigChange) -> Result<WebhookConfig, WebhookError> {
        check_config_change(&change)?;
        let now = self.now();
        let fields: Vec<&str> = [
            ("target_url", change.target_url.is_some()),
            ("agent_intent", change.agent_intent.is_some()),
            ("target_session", change.target_session.is_some()),
            ("secret", change.secret.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, given)| given.then_some(field))
        .collect();
        let updated = self
            .store(move |store| store.update_config(id, &change, now))
            .await?
            .ok_or(WebhookError::UnknownWebhook(id))?;
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
            self.inner.signature_failures.forget(id);
            info!(webhook_id = id, "webhook config deleted with its deliveries");
            Ok(())
        } else {
            Err(WebhookError::UnknownWebhook(id))
        }
    }
}
