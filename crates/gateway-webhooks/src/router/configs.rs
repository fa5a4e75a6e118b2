//! Webhook configs: where a `{source_identifier, event_type}` pair is routed, and the secret that signs its
//! traffic both ways.

use gateway_core::{NewWebhookConfig, StoreError, WebhookConfig};
use tracing::info;

use super::{WebhookRouter, target_host};
use crate::error::WebhookError;
use crate::input::WebhookConfigDraft;

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
