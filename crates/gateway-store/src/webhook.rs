//! `WebhookStore` over `webhook_configs`, `webhook_deliveries` and `webhook_delivery_attempts`.
//!
//! The claim is one conditional `UPDATE … RETURNING`, atomic on its own (on PostgreSQL too: an `UPDATE` that
//! waited for a row a concurrent claim changed re-checks its condition on the new row). Recording an attempt,
//! "Retry now", pruning and deleting a config read before they write, so they run in `DieselStore::immediate`
//! transactions, and on PostgreSQL their reads lock the rows they decide about (`FOR UPDATE`). Besides moving
//! `next_retry_at` to the end of its lease, a claim sets `claimed_until` (migration `webhook_delivery_claims`),
//! which the outcome and "Retry now" clear: the port does not see it; it lets a restarted SQLite gateway tell an
//! interrupted attempt from a scheduled retry (`recovery`). A poll's claim also records its leadership term in
//! `claim_token` (meaningful only while `claimed_until` is set), so a new term can release a deposed leader's
//! claims at once (`release_deposed_claims`).

use std::collections::{BTreeMap, HashMap, HashSet};

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::result::DatabaseErrorKind;
use diesel::sqlite::Sqlite;
use gateway_core::{
    AttemptRecord, AttemptRecorded, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryMaker, DeliveryStatus,
    DeliveryUpdate, DisabledReason, DueDelivery, EndpointStats, FanOut, FencingToken, IdempotencyKey, InboundInsert,
    InsertedToConfig, NewDelivery, NewWebhookConfig, NewWebhookEvent, ReceiptKey, RecoverWindow, RetryNowOutcome,
    StoreError, WILDCARD_EVENT_TYPE, WebhookConfig, WebhookConfigChange, WebhookEvent, WebhookSecret, WebhookStore,
};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::connection::{AnyConnection, DieselStore, returned_row};
use crate::error::classify;
use crate::fencing::{admit, token_to_db};
use crate::schema::{
    webhook_configs, webhook_deliveries, webhook_delivery_attempts, webhook_events, webhook_inbound_receipts,
};
use crate::timestamp::{from_db, to_db};

/// Most deliveries (with their attempts) deleted per transaction when a config's history or old deliveries go.
pub const DELETE_BATCH: usize = 1_000;

/// Which deliveries a batched delete takes.
#[derive(Debug, Clone, Copy)]
enum Doomed {
    /// Every delivery of a config.
    OfConfig(i64),
    /// Delivered and dead deliveries created before the instant.
    FinishedBefore(PrimitiveDateTime),
}

/// Deletes up to `limit` of the `doomed` deliveries, attempts first (they reference the deliveries); returns how
/// many deliveries went. Call it inside a transaction. On PostgreSQL the batch's rows are locked as they are
/// read, so a concurrent "Retry now" or attempt record cannot change a row between its selection and its
/// deletion (it waits, then finds the row gone); a row that changed while this read waited for it is read
/// again, and left out if it no longer qualifies.
fn delete_deliveries(connection: &mut AnyConnection<'_>, doomed: Doomed, limit: usize) -> QueryResult<usize> {
    use webhook_deliveries::dsl;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let finished = [DeliveryStatus::Delivered, DeliveryStatus::Dead].map(DeliveryStatus::as_str);
    let of_config =
        |webhook_id: i64| dsl::webhook_deliveries.filter(dsl::webhook_id.eq(webhook_id)).select(dsl::id).limit(limit);
    let finished_before = |before: PrimitiveDateTime| {
        dsl::webhook_deliveries
            .filter(dsl::created_at.lt(before))
            .filter(dsl::status.eq_any(finished))
            .select(dsl::id)
            .limit(limit)
    };
    let batch: Vec<i64> = match (&mut *connection, doomed) {
        (AnyConnection::Sqlite(c), Doomed::OfConfig(id)) => of_config(id).load(&mut **c)?,
        (AnyConnection::Sqlite(c), Doomed::FinishedBefore(before)) => finished_before(before).load(&mut **c)?,
        (AnyConnection::Postgres(c), Doomed::OfConfig(id)) => of_config(id).for_update().load(&mut **c)?,
        (AnyConnection::Postgres(c), Doomed::FinishedBefore(before)) => {
            finished_before(before).for_update().load(&mut **c)?
        }
    };
    if batch.is_empty() {
        return Ok(0);
    }
    let attempts =
        diesel::delete(webhook_delivery_attempts::table.filter(webhook_delivery_attempts::delivery_id.eq_any(&batch)));
    let deliveries = diesel::delete(webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(&batch)));
    on_backend!(connection, c => {
        attempts.execute(c)?;
        deliveries.execute(c)
    })
}

/// Which inbound receipts a batched delete takes.
#[derive(Debug, Clone, Copy)]
enum DoomedReceipts {
    OfConfig(i64),
    ReceivedBefore(PrimitiveDateTime),
}

/// Deletes up to `limit` of the `doomed` receipts; returns how many went. Call it inside a transaction. The age is
/// checked again by the delete itself: on PostgreSQL a receipt renewed by a concurrent inbound delivery after the
/// batch was read (its `received_at` moved to now) is re-read when the delete reaches it, and stays.
fn delete_receipts(connection: &mut AnyConnection<'_>, doomed: DoomedReceipts, limit: usize) -> QueryResult<usize> {
    use webhook_inbound_receipts::dsl;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    match doomed {
        DoomedReceipts::OfConfig(webhook_id) => {
            let batch =
                dsl::webhook_inbound_receipts.filter(dsl::webhook_id.eq(webhook_id)).select(dsl::id).limit(limit);
            let batch: Vec<i64> = on_backend!(connection, c => batch.load(c))?;
            let delete = diesel::delete(dsl::webhook_inbound_receipts.filter(dsl::id.eq_any(&batch)));
            on_backend!(connection, c => delete.execute(c))
        }
        DoomedReceipts::ReceivedBefore(before) => {
            let batch = dsl::webhook_inbound_receipts
                .filter(dsl::received_at.lt(before))
                .order(dsl::received_at.asc())
                .select(dsl::id)
                .limit(limit);
            let batch: Vec<i64> = on_backend!(connection, c => batch.load(c))?;
            let delete = diesel::delete(
                dsl::webhook_inbound_receipts.filter(dsl::id.eq_any(&batch)).filter(dsl::received_at.lt(before)),
            );
            on_backend!(connection, c => delete.execute(c))
        }
    }
}

#[derive(Insertable)]
#[diesel(table_name = webhook_inbound_receipts)]
struct NewReceiptRow<'a> {
    webhook_id: i64,
    receipt_key: &'a str,
    delivery_id: i64,
    received_at: PrimitiveDateTime,
}

/// Records `key` for the inserted delivery, unless a receipt of the key received at or after `fresh_since` holds
/// it: `Ok(false)` then. An older receipt of the key is taken over (the unique index on `(webhook_id,
/// receipt_key)` turns the insert into that update). On PostgreSQL an insert that meets a concurrent transaction's
/// uncommitted receipt waits for it, then finds it fresh: that is how of two concurrent identical requests only
/// one goes through.
fn record_receipt(
    connection: &mut AnyConnection<'_>,
    receipt: &NewReceiptRow<'_>,
    fresh_since: PrimitiveDateTime,
) -> QueryResult<bool> {
    use webhook_inbound_receipts::dsl;
    let upsert = diesel::insert_into(dsl::webhook_inbound_receipts)
        .values(receipt)
        .on_conflict((dsl::webhook_id, dsl::receipt_key))
        .do_update()
        .set((dsl::delivery_id.eq(receipt.delivery_id), dsl::received_at.eq(receipt.received_at)));
    let upsert = diesel::query_dsl::methods::FilterDsl::filter(upsert, dsl::received_at.lt(fresh_since));
    Ok(on_backend!(connection, c => upsert.execute(c))? == 1)
}

/// The delivery a fresh receipt of one of `keys` recorded, if any.
fn fresh_holder(
    connection: &mut AnyConnection<'_>,
    webhook_id: i64,
    keys: &[&str],
    fresh_since: PrimitiveDateTime,
) -> QueryResult<Option<i64>> {
    use webhook_inbound_receipts::dsl;
    let query = dsl::webhook_inbound_receipts
        .filter(dsl::webhook_id.eq(webhook_id))
        .filter(dsl::receipt_key.eq_any(keys))
        .filter(dsl::received_at.ge(fresh_since))
        .select(dsl::delivery_id)
        .limit(1);
    on_backend!(connection, c => query.first(c).optional())
}

/// The statuses the poll picks up, in the order their due rows are read.
const AWAITING_ATTEMPT: [DeliveryStatus; 2] = [DeliveryStatus::Pending, DeliveryStatus::Failed];

#[derive(Queryable, Selectable)]
#[diesel(table_name = webhook_configs, check_for_backend(Sqlite, Pg))]
struct ConfigRow {
    id: i64,
    source_identifier: String,
    event_type: String,
    agent_intent: String,
    target_session: String,
    target_url: String,
    secret: String,
    created_at: PrimitiveDateTime,
    previous_secret: Option<String>,
    secret_rotated_at: Option<PrimitiveDateTime>,
    inbound_secret: Option<String>,
    previous_inbound_secret: Option<String>,
    inbound_secret_rotated_at: Option<PrimitiveDateTime>,
    inbound_require_timestamp: bool,
    rate_limit_per_second: Option<i32>,
    enabled: bool,
    disabled_reason: Option<String>,
    consecutive_failures: i64,
    last_success_at: Option<PrimitiveDateTime>,
}

impl From<ConfigRow> for WebhookConfig {
    fn from(row: ConfigRow) -> Self {
        Self {
            id: row.id,
            source_identifier: row.source_identifier,
            event_type: row.event_type,
            agent_intent: row.agent_intent,
            target_session: row.target_session,
            target_url: row.target_url,
            secret: WebhookSecret::new(row.secret),
            created_at: from_db(row.created_at),
            previous_secret: row.previous_secret.map(WebhookSecret::new),
            secret_rotated_at: row.secret_rotated_at.map(from_db),
            inbound_secret: row.inbound_secret.map(WebhookSecret::new),
            previous_inbound_secret: row.previous_inbound_secret.map(WebhookSecret::new),
            inbound_secret_rotated_at: row.inbound_secret_rotated_at.map(from_db),
            inbound_require_timestamp: row.inbound_require_timestamp,
            rate_limit_per_second: row.rate_limit_per_second.and_then(|rate| u32::try_from(rate).ok()),
            enabled: row.enabled,
            // A disabled row always has a reason; one this version cannot read is shown as manual (held either way).
            disabled_reason: (!row.enabled).then(|| {
                row.disabled_reason.as_deref().and_then(DisabledReason::parse).unwrap_or(DisabledReason::Manual)
            }),
            consecutive_failures: row.consecutive_failures,
            last_success_at: row.last_success_at.map(from_db),
        }
    }
}

#[derive(Insertable)]
#[diesel(table_name = webhook_configs)]
struct NewConfigRow<'a> {
    source_identifier: &'a str,
    event_type: &'a str,
    agent_intent: &'a str,
    target_session: &'a str,
    target_url: &'a str,
    secret: &'a str,
    created_at: PrimitiveDateTime,
    inbound_secret: Option<&'a str>,
    inbound_require_timestamp: bool,
    rate_limit_per_second: Option<i32>,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = webhook_deliveries, check_for_backend(Sqlite, Pg))]
struct DeliveryRow {
    id: i64,
    webhook_id: i64,
    session_id: String,
    payload: String,
    target_url: String,
    signature: String,
    status: String,
    attempt_count: i32,
    last_attempted_at: Option<PrimitiveDateTime>,
    next_retry_at: Option<PrimitiveDateTime>,
    created_at: PrimitiveDateTime,
    error_detail: Option<String>,
}

impl TryFrom<DeliveryRow> for Delivery {
    type Error = StoreError;

    fn try_from(row: DeliveryRow) -> Result<Self, StoreError> {
        let status = row
            .status
            .parse()
            .map_err(|_| StoreError::Internal(format!("webhook delivery {}: unknown status in the row", row.id)))?;
        Ok(Self {
            id: row.id,
            webhook_id: row.webhook_id,
            session_id: row.session_id,
            payload: row.payload,
            target_url: row.target_url,
            signature: row.signature,
            status,
            attempt_count: row.attempt_count,
            last_attempted_at: row.last_attempted_at.map(from_db),
            next_retry_at: row.next_retry_at.map(from_db),
            created_at: from_db(row.created_at),
            error_detail: row.error_detail,
        })
    }
}

fn deliveries(rows: Vec<DeliveryRow>) -> Result<Vec<Delivery>, StoreError> {
    rows.into_iter().map(Delivery::try_from).collect()
}

/// Every column is bound as a value (a missing key as NULL rather than DEFAULT), which keeps the statement's text
/// fixed so Diesel reuses the prepared statement across rows and groups.
#[derive(Insertable)]
#[diesel(table_name = webhook_deliveries, treat_none_as_default_value = false)]
struct NewDeliveryRow<'a> {
    webhook_id: i64,
    session_id: &'a str,
    payload: &'a str,
    target_url: &'a str,
    signature: &'a str,
    status: &'a str,
    attempt_count: i32,
    next_retry_at: PrimitiveDateTime,
    created_at: PrimitiveDateTime,
    idempotency_key: Option<&'a str>,
    /// The claim marker (`recovery`) of a delivery inserted already claimed.
    claimed_until: Option<PrimitiveDateTime>,
}

/// One row of a group insert, as written, with its config's secret when the insert read it (`to_configs`).
type WrittenRow = QueryResult<(DeliveryRow, Option<String>)>;

impl<'a> NewDeliveryRow<'a> {
    fn of(delivery: &'a NewDelivery) -> Self {
        Self {
            webhook_id: delivery.webhook_id,
            session_id: &delivery.session_id,
            payload: &delivery.payload,
            target_url: &delivery.target_url,
            signature: &delivery.signature,
            status: DeliveryStatus::Pending.as_str(),
            attempt_count: 0,
            next_retry_at: to_db(delivery.next_retry_at),
            created_at: to_db(delivery.created_at),
            idempotency_key: delivery.idempotency_key.as_ref().map(IdempotencyKey::as_str),
            claimed_until: delivery.claimed.then(|| to_db(delivery.next_retry_at)),
        }
    }

    fn insert(&self, connection: &mut AnyConnection<'_>) -> QueryResult<DeliveryRow> {
        on_backend!(connection, c => {
            returned_row(diesel::insert_into(webhook_deliveries::table).values(self).returning(DeliveryRow::as_returning()).get_results(c))
        })
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = webhook_delivery_attempts, check_for_backend(Sqlite, Pg))]
struct AttemptRow {
    delivery_id: i64,
    attempt_number: i32,
    started_at: PrimitiveDateTime,
    duration_ms: i64,
    status_code: Option<i32>,
    error_class: Option<String>,
    error_detail: Option<String>,
}

impl From<AttemptRow> for DeliveryAttempt {
    fn from(row: AttemptRow) -> Self {
        Self {
            delivery_id: row.delivery_id,
            attempt_number: row.attempt_number,
            started_at: from_db(row.started_at),
            duration_ms: row.duration_ms,
            status_code: row.status_code.and_then(|code| u16::try_from(code).ok()),
            error_class: row.error_class,
            error_detail: row.error_detail,
        }
    }
}

#[derive(Insertable)]
#[diesel(table_name = webhook_delivery_attempts)]
struct NewAttemptRow<'a> {
    delivery_id: i64,
    attempt_number: i32,
    started_at: PrimitiveDateTime,
    duration_ms: i64,
    status_code: Option<i32>,
    error_class: Option<&'a str>,
    error_detail: Option<&'a str>,
}

/// Due rows of one status, oldest first: a range scan of the `(status, next_retry_at)` index in index order,
/// so neither a table scan nor a sort, however many rows are delivered or due.
/// A due row as read: id, target URL, `next_retry_at`, config id.
type DueRow = (i64, String, Option<PrimitiveDateTime>, i64);

fn due_of_status(
    connection: &mut AnyConnection<'_>,
    status: DeliveryStatus,
    now: PrimitiveDateTime,
    limit: i64,
    skip_configs: &[i64],
) -> QueryResult<Vec<DueRow>> {
    let query = due_of_status_query(status.as_str(), now, limit, skip_configs.to_vec());
    on_backend!(connection, c => query.load(c))
}

/// The statement [`due_of_status`] runs, apart so that the plan test explains this very statement.
#[diesel::dsl::auto_type]
fn due_of_status_query(status: &'static str, now: PrimitiveDateTime, limit: i64, skip_configs: Vec<i64>) -> _ {
    webhook_deliveries::table
        .filter(webhook_deliveries::status.eq(status))
        .filter(webhook_deliveries::next_retry_at.le(now))
        .filter(webhook_deliveries::webhook_id.ne_all(skip_configs))
        .order((webhook_deliveries::next_retry_at.asc(), webhook_deliveries::id.asc()))
        .limit(limit)
        .select((
            webhook_deliveries::id,
            webhook_deliveries::target_url,
            webhook_deliveries::next_retry_at,
            webhook_deliveries::webhook_id,
        ))
}

/// A config's rate as its column holds it: the API bounds it far below `i32::MAX`, which a larger one saturates
/// to (a limit no dispatcher reaches, as it asked).
fn rate_to_db(rate: Option<u32>) -> Option<i32> {
    rate.map(|rate| i32::try_from(rate).unwrap_or(i32::MAX))
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = webhook_events, check_for_backend(Sqlite, Pg))]
struct EventRow {
    id: i64,
    event_type: String,
    source_identifier: Option<String>,
    request_digest: String,
    idempotency_key: Option<String>,
    delivery_ids: String,
    created_at: PrimitiveDateTime,
}

impl TryFrom<EventRow> for WebhookEvent {
    type Error = StoreError;

    fn try_from(row: EventRow) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Internal(format!("webhook event {}: unreadable delivery_ids", row.id));
        let delivery_ids = serde_json::from_str::<Vec<i64>>(&row.delivery_ids).map_err(|_| corrupt())?;
        let idempotency_key = row.idempotency_key.map(IdempotencyKey::new).transpose().map_err(|_| corrupt())?;
        Ok(Self {
            id: row.id,
            event_type: row.event_type,
            source_identifier: row.source_identifier,
            request_digest: row.request_digest,
            idempotency_key,
            delivery_ids,
            created_at: from_db(row.created_at),
        })
    }
}

#[derive(Insertable)]
#[diesel(table_name = webhook_events)]
struct NewEventRow<'a> {
    event_type: &'a str,
    source_identifier: Option<&'a str>,
    request_digest: &'a str,
    idempotency_key: Option<&'a str>,
    delivery_ids: &'a str,
    created_at: PrimitiveDateTime,
}

/// The event stored with `key`, if any.
fn event_by_key(connection: &mut AnyConnection<'_>, key: &str) -> QueryResult<Option<EventRow>> {
    on_backend!(connection, c => {
        webhook_events::table
            .filter(webhook_events::idempotency_key.eq(key))
            .select(EventRow::as_select())
            .first(c)
            .optional()
    })
}

/// What a fan-out transaction came to, before its rows are turned into domain values.
enum FanOutRows {
    Published(EventRow, Vec<DeliveryRow>),
    Existing(EventRow),
    TooWide(usize),
}

/// The fan-out's transaction (see [`WebhookStore::fan_out`]). On PostgreSQL the matching configs are locked as they
/// are read (`FOR KEY SHARE`, what the deliveries' foreign key check takes anyway), so a config deleted meanwhile is
/// either not read or not deleted before this commits; the deliveries then go in as one statement.
fn fan_out_rows(
    connection: &mut AnyConnection<'_>,
    event: &NewWebhookEvent,
    max_deliveries: usize,
    delivery_for: &DeliveryMaker<'_>,
) -> QueryResult<FanOutRows> {
    use webhook_configs::dsl;
    if let Some(key) = &event.idempotency_key
        && let Some(existing) = event_by_key(connection, key.as_str())?
    {
        return Ok(FanOutRows::Existing(existing));
    }
    let limit = i64::try_from(max_deliveries).unwrap_or(i64::MAX).saturating_add(1);
    let mut configs: Vec<ConfigRow> = on_backend!(connection, c => {
        let mut query = dsl::webhook_configs
            .filter(dsl::event_type.eq_any([event.event_type.as_str(), WILDCARD_EVENT_TYPE]))
            // "One delivery per enabled config": a disabled one is left out, not held (NewWebhookEvent::reaches).
            .filter(dsl::enabled.eq(true))
            .order(dsl::id.asc())
            .limit(limit)
            .select(ConfigRow::as_select())
            .into_boxed();
        if let Some(source) = &event.source_identifier {
            query = query.filter(dsl::source_identifier.eq(source.as_str()));
        }
        query.load(c)
    })?;
    if let AnyConnection::Postgres(c) = connection {
        // Locked as the deliveries' foreign key check would lock them (in id order), so none of them can be deleted
        // before this commits; one deleted since it was read is left out.
        let ids: Vec<i64> = configs.iter().map(|config| config.id).collect();
        let locked: HashSet<i64> = dsl::webhook_configs
            .filter(dsl::id.eq_any(&ids))
            .order(dsl::id.asc())
            .select(dsl::id)
            .for_key_share()
            .load::<i64>(&mut **c)?
            .into_iter()
            .collect();
        configs.retain(|config| locked.contains(&config.id));
    }
    if configs.len() > max_deliveries {
        return Ok(FanOutRows::TooWide(configs.len()));
    }
    let row = NewEventRow {
        event_type: &event.event_type,
        source_identifier: event.source_identifier.as_deref(),
        request_digest: &event.request_digest,
        idempotency_key: event.idempotency_key.as_ref().map(IdempotencyKey::as_str),
        delivery_ids: "[]",
        created_at: to_db(event.created_at),
    };
    let insert = diesel::insert_into(webhook_events::table).values(&row).returning(webhook_events::id);
    let event_id: i64 = on_backend!(connection, c => insert.get_result(c))?;
    let drafts: Vec<NewDelivery> =
        configs.into_iter().map(|config| delivery_for(&WebhookConfig::from(config), event_id)).collect();
    let rows: Vec<NewDeliveryRow<'_>> = drafts.iter().map(NewDeliveryRow::of).collect();
    let written: Vec<DeliveryRow> = match connection {
        AnyConnection::Sqlite(_) => rows.iter().map(|row| row.insert(connection)).collect::<QueryResult<_>>()?,
        AnyConnection::Postgres(_) if rows.is_empty() => Vec::new(),
        AnyConnection::Postgres(c) => match postgres::insert_deliveries(c, &rows, false, false)? {
            Some(outcomes) => {
                outcomes.into_iter().map(|outcome| outcome.map(|(row, _)| row)).collect::<QueryResult<_>>()?
            }
            // The configs are locked: none can be missing. Were one, nothing was written, and nothing must be.
            None => return Err(diesel::result::Error::RollbackTransaction),
        },
    };
    let ids: Vec<i64> = written.iter().map(|delivery| delivery.id).collect();
    let ids_text = serde_json::to_string(&ids).unwrap_or_else(|_| String::from("[]"));
    let record = diesel::update(webhook_events::table.find(event_id)).set(webhook_events::delivery_ids.eq(&ids_text));
    let stored: EventRow = on_backend!(connection, c => record.returning(EventRow::as_returning()).get_result(c))?;
    Ok(FanOutRows::Published(stored, written))
}

impl WebhookStore for DieselStore {
    fn create_config(&self, config: &NewWebhookConfig) -> Result<WebhookConfig, StoreError> {
        let row = NewConfigRow {
            source_identifier: &config.source_identifier,
            event_type: &config.event_type,
            agent_intent: &config.agent_intent,
            target_session: &config.target_session,
            target_url: &config.target_url,
            secret: config.secret.expose(),
            created_at: to_db(config.created_at),
            inbound_secret: config.inbound_secret.as_ref().map(WebhookSecret::expose),
            inbound_require_timestamp: config.inbound_require_timestamp,
            rate_limit_per_second: rate_to_db(config.rate_limit_per_second),
        };
        let created = self.with_connection("create webhook config", |connection| {
            on_backend!(connection, c => {
                returned_row(diesel::insert_into(webhook_configs::table).values(&row).returning(ConfigRow::as_returning()).get_results(c))
            })
        })?;
        Ok(created.into())
    }

    fn config(&self, id: i64) -> Result<Option<WebhookConfig>, StoreError> {
        let row = self.with_connection("read webhook config", |connection| {
            on_backend!(connection, c => webhook_configs::table.find(id).select(ConfigRow::as_select()).first(c).optional())
        })?;
        Ok(row.map(WebhookConfig::from))
    }

    fn list_configs(&self) -> Result<Vec<WebhookConfig>, StoreError> {
        let rows = self.with_connection("list webhook configs", |connection| {
            on_backend!(connection, c => {
                webhook_configs::table.order(webhook_configs::id.asc()).select(ConfigRow::as_select()).load(c)
            })
        })?;
        Ok(rows.into_iter().map(WebhookConfig::from).collect())
    }

    fn config_ids(&self) -> Result<Vec<i64>, StoreError> {
        self.with_connection(
            "list webhook config ids",
            |connection| on_backend!(connection, c => webhook_configs::table.select(webhook_configs::id).load(c)),
        )
    }

    fn update_config(
        &self,
        id: i64,
        change: &WebhookConfigChange,
        at: OffsetDateTime,
    ) -> Result<Option<WebhookConfig>, StoreError> {
        use webhook_configs::dsl;
        let updated = self.immediate("update webhook config", |connection| {
            let current = dsl::webhook_configs.find(id);
            let current = match connection {
                AnyConnection::Sqlite(c) => current.select(ConfigRow::as_select()).first(&mut **c).optional()?,
                // Locked: a concurrent rotation waits, then rotates from what this one wrote.
                AnyConnection::Postgres(c) => {
                    current.select(ConfigRow::as_select()).for_update().first(&mut **c).optional()?
                }
            };
            let Some(current) = current else { return Ok(None) };
            let old_target = current.target_url.clone();
            let was_enabled = current.enabled;
            let changed = WebhookConfig::from(current).changed(change, at);
            let write = diesel::update(dsl::webhook_configs.find(id)).set((
                dsl::target_url.eq(&changed.target_url),
                dsl::agent_intent.eq(&changed.agent_intent),
                dsl::target_session.eq(&changed.target_session),
                dsl::secret.eq(changed.secret.expose()),
                dsl::previous_secret.eq(changed.previous_secret.as_ref().map(WebhookSecret::expose)),
                dsl::secret_rotated_at.eq(changed.secret_rotated_at.map(to_db)),
                dsl::inbound_secret.eq(changed.inbound_secret.as_ref().map(WebhookSecret::expose)),
                dsl::previous_inbound_secret.eq(changed.previous_inbound_secret.as_ref().map(WebhookSecret::expose)),
                dsl::inbound_secret_rotated_at.eq(changed.inbound_secret_rotated_at.map(to_db)),
                dsl::inbound_require_timestamp.eq(changed.inbound_require_timestamp),
                dsl::rate_limit_per_second.eq(rate_to_db(changed.rate_limit_per_second)),
                dsl::enabled.eq(changed.enabled),
                dsl::disabled_reason.eq(changed.disabled_reason.map(DisabledReason::as_str)),
                dsl::consecutive_failures.eq(changed.consecutive_failures),
            ));
            let written = on_backend!(connection, c => write.returning(ConfigRow::as_returning()).get_result(c))?;
            // Deliveries not delivered yet (dead ones too: "Retry now" after fixing the URL is the point) go where
            // the config now points; delivered ones keep the target they reached.
            if written.target_url != old_target {
                use webhook_deliveries::dsl as deliveries;
                let unfinished =
                    [DeliveryStatus::Pending, DeliveryStatus::Failed, DeliveryStatus::Dead].map(DeliveryStatus::as_str);
                let follow = diesel::update(
                    deliveries::webhook_deliveries
                        .filter(deliveries::status.eq_any(unfinished))
                        .filter(deliveries::webhook_id.eq(id)),
                )
                .set(deliveries::target_url.eq(&written.target_url));
                on_backend!(connection, c => follow.execute(c))?;
            }
            match (was_enabled, written.enabled) {
                (true, false) => hold_deliveries(connection, id)?,
                (false, true) => resume_deliveries(connection, id, to_db(at))?,
                _ => {}
            }
            Ok(Some(written))
        })?;
        Ok(updated.map(WebhookConfig::from))
    }

    fn delete_config(&self, id: i64) -> Result<bool, StoreError> {
        // The history first, a batch per transaction: one transaction over a large history would hold SQLite's
        // write lock past other writers' busy timeout.
        while self.immediate("delete a webhook config's history", |connection| {
            delete_deliveries(connection, Doomed::OfConfig(id), DELETE_BATCH)
        })? == DELETE_BATCH
        {}
        while self.immediate("delete a webhook config's inbound receipts", |connection| {
            delete_receipts(connection, DoomedReceipts::OfConfig(id), DELETE_BATCH)
        })? == DELETE_BATCH
        {}
        // What is left (deliveries enqueued meanwhile: a handful) goes with the config, atomically. On
        // PostgreSQL the config row is locked first: an insert of a delivery for it (whose foreign key check
        // needs that row) waits until the config is gone and then fails as a conflict, instead of slipping in
        // between the last batch and the config's deletion.
        self.immediate("delete webhook config", |connection| {
            if let AnyConnection::Postgres(c) = connection {
                webhook_configs::table.find(id).select(webhook_configs::id).for_update().load::<i64>(&mut **c)?;
            }
            while delete_deliveries(connection, Doomed::OfConfig(id), DELETE_BATCH)? > 0 {}
            while delete_receipts(connection, DoomedReceipts::OfConfig(id), DELETE_BATCH)? > 0 {}
            let deleted = on_backend!(connection, c => diesel::delete(webhook_configs::table.find(id)).execute(c))?;
            Ok(deleted > 0)
        })
    }

    fn prune_finished_deliveries(&self, created_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        self.immediate("prune finished webhook deliveries", |connection| {
            delete_deliveries(connection, Doomed::FinishedBefore(to_db(created_before)), limit)
        })
    }

    fn fan_out(
        &self,
        event: &NewWebhookEvent,
        max_deliveries: usize,
        delivery_for: &DeliveryMaker<'_>,
    ) -> Result<FanOut, StoreError> {
        let rows = self.immediate("publish webhook event", |connection| {
            fan_out_rows(connection, event, max_deliveries, delivery_for)
        })?;
        Ok(match rows {
            FanOutRows::Published(event, deliveries) => {
                FanOut::Published { event: event.try_into()?, deliveries: self::deliveries(deliveries)? }
            }
            FanOutRows::Existing(event) => FanOut::Existing(event.try_into()?),
            FanOutRows::TooWide(matching) => FanOut::TooWide { matching },
        })
    }

    fn webhook_event_by_key(&self, key: &IdempotencyKey) -> Result<Option<WebhookEvent>, StoreError> {
        let row = self.with_connection("read webhook event by idempotency key", |connection| {
            event_by_key(connection, key.as_str())
        })?;
        row.map(WebhookEvent::try_from).transpose()
    }

    fn insert_delivery(&self, delivery: &NewDelivery) -> Result<Delivery, StoreError> {
        let row = NewDeliveryRow::of(delivery);
        let inserted = self.immediate("insert webhook delivery", |connection| {
            let inserted = row.insert(connection)?;
            Ok(hold_new(connection, vec![inserted])?.remove(0))
        })?;
        inserted.try_into()
    }

    fn insert_inbound_delivery(
        &self,
        delivery: &NewDelivery,
        keys: &[ReceiptKey],
        fresh_since: OffsetDateTime,
    ) -> Result<InboundInsert, StoreError> {
        let row = NewDeliveryRow::of(delivery);
        // Sorted: two transactions that record the same keys take their index entries in the same order, so on
        // PostgreSQL they wait for each other instead of deadlocking.
        let mut keys: Vec<&str> = keys.iter().map(ReceiptKey::as_str).collect();
        keys.sort_unstable();
        keys.dedup();
        let fresh_since = to_db(fresh_since);
        // A receipt found taken after the delivery was written: the transaction is rolled back, and this is the
        // delivery of the receipt that won.
        let mut lost_to = None;
        let outcome = self.immediate("insert inbound webhook delivery", |connection| {
            if let Some(holder) = fresh_holder(connection, delivery.webhook_id, &keys, fresh_since)? {
                return Ok(InboundInsert::Duplicate { delivery_id: holder });
            }
            let inserted = row.insert(connection)?;
            let inserted = hold_new(connection, vec![inserted])?.remove(0);
            for key in &keys {
                let receipt = NewReceiptRow {
                    webhook_id: delivery.webhook_id,
                    receipt_key: key,
                    delivery_id: inserted.id,
                    received_at: row.created_at,
                };
                if !record_receipt(connection, &receipt, fresh_since)? {
                    // Committed by a concurrent request since this transaction's first read (PostgreSQL; SQLite's
                    // write lock rules that out): visible to this new statement.
                    lost_to = fresh_holder(connection, delivery.webhook_id, &[key], fresh_since)?;
                    return Err(diesel::result::Error::RollbackTransaction);
                }
            }
            Ok(InboundInsert::Inserted(Delivery::try_from(inserted).map_err(|error| {
                diesel::result::Error::DeserializationError(Box::new(std::io::Error::other(error.to_string())))
            })?))
        });
        match (outcome, lost_to) {
            (Ok(outcome), _) => Ok(outcome),
            (Err(_), Some(delivery_id)) => Ok(InboundInsert::Duplicate { delivery_id }),
            (Err(error), None) => Err(error),
        }
    }

    fn prune_inbound_receipts(&self, received_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        let before = to_db(received_before);
        self.immediate("prune inbound webhook receipts", |connection| {
            delete_receipts(connection, DoomedReceipts::ReceivedBefore(before), limit)
        })
    }

    fn insert_deliveries(&self, deliveries: &[NewDelivery]) -> Result<Vec<Result<Delivery, StoreError>>, StoreError> {
        let outcomes = self.insert_delivery_group(deliveries, false)?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| {
                outcome
                    .map_err(|error| classify("insert webhook delivery", error))
                    .and_then(|(row, _)| Delivery::try_from(row))
            })
            .collect())
    }

    fn insert_deliveries_to_configs(&self, deliveries: &[NewDelivery]) -> Result<Vec<InsertedToConfig>, StoreError> {
        if self.is_sqlite() {
            // A read costs SQLite no round trip; the insert stays the one SQLite writes for any group.
            return gateway_core::insert_deliveries_reading_configs(self, deliveries);
        }
        let outcomes = self.insert_delivery_group(deliveries, true)?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| {
                let (row, secret) = outcome.map_err(|error| classify("insert webhook delivery", error))?;
                let secret =
                    secret.ok_or_else(|| StoreError::Internal("a delivery came back without its secret".to_owned()))?;
                Ok((Delivery::try_from(row)?, WebhookSecret::new(secret)))
            })
            .collect())
    }

    fn delivery_by_idempotency_key(&self, key: &IdempotencyKey) -> Result<Option<Delivery>, StoreError> {
        let row = self.with_connection("read webhook delivery by idempotency key", |connection| {
            on_backend!(connection, c => {
                webhook_deliveries::table
                    .filter(webhook_deliveries::idempotency_key.eq(key.as_str()))
                    .select(DeliveryRow::as_select())
                    .first(c)
                    .optional()
            })
        })?;
        row.map(Delivery::try_from).transpose()
    }

    fn delivery(&self, id: i64) -> Result<Option<Delivery>, StoreError> {
        let row = self.with_connection("read webhook delivery", |connection| {
            on_backend!(connection, c => {
                webhook_deliveries::table.find(id).select(DeliveryRow::as_select()).first(c).optional()
            })
        })?;
        row.map(Delivery::try_from).transpose()
    }

    fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        use webhook_deliveries::dsl;
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let rows = self.with_connection("list webhook deliveries", |connection| {
            on_backend!(connection, c => {
                let mut query = dsl::webhook_deliveries.select(DeliveryRow::as_select()).into_boxed();
                if let Some(session_id) = &filter.session_id {
                    query = query.filter(dsl::session_id.eq(session_id));
                }
                if let Some(status) = filter.status {
                    query = query.filter(dsl::status.eq(status.as_str()));
                }
                if let Some(from) = filter.created_from {
                    query = query.filter(dsl::created_at.ge(to_db(from)));
                }
                if let Some(before) = filter.created_before {
                    query = query.filter(dsl::created_at.lt(to_db(before)));
                }
                if let Some(after_id) = filter.after_id {
                    query = query.filter(dsl::id.gt(after_id));
                }
                query.order(dsl::id.asc()).limit(limit).load(c)
            })
        })?;
        deliveries(rows)
    }

    fn attempts(&self, delivery_id: i64) -> Result<Vec<DeliveryAttempt>, StoreError> {
        let rows = self.with_connection("read webhook delivery attempts", |connection| {
            on_backend!(connection, c => {
                webhook_delivery_attempts::table
                    .filter(webhook_delivery_attempts::delivery_id.eq(delivery_id))
                    .order(webhook_delivery_attempts::id.asc())
                    .select(AttemptRow::as_select())
                    .load(c)
            })
        })?;
        Ok(rows.into_iter().map(DeliveryAttempt::from).collect())
    }

    fn count_deliveries(&self, status: DeliveryStatus) -> Result<u64, StoreError> {
        let count: i64 = self.with_connection("count webhook deliveries", |connection| {
            let query = webhook_deliveries::table.filter(webhook_deliveries::status.eq(status.as_str())).count();
            on_backend!(connection, c => query.get_result(c))
        })?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn count_due_deliveries(&self, now: OffsetDateTime) -> Result<u64, StoreError> {
        let now = to_db(now);
        // One index range per status, as `due_deliveries` reads them: `(status, next_retry_at)` answers each.
        self.with_connection("count due webhook deliveries", |connection| {
            let mut due = 0_i64;
            for status in AWAITING_ATTEMPT {
                let query = webhook_deliveries::table
                    .filter(webhook_deliveries::status.eq(status.as_str()))
                    .filter(webhook_deliveries::next_retry_at.le(now))
                    .count();
                let count: i64 = on_backend!(connection, c => query.get_result(c))?;
                due = due.saturating_add(count);
            }
            Ok(due)
        })
        .map(|due| u64::try_from(due).unwrap_or(0))
    }

    fn due_deliveries_skipping(
        &self,
        now: OffsetDateTime,
        limit: usize,
        skip_configs: &[i64],
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let now = to_db(now);
        let sql_limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // One index range per status, merged here: `status IN (…) ORDER BY next_retry_at` would sort every due
        // row of both statuses before applying the limit.
        let mut due = Vec::new();
        let rates: HashMap<i64, Option<i32>> = self.with_connection("read due webhook deliveries", |connection| {
            for status in AWAITING_ATTEMPT {
                due.extend(due_of_status(connection, status, now, sql_limit, skip_configs)?);
            }
            // The configs' rates by a second read of their primary keys, not a join: the due read stays the one
            // index range per status that the plan test checks.
            let mut configs: Vec<i64> = due.iter().map(|(_, _, _, webhook_id)| *webhook_id).collect();
            configs.sort_unstable();
            configs.dedup();
            let query = webhook_configs::table
                .filter(webhook_configs::id.eq_any(configs))
                .select((webhook_configs::id, webhook_configs::rate_limit_per_second));
            let rates: Vec<(i64, Option<i32>)> = on_backend!(connection, c => query.load(c))?;
            Ok(rates.into_iter().collect())
        })?;
        let mut due: Vec<DueDelivery> = due
            .into_iter()
            .filter_map(|(id, target_url, next_retry_at, webhook_id)| {
                Some(DueDelivery {
                    id,
                    target_url,
                    next_retry_at: from_db(next_retry_at?),
                    webhook_id,
                    rate_limit_per_second: rates
                        .get(&webhook_id)
                        .copied()
                        .flatten()
                        .and_then(|rate| u32::try_from(rate).ok()),
                })
            })
            .collect();
        due.sort_by_key(|row| (row.next_retry_at, row.id));
        due.truncate(limit);
        Ok(due)
    }

    fn claim(
        &self,
        ids: &[i64],
        due_by: OffsetDateTime,
        lease_until: OffsetDateTime,
    ) -> Result<Vec<Delivery>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.with_connection("claim webhook deliveries", |connection| {
            claim_rows(connection, ids, due_by, lease_until, None)
        })?;
        let mut claimed = deliveries(rows)?;
        claimed.sort_by_key(|delivery| delivery.id);
        Ok(claimed)
    }

    fn claim_fenced(
        &self,
        ids: &[i64],
        due_by: OffsetDateTime,
        lease_until: OffsetDateTime,
        token: FencingToken,
    ) -> Result<Vec<Delivery>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.immediate_fenced("claim webhook deliveries for the poll", |connection| {
            admit(connection, token)?;
            Ok(claim_rows(connection, ids, due_by, lease_until, Some(token))?)
        })?;
        let mut claimed = deliveries(rows)?;
        claimed.sort_by_key(|delivery| delivery.id);
        Ok(claimed)
    }

    fn release_deposed_claims(&self, token: FencingToken, now: OffsetDateTime) -> Result<usize, StoreError> {
        use webhook_deliveries::dsl;
        let statuses = AWAITING_ATTEMPT.map(DeliveryStatus::as_str);
        // Claims in flight are the rows of the partial index on `claimed_until`: a handful, whatever the history.
        let release = diesel::update(
            dsl::webhook_deliveries
                .filter(dsl::claimed_until.is_not_null())
                .filter(dsl::claim_token.lt(token_to_db(token)))
                .filter(dsl::status.eq_any(statuses)),
        )
        .set((
            dsl::next_retry_at.eq(to_db(now)),
            dsl::claimed_until.eq(None::<PrimitiveDateTime>),
            dsl::claim_token.eq(None::<i64>),
        ));
        self.immediate_fenced("release the claims of deposed leaders", |connection| {
            admit(connection, token)?;
            Ok(on_backend!(connection, c => release.execute(c))?)
        })
    }

    fn claim_each(
        &self,
        claims: &[(i64, OffsetDateTime)],
        lease_until: OffsetDateTime,
    ) -> Result<Vec<Delivery>, StoreError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let work = |connection: &mut AnyConnection<'_>| match connection {
            AnyConnection::Sqlite(_) => {
                let mut claimed = Vec::with_capacity(claims.len());
                for (id, due_by) in claims {
                    claimed.extend(claim_rows(connection, std::slice::from_ref(id), *due_by, lease_until, None)?);
                }
                Ok(claimed)
            }
            AnyConnection::Postgres(c) => postgres::claim(c, claims.iter().copied(), lease_until, None),
        };
        let rows = if self.is_sqlite() {
            self.immediate("claim webhook deliveries", work)?
        } else {
            // One statement, atomic on its own: no BEGIN and COMMIT round trips.
            self.with_connection("claim webhook deliveries", work)?
        };
        deliveries(rows)
    }

    fn record_attempts_counting(
        &self,
        records: &[AttemptRecord],
        disable_after_failures: u32,
    ) -> Result<Vec<AttemptRecorded>, StoreError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        if !self.is_sqlite() && postgres::all_successes_to_one_config(records) {
            // The commonest group of all, successes to one endpoint, in one statement without a transaction
            // around it: two round trips and a statement fewer than the path below. Should a delivery be gone,
            // nothing was written and the group goes the general way.
            let recorded = self.with_connection("record webhook attempts", |connection| {
                let AnyConnection::Postgres(c) = connection else {
                    return Ok(None);
                };
                postgres::record_successes(c, records)
            })?;
            if let Some((recorded, disabled)) = recorded {
                if disabled {
                    // Held as the path below holds a disabled config's rows; a success schedules no next try, so
                    // this only repeats what disabling it held.
                    self.immediate("hold webhook deliveries", |connection| {
                        hold_deliveries(connection, records[0].webhook_id)
                    })?;
                }
                return Ok(recorded);
            }
        }
        if !self.is_sqlite() && !postgres::repeats_a_delivery(records) {
            // The common case on PostgreSQL: the records in one statement (the configs locked first), then the
            // configs' health in one. Should a delivery be gone (deleted with its config mid-attempt: its attempt
            // must count for nothing), that transaction is rolled back and the group recorded the general way.
            let mut a_delivery_was_gone = false;
            let counted = self.immediate("record webhook attempts", |connection| {
                let AnyConnection::Postgres(c) = connection else {
                    return Err(diesel::result::Error::RollbackTransaction);
                };
                let counted = postgres::record_attempts_counting(c, records, disable_after_failures)?;
                a_delivery_was_gone = counted.is_none();
                counted.ok_or(diesel::result::Error::RollbackTransaction)
            });
            if !a_delivery_was_gone {
                return counted;
            }
        }
        // One transaction: the history, the rows' outcomes and the configs' health commit together (a crash cannot
        // count an attempt twice or lose one). The configs are locked before the deliveries, as `update_config`
        // locks a config before holding its deliveries, so the two never wait for each other in a circle.
        self.immediate("record webhook attempts", |connection| {
            let mut configs = lock_configs(connection, records)?;
            let applied: Vec<Option<bool>> = match connection {
                AnyConnection::Postgres(c) => postgres::record_attempts_in_turn(c, records)?,
                AnyConnection::Sqlite(_) => records
                    .iter()
                    .map(|entry| record(connection, &entry.attempt, entry.lease, &entry.update))
                    .collect::<QueryResult<_>>()?,
            };
            let mut recorded = Vec::with_capacity(records.len());
            for (entry, applied) in records.iter().zip(applied) {
                // A delivery that is gone: its attempt counts for nothing.
                let config = applied.and_then(|_| configs.get_mut(&entry.webhook_id));
                let disabled = config.and_then(|config| config.count_attempt(&entry.attempt, disable_after_failures));
                recorded.push(AttemptRecorded { applied: applied.unwrap_or(false), disabled });
            }
            for config in configs.values() {
                write_health(connection, config)?;
                if !config.enabled {
                    // Attempts that were in flight when it was disabled have just scheduled their next try.
                    hold_deliveries(connection, config.id)?;
                }
            }
            Ok(recorded)
        })
    }

    fn endpoint_stats(&self, since: OffsetDateTime) -> Result<BTreeMap<i64, EndpointStats>, StoreError> {
        let since = to_db(since);
        let rows = self.with_connection("read webhook endpoint stats", |connection| {
            on_backend!(connection, c => diesel::sql_query(ENDPOINT_STATS_SQL)
                .bind::<diesel::sql_types::Timestamp, _>(since)
                .bind::<diesel::sql_types::Timestamp, _>(since)
                .load::<StatsRow>(c))
        })?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let mut stats: BTreeMap<i64, EndpointStats> = BTreeMap::new();
        for row in rows {
            let entry = stats.entry(row.webhook_id).or_default();
            entry.delivered += count(row.delivered);
            entry.failed_attempts += count(row.failed_attempts);
            entry.dead += count(row.dead);
        }
        Ok(stats)
    }

    fn retry_now(&self, id: i64, now: OffsetDateTime) -> Result<RetryNowOutcome, StoreError> {
        use webhook_deliveries::dsl;
        let retryable = [DeliveryStatus::Failed, DeliveryStatus::Dead].map(DeliveryStatus::as_str);
        let outcome = self.immediate("retry webhook delivery now", |connection| {
            let current = dsl::webhook_deliveries.find(id);
            let current = match connection {
                AnyConnection::Sqlite(c) => current.select(DeliveryRow::as_select()).first(&mut **c).optional()?,
                // Locked: the status it is about to judge stays what it read until the reset commits.
                AnyConnection::Postgres(c) => {
                    current.select(DeliveryRow::as_select()).for_update().first(&mut **c).optional()?
                }
            };
            let Some(current) = current else {
                return Ok(None);
            };
            if !retryable.contains(&current.status.as_str()) {
                return Ok(Some(Err(current)));
            }
            let reset = reset_for_retry(connection, &[id], now)?;
            // A disabled config's delivery is reset but held, like every delivery of its config.
            Ok(Some(Ok(hold_new(connection, reset)?.pop().ok_or(diesel::result::Error::NotFound)?)))
        })?;
        match outcome {
            None => Ok(RetryNowOutcome::NotFound),
            Some(Err(current)) => Ok(RetryNowOutcome::NotAllowed(Delivery::try_from(current)?.status)),
            Some(Ok(reset)) => Ok(RetryNowOutcome::Reset(reset.try_into()?)),
        }
    }

    fn recover_dead(
        &self,
        webhook_id: i64,
        window: &RecoverWindow,
        after_id: i64,
        now: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        use webhook_deliveries::dsl;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (since, until) = (to_db(window.since), to_db(window.until));
        let rows = self.immediate("recover dead webhook deliveries", |connection| {
            let batch = dsl::webhook_deliveries
                .filter(dsl::webhook_id.eq(webhook_id))
                .filter(dsl::status.eq(DeliveryStatus::Dead.as_str()))
                .filter(dsl::created_at.between(since, until))
                .filter(dsl::id.gt(after_id))
                .order(dsl::id.asc())
                .select(dsl::id)
                .limit(limit);
            let batch: Vec<i64> = match connection {
                AnyConnection::Sqlite(c) => batch.load(&mut **c)?,
                // Locked, as "Retry now" locks its row: a concurrent attempt record or delete waits for the reset.
                AnyConnection::Postgres(c) => batch.for_update().load(&mut **c)?,
            };
            if batch.is_empty() {
                return Ok(Vec::new());
            }
            let reset = reset_for_retry(connection, &batch, now)?;
            // A disabled config's recovered deliveries are held, like every delivery of its config.
            hold_new(connection, reset)
        })?;
        let mut recovered = deliveries(rows)?;
        recovered.sort_by_key(|delivery| delivery.id);
        Ok(recovered)
    }
}

/// "Retry now" of the rows `ids` (which the caller has judged failed or dead, inside its transaction): the one
/// update both "Retry now" and recover make ([`Delivery::reset_for_retry`]). Returns the rows as reset, in any order.
fn reset_for_retry(
    connection: &mut AnyConnection<'_>,
    ids: &[i64],
    now: OffsetDateTime,
) -> QueryResult<Vec<DeliveryRow>> {
    use webhook_deliveries::dsl;
    let reset = diesel::update(dsl::webhook_deliveries.filter(dsl::id.eq_any(ids))).set((
        dsl::status.eq(DeliveryStatus::Pending.as_str()),
        dsl::attempt_count.eq(0),
        dsl::next_retry_at.eq(Some(to_db(now))),
        // An attempt still in flight no longer holds the row: its outcome will not be applied.
        dsl::claimed_until.eq(None::<PrimitiveDateTime>),
    ));
    on_backend!(connection, c => reset.returning(DeliveryRow::as_returning()).get_results(c))
}

impl DieselStore {
    /// The group insert in one transaction, each delivery a constraint refuses failing alone. SQLite: a savepoint
    /// per row, so a refused row rolls back alone and the others still commit together. PostgreSQL: the configs
    /// locked first, then one statement (`postgres::insert_deliveries`).
    fn insert_deliveries_in_transaction(
        &self,
        rows: &[NewDeliveryRow<'_>],
        to_configs: bool,
    ) -> Result<Vec<WrittenRow>, StoreError> {
        self.immediate("insert webhook deliveries", |connection| {
            let c = match connection {
                AnyConnection::Sqlite(c) => c,
                // The statement holds the rows of configs disabled as it finds them, as on the path without a
                // transaction (`insert_delivery_group`, which says what holds those of a config disabled after).
                AnyConnection::Postgres(c) => {
                    return postgres::insert_deliveries(c, rows, true, to_configs).map(Option::unwrap_or_default);
                }
            };
            let mut outcomes = Vec::with_capacity(rows.len());
            for row in rows {
                match c.transaction(|c| row.insert(&mut AnyConnection::Sqlite(c))) {
                    Ok(inserted) => outcomes.push(Ok(inserted)),
                    Err(error @ diesel::result::Error::DatabaseError(kind, _)) if is_constraint(&kind) => {
                        outcomes.push(Err(error));
                    }
                    Err(other) => return Err(other),
                }
            }
            // In the insert's own transaction: SQLite runs one writer at a time, so no disable comes between.
            let held = hold_outcomes(&mut AnyConnection::Sqlite(c), outcomes)?;
            Ok(held.into_iter().map(|outcome| outcome.map(|row| (row, None))).collect())
        })
    }

    /// The group insert of `insert_deliveries` (`to_configs`: of `insert_deliveries_to_configs`, on PostgreSQL;
    /// SQLite reads the configs first), each row with its config's secret when `to_configs`.
    fn insert_delivery_group(
        &self,
        deliveries: &[NewDelivery],
        to_configs: bool,
    ) -> Result<Vec<WrittenRow>, StoreError> {
        let rows: Vec<NewDeliveryRow<'_>> = deliveries.iter().map(NewDeliveryRow::of).collect();
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut written = None;
        if !self.is_sqlite() {
            // One statement, atomic on its own, when every config is there (the common case: the router has just
            // read them, or it asks the statement to read them); else the group again, its configs locked first.
            written = self.with_connection("insert webhook deliveries", |connection| match connection {
                AnyConnection::Postgres(c) => postgres::insert_deliveries(c, &rows, false, to_configs),
                AnyConnection::Sqlite(_) => Ok(None),
            })?;
        }
        // PostgreSQL's statement has held the rows of configs disabled as it found them. A config disabled after is
        // held by the disable's own statement (`hold_deliveries`), or, when the disable commits while this runs, by the
        // first claim that finds a row due (`hold_lapsed`) or by the record of an attempt that started (the record
        // holds a disabled config's deliveries): nothing escapes all of them.
        match written {
            Some(outcomes) => Ok(outcomes),
            None => self.insert_deliveries_in_transaction(&rows, to_configs),
        }
    }
}

/// Claims the rows `ids` that are pending or failed and due by `due_by`, until `lease_until`, recording the poll's
/// term (`token`; `None` for an immediate attempt). On PostgreSQL the rows are locked in id order first
/// (`postgres`: every claim and attempt record does so, and so they never deadlock on each other).
fn claim_rows(
    connection: &mut AnyConnection<'_>,
    ids: &[i64],
    due_by: OffsetDateTime,
    lease_until: OffsetDateTime,
    token: Option<FencingToken>,
) -> QueryResult<Vec<DeliveryRow>> {
    let claimed = match connection {
        AnyConnection::Postgres(c) => {
            postgres::claim(c, ids.iter().map(|id| (*id, due_by)), lease_until, token.map(token_to_db))?
        }
        AnyConnection::Sqlite(_) => claim_rows_sqlite(connection, ids, due_by, lease_until, token)?,
    };
    if claimed.len() < ids.len() {
        let taken: HashSet<i64> = claimed.iter().map(|row| row.id).collect();
        let passed: Vec<i64> = ids.iter().copied().filter(|id| !taken.contains(id)).collect();
        hold_lapsed(connection, &passed, due_by)?;
    }
    Ok(claimed)
}

/// Holds those of `ids` that are due by `due_by` while their config is disabled: rows a claim was taken on before
/// the disable (the disable leaves claimed rows to their attempt) whose process died, so that no attempt recorded
/// and held them. Without this they would stay due — read by every poll, refused by every claim — until an enable.
fn hold_lapsed(connection: &mut AnyConnection<'_>, ids: &[i64], due_by: OffsetDateTime) -> QueryResult<()> {
    use webhook_deliveries::dsl;
    let hold = diesel::update(
        dsl::webhook_deliveries
            .filter(dsl::id.eq_any(ids))
            .filter(dsl::status.eq_any(AWAITING_ATTEMPT.map(DeliveryStatus::as_str)))
            .filter(dsl::next_retry_at.le(to_db(due_by)))
            .filter(dsl::webhook_id.eq_any(disabled_configs())),
    )
    .set((
        dsl::next_retry_at.eq(None::<PrimitiveDateTime>),
        dsl::claimed_until.eq(None::<PrimitiveDateTime>),
        dsl::claim_token.eq(None::<i64>),
    ));
    on_backend!(connection, c => hold.execute(c))?;
    Ok(())
}

fn claim_rows_sqlite(
    connection: &mut AnyConnection<'_>,
    ids: &[i64],
    due_by: OffsetDateTime,
    lease_until: OffsetDateTime,
    token: Option<FencingToken>,
) -> QueryResult<Vec<DeliveryRow>> {
    use webhook_deliveries::dsl;
    let token = token.map(token_to_db);
    let statuses = AWAITING_ATTEMPT.map(DeliveryStatus::as_str);
    let claim = diesel::update(
        dsl::webhook_deliveries
            .filter(dsl::id.eq_any(ids))
            .filter(dsl::status.eq_any(statuses))
            .filter(dsl::next_retry_at.le(to_db(due_by)))
            .filter(dsl::webhook_id.ne_all(disabled_configs())),
    )
    // The marker tells this claim from a scheduled retry once its process is gone (`recovery`).
    .set((
        dsl::next_retry_at.eq(to_db(lease_until)),
        dsl::claimed_until.eq(to_db(lease_until)),
        dsl::claim_token.eq(token),
    ));
    on_backend!(connection, c => claim.returning(DeliveryRow::as_returning()).get_results(c))
}

/// Appends an attempt to the history and applies its outcome if the row still carries the claim it ran under:
/// whether it applied, `None` when the delivery is gone (nothing recorded). Call it inside a
/// `DieselStore::immediate` transaction (it reads, then writes).
fn record(
    connection: &mut AnyConnection<'_>,
    attempt: &DeliveryAttempt,
    lease: OffsetDateTime,
    update: &DeliveryUpdate,
) -> QueryResult<Option<bool>> {
    use webhook_deliveries::dsl;
    let history = NewAttemptRow {
        delivery_id: attempt.delivery_id,
        attempt_number: attempt.attempt_number,
        started_at: to_db(attempt.started_at),
        duration_ms: attempt.duration_ms,
        status_code: attempt.status_code.map(i32::from),
        error_class: attempt.error_class.as_deref(),
        error_detail: attempt.error_detail.as_deref(),
    };
    let exists = match connection {
        AnyConnection::Sqlite(c) => {
            diesel::select(diesel::dsl::exists(dsl::webhook_deliveries.find(attempt.delivery_id)))
                .get_result::<bool>(&mut **c)?
        }
        // Locked, so that a concurrent delete (its config's, or retention's) waits for this record rather than
        // removing the row between this check and the history's insert.
        AnyConnection::Postgres(c) => dsl::webhook_deliveries
            .find(attempt.delivery_id)
            .select(dsl::id)
            .for_update()
            .first::<i64>(&mut **c)
            .optional()?
            .is_some(),
    };
    if !exists {
        // Deleted with its config mid-attempt: there is nothing left to attach the history to.
        return Ok(None);
    }
    let insert = diesel::insert_into(webhook_delivery_attempts::table).values(&history);
    on_backend!(connection, c => insert.execute(c))?;
    let apply = diesel::update(
        dsl::webhook_deliveries
            .find(attempt.delivery_id)
            .filter(dsl::next_retry_at.eq(to_db(lease)))
            .filter(dsl::attempt_count.eq(attempt.attempt_number - 1)),
    )
    .set((
        dsl::status.eq(update.status.as_str()),
        dsl::attempt_count.eq(update.attempt_count),
        dsl::last_attempted_at.eq(to_db(update.last_attempted_at)),
        dsl::next_retry_at.eq(update.next_retry_at.map(to_db)),
        dsl::error_detail.eq(update.error_detail.as_deref()),
        dsl::claimed_until.eq(None::<PrimitiveDateTime>),
    ));
    let applied = on_backend!(connection, c => apply.execute(c))? == 1;
    if applied && let Some(signature) = &update.signature {
        let resign =
            diesel::update(dsl::webhook_deliveries.find(attempt.delivery_id)).set(dsl::signature.eq(signature));
        on_backend!(connection, c => resign.execute(c))?;
    }
    Ok(Some(applied))
}

/// The ids of the disabled configs: a handful at most, read as a subquery by the claim.
#[diesel::dsl::auto_type]
fn disabled_configs() -> _ {
    webhook_configs::table.filter(webhook_configs::enabled.eq(false)).select(webhook_configs::id)
}

/// Holds a disabled config's deliveries that await an attempt and are not claimed: `next_retry_at = NULL`, off the
/// due index. A claimed one is left to its attempt, whose record holds it afterwards.
fn hold_deliveries(connection: &mut AnyConnection<'_>, webhook_id: i64) -> QueryResult<()> {
    use webhook_deliveries::dsl;
    let hold = diesel::update(
        dsl::webhook_deliveries
            .filter(dsl::webhook_id.eq(webhook_id))
            .filter(dsl::status.eq_any(AWAITING_ATTEMPT.map(DeliveryStatus::as_str)))
            .filter(dsl::claimed_until.is_null())
            .filter(dsl::next_retry_at.is_not_null()),
    )
    .set(dsl::next_retry_at.eq(None::<PrimitiveDateTime>));
    on_backend!(connection, c => hold.execute(c))?;
    Ok(())
}

/// A resumed config's held deliveries are due at `now`: the poll then sends them oldest first (ties by id) under
/// the global rate, as any backlog.
fn resume_deliveries(connection: &mut AnyConnection<'_>, webhook_id: i64, now: PrimitiveDateTime) -> QueryResult<()> {
    use webhook_deliveries::dsl;
    let resume = diesel::update(
        dsl::webhook_deliveries
            .filter(dsl::webhook_id.eq(webhook_id))
            .filter(dsl::status.eq_any(AWAITING_ATTEMPT.map(DeliveryStatus::as_str)))
            .filter(dsl::next_retry_at.is_null()),
    )
    .set(dsl::next_retry_at.eq(Some(now)));
    on_backend!(connection, c => resume.execute(c))?;
    Ok(())
}

/// Of the rows `ids`, those of disabled configs held (claim marker cleared too: an insert's claim must not start
/// an attempt); returns the rows it changed.
fn hold_rows(connection: &mut AnyConnection<'_>, ids: &[i64]) -> QueryResult<Vec<DeliveryRow>> {
    use webhook_deliveries::dsl;
    let hold = diesel::update(
        dsl::webhook_deliveries
            .filter(dsl::id.eq_any(ids))
            .filter(dsl::status.eq_any(AWAITING_ATTEMPT.map(DeliveryStatus::as_str)))
            .filter(dsl::webhook_id.eq_any(disabled_configs())),
    )
    .set((dsl::next_retry_at.eq(None::<PrimitiveDateTime>), dsl::claimed_until.eq(None::<PrimitiveDateTime>)));
    on_backend!(connection, c => hold.returning(DeliveryRow::as_returning()).get_results(c))
}

/// Those of `ids` whose config is disabled, held ([`hold_rows`]), by id.
fn hold_by_id(connection: &mut AnyConnection<'_>, ids: &[i64]) -> QueryResult<HashMap<i64, DeliveryRow>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(hold_rows(connection, ids)?.into_iter().map(|row| (row.id, row)).collect())
}

/// A group insert's outcomes with the rows of disabled configs held, in the same order.
fn hold_outcomes(
    connection: &mut AnyConnection<'_>,
    outcomes: Vec<QueryResult<DeliveryRow>>,
) -> QueryResult<Vec<QueryResult<DeliveryRow>>> {
    let ids: Vec<i64> = outcomes.iter().flatten().filter(|row| row.next_retry_at.is_some()).map(|row| row.id).collect();
    let mut held = hold_by_id(connection, &ids)?;
    Ok(outcomes.into_iter().map(|outcome| outcome.map(|row| held.remove(&row.id).unwrap_or(row))).collect())
}

/// `rows` just written, with those of disabled configs held, in the same order.
fn hold_new(connection: &mut AnyConnection<'_>, rows: Vec<DeliveryRow>) -> QueryResult<Vec<DeliveryRow>> {
    let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
    let mut held = hold_by_id(connection, &ids)?;
    Ok(rows.into_iter().map(|row| held.remove(&row.id).unwrap_or(row)).collect())
}

/// The configs the records name, read (on PostgreSQL locked, in id order) to count attempts against.
fn lock_configs(
    connection: &mut AnyConnection<'_>,
    records: &[AttemptRecord],
) -> QueryResult<BTreeMap<i64, WebhookConfig>> {
    let mut ids: Vec<i64> = records.iter().map(|entry| entry.webhook_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let query = webhook_configs::table.filter(webhook_configs::id.eq_any(&ids)).order(webhook_configs::id.asc());
    let rows: Vec<ConfigRow> = match connection {
        AnyConnection::Sqlite(c) => query.select(ConfigRow::as_select()).load(&mut **c)?,
        // Not a key update: a delivery inserted for the config meanwhile (its foreign key check) does not wait.
        AnyConnection::Postgres(c) => query.select(ConfigRow::as_select()).for_no_key_update().load(&mut **c)?,
    };
    Ok(rows.into_iter().map(|row| (row.id, WebhookConfig::from(row))).collect())
}

/// Writes a config's health as counted.
fn write_health(connection: &mut AnyConnection<'_>, config: &WebhookConfig) -> QueryResult<()> {
    use webhook_configs::dsl;
    let write = diesel::update(dsl::webhook_configs.find(config.id)).set((
        dsl::enabled.eq(config.enabled),
        dsl::disabled_reason.eq(config.disabled_reason.map(DisabledReason::as_str)),
        dsl::consecutive_failures.eq(config.consecutive_failures),
        dsl::last_success_at.eq(config.last_success_at.map(to_db)),
    ));
    on_backend!(connection, c => write.execute(c))?;
    Ok(())
}

/// `stats_24h` of every config: the window's attempts (a range of `webhook_delivery_attempts_started_at`, each
/// joined to its delivery by primary key) and its dead letters (a range of the partial `webhook_deliveries_dead_at`).
const ENDPOINT_STATS_SQL: &str = "\
    SELECT d.webhook_id AS webhook_id, \
        CAST(SUM(CASE WHEN a.error_class IS NULL THEN 1 ELSE 0 END) AS BIGINT) AS delivered, \
        CAST(SUM(CASE WHEN a.error_class IS NULL THEN 0 ELSE 1 END) AS BIGINT) AS failed_attempts, \
        CAST(0 AS BIGINT) AS dead \
    FROM webhook_delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id \
    WHERE a.started_at >= $1 GROUP BY d.webhook_id \
    UNION ALL \
    SELECT webhook_id, CAST(0 AS BIGINT), CAST(0 AS BIGINT), CAST(COUNT(*) AS BIGINT) FROM webhook_deliveries \
    WHERE status = 'dead' AND last_attempted_at >= $2 GROUP BY webhook_id";

#[derive(QueryableByName)]
struct StatsRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    webhook_id: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    delivered: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    failed_attempts: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    dead: i64,
}

fn is_constraint(kind: &DatabaseErrorKind) -> bool {
    matches!(
        kind,
        DatabaseErrorKind::UniqueViolation | DatabaseErrorKind::ForeignKeyViolation | DatabaseErrorKind::CheckViolation
    )
}

mod postgres;
#[cfg(test)]
mod tests;
