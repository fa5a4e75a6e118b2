//! The router's shared commits: concurrent enqueues, immediate claims and attempt outcomes each share one store
//! transaction (and one trip to the blocking pool) with whatever else is queued at the time, instead of paying
//! for one each. A caller still gets its own answer, after its own row is committed.

use std::collections::HashMap;
use std::sync::Arc;

use gateway_core::runtime::group_commit::GroupCommit;
use gateway_core::{
    AttemptRecord, AttemptRecorded, Clock, Delivery, NewDelivery, StoreError, WebhookConfig, WebhookSecret,
    WebhookStore,
};
use time::OffsetDateTime;

use super::{ENQUEUE_SAFETY_NET, LEASE_MARGIN, duration_to_time, millisecond_now};
use crate::error::WebhookError;
use crate::signature::sign;

/// Most rows written by one shared commit.
pub const MAX_GROUP: usize = 256;

/// A delivery to create: the config is looked up (and the payload signed) by the writer, in the same trip as
/// the insert, unless the caller already has it (an inbound webhook verified with it).
#[derive(Debug)]
pub(super) struct DeliveryDraft {
    pub(super) webhook_id: i64,
    pub(super) config: Option<WebhookConfig>,
    pub(super) session_id: String,
    pub(super) payload: String,
    pub(super) created_at: OffsetDateTime,
    pub(super) idempotency_key: Option<gateway_core::IdempotencyKey>,
    /// The caller holds a slot and a start for it: insert it claimed, for an attempt that starts at once.
    pub(super) claimed: bool,
}

impl DeliveryDraft {
    pub(super) fn new(webhook_id: i64, session_id: String, payload: String, created_at: OffsetDateTime) -> Self {
        Self { webhook_id, config: None, session_id, payload, created_at, idempotency_key: None, claimed: false }
    }
}

/// A claimed delivery with the secret its attempt signs with: its config's secret as read when the row was claimed
/// (or inserted claimed), so a rotated secret signs every attempt claimed after the rotation.
pub(super) type Claimed = (Delivery, WebhookSecret);

pub(super) type Inserts = GroupCommit<DeliveryDraft, Result<Claimed, WebhookError>>;
pub(super) type Claims = GroupCommit<(i64, OffsetDateTime), Option<Claimed>>;
pub(super) type Records = GroupCommit<AttemptRecord, AttemptRecorded>;

/// The row of `draft` for `config`'s target, signed with its (outbound) secret. A new delivery is due
/// `ENQUEUE_SAFETY_NET` after its creation (FR-10.8); one inserted claimed holds its claim until then too, unless
/// the attempt's time limit needs longer (`shortest_lease`).
pub(super) fn new_row(config: &WebhookConfig, draft: DeliveryDraft, shortest_lease: OffsetDateTime) -> NewDelivery {
    NewDelivery {
        webhook_id: config.id,
        signature: sign(&config.secret, draft.payload.as_bytes()),
        session_id: draft.session_id,
        payload: draft.payload,
        target_url: config.target_url.clone(),
        created_at: draft.created_at,
        next_retry_at: match draft.claimed {
            true => (draft.created_at + ENQUEUE_SAFETY_NET).max(shortest_lease),
            false => draft.created_at + ENQUEUE_SAFETY_NET,
        },
        idempotency_key: draft.idempotency_key,
        // A disabled config's delivery is held, never attempted at once (the store holds it whatever is asked).
        claimed: draft.claimed && config.enabled,
    }
}

/// A new delivery is due `ENQUEUE_SAFETY_NET` after its creation (FR-10.8), whether or not it is inserted claimed:
/// a claim taken at insert runs until then too, unless the attempt's time limit needs longer.
pub(super) fn inserts(
    store: Arc<dyn WebhookStore>,
    clock: Arc<dyn Clock>,
    attempt_timeout: std::time::Duration,
) -> Inserts {
    GroupCommit::new(MAX_GROUP, move |drafts: Vec<DeliveryDraft>| {
        let shortest_lease = millisecond_now(clock.as_ref()) + duration_to_time(attempt_timeout) + LEASE_MARGIN;
        let mut configs: HashMap<i64, Option<WebhookConfig>> = HashMap::new();
        let mut outcomes: Vec<Option<Result<Claimed, WebhookError>>> = Vec::with_capacity(drafts.len());
        let mut rows = Vec::with_capacity(drafts.len());
        let mut secrets = Vec::with_capacity(drafts.len());
        for mut draft in drafts {
            let config = match draft.config.take() {
                Some(config) => Some(config),
                None => match configs.get(&draft.webhook_id) {
                    Some(known) => known.clone(),
                    None => {
                        let found = store.config(draft.webhook_id)?;
                        configs.insert(draft.webhook_id, found.clone());
                        found
                    }
                },
            };
            let Some(config) = config else {
                outcomes.push(Some(Err(WebhookError::UnknownWebhook(draft.webhook_id))));
                continue;
            };
            secrets.push(config.secret.clone());
            rows.push(new_row(&config, draft, shortest_lease));
            outcomes.push(None);
        }
        let mut inserted =
            store.insert_deliveries(&rows)?.into_iter().zip(rows.iter().map(|row| row.webhook_id).zip(secrets));
        Ok(outcomes
            .into_iter()
            .map(|known| {
                known.unwrap_or_else(|| match inserted.next() {
                    Some((Ok(delivery), (_, secret))) => Ok((delivery, secret)),
                    // The config was deleted since it was read, or the idempotency key is held: the caller tells.
                    Some((Err(StoreError::Conflict(_)), (webhook_id, _))) => {
                        Err(WebhookError::UnknownWebhook(webhook_id))
                    }
                    Some((Err(error), _)) => Err(error.into()),
                    None => Err(StoreError::Internal("a grouped insert returned too few outcomes".to_owned()).into()),
                })
            })
            .collect())
    })
}

/// Claims for immediate attempts, each by its own due time, all under one lease taken when the group is written.
pub(super) fn claims(
    store: Arc<dyn WebhookStore>,
    clock: Arc<dyn Clock>,
    attempt_timeout: std::time::Duration,
) -> Claims {
    GroupCommit::new(MAX_GROUP, move |claims: Vec<(i64, OffsetDateTime)>| {
        let lease = millisecond_now(clock.as_ref()) + duration_to_time(attempt_timeout) + LEASE_MARGIN;
        let claimed = with_secrets(store.as_ref(), store.claim_each(&claims, lease)?)?;
        let mut claimed: HashMap<i64, Claimed> = claimed.into_iter().map(|row| (row.0.id, row)).collect();
        Ok(claims.iter().map(|(id, _)| claimed.remove(id)).collect())
    })
}

/// Claimed rows with their configs' current secrets, read once per config. A row whose config is gone (deleted
/// since, and the row with it) is left out: its attempt would record nothing. Should the read fail, the rows stay
/// claimed and come due again when their lease ends.
pub(super) fn with_secrets(store: &dyn WebhookStore, rows: Vec<Delivery>) -> Result<Vec<Claimed>, StoreError> {
    let mut secrets: HashMap<i64, Option<WebhookSecret>> = HashMap::new();
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let secret = match secrets.get(&row.webhook_id) {
            Some(known) => known.clone(),
            None => {
                let found = store.config(row.webhook_id)?.map(|config| config.secret);
                secrets.insert(row.webhook_id, found.clone());
                found
            }
        };
        if let Some(secret) = secret {
            claimed.push((row, secret));
        }
    }
    Ok(claimed)
}

pub(super) fn records(store: Arc<dyn WebhookStore>, disable_after_failures: u32) -> Records {
    GroupCommit::new(MAX_GROUP, move |records: Vec<AttemptRecord>| {
        store.record_attempts_counting(&records, disable_after_failures)
    })
}
