//! Webhook domain types, the two webhook ports and their in-memory implementations: [`WebhookStore`] (configs,
//! deliveries and their attempt history) with [`InMemoryWebhookStore`], and [`WebhookTransport`] (one outbound
//! HTTP attempt) with [`FakeTransport`].

mod fake_transport;
mod in_memory;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use time::OffsetDateTime;

use crate::ids::IdempotencyKey;
use crate::ports::leadership::{FencingEpoch, FencingToken};
use crate::ports::store::StoreError;

pub use fake_transport::FakeTransport;
pub use in_memory::InMemoryWebhookStore;

/// The shared secret of a webhook config. Its `Debug` is redacted and it has no `Display` or `Serialize`, so
/// it cannot reach a log line or a response body by accident; [`Self::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(String);

impl WebhookSecret {
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for signing and for the store. Never log what this returns.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for WebhookSecret {
    fn from(secret: &str) -> Self {
        Self::new(secret)
    }
}

impl From<String> for WebhookSecret {
    fn from(secret: String) -> Self {
        Self::new(secret)
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// One row of `webhook_configs`: where a `{source_identifier, event_type}` pair is routed, and the secret that
/// signs its traffic both ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    pub id: i64,
    pub source_identifier: String,
    pub event_type: String,
    pub agent_intent: String,
    pub target_session: String,
    pub target_url: String,
    pub secret: WebhookSecret,
    pub created_at: OffsetDateTime,
    /// The secret before the latest rotation: inbound signatures made with it are still accepted for a grace
    /// period after `secret_rotated_at` (docs/webhooks.md). Only the latest previous secret is kept.
    pub previous_secret: Option<WebhookSecret>,
    /// When the secret was last rotated (`None`: never).
    pub secret_rotated_at: Option<OffsetDateTime>,
    /// The secret inbound signatures are verified with instead of `secret`, when set: a receiver of the outbound
    /// deliveries (signed with `secret`) then cannot post them back in (docs/webhooks.md, "reflection").
    pub inbound_secret: Option<WebhookSecret>,
    /// The inbound secret before its latest rotation, accepted inbound for a grace period after
    /// `inbound_secret_rotated_at`, like `previous_secret`.
    pub previous_inbound_secret: Option<WebhookSecret>,
    /// When the inbound secret was last set or rotated (`None`: never).
    pub inbound_secret_rotated_at: Option<OffsetDateTime>,
    /// Inbound requests must carry a Standard Webhooks signature with a fresh timestamp: the
    /// `X-Observatory-Signature` scheme, which has no timestamp, is refused.
    pub inbound_require_timestamp: bool,
    /// At most this many attempts to this endpoint start in any one second, inside the global cap
    /// (`--webhook-max-per-second`); `None`: only the global cap.
    pub rate_limit_per_second: Option<u32>,
    /// Health (issue 20): a disabled config's deliveries are held, neither attempted nor aging toward dead.
    pub enabled: bool,
    /// Why it is disabled; `None` while enabled.
    pub disabled_reason: Option<DisabledReason>,
    /// Failed attempts in a row, counted when each attempt is recorded; a success resets it.
    pub consecutive_failures: i64,
    pub last_success_at: Option<OffsetDateTime>,
}

/// Why a config is disabled; the names are the `disabled_reason` column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DisabledReason {
    /// Disabled by the router after `--webhook-disable-after-failures` failed attempts in a row.
    Failing,
    /// Disabled by an operator (`PATCH {"enabled": false}`).
    Manual,
}

impl DisabledReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failing => "failing",
            Self::Manual => "manual",
        }
    }

    /// The column's text; `None` for a value no version wrote (read as "manual": held either way).
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Failing, Self::Manual].into_iter().find(|reason| reason.as_str() == text)
    }
}

/// A config that [`WebhookStore::record_attempts_counting`] disabled: the `webhook_endpoint_disabled` event's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointDisabled {
    pub webhook_id: i64,
    pub consecutive_failures: i64,
    pub reason: DisabledReason,
}

/// What recording one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecorded {
    /// The row carried the attempt's claim and took its outcome ([`WebhookStore::record_attempt`]'s answer).
    pub applied: bool,
    /// This attempt was the one that disabled its config (at most one attempt per disable reports it).
    pub disabled: Option<EndpointDisabled>,
}

/// One config's `stats_24h`: attempts and dead letters since an instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EndpointStats {
    /// Successful attempts (each is a delivery delivered).
    pub delivered: u64,
    pub failed_attempts: u64,
    /// Deliveries whose last attempt made them dead.
    pub dead: u64,
}

/// What an operator's `PATCH` changes in a config; `None` (and `false`) leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookConfigChange {
    pub target_url: Option<String>,
    pub agent_intent: Option<String>,
    pub target_session: Option<String>,
    pub secret: Option<WebhookSecret>,
    pub inbound_secret: Option<WebhookSecret>,
    pub inbound_require_timestamp: Option<bool>,
    /// Ends the grace of every previous secret at once (a leaked secret): after this change only the current
    /// secret (and the current inbound secret) verifies.
    pub revoke_previous: bool,
    /// `Some(None)` removes the endpoint's own rate, `Some(Some(n))` sets it.
    pub rate_limit_per_second: Option<Option<u32>>,
    /// `Some(true)` resumes a disabled config (reason and count cleared, its held deliveries due at once);
    /// `Some(false)` disables an enabled one by hand.
    pub enabled: Option<bool>,
}

impl WebhookConfig {
    /// The config after `change`, made at `at`: the rule every [`WebhookStore::update_config`] applies.
    pub fn changed(mut self, change: &WebhookConfigChange, at: OffsetDateTime) -> Self {
        if let Some(target_url) = &change.target_url {
            self.target_url.clone_from(target_url);
        }
        if let Some(agent_intent) = &change.agent_intent {
            self.agent_intent.clone_from(agent_intent);
        }
        if let Some(target_session) = &change.target_session {
            self.target_session.clone_from(target_session);
        }
        if let Some(secret) = &change.secret
            && *secret != self.secret
        {
            self.previous_secret = Some(std::mem::replace(&mut self.secret, secret.clone()));
            self.secret_rotated_at = Some(at);
        }
        if let Some(inbound) = &change.inbound_secret
            && self.inbound_secret.as_ref() != Some(inbound)
        {
            // Setting the first inbound secret leaves no previous one: the outbound secret that verified inbound
            // until now must stop doing so at once, or a receiver could still reflect deliveries back in.
            self.previous_inbound_secret = self.inbound_secret.replace(inbound.clone());
            self.inbound_secret_rotated_at = Some(at);
        }
        if let Some(require) = change.inbound_require_timestamp {
            self.inbound_require_timestamp = require;
        }
        if change.revoke_previous {
            self.previous_secret = None;
            self.previous_inbound_secret = None;
        }
        if let Some(rate) = change.rate_limit_per_second {
            self.rate_limit_per_second = rate;
        }
        match change.enabled {
            Some(true) if !self.enabled => {
                self.enabled = true;
                self.disabled_reason = None;
                self.consecutive_failures = 0;
            }
            Some(false) if self.enabled => {
                self.enabled = false;
                self.disabled_reason = Some(DisabledReason::Manual);
            }
            _ => {}
        }
        self
    }
}

impl WebhookConfig {
    /// Counts one recorded attempt in the config's health, the rule every
    /// [`WebhookStore::record_attempts_counting`] applies: a success resets the count and moves `last_success_at`
    /// forward; a failure adds one, and an enabled config whose count reaches `disable_after_failures` (0: never)
    /// is disabled as `failing` — the disable returned, once.
    pub fn count_attempt(
        &mut self,
        attempt: &DeliveryAttempt,
        disable_after_failures: u32,
    ) -> Option<EndpointDisabled> {
        if attempt.error_class.is_none() {
            self.consecutive_failures = 0;
            self.last_success_at =
                Some(self.last_success_at.map_or(attempt.started_at, |at| at.max(attempt.started_at)));
            return None;
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let reached = disable_after_failures > 0 && self.consecutive_failures >= i64::from(disable_after_failures);
        if !(self.enabled && reached) {
            return None;
        }
        self.enabled = false;
        self.disabled_reason = Some(DisabledReason::Failing);
        Some(EndpointDisabled {
            webhook_id: self.id,
            consecutive_failures: self.consecutive_failures,
            reason: DisabledReason::Failing,
        })
    }
}

/// A config to create; the store assigns the id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebhookConfig {
    pub source_identifier: String,
    pub event_type: String,
    pub agent_intent: String,
    pub target_session: String,
    pub target_url: String,
    pub secret: WebhookSecret,
    pub created_at: OffsetDateTime,
    pub inbound_secret: Option<WebhookSecret>,
    pub inbound_require_timestamp: bool,
    pub rate_limit_per_second: Option<u32>,
}

/// Where a delivery is in its life. The names are the `status` column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not attempted yet (or reset by "Retry now").
    Pending,
    /// A 2xx came back; final.
    Delivered,
    /// At least one attempt failed and another is scheduled.
    Failed,
    /// Every attempt failed; only an operator's "Retry now" revives it.
    Dead,
}

impl DeliveryStatus {
    pub const ALL: [Self; 4] = [Self::Pending, Self::Delivered, Self::Failed, Self::Dead];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
            Self::Dead => "dead",
        }
    }

    /// The statuses the poll picks up when `next_retry_at` has come.
    pub fn is_awaiting_attempt(self) -> bool {
        matches!(self, Self::Pending | Self::Failed)
    }

    /// The statuses an operator's "Retry now" may reset (FR-10.12).
    pub fn allows_retry_now(self) -> bool {
        matches!(self, Self::Failed | Self::Dead)
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `status` value that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown delivery status {0:?} (expected pending, delivered, failed or dead)")]
pub struct UnknownDeliveryStatus(pub String);

impl FromStr for DeliveryStatus {
    type Err = UnknownDeliveryStatus;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|status| status.as_str() == text).ok_or_else(|| UnknownDeliveryStatus(text.into()))
    }
}

/// One row of `webhook_deliveries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: i64,
    pub webhook_id: i64,
    pub session_id: String,
    /// The exact bytes that are POSTed (JSON text) and that `signature` covers.
    pub payload: String,
    pub target_url: String,
    /// `sha256=<hex>`, the value of the `X-Observatory-Signature` header.
    pub signature: String,
    pub status: DeliveryStatus,
    pub attempt_count: i32,
    pub last_attempted_at: Option<OffsetDateTime>,
    /// When the poll may pick the row up. While an attempt is in flight this is the end of that attempt's
    /// claim, so a crash mid-attempt leaves the row due again then.
    pub next_retry_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub error_detail: Option<String>,
}

/// One delivery's outcome of [`WebhookStore::insert_deliveries_to_configs`]: the row as written, with its config's
/// secret as the write found it.
pub type InsertedToConfig = Result<(Delivery, WebhookSecret), StoreError>;

/// A delivery to insert: always `pending` with `attempt_count = 0`.
#[derive(Clone, PartialEq, Eq)]
pub struct NewDelivery {
    pub webhook_id: i64,
    pub session_id: String,
    pub payload: String,
    pub target_url: String,
    pub signature: String,
    pub created_at: OffsetDateTime,
    pub next_retry_at: OffsetDateTime,
    /// The creating request's `Idempotency-Key`; unique among deliveries when present.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Inserted already claimed by its inserter, until `next_retry_at`: the router does this when a slot and a start
    /// are free at once, so the immediate attempt needs no claim of its own (see [`WebhookStore::claim`]).
    pub claimed: bool,
}

impl fmt::Debug for NewDelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Payloads are customer data: only their size may appear in a log.
        f.debug_struct("NewDelivery")
            .field("webhook_id", &self.webhook_id)
            .field("session_id", &self.session_id)
            .field("payload_bytes", &self.payload.len())
            .field("target_url", &self.target_url)
            .field("created_at", &self.created_at)
            .field("next_retry_at", &self.next_retry_at)
            .field("idempotency_key", &self.idempotency_key)
            .field("claimed", &self.claimed)
            .finish_non_exhaustive()
    }
}

/// What the poll needs to choose among due rows, without loading their payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDelivery {
    pub id: i64,
    pub target_url: String,
    pub next_retry_at: OffsetDateTime,
    /// Its config, and that config's own rate (`rate_limit_per_second`), which the poll paces it by.
    pub webhook_id: i64,
    pub rate_limit_per_second: Option<u32>,
}

/// One row of `webhook_delivery_attempts`: the history the forensic inspector shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryAttempt {
    pub delivery_id: i64,
    /// 1-based; after a "Retry now" the numbering starts again at 1, so the pair with `started_at` is what
    /// identifies an attempt.
    pub attempt_number: i32,
    #[serde(with = "crate::encoding::rfc3339::serde")]
    pub started_at: OffsetDateTime,
    pub duration_ms: i64,
    /// The response status, when a response came back.
    pub status_code: Option<u16>,
    /// `timeout`, `connect`, `dns`, `ssrf_blocked`, `http_<code>`, ...; `None` when the attempt succeeded.
    pub error_class: Option<String>,
    pub error_detail: Option<String>,
}

/// The row's new state after an attempt, written together with the attempt's history row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryUpdate {
    pub status: DeliveryStatus,
    pub attempt_count: i32,
    pub last_attempted_at: OffsetDateTime,
    pub next_retry_at: Option<OffsetDateTime>,
    pub error_detail: Option<String>,
    /// The `X-Observatory-Signature` the attempt was sent with, when it differs from the stored one (the config's
    /// secret was rotated since): the row then shows what was sent. `None` keeps the stored signature.
    pub signature: Option<String>,
}

/// The forensic inspector's query: every filter optional, keyset pagination by id (ascending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFilter {
    pub session_id: Option<String>,
    pub status: Option<DeliveryStatus>,
    /// Inclusive lower bound on `created_at`.
    pub created_from: Option<OffsetDateTime>,
    /// Exclusive upper bound on `created_at`.
    pub created_before: Option<OffsetDateTime>,
    /// Only rows with an id greater than this (the last id of the previous page).
    pub after_id: Option<i64>,
    pub limit: usize,
}

/// An attempt to record with [`WebhookStore::record_attempts`]: its history row, the lease it ran under, and the
/// delivery's new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The config of the attempt's delivery (as claimed: a delivery never changes config), whose health the
    /// attempt counts in. Carried so that a store counts without reading each delivery's owner first.
    pub webhook_id: i64,
    pub attempt: DeliveryAttempt,
    pub lease: OffsetDateTime,
    pub update: DeliveryUpdate,
}

/// What "Retry now" found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryNowOutcome {
    NotFound,
    /// The row is pending or delivered: there is nothing to retry.
    NotAllowed(DeliveryStatus),
    /// The row as reset: `pending`, `attempt_count = 0`, due at the given instant.
    Reset(Delivery),
}

/// An event published to every config subscribed to its type (`POST /gateway/webhook-events`): one row of
/// `webhook_events`, which keeps the ids of the deliveries it made so that a retry of the request with the same
/// `Idempotency-Key` answers exactly what the first one did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEvent {
    pub id: i64,
    pub event_type: String,
    /// The request narrowed the fan-out to the configs of this source.
    pub source_identifier: Option<String>,
    /// A digest of what the request asked for (type, source, payload), so a retry with the same key can be told
    /// from a different request that reuses the key.
    pub request_digest: String,
    pub idempotency_key: Option<IdempotencyKey>,
    /// The deliveries made, by config id ascending; empty when no config matched.
    pub delivery_ids: Vec<i64>,
    pub created_at: OffsetDateTime,
}

/// An event to publish; the store assigns the id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebhookEvent {
    pub event_type: String,
    pub source_identifier: Option<String>,
    pub request_digest: String,
    pub idempotency_key: Option<IdempotencyKey>,
    pub created_at: OffsetDateTime,
}

impl NewWebhookEvent {
    /// Whether `config` receives this event: its `event_type` is the event's or `*`, and its source is the
    /// narrowing one when the event names one. The rule every [`WebhookStore::fan_out`] applies.
    pub fn reaches(&self, config: &WebhookConfig) -> bool {
        config.enabled
            && (config.event_type == self.event_type || config.event_type == WILDCARD_EVENT_TYPE)
            && self.source_identifier.as_ref().is_none_or(|source| *source == config.source_identifier)
    }
}

/// The `event_type` of a config that receives every published event.
pub const WILDCARD_EVENT_TYPE: &str = "*";

/// What [`WebhookStore::fan_out`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FanOut {
    /// The event, and one delivery per matching config, written in one transaction.
    Published { event: WebhookEvent, deliveries: Vec<Delivery> },
    /// An event with the same idempotency key exists: nothing was written; this is that event.
    Existing(WebhookEvent),
    /// More configs match than the caller allows: nothing was written. `matching` is at least the limit plus one.
    TooWide { matching: usize },
}

/// Makes the delivery of a published event for one matching config: `(config, event id)` → the row to insert.
pub type DeliveryMaker<'a> = dyn Fn(&WebhookConfig, i64) -> NewDelivery + Sync + 'a;

/// What identifies an accepted inbound webhook for replay detection, within its config: the router derives it
/// from a verified signature (gateway-webhooks `replay`); the store compares it as opaque text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReceiptKey(String);

impl ReceiptKey {
    /// Longest key a store must hold.
    pub const MAX_BYTES: usize = 128;

    /// `None` for an empty key or one over [`Self::MAX_BYTES`].
    pub fn new(key: impl Into<String>) -> Option<Self> {
        let key = key.into();
        (!key.is_empty() && key.len() <= Self::MAX_BYTES).then_some(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What [`WebhookStore::insert_inbound_delivery`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundInsert {
    /// The delivery, stored with its receipts.
    Inserted(Delivery),
    /// One of the keys was received for this config within the window: nothing was written; this is the delivery
    /// that receipt recorded (it may since have been deleted with its history).
    Duplicate { delivery_id: i64 },
}

/// Durable storage of webhook configs, deliveries and attempts.
///
/// The claim protocol keeps one attempt per row at a time without holding a transaction across the HTTP call:
/// [`Self::claim`] moves a due row's `next_retry_at` to the end of a lease, atomically; [`Self::record_attempt`]
/// writes the outcome only if the row still carries that lease. A crash mid-attempt leaves the row due again
/// when the lease ends.
///
/// It reads the fencing epoch too ([`FencingEpoch`]): an attempt made by an instance that does not lead carries
/// the newest term the store has seen (`X-Gateway-Epoch`).
pub trait WebhookStore: FencingEpoch + Send + Sync + fmt::Debug {
    /// Inserts a config; [`StoreError::Conflict`] when the `(source_identifier, event_type)` pair exists.
    fn create_config(&self, config: &NewWebhookConfig) -> Result<WebhookConfig, StoreError>;
    fn config(&self, id: i64) -> Result<Option<WebhookConfig>, StoreError>;
    /// Every config, by id.
    fn list_configs(&self) -> Result<Vec<WebhookConfig>, StoreError>;
    /// Deletes the config together with its deliveries, their attempts and its inbound receipts; `false` when
    /// there was none. A
    /// database adapter should delete a large history in batches, each its own short transaction, so that no
    /// other writer waits behind one long delete; a crash midway then leaves the config with part of its history,
    /// and deleting it again finishes the job.
    fn delete_config(&self, id: i64) -> Result<bool, StoreError>;
    /// Applies `change` to the config, reading it and writing it in one transaction (a database adapter locks the
    /// row, or writes under SQLite's IMMEDIATE lock): a new secret that differs from the current one moves the
    /// current one to `previous_secret` (replacing any earlier previous secret) and sets `secret_rotated_at = at`;
    /// the same secret again changes nothing. Returns the config as stored, `None` when there is none with this id.
    fn update_config(
        &self,
        id: i64,
        change: &WebhookConfigChange,
        at: OffsetDateTime,
    ) -> Result<Option<WebhookConfig>, StoreError>;

    /// The ids of every config, in any order: what an inbound request's id is checked against before anything
    /// else is read (a database adapter reads them from the primary key alone).
    fn config_ids(&self) -> Result<Vec<i64>, StoreError>;

    /// Fan-out, in one transaction, all or nothing: when `event` carries an idempotency key that an event already
    /// has, [`FanOut::Existing`] with that event; when more than `max_deliveries` configs match
    /// ([`NewWebhookEvent::reaches`]), [`FanOut::TooWide`]; else the event row and, for each matching config in id
    /// order, the delivery `delivery_for(config, event id)` makes. Of concurrent calls sharing a key exactly one
    /// writes (a database adapter relies on a unique index on the key; the loser's transaction fails as
    /// [`StoreError::Conflict`] and it reads the winner's event with [`Self::webhook_event_by_key`]).
    fn fan_out(
        &self,
        event: &NewWebhookEvent,
        max_deliveries: usize,
        delivery_for: &DeliveryMaker<'_>,
    ) -> Result<FanOut, StoreError>;
    /// The event published with this `Idempotency-Key`, if any.
    fn webhook_event_by_key(&self, key: &IdempotencyKey) -> Result<Option<WebhookEvent>, StoreError>;
    /// [`StoreError::Conflict`] when the config is gone or the idempotency key is taken.
    fn insert_delivery(&self, delivery: &NewDelivery) -> Result<Delivery, StoreError>;
    /// An accepted inbound webhook's delivery with its receipts, atomically: when a receipt of the delivery's
    /// config holds one of `keys` with `received_at >= fresh_since`, nothing is written and that receipt's
    /// delivery id is returned; otherwise the delivery is inserted and each key recorded with it (received at the
    /// delivery's `created_at`), replacing a receipt of the same key older than `fresh_since`. Of concurrent
    /// calls sharing a key, exactly one inserts; the others answer the duplicate of its delivery (a database
    /// adapter relies on a unique index over `(webhook_id, key)`, never on its own read alone).
    /// [`StoreError::Conflict`] when the config is gone.
    fn insert_inbound_delivery(
        &self,
        delivery: &NewDelivery,
        keys: &[ReceiptKey],
        fresh_since: OffsetDateTime,
    ) -> Result<InboundInsert, StoreError>;
    /// Deletes up to `limit` receipts received before `received_before`; returns how many went. Callers repeat it
    /// until it returns less than `limit`.
    fn prune_inbound_receipts(&self, received_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError>;
    /// Inserts `deliveries`, one outcome each, in order: a conflict (config gone, idempotency key taken) fails only
    /// its own delivery. A database adapter should write them in one transaction: the router groups concurrent
    /// enqueues into one call, so a commit is shared by all of them. This default is one insert per delivery.
    fn insert_deliveries(&self, deliveries: &[NewDelivery]) -> Result<Vec<Result<Delivery, StoreError>>, StoreError> {
        Ok(deliveries.iter().map(|delivery| self.insert_delivery(delivery)).collect())
    }
    /// [`Self::insert_deliveries`] for callers that have not read the configs: each delivery goes to its config as
    /// this write finds it. A row's `target_url` is its config's and its `signature` is empty, whatever the caller
    /// put in them (the signature is the first attempt's to record: [`DeliveryUpdate::signature`]), and each
    /// written row comes back with its config's secret, which its attempt signs with. A delivery whose config is
    /// gone fails alone, with [`StoreError::Conflict`], as do the other conflicts. So a router's group of enqueues
    /// needs no read before its write: a database adapter returns the secrets from the insert statement itself.
    /// This default reads each config once, then inserts.
    fn insert_deliveries_to_configs(&self, deliveries: &[NewDelivery]) -> Result<Vec<InsertedToConfig>, StoreError> {
        insert_deliveries_reading_configs(self, deliveries)
    }
    fn delivery(&self, id: i64) -> Result<Option<Delivery>, StoreError>;
    /// The delivery created with this `Idempotency-Key`, if any.
    fn delivery_by_idempotency_key(&self, key: &IdempotencyKey) -> Result<Option<Delivery>, StoreError>;
    fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError>;
    /// A delivery's attempts, oldest first.
    fn attempts(&self, delivery_id: i64) -> Result<Vec<DeliveryAttempt>, StoreError>;
    /// How many deliveries have `status`, for metrics. A database adapter counts on an index on `status`.
    fn count_deliveries(&self, status: DeliveryStatus) -> Result<u64, StoreError>;
    /// How many deliveries [`Self::due_deliveries`] would return at `now` without a limit (pending or failed,
    /// `next_retry_at <= now`; a claimed row's `next_retry_at` is its lease's end, so attempts in flight are not
    /// due): the backlog of attempts waiting for a slot, for metrics.
    fn count_due_deliveries(&self, now: OffsetDateTime) -> Result<u64, StoreError>;

    /// Rows with status pending or failed and `next_retry_at <= now`, oldest `next_retry_at` first (ties by
    /// id), at most `limit`. Read only: the caller claims what it picks.
    fn due_deliveries(&self, now: OffsetDateTime, limit: usize) -> Result<Vec<DueDelivery>, StoreError> {
        self.due_deliveries_skipping(now, limit, &[])
    }
    /// [`Self::due_deliveries`] leaving out the rows of the configs in `skip_configs`: the poll skips the endpoints
    /// whose own rate is spent right now, so that their backlog does not fill the rows it reads and starve the
    /// others. Each row carries its config's `rate_limit_per_second` as it is when read.
    fn due_deliveries_skipping(
        &self,
        now: OffsetDateTime,
        limit: usize,
        skip_configs: &[i64],
    ) -> Result<Vec<DueDelivery>, StoreError>;
    /// Atomically claims those of `ids` that are pending or failed with `next_retry_at <= due_by`, setting
    /// their `next_retry_at` to `lease_until`; returns the claimed rows as stored. Rows claimed by someone
    /// else meanwhile, or changed, are left out.
    fn claim(
        &self,
        ids: &[i64],
        due_by: OffsetDateTime,
        lease_until: OffsetDateTime,
    ) -> Result<Vec<Delivery>, StoreError>;
    /// [`Self::claim`] as a leader-only write, what the poll does: [`StoreError::Fenced`], and nothing claimed,
    /// when `token` is older than the newest leadership token the store has seen; a newer one raises it. The claim
    /// records `token`, so that a later term can release it ([`Self::release_deposed_claims`]).
    /// (Immediate attempts use [`Self::claim`]: any instance may make them, the row claim keeps them exclusive; such
    /// a claim records no token, and only its lease ends it.)
    fn claim_fenced(
        &self,
        ids: &[i64],
        due_by: OffsetDateTime,
        lease_until: OffsetDateTime,
        token: FencingToken,
    ) -> Result<Vec<Delivery>, StoreError>;
    /// What a poll does first in a new leadership term: every row still claimed by a poll of an older term than
    /// `token` (a leader that died or was deposed mid-attempt) and still awaiting an attempt is made due at `now`,
    /// its claim released, instead of waiting for that claim's lease to end. An attempt the deposed leader may
    /// still be making then records only its history ([`Self::record_attempt`]: the row no longer carries its
    /// lease). A leader-only write, fenced like [`Self::claim_fenced`]. Returns how many rows it released.
    fn release_deposed_claims(&self, token: FencingToken, now: OffsetDateTime) -> Result<usize, StoreError>;
    /// [`Self::claim`] for several rows at once, each with its own `due_by`, all until `lease_until`; returns the
    /// claimed rows. A database adapter should do it in one transaction (the router groups concurrent immediate
    /// attempts into one call). This default is one claim per row.
    fn claim_each(
        &self,
        claims: &[(i64, OffsetDateTime)],
        lease_until: OffsetDateTime,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut claimed = Vec::with_capacity(claims.len());
        for (id, due_by) in claims {
            claimed.extend(self.claim(&[*id], *due_by, lease_until)?);
        }
        Ok(claimed)
    }
    /// In one transaction: appends `attempt` to the history, and applies `update` to the delivery if it still
    /// carries the claim this attempt ran under: `next_retry_at = lease` and `attempt_count =
    /// attempt.attempt_number - 1`. (The lease instant alone is not enough: a "Retry now" and a new claim
    /// within the same millisecond would reproduce it, but never with the same attempt count.) `Ok(false)`
    /// when the claim was lost (the row was reset or re-claimed meanwhile): the attempt is recorded, the row
    /// untouched. `Ok(false)` too when the delivery is gone (deleted with its config mid-attempt), and then
    /// nothing is recorded: there is no row to attach the history to.
    fn record_attempt(
        &self,
        attempt: &DeliveryAttempt,
        lease: OffsetDateTime,
        update: &DeliveryUpdate,
    ) -> Result<bool, StoreError> {
        // One attempt on its own (tests, tools; the router records groups with the config it claimed under): its
        // config is read here. A delivery already gone records nothing, whatever config is named.
        let Some(delivery) = self.delivery(attempt.delivery_id)? else {
            return Ok(false);
        };
        let record =
            AttemptRecord { webhook_id: delivery.webhook_id, attempt: attempt.clone(), lease, update: update.clone() };
        Ok(self
            .record_attempts_counting(std::slice::from_ref(&record), 0)?
            .into_iter()
            .all(|recorded| recorded.applied))
    }
    /// [`Self::record_attempt`] for several attempts, one outcome each, in order, as one
    /// [`Self::record_attempts_counting`] that never disables: all or nothing, so a caller that retries after an
    /// error records nothing twice.
    fn record_attempts(&self, records: &[AttemptRecord]) -> Result<Vec<bool>, StoreError> {
        Ok(self.record_attempts_counting(records, 0)?.into_iter().map(|recorded| recorded.applied).collect())
    }
    /// [`Self::record_attempts`], in the same transaction counting each config's failed attempts in a row (an
    /// attempt whose delivery is gone counts for nothing): a success sets `consecutive_failures = 0` and
    /// `last_success_at` (the latest attempt's start), a failure adds one; an enabled config whose count reaches
    /// `disable_after_failures` (0: never) is disabled as `failing`, and the attempt that did it reports it. A
    /// disabled config's deliveries awaiting an attempt and not claimed are held: `next_retry_at = NULL`.
    fn record_attempts_counting(
        &self,
        records: &[AttemptRecord],
        disable_after_failures: u32,
    ) -> Result<Vec<AttemptRecorded>, StoreError>;
    /// Each config's attempts and dead letters since `since` (`stats_24h`); a config without any is left out. A
    /// database adapter reads the window from indexes on the attempts' start and the dead rows' last attempt.
    fn endpoint_stats(
        &self,
        since: OffsetDateTime,
    ) -> Result<std::collections::BTreeMap<i64, EndpointStats>, StoreError>;
    /// Retention: deletes up to `limit` deliveries that are delivered or dead and were created before
    /// `created_before`, with their attempts (and so their idempotency keys); returns how many deliveries went.
    /// Pending and failed deliveries are never pruned, however old. Callers repeat it until it returns less than
    /// `limit`, so each call is one short transaction.
    fn prune_finished_deliveries(&self, created_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError>;
    /// "Retry now": in one transaction, if the row is failed or dead, sets `status = pending`,
    /// `attempt_count = 0`, `next_retry_at = now`.
    fn retry_now(&self, id: i64, now: OffsetDateTime) -> Result<RetryNowOutcome, StoreError>;

    /// Recover (a bulk "Retry now"), one batch: in one transaction, resets up to `limit` of the dead deliveries of
    /// config `webhook_id` created in `window` whose id is greater than `after_id`, lowest ids first, each exactly
    /// as [`Self::retry_now`] resets one ([`Delivery::reset_for_retry`]); returns them as stored, ascending by id.
    /// Callers repeat it from the last id returned until it returns less than `limit`, so that each call is one
    /// short transaction however many deliveries the window holds.
    fn recover_dead(
        &self,
        webhook_id: i64,
        window: &RecoverWindow,
        after_id: i64,
        now: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError>;
}

/// Which deliveries a recover takes by age: those with `since <= created_at <= until` (both ends included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoverWindow {
    pub since: OffsetDateTime,
    pub until: OffsetDateTime,
}

impl RecoverWindow {
    pub fn contains(&self, instant: OffsetDateTime) -> bool {
        self.since <= instant && instant <= self.until
    }
}

impl Delivery {
    /// What "Retry now" and recover do to a failed or dead row, the one rule every store applies: `pending`,
    /// `attempt_count = 0` (a full set of attempts again), due at `now`. The history and `error_detail` stay, as
    /// the record of what happened before.
    pub fn reset_for_retry(&mut self, now: OffsetDateTime) {
        self.status = DeliveryStatus::Pending;
        self.attempt_count = 0;
        self.next_retry_at = Some(now);
    }
}

/// One outbound POST: the stored payload bytes, signed, to the stored target.
#[derive(Clone, PartialEq, Eq)]
pub struct OutboundRequest {
    pub delivery_id: i64,
    pub url: String,
    pub body: String,
    /// `sha256=<hex>`, the `X-Observatory-Signature` header.
    pub signature: String,
    /// Unix seconds of the attempt's start: the `webhook-timestamp` header (Standard Webhooks), which
    /// `standard_signature` covers.
    pub timestamp: i64,
    /// `v1,<base64>`, the `webhook-signature` header (Standard Webhooks) over `"{delivery_id}.{timestamp}.{body}"`.
    pub standard_signature: String,
    /// The leadership term the attempt was made under, the `X-Gateway-Epoch` header: a receiver that keeps the
    /// highest it has seen can refuse an attempt of a deposed leader (docs/webhooks.md, "Fencing").
    pub epoch: u64,
    /// `v1,<base64>`, the `X-Gateway-Epoch-Signature` header: the Standard Webhooks key's HMAC-SHA256 of
    /// `"{delivery_id}.{timestamp}.{epoch}"`, since neither body signature covers a header.
    pub epoch_signature: String,
}

impl fmt::Debug for OutboundRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundRequest")
            .field("delivery_id", &self.delivery_id)
            .field("url", &self.url)
            .field("body_bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// Why an attempt failed; its label is the prefix of `error_detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// A response that is not 2xx (3xx included: redirects are not followed).
    Http(u16),
    /// The attempt's time limit ran out (resolving, connecting, sending or waiting for the response).
    Timeout,
    /// The connection could not be made or broke (refused, reset, TLS handshake failed).
    Connect,
    /// The host name did not resolve.
    Dns,
    /// Every address of the target is in a refused range (SSRF guard).
    SsrfBlocked,
    /// The stored target is not an absolute http(s) URL.
    InvalidUrl,
    /// The server answered with something that is not HTTP/1.1.
    Protocol,
}

impl FailureClass {
    pub fn label(self) -> String {
        match self {
            Self::Http(code) => format!("http_{code}"),
            Self::Timeout => "timeout".into(),
            Self::Connect => "connect".into(),
            Self::Dns => "dns".into(),
            Self::SsrfBlocked => "ssrf_blocked".into(),
            Self::InvalidUrl => "invalid_url".into(),
            Self::Protocol => "protocol".into(),
        }
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A 2xx response.
    Delivered { status_code: u16 },
    Failed {
        class: FailureClass,
        /// A short explanation without payload or secret (an OS error, the refused address range).
        detail: Option<String>,
    },
}

impl AttemptOutcome {
    pub fn failed(class: FailureClass, detail: impl Into<String>) -> Self {
        Self::Failed { class, detail: Some(detail.into()) }
    }

    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Delivered { status_code } => Some(*status_code),
            Self::Failed { class: FailureClass::Http(code), .. } => Some(*code),
            Self::Failed { .. } => None,
        }
    }

    /// `error_detail` as stored: the class label, then the detail when there is one.
    pub fn error_detail(&self) -> Option<String> {
        match self {
            Self::Delivered { .. } => None,
            Self::Failed { class, detail: None } => Some(class.label()),
            Self::Failed { class, detail: Some(detail) } => Some(format!("{}: {detail}", class.label())),
        }
    }
}

/// Makes one outbound attempt. Synchronous (the real adapter is a blocking HTTP client); async callers go
/// through [`crate::run_blocking`]. Never fails as a Rust error: every way an attempt can go wrong is an
/// [`AttemptOutcome::Failed`] with its class.
pub trait WebhookTransport: Send + Sync + fmt::Debug {
    fn post(&self, request: &OutboundRequest) -> AttemptOutcome;
}

/// [`WebhookStore::insert_deliveries_to_configs`] by reading each config once, then inserting: its default, and
/// what an adapter whose reads cost no round trip (SQLite) can keep.
pub fn insert_deliveries_reading_configs<S: WebhookStore + ?Sized>(
    store: &S,
    deliveries: &[NewDelivery],
) -> Result<Vec<InsertedToConfig>, StoreError> {
    let mut configs: HashMap<i64, Option<WebhookConfig>> = HashMap::new();
    let mut rows = Vec::with_capacity(deliveries.len());
    let mut secrets = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        let config = match configs.get(&delivery.webhook_id) {
            Some(known) => known.clone(),
            None => {
                let found = store.config(delivery.webhook_id)?;
                configs.insert(delivery.webhook_id, found.clone());
                found
            }
        };
        match config {
            Some(config) => {
                rows.push(NewDelivery { target_url: config.target_url, signature: String::new(), ..delivery.clone() });
                secrets.push(Some(config.secret));
            }
            None => secrets.push(None),
        }
    }
    let mut inserted = store.insert_deliveries(&rows)?.into_iter();
    secrets
        .into_iter()
        .map(|secret| match secret {
            None => Ok(Err(StoreError::Conflict("the webhook config is gone".to_owned()))),
            Some(secret) => match inserted.next() {
                Some(outcome) => Ok(outcome.map(|row| (row, secret))),
                None => Err(StoreError::Internal("a grouped insert returned too few outcomes".to_owned())),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show_in_debug_output() {
        let config = NewWebhookConfig {
            source_identifier: "github".into(),
            event_type: "push".into(),
            agent_intent: "review".into(),
            target_session: "s-1".into(),
            target_url: "https://example.com/hook".into(),
            secret: WebhookSecret::new("hunter2-very-secret"),
            created_at: time::macros::datetime!(2026-02-22 12:00:00 UTC),
            inbound_secret: Some(WebhookSecret::new("hunter3-inbound")),
            inbound_require_timestamp: false,
            rate_limit_per_second: None,
        };
        let printed = format!("{config:?}");
        assert!(!printed.contains("hunter2") && !printed.contains("hunter3"), "{printed}");
        assert!(printed.contains("<redacted>"));
        assert_eq!(config.secret.expose(), "hunter2-very-secret");
    }

    #[test]
    fn payloads_never_show_in_debug_output() {
        let request = OutboundRequest {
            delivery_id: 3,
            url: "https://example.com/hook".into(),
            body: r#"{"card":"4111111111111111"}"#.into(),
            signature: "sha256=00".into(),
            timestamp: 0,
            standard_signature: "v1,AA==".into(),
            epoch: 1,
            epoch_signature: "v1,AA==".into(),
        };
        let printed = format!("{request:?}");
        assert!(!printed.contains("4111"), "{printed}");
        assert!(printed.contains("body_bytes: 27"), "{printed}");
    }

    #[test]
    fn statuses_round_trip_and_know_what_they_allow() {
        for status in DeliveryStatus::ALL {
            assert_eq!(status.as_str().parse::<DeliveryStatus>(), Ok(status));
        }
        assert!("PENDING".parse::<DeliveryStatus>().is_err());
        let awaiting: Vec<_> = DeliveryStatus::ALL.into_iter().filter(|s| s.is_awaiting_attempt()).collect();
        assert_eq!(awaiting, [DeliveryStatus::Pending, DeliveryStatus::Failed]);
        let retryable: Vec<_> = DeliveryStatus::ALL.into_iter().filter(|s| s.allows_retry_now()).collect();
        assert_eq!(retryable, [DeliveryStatus::Failed, DeliveryStatus::Dead]);
    }

    #[test]
    fn error_detail_starts_with_the_class_label() {
        assert_eq!(AttemptOutcome::Delivered { status_code: 204 }.error_detail(), None);
        let http = AttemptOutcome::Failed { class: FailureClass::Http(503), detail: None };
        assert_eq!(http.error_detail().as_deref(), Some("http_503"));
        assert_eq!(http.status_code(), Some(503));
        let blocked = AttemptOutcome::failed(FailureClass::SsrfBlocked, "127.0.0.1 is loopback");
        assert_eq!(blocked.error_detail().as_deref(), Some("ssrf_blocked: 127.0.0.1 is loopback"));
        assert_eq!(blocked.status_code(), None);
        for (class, label) in [
            (FailureClass::Timeout, "timeout"),
            (FailureClass::Connect, "connect"),
            (FailureClass::Dns, "dns"),
            (FailureClass::InvalidUrl, "invalid_url"),
            (FailureClass::Protocol, "protocol"),
            (FailureClass::Http(302), "http_302"),
        ] {
            assert_eq!(class.label(), label);
        }
    }
}
