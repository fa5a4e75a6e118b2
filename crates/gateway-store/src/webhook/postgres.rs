//! The webhook store's group writes on PostgreSQL, each a statement or two for the whole group (`batch`), with
//! the outcome of each item what the row-by-row writes give on SQLite.
//!
//! Lock order: every write that locks several delivery rows locks them in ascending id order, in its first
//! statement (the claims' `FOR UPDATE … ORDER BY id`, the attempt records' likewise), and takes no other row lock
//! before but, for a record group, its configs' (`FOR NO KEY UPDATE`, in id order, in the same statement): two such
//! writes wait for each other instead of deadlocking. A group insert locks its configs (`FOR KEY SHARE`, in id
//! order, or through its foreign key check) and only inserts deliveries; deleting a config locks the config first.
//!
//! Locking a row and updating it in one statement is safe only where no other transaction can hold a lock on the
//! row beside its updater. PostgreSQL waits in two steps: for the heavyweight lock on the tuple (the version that
//! the statement's snapshot found), then for the transactions holding the row; and a statement whose lock waited
//! for another transaction's update locks the newest version, while its `UPDATE` still reaches the row through
//! the older one its snapshot sees. When that older version is still held by a running transaction too, a key share
//! lock from a delivery insert's foreign key check (its `xmax` a multixact of that locker and the committed
//! updater), the `UPDATE` queues for the older version's tuple lock while it holds the newest one, and the next
//! group, which holds that tuple lock while it waits for the newest version, closes a circle: `deadlock detected`.
//! Configs have such lockers (every delivery insert), so a record group locks its configs in its first statement
//! (the records', before their deliveries) and counts them in its second, whose snapshot sees the versions it
//! locked (`record_attempts_counting`). Deliveries have none (the only key share lock on one, an attempt's foreign
//! key check, is taken by the record that already holds it `FOR UPDATE`): the claim and the record lock and update
//! them in one statement.

use std::collections::{BTreeMap, HashMap, HashSet};

use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text, Timestamp};
use gateway_core::{AttemptRecord, AttemptRecorded, DeliveryStatus, DisabledReason, EndpointDisabled};
use time::{OffsetDateTime, PrimitiveDateTime};

use super::{AWAITING_ATTEMPT, DeliveryRow, NewDeliveryRow, WrittenRow, record};
use crate::batch::{pair_in_order, push_sql_with_binds};
use crate::connection::AnyConnection;
use crate::schema::{webhook_configs, webhook_deliveries};
use crate::timestamp::to_db;

/// `DeliveryRow`'s columns, in its field order.
const DELIVERY_COLUMNS: &str = "webhook_deliveries.id, webhook_deliveries.webhook_id, webhook_deliveries.session_id, \
    webhook_deliveries.payload, webhook_deliveries.target_url, webhook_deliveries.signature, \
    webhook_deliveries.status, webhook_deliveries.attempt_count, webhook_deliveries.last_attempted_at, \
    webhook_deliveries.next_retry_at, webhook_deliveries.created_at, webhook_deliveries.error_detail";

/// `DeliveryRow`'s SQL type.
type DeliveryColumns = (
    BigInt,
    BigInt,
    Text,
    Text,
    Text,
    Text,
    Text,
    Integer,
    Nullable<Timestamp>,
    Nullable<Timestamp>,
    Timestamp,
    Nullable<Text>,
);

/// A group's deliveries as one `INSERT … SELECT … FROM unnest(…)`, in the order they were sent; a delivery whose
/// idempotency key is held is skipped, and one of a config disabled as this statement finds it is written held (no
/// `next_retry_at`, no claim: what `hold_rows` would make of it, without a statement of its own). Returns each
/// written row with its key and claim marker.
struct InsertDeliveries<'a> {
    webhook_id: Vec<i64>,
    session_id: Vec<&'a str>,
    payload: Vec<&'a str>,
    target_url: Vec<&'a str>,
    signature: Vec<&'a str>,
    status: Vec<&'a str>,
    attempt_count: Vec<i32>,
    next_retry_at: Vec<PrimitiveDateTime>,
    created_at: Vec<PrimitiveDateTime>,
    idempotency_key: Vec<Option<&'a str>>,
    claimed_until: Vec<Option<PrimitiveDateTime>>,
}

postgres_statement!(InsertDeliveries -> (DeliveryColumns, Nullable<Text>, Nullable<Timestamp>));

impl<'a> InsertDeliveries<'a> {
    fn of(rows: &[&'a NewDeliveryRow<'a>]) -> Self {
        Self {
            webhook_id: rows.iter().map(|row| row.webhook_id).collect(),
            session_id: rows.iter().map(|row| row.session_id).collect(),
            payload: rows.iter().map(|row| row.payload).collect(),
            target_url: rows.iter().map(|row| row.target_url).collect(),
            signature: rows.iter().map(|row| row.signature).collect(),
            status: rows.iter().map(|row| row.status).collect(),
            attempt_count: rows.iter().map(|row| row.attempt_count).collect(),
            next_retry_at: rows.iter().map(|row| row.next_retry_at).collect(),
            created_at: rows.iter().map(|row| row.created_at).collect(),
            idempotency_key: rows.iter().map(|row| row.idempotency_key).collect(),
            claimed_until: rows.iter().map(|row| row.claimed_until).collect(),
        }
    }
}

/// [`InsertDeliveries`] for rows that go to their configs as the statement finds them
/// (`WebhookStore::insert_deliveries_to_configs`): each row's target is its config's, its signature empty, and each
/// written row comes back with its config's secret, read in the same snapshot as the target. A row whose config is
/// missing fails the statement (its target is NULL), as the foreign key would. A type of its own because Diesel
/// caches a prepared statement by its type.
struct InsertDeliveriesToConfigs<'a>(InsertDeliveries<'a>);

postgres_statement!(InsertDeliveriesToConfigs -> (DeliveryColumns, Nullable<Text>, Nullable<Timestamp>, Nullable<Text>));

impl QueryFragment<Pg> for InsertDeliveriesToConfigs<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let rows = &self.0;
        out.push_sql(
            "WITH written AS (INSERT INTO webhook_deliveries (webhook_id, session_id, payload, target_url, signature, \
             status, attempt_count, next_retry_at, created_at, idempotency_key, claimed_until) \
             SELECT sent.webhook_id, sent.session_id, sent.payload, config.target_url, '', sent.status, \
             sent.attempt_count, CASE WHEN config.enabled THEN sent.next_retry_at END, sent.created_at, \
             sent.idempotency_key, CASE WHEN config.enabled THEN sent.claimed_until END ",
        );
        push_sql_with_binds(
            &mut out,
            "FROM unnest($, $, $, $, $, $, $, $, $) WITH ORDINALITY AS sent (webhook_id, session_id, payload, status, \
             attempt_count, next_retry_at, created_at, idempotency_key, claimed_until, position) \
             LEFT JOIN webhook_configs AS config ON config.id = sent.webhook_id \
             ORDER BY position \
             ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING ",
            |index, out| match index {
                0 => out.push_bind_param::<Array<BigInt>, _>(&rows.webhook_id),
                1 => out.push_bind_param::<Array<Text>, _>(&rows.session_id),
                2 => out.push_bind_param::<Array<Text>, _>(&rows.payload),
                3 => out.push_bind_param::<Array<Text>, _>(&rows.status),
                4 => out.push_bind_param::<Array<Integer>, _>(&rows.attempt_count),
                5 => out.push_bind_param::<Array<Timestamp>, _>(&rows.next_retry_at),
                6 => out.push_bind_param::<Array<Timestamp>, _>(&rows.created_at),
                7 => out.push_bind_param::<Array<Nullable<Text>>, _>(&rows.idempotency_key),
                _ => out.push_bind_param::<Array<Nullable<Timestamp>>, _>(&rows.claimed_until),
            },
        )?;
        out.push_sql(DELIVERY_COLUMNS);
        out.push_sql(
            ", webhook_deliveries.idempotency_key AS written_key, webhook_deliveries.claimed_until AS written_claim) \
             SELECT written.*, config.secret FROM written LEFT JOIN webhook_configs AS config \
             ON config.id = written.webhook_id",
        );
        Ok(())
    }
}

impl QueryFragment<Pg> for InsertDeliveries<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO webhook_deliveries (webhook_id, session_id, payload, target_url, signature, status, \
             attempt_count, next_retry_at, created_at, idempotency_key, claimed_until) \
             SELECT sent.webhook_id, sent.session_id, sent.payload, sent.target_url, sent.signature, sent.status, \
             sent.attempt_count, CASE WHEN held.id IS NULL THEN sent.next_retry_at END, sent.created_at, \
             sent.idempotency_key, CASE WHEN held.id IS NULL THEN sent.claimed_until END ",
        );
        push_sql_with_binds(
            &mut out,
            "FROM unnest($, $, $, $, $, $, $, $, $, $, $) WITH ORDINALITY AS sent (webhook_id, session_id, payload, \
             target_url, signature, status, attempt_count, next_retry_at, created_at, idempotency_key, \
             claimed_until, position) \
             LEFT JOIN (SELECT id FROM webhook_configs WHERE NOT enabled) AS held ON held.id = sent.webhook_id \
             ORDER BY position \
             ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING ",
            |index, out| match index {
                0 => out.push_bind_param::<Array<BigInt>, _>(&self.webhook_id),
                1 => out.push_bind_param::<Array<Text>, _>(&self.session_id),
                2 => out.push_bind_param::<Array<Text>, _>(&self.payload),
                3 => out.push_bind_param::<Array<Text>, _>(&self.target_url),
                4 => out.push_bind_param::<Array<Text>, _>(&self.signature),
                5 => out.push_bind_param::<Array<Text>, _>(&self.status),
                6 => out.push_bind_param::<Array<Integer>, _>(&self.attempt_count),
                7 => out.push_bind_param::<Array<Timestamp>, _>(&self.next_retry_at),
                8 => out.push_bind_param::<Array<Timestamp>, _>(&self.created_at),
                9 => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.idempotency_key),
                _ => out.push_bind_param::<Array<Nullable<Timestamp>>, _>(&self.claimed_until),
            },
        )?;
        out.push_sql(DELIVERY_COLUMNS);
        out.push_sql(", webhook_deliveries.idempotency_key, webhook_deliveries.claimed_until");
        Ok(())
    }
}

/// What a refused delivery fails with: the error the row's own insert would have raised.
fn refused(kind: DatabaseErrorKind, why: &str) -> DieselError {
    DieselError::DatabaseError(kind, Box::new(why.to_owned()))
}

/// The group insert. With `lock_configs`, the configs the group names are locked first (`FOR KEY SHARE`, what the
/// foreign key check itself takes, in id order), so a config deleted meanwhile is simply not found and one found
/// cannot go before this commits: no insert fails on the foreign key. A delivery for a missing config, or whose key
/// is held (by an earlier row, or by an earlier delivery of the group), fails alone, as the row-by-row insert's
/// savepoints make it; every other error fails the group. Call it inside a transaction.
///
/// Without `lock_configs`, the insert is one statement, for a group whose configs all exist (as they did when the
/// router read them): `None` when one is missing, and then nothing was written (the statement failed on the foreign
/// key, whole), so the caller runs the group again with `lock_configs`.
///
/// With `to_configs`, each row goes to its config as the statement finds it ([`InsertDeliveriesToConfigs`]) and
/// comes back with the config's secret; without, with `None`.
pub(super) fn insert_deliveries(
    connection: &mut PgConnection,
    rows: &[NewDeliveryRow<'_>],
    lock_configs: bool,
    to_configs: bool,
) -> QueryResult<Option<Vec<WrittenRow>>> {
    let configs: Option<HashSet<i64>> = if lock_configs {
        let mut webhook_ids: Vec<i64> = rows.iter().map(|row| row.webhook_id).collect();
        webhook_ids.sort_unstable();
        webhook_ids.dedup();
        let found = webhook_configs::table
            .filter(webhook_configs::id.eq_any(&webhook_ids))
            .order(webhook_configs::id.asc())
            .select(webhook_configs::id)
            .for_key_share()
            .load::<i64>(connection)?;
        Some(found.into_iter().collect())
    } else {
        None
    };
    // Per row: `Ok(position in the statement)`, or the error that refuses it without sending it.
    let mut keys_sent: HashSet<&str> = HashSet::new();
    let mut sent: Vec<&NewDeliveryRow<'_>> = Vec::with_capacity(rows.len());
    let plan: Vec<Result<usize, DieselError>> = rows
        .iter()
        .map(|row| {
            if configs.as_ref().is_some_and(|configs| !configs.contains(&row.webhook_id)) {
                return Err(refused(DatabaseErrorKind::ForeignKeyViolation, "the webhook config is gone"));
            }
            if row.idempotency_key.is_some_and(|key| !keys_sent.insert(key)) {
                return Err(refused(DatabaseErrorKind::UniqueViolation, "the idempotency key is held"));
            }
            sent.push(row);
            Ok(sent.len() - 1)
        })
        .collect();
    type Written = (DeliveryRow, Option<String>, Option<PrimitiveDateTime>, Option<String>);
    let mut written: Vec<Written> = if sent.is_empty() {
        Vec::new()
    } else {
        let statement = InsertDeliveries::of(&sent);
        let loaded = if to_configs {
            InsertDeliveriesToConfigs(statement).load(connection)
        } else {
            statement
                .load(connection)
                .map(|rows| rows.into_iter().map(|(row, key, claimed_until)| (row, key, claimed_until, None)).collect())
        };
        match loaded {
            // A missing config: the foreign key refuses the row, or, going to its config, its target is NULL.
            Err(DieselError::DatabaseError(
                DatabaseErrorKind::ForeignKeyViolation | DatabaseErrorKind::NotNullViolation,
                _,
            )) if !lock_configs => {
                return Ok(None);
            }
            written => written?,
        }
    };
    written.sort_unstable_by_key(|(row, _, _, _)| row.id);
    let mut written = pair_in_order(
        &sent,
        written,
        |sent, (row, key, claimed_until, secret)| {
            row.webhook_id == sent.webhook_id
                && row.session_id == sent.session_id
                && row.payload == sent.payload
                && match to_configs {
                    true => row.signature.is_empty() && secret.is_some(),
                    false => row.target_url == sent.target_url && row.signature == sent.signature,
                }
                && row.created_at == sent.created_at
                && key.as_deref() == sent.idempotency_key
                // As sent, or held (both cleared) when its config is disabled.
                && ((row.next_retry_at == Some(sent.next_retry_at) && *claimed_until == sent.claimed_until)
                    || (row.next_retry_at.is_none() && claimed_until.is_none()))
        },
        |sent| sent.idempotency_key.is_some(),
    )?;
    Ok(Some(
        plan.into_iter()
            .map(|step| {
                let position = step?;
                match written[position].take() {
                    Some((row, _, _, secret)) => Ok((row, secret)),
                    None => Err(refused(DatabaseErrorKind::UniqueViolation, "the idempotency key is held")),
                }
            })
            .collect(),
    ))
}

/// Claims each asked row that is awaiting an attempt and due by its own instant, until `lease_until`, in one
/// statement: the claimable rows are locked in id order first (a row a concurrent write changed is judged again
/// once that write commits), then moved to the lease. Returns the claimed rows, in no particular order.
struct ClaimDeliveries<'a> {
    id: Vec<i64>,
    due_by: Vec<PrimitiveDateTime>,
    statuses: [&'a str; 2],
    lease_until: PrimitiveDateTime,
    /// The poll's leadership term; `None` for an immediate attempt.
    token: Option<i64>,
}

postgres_statement!(ClaimDeliveries -> DeliveryColumns);

impl QueryFragment<Pg> for ClaimDeliveries<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.unsafe_to_cache_prepared();
        push_sql_with_binds(
            &mut out,
            "WITH claimable AS MATERIALIZED (\
             SELECT webhook_deliveries.id FROM webhook_deliveries \
             JOIN unnest($, $) AS asked (id, due_by) ON webhook_deliveries.id = asked.id \
             WHERE webhook_deliveries.status = ANY($) AND webhook_deliveries.next_retry_at <= asked.due_by \
             AND webhook_deliveries.webhook_id NOT IN (SELECT id FROM webhook_configs WHERE NOT enabled) \
             ORDER BY webhook_deliveries.id FOR UPDATE OF webhook_deliveries) \
             UPDATE webhook_deliveries SET next_retry_at = $, claimed_until = $, claim_token = $ \
             FROM claimable WHERE webhook_deliveries.id = claimable.id RETURNING ",
            |index, out| match index {
                0 => out.push_bind_param::<Array<BigInt>, _>(&self.id),
                1 => out.push_bind_param::<Array<Timestamp>, _>(&self.due_by),
                2 => out.push_bind_param::<Array<Text>, _>(&self.statuses[..]),
                3 | 4 => out.push_bind_param::<Timestamp, _>(&self.lease_until),
                _ => out.push_bind_param::<Nullable<BigInt>, _>(&self.token),
            },
        )?;
        out.push_sql(DELIVERY_COLUMNS);
        Ok(())
    }
}

/// The claims `(id, due_by)`, all until `lease_until`, as one statement; the claimed rows in the order of their
/// first claim.
pub(super) fn claim(
    connection: &mut PgConnection,
    claims: impl Iterator<Item = (i64, OffsetDateTime)>,
    lease_until: OffsetDateTime,
    token: Option<i64>,
) -> QueryResult<Vec<DeliveryRow>> {
    let (id, due_by): (Vec<i64>, Vec<PrimitiveDateTime>) = claims.map(|(id, due_by)| (id, to_db(due_by))).unzip();
    let statuses = AWAITING_ATTEMPT.map(DeliveryStatus::as_str);
    let mut order: HashMap<i64, usize> = HashMap::with_capacity(id.len());
    for (position, id) in id.iter().enumerate() {
        order.entry(*id).or_insert(position);
    }
    let mut claimed =
        ClaimDeliveries { id, due_by, statuses, lease_until: to_db(lease_until), token }.load(connection)?;
    claimed.sort_unstable_by_key(|row: &DeliveryRow| order.get(&row.id).copied());
    Ok(claimed)
}

/// A group's attempts in one statement: their deliveries locked first, in id order (one deleted meanwhile is not
/// found, and its attempt is not recorded); the history rows of the others inserted in the group's order; and
/// each outcome applied to its delivery if the row still carries the claim the attempt ran under. Returns each
/// delivery found, and whether its outcome applied. Each delivery at most once in the group.
///
/// Only the `configs` CTE (the group's configs, for the count that follows in the transaction) and then the
/// `locked` one wait for other transactions' row locks, each in id order, the configs first (`locked` waits for
/// `configs` through a one-time filter): the insert and the update touch only rows `locked` returned (the foreign
/// key check of the history takes a lock this transaction already holds), and nothing here updates a config.
struct RecordAttempts<'a> {
    /// Configs locked (`FOR NO KEY UPDATE`, in id order) before the deliveries, for the count that follows in the
    /// transaction; empty for none.
    webhook_id: Vec<i64>,
    delivery_id: Vec<i64>,
    attempt_number: Vec<i32>,
    started_at: Vec<PrimitiveDateTime>,
    duration_ms: Vec<i64>,
    status_code: Vec<Option<i32>>,
    error_class: Vec<Option<&'a str>>,
    attempt_error_detail: Vec<Option<&'a str>>,
    lease: Vec<PrimitiveDateTime>,
    status: Vec<&'a str>,
    attempt_count: Vec<i32>,
    last_attempted_at: Vec<PrimitiveDateTime>,
    next_retry_at: Vec<Option<PrimitiveDateTime>>,
    error_detail: Vec<Option<&'a str>>,
    signature: Vec<Option<&'a str>>,
}

postgres_statement!(RecordAttempts -> (BigInt, diesel::sql_types::Bool));

impl<'a> RecordAttempts<'a> {
    fn of(records: &[&'a AttemptRecord]) -> Self {
        let mut webhook_id: Vec<i64> = records.iter().map(|record| record.webhook_id).collect();
        webhook_id.sort_unstable();
        webhook_id.dedup();
        Self {
            webhook_id,
            delivery_id: records.iter().map(|record| record.attempt.delivery_id).collect(),
            attempt_number: records.iter().map(|record| record.attempt.attempt_number).collect(),
            started_at: records.iter().map(|record| to_db(record.attempt.started_at)).collect(),
            duration_ms: records.iter().map(|record| record.attempt.duration_ms).collect(),
            status_code: records.iter().map(|record| record.attempt.status_code.map(i32::from)).collect(),
            error_class: records.iter().map(|record| record.attempt.error_class.as_deref()).collect(),
            attempt_error_detail: records.iter().map(|record| record.attempt.error_detail.as_deref()).collect(),
            lease: records.iter().map(|record| to_db(record.lease)).collect(),
            status: records.iter().map(|record| record.update.status.as_str()).collect(),
            attempt_count: records.iter().map(|record| record.update.attempt_count).collect(),
            last_attempted_at: records.iter().map(|record| to_db(record.update.last_attempted_at)).collect(),
            next_retry_at: records.iter().map(|record| record.update.next_retry_at.map(to_db)).collect(),
            error_detail: records.iter().map(|record| record.update.error_detail.as_deref()).collect(),
            signature: records.iter().map(|record| record.update.signature.as_deref()).collect(),
        }
    }
}

/// The part every record statement shares, after its `locked` CTE (the group's deliveries, locked): each attempt's
/// history row, and each delivery's outcome where the claim it ran under still holds (the lease instant and the
/// attempt count before it, see `WebhookStore::record_attempt`). Binds: [`RecordAttempts::push_history_and_applied_bind`].
macro_rules! history_and_applied {
    () => {
        "history AS (\
         INSERT INTO webhook_delivery_attempts (delivery_id, attempt_number, started_at, duration_ms, \
         status_code, error_class, error_detail) \
         SELECT delivery_id, attempt_number, started_at, duration_ms, status_code, error_class, error_detail \
         FROM unnest($, $, $, $, $, $, $) WITH ORDINALITY AS attempt (delivery_id, attempt_number, started_at, \
         duration_ms, status_code, error_class, error_detail, position) \
         WHERE attempt.delivery_id IN (SELECT id FROM locked) \
         ORDER BY position), \
         applied AS (\
         UPDATE webhook_deliveries SET status = outcome.status, attempt_count = outcome.attempt_count, \
         last_attempted_at = outcome.last_attempted_at, next_retry_at = outcome.next_retry_at, \
         error_detail = outcome.error_detail, claimed_until = NULL, \
         signature = COALESCE(outcome.signature, webhook_deliveries.signature) \
         FROM unnest($, $, $, $, $, $, $, $, $) AS outcome (delivery_id, attempt_number, lease, status, \
         attempt_count, last_attempted_at, next_retry_at, error_detail, signature) \
         WHERE webhook_deliveries.id = outcome.delivery_id AND webhook_deliveries.id IN (SELECT id FROM locked) \
         AND webhook_deliveries.next_retry_at = outcome.lease \
         AND webhook_deliveries.attempt_count = outcome.attempt_number - 1 \
         RETURNING webhook_deliveries.id)"
    };
}

impl QueryFragment<Pg> for RecordAttempts<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.unsafe_to_cache_prepared();
        push_sql_with_binds(
            &mut out,
            concat!(
                "WITH configs AS MATERIALIZED (\
                 SELECT id FROM webhook_configs WHERE id = ANY($) ORDER BY id FOR NO KEY UPDATE), \
                 locked AS MATERIALIZED (\
                 SELECT id FROM webhook_deliveries WHERE id = ANY($) AND (SELECT count(*) FROM configs) >= 0 \
                 ORDER BY id FOR UPDATE), ",
                history_and_applied!(),
                " SELECT locked.id, locked.id IN (SELECT id FROM applied) FROM locked"
            ),
            |index, out| match index {
                0 => out.push_bind_param::<Array<BigInt>, _>(&self.webhook_id),
                1 => out.push_bind_param::<Array<BigInt>, _>(&self.delivery_id),
                _ => self.push_history_and_applied_bind(index - 2, out),
            },
        )
    }
}

impl RecordAttempts<'_> {
    /// The binds of [`history_and_applied!`], in their order (`index` 0 is its first `$`).
    fn push_history_and_applied_bind<'b>(&'b self, index: usize, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        match index {
            0 | 7 => out.push_bind_param::<Array<BigInt>, _>(&self.delivery_id),
            1 | 8 => out.push_bind_param::<Array<Integer>, _>(&self.attempt_number),
            2 => out.push_bind_param::<Array<Timestamp>, _>(&self.started_at),
            3 => out.push_bind_param::<Array<BigInt>, _>(&self.duration_ms),
            4 => out.push_bind_param::<Array<Nullable<Integer>>, _>(&self.status_code),
            5 => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.error_class),
            6 => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.attempt_error_detail),
            9 => out.push_bind_param::<Array<Timestamp>, _>(&self.lease),
            10 => out.push_bind_param::<Array<Text>, _>(&self.status),
            11 => out.push_bind_param::<Array<Integer>, _>(&self.attempt_count),
            12 => out.push_bind_param::<Array<Timestamp>, _>(&self.last_attempted_at),
            13 => out.push_bind_param::<Array<Nullable<Timestamp>>, _>(&self.next_retry_at),
            14 => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.error_detail),
            _ => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.signature),
        }
    }
}

/// A group whose attempts all succeeded, all to one config, as one statement, atomic on its own and sent without
/// `BEGIN`/`COMMIT` ([`record_successes`]): the config's health written first (`health`, a plain `UPDATE`: its count
/// back to 0, `last_success_at` moved on; a success cannot disable), then [`RecordAttempts`]' deliveries, history
/// and outcomes. The deliveries' lock waits for the config's update through a one-time filter (configs before
/// deliveries, the order everywhere). The config is not locked and then updated in one statement — the circle the
/// module comment describes — but updated as an ordinary `UPDATE`, which waits for a concurrent updater and then
/// re-reads the newest version, holding nothing else meanwhile; with one config per group there is no order
/// between configs to keep. A delivery that is gone makes the statement fail whole ([`DELIVERY_GONE`]): its
/// attempt must count for nothing, so the caller records the group the general way.
struct RecordSuccesses<'a> {
    records: RecordAttempts<'a>,
    last_success_at: PrimitiveDateTime,
    deliveries: i64,
}

/// What [`RecordSuccesses`] fails with when one of its deliveries is gone: the text of a failed cast, the one way a
/// statement can raise an error of its choosing without a function of its own.
const DELIVERY_GONE: &str = "webhook deliveries gone from the group";

postgres_statement!(RecordSuccesses -> (BigInt, diesel::sql_types::Bool, Nullable<diesel::sql_types::Bool>));

impl QueryFragment<Pg> for RecordSuccesses<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.unsafe_to_cache_prepared();
        let records = &self.records;
        push_sql_with_binds(
            &mut out,
            concat!(
                "WITH health AS (\
                 UPDATE webhook_configs SET consecutive_failures = 0, \
                 last_success_at = GREATEST(webhook_configs.last_success_at, $) \
                 WHERE id = ANY($) RETURNING id, enabled), \
                 locked AS MATERIALIZED (\
                 SELECT id FROM webhook_deliveries WHERE id = ANY($) AND (SELECT count(*) FROM health) >= 0 \
                 ORDER BY id FOR UPDATE), ",
                history_and_applied!(),
                ", checked AS (\
                 SELECT CASE WHEN (SELECT count(*) FROM locked) < $ \
                 THEN CAST($ || (SELECT count(*) FROM locked) AS integer) ELSE 0 END AS gone) \
                 SELECT locked.id, locked.id IN (SELECT id FROM applied), (SELECT bool_and(enabled) FROM health) \
                 FROM checked JOIN locked ON checked.gone = 0"
            ),
            |index, out| match index {
                0 => out.push_bind_param::<Timestamp, _>(&self.last_success_at),
                1 => out.push_bind_param::<Array<BigInt>, _>(&records.webhook_id),
                2 => out.push_bind_param::<Array<BigInt>, _>(&records.delivery_id),
                3..=18 => records.push_history_and_applied_bind(index - 3, out),
                19 => out.push_bind_param::<BigInt, _>(&self.deliveries),
                _ => out.push_bind_param::<Text, _>(&DELIVERY_GONE),
            },
        )
    }
}

/// Whether the group can be [`record_successes`]' one statement: each delivery once, every attempt a success, all
/// to one config.
pub(super) fn all_successes_to_one_config(records: &[AttemptRecord]) -> bool {
    records.first().is_some_and(|first| {
        records.iter().all(|record| record.webhook_id == first.webhook_id && record.attempt.error_class.is_none())
    }) && !repeats_a_delivery(records)
}

/// A group that [`all_successes_to_one_config`] as one statement, outside a transaction: each record's outcome, and
/// whether the config is disabled (then its awaiting deliveries are for the caller to hold). `None` when a delivery
/// of the group is gone: nothing was written, and the caller records the group the general way.
pub(super) fn record_successes(
    connection: &mut PgConnection,
    records: &[AttemptRecord],
) -> QueryResult<Option<(Vec<AttemptRecorded>, bool)>> {
    let references: Vec<&AttemptRecord> = records.iter().collect();
    let Some(last_success_at) = records.iter().map(|record| to_db(record.attempt.started_at)).max() else {
        return Ok(Some((Vec::new(), false)));
    };
    let statement = RecordSuccesses {
        records: RecordAttempts::of(&references),
        last_success_at,
        deliveries: i64::try_from(records.len()).unwrap_or(i64::MAX),
    };
    let found: Vec<(i64, bool, Option<bool>)> = match statement.load(connection) {
        Err(DieselError::DatabaseError(_, information)) if information.message().contains(DELIVERY_GONE) => {
            return Ok(None);
        }
        found => found?,
    };
    let disabled = found.iter().any(|(_, _, enabled)| *enabled == Some(false));
    let applied: HashMap<i64, bool> = found.into_iter().map(|(id, applied, _)| (id, applied)).collect();
    let recorded = records
        .iter()
        .map(|record| AttemptRecorded {
            applied: applied.get(&record.attempt.delivery_id).copied().unwrap_or(false),
            disabled: None,
        })
        .collect();
    Ok(Some((recorded, disabled)))
}

/// Whether the records name a delivery more than once: such a group cannot be [`record_attempts`]' one statement.
pub(super) fn repeats_a_delivery(records: &[AttemptRecord]) -> bool {
    let mut ids: Vec<i64> = records.iter().map(|record| record.attempt.delivery_id).collect();
    ids.sort_unstable();
    ids.windows(2).any(|pair| pair[0] == pair[1])
}

/// The group's records as one statement, atomic on its own (call it outside a transaction, or inside one), for a
/// group that names each delivery once (`repeats_a_delivery`): whether each applied, `None` for a delivery that is
/// gone (nothing recorded for it).
pub(super) fn record_attempts(
    connection: &mut PgConnection,
    records: &[AttemptRecord],
) -> QueryResult<Vec<Option<bool>>> {
    let references: Vec<&AttemptRecord> = records.iter().collect();
    let found: HashMap<i64, bool> =
        RecordAttempts::of(&references).load::<(i64, bool)>(connection)?.into_iter().collect();
    Ok(records.iter().map(|record| found.get(&record.attempt.delivery_id).copied()).collect())
}

/// What one group's attempts do to one config's health, counted from the attempts in the group's order: the
/// failures before its first success (all of them without one), the longest run of failures after a success, the
/// run at its end, whether any succeeded, and the latest success's start. With the count the config had, these
/// give every count [`gateway_core::WebhookConfig::count_attempt`] passes through, and so whether it crossed the
/// limit, in one statement that reads the count as it finds it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct GroupHealth {
    leading_failures: i64,
    peak_after_success: i64,
    trailing_failures: i64,
    any_success: bool,
    last_success_at: Option<PrimitiveDateTime>,
}

impl GroupHealth {
    fn count(&mut self, attempt: &gateway_core::DeliveryAttempt) {
        if attempt.error_class.is_none() {
            self.any_success = true;
            self.trailing_failures = 0;
            let started = to_db(attempt.started_at);
            self.last_success_at = Some(self.last_success_at.map_or(started, |at| at.max(started)));
            return;
        }
        self.trailing_failures = self.trailing_failures.saturating_add(1);
        if self.any_success {
            self.peak_after_success = self.peak_after_success.max(self.trailing_failures);
        } else {
            self.leading_failures = self.trailing_failures;
        }
    }
}

/// Each config's [`GroupHealth`] applied in one `UPDATE … FROM unnest(…)`, once the transaction has locked the configs
/// in a statement before ([`RecordAttempts`]; see the module comment): the configs are locked again here, in id order
/// (which waits for nothing then, and keeps the statement right on its own: a group for the same config committing
/// meanwhile is waited for and its count read as it left it, so none is lost), then the count, `last_success_at` and,
/// for an enabled config whose count reached the limit (`disable_after_failures`, 0: never) at any attempt of the
/// group, the disable. Returns per config found: its id, whether it was enabled and its count before, and whether it is
/// enabled now.
struct CountHealth<'a> {
    webhook_id: Vec<i64>,
    leading_failures: Vec<i64>,
    peak_after_success: Vec<i64>,
    trailing_failures: Vec<i64>,
    any_success: Vec<bool>,
    last_success_at: Vec<Option<PrimitiveDateTime>>,
    disable_after_failures: i64,
    failing: &'a str,
}

postgres_statement!(CountHealth -> (BigInt, diesel::sql_types::Bool, BigInt, diesel::sql_types::Bool));

impl QueryFragment<Pg> for CountHealth<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        // Planned at each execution, as the other group statements looking rows up by id (`batch`).
        out.unsafe_to_cache_prepared();
        push_sql_with_binds(
            &mut out,
            "WITH found AS MATERIALIZED (\
             SELECT id, enabled, consecutive_failures FROM webhook_configs WHERE id = ANY($) \
             ORDER BY id FOR NO KEY UPDATE), \
             counted AS (\
             SELECT found.id, found.enabled AS was_enabled, found.consecutive_failures AS was, group_health.*, \
             (found.enabled AND $ > 0 AND GREATEST(\
             CASE WHEN group_health.leading_failures > 0 \
             THEN found.consecutive_failures + group_health.leading_failures ELSE 0 END, \
             group_health.peak_after_success) >= $) AS crossed \
             FROM found JOIN unnest($, $, $, $, $, $) AS group_health (webhook_id, leading_failures, \
             peak_after_success, trailing_failures, any_success, last_success_at) \
             ON group_health.webhook_id = found.id) \
             UPDATE webhook_configs SET \
             consecutive_failures = CASE WHEN counted.any_success THEN counted.trailing_failures \
             ELSE counted.was + counted.trailing_failures END, \
             last_success_at = GREATEST(webhook_configs.last_success_at, counted.last_success_at), \
             enabled = counted.was_enabled AND NOT counted.crossed, \
             disabled_reason = CASE WHEN counted.crossed THEN $ ELSE webhook_configs.disabled_reason END \
             FROM counted WHERE webhook_configs.id = counted.id \
             RETURNING webhook_configs.id, counted.was_enabled, counted.was, webhook_configs.enabled",
            |index, out| match index {
                0 | 3 => out.push_bind_param::<Array<BigInt>, _>(&self.webhook_id),
                1 | 2 => out.push_bind_param::<BigInt, _>(&self.disable_after_failures),
                4 => out.push_bind_param::<Array<BigInt>, _>(&self.leading_failures),
                5 => out.push_bind_param::<Array<BigInt>, _>(&self.peak_after_success),
                6 => out.push_bind_param::<Array<BigInt>, _>(&self.trailing_failures),
                7 => out.push_bind_param::<Array<diesel::sql_types::Bool>, _>(&self.any_success),
                8 => out.push_bind_param::<Array<Nullable<Timestamp>>, _>(&self.last_success_at),
                _ => out.push_bind_param::<Text, _>(&self.failing),
            },
        )
    }
}

/// [`super::WebhookStore::record_attempts_counting`] for a group that names each delivery once, in two statements
/// (the records, which lock the configs before the deliveries, then the configs' health) and a hold for a config
/// left disabled; call it inside a transaction. The configs are locked before the deliveries, as everywhere
/// (`update_config` locks a config, then holds its deliveries). `None` when a delivery of the group is gone (before
/// any count is written): its attempt must count for nothing, so the caller rolls back and records the group the
/// general way.
pub(super) fn record_attempts_counting(
    connection: &mut PgConnection,
    records: &[AttemptRecord],
    disable_after_failures: u32,
) -> QueryResult<Option<Vec<AttemptRecorded>>> {
    let mut health: BTreeMap<i64, GroupHealth> = BTreeMap::new();
    for record in records {
        health.entry(record.webhook_id).or_default().count(&record.attempt);
    }
    let statement = CountHealth {
        webhook_id: health.keys().copied().collect(),
        leading_failures: health.values().map(|counts| counts.leading_failures).collect(),
        peak_after_success: health.values().map(|counts| counts.peak_after_success).collect(),
        trailing_failures: health.values().map(|counts| counts.trailing_failures).collect(),
        any_success: health.values().map(|counts| counts.any_success).collect(),
        last_success_at: health.values().map(|counts| counts.last_success_at).collect(),
        disable_after_failures: i64::from(disable_after_failures),
        failing: DisabledReason::Failing.as_str(),
    };
    // The records first: their statement locks the configs before the deliveries, so the count's statement, whose
    // snapshot is taken after, sees the very versions locked (see the module comment: locking and updating in one
    // statement deadlocks).
    let applied = record_attempts(connection, records)?;
    if applied.iter().any(Option::is_none) {
        return Ok(None);
    }
    let counted: Vec<(i64, bool, i64, bool)> = statement.load(connection)?;
    // Which attempt disabled its config: the count replayed from where the statement found it, attempt by attempt,
    // as `count_attempt` counts.
    let mut replay: HashMap<i64, (bool, i64)> =
        counted.iter().map(|(id, was_enabled, was, _)| (*id, (*was_enabled, *was))).collect();
    let limit = i64::from(disable_after_failures);
    let mut recorded = Vec::with_capacity(records.len());
    for (record, applied) in records.iter().zip(applied) {
        let mut disabled = None;
        if let Some((enabled, count)) = replay.get_mut(&record.webhook_id) {
            if record.attempt.error_class.is_none() {
                *count = 0;
            } else {
                *count = count.saturating_add(1);
                if *enabled && limit > 0 && *count >= limit {
                    *enabled = false;
                    disabled = Some(EndpointDisabled {
                        webhook_id: record.webhook_id,
                        consecutive_failures: *count,
                        reason: DisabledReason::Failing,
                    });
                }
            }
        }
        recorded.push(AttemptRecorded { applied: applied.unwrap_or(false), disabled });
    }
    for (webhook_id, _, _, enabled) in counted {
        if !enabled {
            // Attempts that were in flight when it was disabled have just scheduled their next try.
            super::hold_deliveries(&mut AnyConnection::Postgres(connection), webhook_id)?;
        }
    }
    Ok(Some(recorded))
}

/// The group's records when one delivery has several (its attempts judged one after the other): the deliveries
/// locked first, in id order, then the records one by one, each against the state the one before left. Call it
/// inside a transaction.
pub(super) fn record_attempts_in_turn(
    connection: &mut PgConnection,
    records: &[AttemptRecord],
) -> QueryResult<Vec<Option<bool>>> {
    let mut ids: Vec<i64> = records.iter().map(|record| record.attempt.delivery_id).collect();
    ids.sort_unstable();
    ids.dedup();
    webhook_deliveries::table
        .filter(webhook_deliveries::id.eq_any(&ids))
        .order(webhook_deliveries::id.asc())
        .select(webhook_deliveries::id)
        .for_update()
        .load::<i64>(connection)?;
    records
        .iter()
        .map(|entry| record(&mut AnyConnection::Postgres(connection), &entry.attempt, entry.lease, &entry.update))
        .collect()
}

#[cfg(test)]
mod tests {
    use gateway_core::{DeliveryAttempt, DeliveryUpdate};
    use time::macros::datetime;

    use super::*;
    use crate::testing::TestStore;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    /// The plan PostgreSQL picks for `statement` on 50,000 deliveries it has statistics for.
    fn plan(fixture: &TestStore, statement: impl QueryFragment<Pg> + diesel::query_builder::QueryId) -> String {
        fixture
            .store
            .with_connection("explain", |connection| {
                let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
                crate::explain::postgres_plan(c, statement)
            })
            .unwrap()
            .join("\n")
    }

    /// The group claim and the group record find their rows through the primary key, whatever the size of the
    /// table: a sequential scan per group would grow with the history.
    #[test]
    fn claims_and_records_find_their_rows_by_id() {
        let Some(fixture) =
            crate::testing::postgres("webhook::postgres::tests::claims_and_records_find_their_rows_by_id")
        else {
            return;
        };
        fixture
            .store
            .with_connection("fill", |connection| {
                let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
                crate::explain::fill_webhook_deliveries(c, 50_000)
            })
            .unwrap();
        let ids: Vec<i64> = (1_000..1_010).collect();
        let claim = ClaimDeliveries {
            id: ids.clone(),
            due_by: vec![to_db(START); ids.len()],
            statuses: AWAITING_ATTEMPT.map(DeliveryStatus::as_str),
            lease_until: to_db(START),
            token: Some(1),
        };
        let records: Vec<AttemptRecord> = ids
            .iter()
            .map(|id| AttemptRecord {
                webhook_id: 1,
                attempt: DeliveryAttempt {
                    delivery_id: *id,
                    attempt_number: 1,
                    started_at: START,
                    duration_ms: 1,
                    status_code: Some(503),
                    error_class: None,
                    error_detail: None,
                },
                lease: START,
                update: DeliveryUpdate {
                    status: DeliveryStatus::Failed,
                    attempt_count: 1,
                    last_attempted_at: START,
                    next_retry_at: Some(START),
                    error_detail: None,
                    signature: None,
                },
            })
            .collect();
        let records: Vec<&AttemptRecord> = records.iter().collect();
        for plan in [plan(&fixture, claim), plan(&fixture, RecordAttempts::of(&records))] {
            assert!(plan.contains("webhook_deliveries_pkey"), "{plan}");
            assert!(!plan.contains("Seq Scan on webhook_deliveries"), "{plan}");
        }
    }
}
