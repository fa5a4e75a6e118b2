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

/// A delivery to create: its config's target and secret are the insert's to read
/// (`WebhookStore::insert_deliveries_to_configs`), in the same statement on PostgreSQL.
#[derive(Debug)]
pub(super) struct DeliveryDraft {
    pub(super) webhook_id: i64,
    pub(super) session_id: String,
    pub(super) payload: String,
    pub(super) created_at: OffsetDateTime,
    pub(super) idempotency_key: Option<gateway_core::IdempotencyKey>,
    /// The caller holds a slot and a start for it: insert it claimed, for an attempt that starts at once.
    pub(super) claimed: bool,
}

impl DeliveryDraft {
    pub(super) fn new(webhook_id: i64, session_id: String, payload: String, created_at: OffsetDateTime) -> Self {
        Self { webhook_id, session_id, payload, created_at, idempotency_key: None, claimed: false }
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
    let row = unsigned_row(draft, shortest_lease);
    NewDelivery {
        webhook_id: config.id,
        signature: sign(&config.secret, row.payload.as_bytes()),
        target_url: config.target_url.clone(),
        // A disabled config's delivery is held, never attempted at once (the store holds it whatever is asked).
        claimed: row.claimed && config.enabled,
        ..row
    }
}

/// A new delivery is due `ENQUEUE_SAFETY_NET` after its creation (FR-10.8), whether or not it is inserted claimed:
/// a claim taken at insert runs until then too, unless the attempt's time limit needs longer. The group is written
/// without reading its configs first: the insert takes each row's target from its config and hands back the
/// config's secret as it found it, which the attempt signs with, so a rotation committed before the insert signs
/// it. The row is stored without a signature (its first attempt records the one it was sent with); the caller's
/// answer shows the signature that attempt sends ([`signed`]).
///
/// Lingering (`GroupCommit::lingering`): callers that each send their next request once answered split into two
/// cohorts, each paying an insert commit (8 clients: groups of 3.7–3.9); waiting up to the last group's write time
/// for those just answered takes the groups to about 8 and the commits per delivery from 0.38 to 0.24 on
/// PostgreSQL, while a lone caller never waits (docs/benchmarks.md, issue 18, branch s26-w).
pub(super) fn inserts(
    store: Arc<dyn WebhookStore>,
    clock: Arc<dyn Clock>,
    attempt_timeout: std::time::Duration,
) -> Inserts {
    GroupCommit::new(MAX_GROUP, move |drafts: Vec<DeliveryDraft>| {
        let shortest_lease = millisecond_now(clock.as_ref()) + duration_to_time(attempt_timeout) + LEASE_MARGIN;
        let rows: Vec<NewDelivery> = drafts.into_iter().map(|draft| unsigned_row(draft, shortest_lease)).collect();
        let inserted = store.insert_deliveries_to_configs(&rows)?;
        Ok(rows
            .iter()
            .zip(inserted)
            .map(|(row, outcome)| match outcome {
                Ok(claimed) => Ok(claimed),
                // The config is gone, or the idempotency key is held: the caller tells.
                Err(StoreError::Conflict(_)) => Err(WebhookError::UnknownWebhook(row.webhook_id)),
                Err(error) => Err(error.into()),
            })
            .collect())
    })
    .lingering()
}

/// The row of `draft` before its config is read: the store fills in the target and leaves the signature empty.
/// A disabled config's delivery is inserted held whatever `claimed` asks (the store holds it).
fn unsigned_row(draft: DeliveryDraft, shortest_lease: OffsetDateTime) -> NewDelivery {
    NewDelivery {
        webhook_id: draft.webhook_id,
        signature: String::new(),
        session_id: draft.session_id,
        payload: draft.payload,
        target_url: String::new(),
        created_at: draft.created_at,
        next_retry_at: match draft.claimed {
            true => (draft.created_at + ENQUEUE_SAFETY_NET).max(shortest_lease),
            false => draft.created_at + ENQUEUE_SAFETY_NET,
        },
        idempotency_key: draft.idempotency_key,
        claimed: draft.claimed,
    }
}

/// `row` as its caller is answered: with the signature its attempts send (`X-Observatory-Signature`), made with
/// `secret`, when the row holds none yet.
pub(super) fn signed(mut row: Delivery, secret: &WebhookSecret) -> Delivery {
    if row.signature.is_empty() {
        row.signature = sign(secret, row.payload.as_bytes());
    }
    row
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

/// Lingering (`GroupCommit::lingering`), as the inserts' group: on PostgreSQL a group of successes to one config
/// is one cheap statement, and without waiting for company its writer came back so soon that groups shrank from
/// about 8.7 records to 5.5 and the commits per delivery rose (docs/benchmarks.md, issue 18, branch s26-w).
pub(super) fn records(store: Arc<dyn WebhookStore>, disable_after_failures: u32) -> Records {
    GroupCommit::new(MAX_GROUP, move |records: Vec<AttemptRecord>| {
        store.record_attempts_counting(&records, disable_after_failures)
    })
    .lingering()
}
