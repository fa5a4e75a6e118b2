//! `CronJobStore` over `cron_jobs` (plus the claim columns of migration `cron_job_claims`).
//!
//! A claim is one conditional `UPDATE` per fire, all fires of a batch in one IMMEDIATE transaction: the row
//! must still be at the claimed instant and be unclaimed, past its lease, or claimed under an older
//! leadership token. Completions are conditional on the same owner and instant. Plain SQL comparisons only,
//! so the same statements serve PostgreSQL, where each conditional `UPDATE` re-checks its condition on a row a
//! concurrent claim changed while it waited for the row's lock: one claim per instant on both backends.

use std::collections::{HashMap, HashSet};

use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Timestamp};
use diesel::sqlite::SqliteConnection;
use gateway_core::{
    AgentId, ClaimLease, CronJob, CronJobInsert, CronJobRun, CronJobStore, FencingToken, FireCompletion, FiredReminder,
    IdempotencyKey, MisfirePolicy, NewCronJob, PendingFire, SkippedRun, StoreError,
};
use time::PrimitiveDateTime;

use crate::batch::{pair_in_order, push_sql_with_binds};
use crate::connection::{AnyConnection, DieselStore, returned_row, returned_row_if_any};
use crate::fencing::{admit, token_from_db, token_to_db};
use crate::mailbox::record_fires;
use crate::schema::cron_jobs;
use crate::timestamp::{from_db, to_db};

diesel::define_sql_function! {
    /// SQLite's rowid of the connection's latest successful insert.
    fn last_insert_rowid() -> BigInt;
}

#[derive(Queryable, Selectable, Clone)]
#[diesel(table_name = cron_jobs)]
struct CronJobRow {
    id: i64,
    agent_id: String,
    schedule: Option<String>,
    next_fire_at: PrimitiveDateTime,
    payload: String,
    is_one_time: bool,
    paused: bool,
    timezone: String,
    misfire_policy: String,
    max_lateness_ms: Option<i64>,
}

/// Every column is bound as a value (a missing schedule or key as NULL rather than DEFAULT), which keeps the
/// statement's text fixed so Diesel reuses the prepared statement instead of compiling it per row.
#[derive(Insertable)]
#[diesel(table_name = cron_jobs, treat_none_as_default_value = false)]
struct NewCronJobRow<'a> {
    agent_id: &'a str,
    schedule: Option<&'a str>,
    next_fire_at: PrimitiveDateTime,
    payload: String,
    is_one_time: bool,
    idempotency_key: Option<&'a str>,
    timezone: &'a str,
    misfire_policy: &'static str,
    max_lateness_ms: Option<i64>,
}

impl<'a> NewCronJobRow<'a> {
    fn of(job: &'a NewCronJob) -> Self {
        Self {
            agent_id: job.agent_id.as_str(),
            schedule: job.schedule.as_deref(),
            next_fire_at: to_db(job.next_fire_at),
            payload: serde_json::to_string(&job.payload).unwrap_or_else(|_| "{}".to_owned()),
            is_one_time: job.is_one_time,
            idempotency_key: job.idempotency_key.as_ref().map(IdempotencyKey::as_str),
            timezone: &job.timezone,
            misfire_policy: job.misfire_policy.as_str(),
            max_lateness_ms: job.max_lateness_ms.map(|lateness| i64::try_from(lateness).unwrap_or(i64::MAX)),
        }
    }

    fn insert(&self, connection: &mut AnyConnection<'_>) -> QueryResult<CronJobRow> {
        match connection {
            AnyConnection::Sqlite(c) => self.insert_sqlite(c),
            AnyConnection::Postgres(c) => returned_row(
                diesel::insert_into(cron_jobs::table)
                    .values(self)
                    .returning(CronJobRow::as_returning())
                    .get_results(&mut **c),
            ),
        }
    }

    /// SQLite's insert without `RETURNING`: the row is what was bound, under the id SQLite gave it. `RETURNING` is
    /// compiled as a trigger, which makes a single-row insert a statement that may abort half-way (its NOT NULL
    /// checks) and so one that opens a statement journal and collects its rows in an ephemeral table; without it
    /// the insert writes the row and its index entries and nothing else.
    fn insert_sqlite(&self, connection: &mut SqliteConnection) -> QueryResult<CronJobRow> {
        diesel::insert_into(cron_jobs::table).values(self).execute(connection)?;
        let id = diesel::select(last_insert_rowid()).get_result::<i64>(connection)?;
        Ok(CronJobRow {
            id,
            agent_id: self.agent_id.to_owned(),
            schedule: self.schedule.map(str::to_owned),
            next_fire_at: self.next_fire_at,
            payload: self.payload.clone(),
            is_one_time: self.is_one_time,
            // The column's default: a job is written unpaused.
            paused: false,
            timezone: self.timezone.to_owned(),
            misfire_policy: self.misfire_policy.to_owned(),
            max_lateness_ms: self.max_lateness_ms,
        })
    }

    /// Inserts the row unless its idempotency key is held, in which case the holder comes back instead
    /// (`false`). SQLite's group path only, inside the group's immediate transaction: no other writer can take the
    /// key between the read and the insert, and a key repeated within the group finds the group's own earlier row.
    /// A read rather than `ON CONFLICT`: the key's unique index is partial (keyless rows write no entry), and
    /// Diesel cannot name an index predicate in SQLite's conflict target; PostgreSQL's group insert names it.
    fn insert_unless_key_held(&self, connection: &mut AnyConnection<'_>) -> QueryResult<(CronJobRow, bool)> {
        let Some(key) = self.idempotency_key else { return self.insert(connection).map(|row| (row, true)) };
        let holder = on_backend!(connection, c => {
            cron_jobs::table
                .filter(cron_jobs::idempotency_key.eq(key))
                .select(CronJobRow::as_select())
                .first(c)
                .optional()
        })?;
        match holder {
            Some(holder) => Ok((holder, false)),
            None => self.insert(connection).map(|row| (row, true)),
        }
    }
}

/// A group's rows as one `INSERT … SELECT … FROM unnest(…)` (`batch`), in the order they were sent; a row whose
/// idempotency key is held is skipped. Returns each written row with its key.
struct InsertCronJobs<'a> {
    agent_id: Vec<&'a str>,
    schedule: Vec<Option<&'a str>>,
    next_fire_at: Vec<PrimitiveDateTime>,
    payload: Vec<&'a str>,
    is_one_time: Vec<bool>,
    idempotency_key: Vec<Option<&'a str>>,
    timezone: Vec<&'a str>,
    misfire_policy: Vec<&'static str>,
    max_lateness_ms: Vec<Option<i64>>,
}

postgres_statement!(InsertCronJobs -> (
    (BigInt, Text, Nullable<Text>, Timestamp, Text, Bool, Bool, Text, Text, Nullable<BigInt>),
    Nullable<Text>
));

impl<'a> InsertCronJobs<'a> {
    fn of(rows: &[&'a NewCronJobRow<'a>]) -> Self {
        Self {
            agent_id: rows.iter().map(|row| row.agent_id).collect(),
            schedule: rows.iter().map(|row| row.schedule).collect(),
            next_fire_at: rows.iter().map(|row| row.next_fire_at).collect(),
            payload: rows.iter().map(|row| row.payload.as_str()).collect(),
            is_one_time: rows.iter().map(|row| row.is_one_time).collect(),
            idempotency_key: rows.iter().map(|row| row.idempotency_key).collect(),
            timezone: rows.iter().map(|row| row.timezone).collect(),
            misfire_policy: rows.iter().map(|row| row.misfire_policy).collect(),
            max_lateness_ms: rows.iter().map(|row| row.max_lateness_ms).collect(),
        }
    }
}

/// The text of [`InsertCronJobs`] and [`InsertKeylessCronJobs`], which differ only in `ON CONFLICT`.
macro_rules! insert_cron_jobs_sql {
    ($on_conflict:literal) => {
        concat!(
            "INSERT INTO cron_jobs (agent_id, schedule, next_fire_at, payload, is_one_time, idempotency_key, \
             timezone, misfire_policy, max_lateness_ms) \
             SELECT agent_id, schedule, next_fire_at, payload, is_one_time, idempotency_key, timezone, \
             misfire_policy, max_lateness_ms \
             FROM unnest($, $, $, $, $, $, $, $, $) WITH ORDINALITY \
             AS sent (agent_id, schedule, next_fire_at, payload, is_one_time, idempotency_key, timezone, \
             misfire_policy, max_lateness_ms, position) \
             ORDER BY position ",
            $on_conflict,
            "RETURNING id, agent_id, schedule, next_fire_at, payload, is_one_time, paused, timezone, misfire_policy, \
             max_lateness_ms, idempotency_key"
        )
    };
}

impl InsertCronJobs<'_> {
    /// Binds the nine arrays, for the `$`s of `unnest(…)`.
    fn bind_arrays<'b>(&'b self, index: usize, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        match index {
            0 => out.push_bind_param::<Array<Text>, _>(&self.agent_id),
            1 => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.schedule),
            2 => out.push_bind_param::<Array<Timestamp>, _>(&self.next_fire_at),
            3 => out.push_bind_param::<Array<Text>, _>(&self.payload),
            4 => out.push_bind_param::<Array<Bool>, _>(&self.is_one_time),
            5 => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.idempotency_key),
            6 => out.push_bind_param::<Array<Text>, _>(&self.timezone),
            7 => out.push_bind_param::<Array<Text>, _>(&self.misfire_policy),
            _ => out.push_bind_param::<Array<Nullable<BigInt>>, _>(&self.max_lateness_ms),
        }
    }
}

impl QueryFragment<Pg> for InsertCronJobs<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        push_sql_with_binds(
            &mut out,
            insert_cron_jobs_sql!("ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING "),
            |index, out| self.bind_arrays(index, out),
        )
    }
}

/// [`InsertCronJobs`] for a group in which no row has an idempotency key, without `ON CONFLICT`: no such row can
/// conflict (the key's unique index is partial, `WHERE idempotency_key IS NOT NULL`, and ids come from the
/// sequence), and an `INSERT … ON CONFLICT` inserts each row speculatively — it first probes the arbiter index,
/// then writes the heap tuple and a second WAL record to confirm it. Measured in docs/benchmarks.md (issue 18,
/// branch s28-c).
struct InsertKeylessCronJobs<'a>(InsertCronJobs<'a>);

postgres_statement!(InsertKeylessCronJobs -> (
    (BigInt, Text, Nullable<Text>, Timestamp, Text, Bool, Bool, Text, Text, Nullable<BigInt>),
    Nullable<Text>
));

impl QueryFragment<Pg> for InsertKeylessCronJobs<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        push_sql_with_binds(&mut out, insert_cron_jobs_sql!(""), |index, out| self.0.bind_arrays(index, out))
    }
}

/// The group insert on PostgreSQL: one statement for the group, plus one that reads the holders of the keys it
/// found held. Same outcomes as the row-by-row insert: a key repeated within the group is sent once and its later
/// rows find the earlier one's outcome (its row, not inserted by them), and a key already held finds its holder.
///
/// An insert whose key a concurrent, uncommitted insert holds waits for that transaction: if it commits, the row
/// is skipped and the holders' read (a later statement, hence a later snapshot) finds its row.
fn insert_group_postgres(
    connection: &mut PgConnection,
    rows: &[NewCronJobRow<'_>],
) -> QueryResult<Vec<(CronJobRow, bool)>> {
    // Per row: `Ok(position in the statement)` or, for a repeated key, `Err(the first row with that key)`.
    let mut first_with_key: HashMap<&str, usize> = HashMap::new();
    let mut sent: Vec<&NewCronJobRow<'_>> = Vec::with_capacity(rows.len());
    let plan: Vec<Result<usize, usize>> = rows
        .iter()
        .enumerate()
        .map(|(index, row)| match row.idempotency_key.map(|key| *first_with_key.entry(key).or_insert(index)) {
            Some(first) if first != index => Err(first),
            _ => {
                sent.push(row);
                Ok(sent.len() - 1)
            }
        })
        .collect();
    let statement = InsertCronJobs::of(&sent);
    let mut written: Vec<(CronJobRow, Option<String>)> = if sent.iter().all(|row| row.idempotency_key.is_none()) {
        InsertKeylessCronJobs(statement).load(connection)?
    } else {
        statement.load(connection)?
    };
    written.sort_unstable_by_key(|(row, _)| row.id);
    let written = pair_in_order(
        &sent,
        written,
        |sent, (row, key)| {
            row.agent_id == sent.agent_id
                && row.schedule.as_deref() == sent.schedule
                && row.next_fire_at == sent.next_fire_at
                && row.payload == sent.payload
                && row.is_one_time == sent.is_one_time
                && row.timezone == sent.timezone
                && row.misfire_policy == sent.misfire_policy
                && row.max_lateness_ms == sent.max_lateness_ms
                && key.as_deref() == sent.idempotency_key
        },
        |sent| sent.idempotency_key.is_some(),
    )?;
    let held: Vec<&str> = sent
        .iter()
        .zip(&written)
        .filter(|(_, row)| row.is_none())
        .filter_map(|(sent, _)| sent.idempotency_key)
        .collect();
    let mut holders: HashMap<String, CronJobRow> = if held.is_empty() {
        HashMap::new()
    } else {
        cron_jobs::table
            // Says what the partial index on the key covers, so the planner need not prove it from `= ANY($1)`.
            .filter(cron_jobs::idempotency_key.is_not_null())
            .filter(cron_jobs::idempotency_key.eq_any(&held))
            .select((CronJobRow::as_select(), cron_jobs::idempotency_key.assume_not_null()))
            .load::<(CronJobRow, String)>(connection)?
            .into_iter()
            .map(|(row, key)| (key, row))
            .collect()
    };
    // Each row's outcome: the row that holds its job, and whether this row wrote it. Only a key repeated within
    // the group clones a row.
    let mut outcomes: Vec<(CronJobRow, bool)> = Vec::with_capacity(rows.len());
    let mut written: Vec<Option<CronJobRow>> = written.into_iter().map(|row| row.map(|(row, _)| row)).collect();
    for (index, step) in plan.iter().enumerate() {
        let outcome = match *step {
            Ok(position) => match written[position].take() {
                Some(row) => (row, true),
                None => {
                    let key = rows[index].idempotency_key.unwrap_or_default();
                    // Deleted between the insert and this read: as the row-by-row insert, the group fails.
                    let holder = holders.remove(key).ok_or(diesel::result::Error::NotFound)?;
                    (holder, false)
                }
            },
            Err(first) => (outcomes[first].0.clone(), false),
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

impl TryFrom<CronJobRow> for CronJob {
    type Error = StoreError;

    fn try_from(row: CronJobRow) -> Result<Self, StoreError> {
        let agent_id = AgentId::new(row.agent_id)
            .map_err(|error| StoreError::Internal(format!("cron job {}: stored agent_id invalid: {error}", row.id)))?;
        let payload = match serde_json::from_str(&row.payload) {
            Ok(serde_json::Value::Object(payload)) => payload,
            _ => return Err(StoreError::Internal(format!("cron job {}: stored payload is not a JSON object", row.id))),
        };
        let misfire_policy = MisfirePolicy::parse(&row.misfire_policy).ok_or_else(|| {
            StoreError::Internal(format!("cron job {}: stored misfire_policy unknown: {}", row.id, row.misfire_policy))
        })?;
        Ok(Self {
            id: row.id,
            agent_id,
            schedule: row.schedule,
            next_fire_at: from_db(row.next_fire_at),
            payload,
            is_one_time: row.is_one_time,
            paused: row.paused,
            timezone: row.timezone,
            misfire_policy,
            max_lateness_ms: row.max_lateness_ms.and_then(|lateness| u64::try_from(lateness).ok()),
        })
    }
}

fn jobs(rows: Vec<CronJobRow>) -> Result<Vec<CronJob>, StoreError> {
    rows.into_iter().map(CronJob::try_from).collect()
}

fn limit_to_db(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

impl CronJobStore for DieselStore {
    fn single_writer(&self) -> bool {
        self.is_sqlite()
    }

    fn insert_cron_job(&self, job: &NewCronJob) -> Result<CronJob, StoreError> {
        let row = NewCronJobRow::of(job);
        let stored = self.with_connection("insert cron job", |connection| row.insert(connection))?;
        stored.try_into()
    }

    fn insert_cron_jobs(&self, jobs: &[NewCronJob]) -> Result<Vec<CronJobInsert>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<NewCronJobRow<'_>> = jobs.iter().map(NewCronJobRow::of).collect();
        let work = |connection: &mut AnyConnection<'_>| match connection {
            // One statement per row (RETURNING order is only defined per statement, and a held key must be known
            // per row), one commit for all: the commit's page writes are what a single-row insert mostly pays for.
            AnyConnection::Sqlite(_) => {
                rows.iter().map(|row| row.insert_unless_key_held(connection)).collect::<QueryResult<Vec<_>>>()
            }
            AnyConnection::Postgres(connection) => insert_group_postgres(connection, &rows),
        };
        let stored = if !self.is_sqlite() && rows.iter().all(|row| row.idempotency_key.is_none()) {
            // Without keys the group is one statement, atomic on its own: no BEGIN and COMMIT round trips.
            self.with_connection("insert cron jobs", work)?
        } else {
            self.immediate("insert cron jobs", work)?
        };
        stored.into_iter().map(|(row, inserted)| Ok(CronJobInsert { job: row.try_into()?, inserted })).collect()
    }

    fn cron_job(&self, id: i64) -> Result<Option<CronJob>, StoreError> {
        let row = self.with_connection("read cron job", |connection| {
            on_backend!(connection, c => cron_jobs::table.find(id).select(CronJobRow::as_select()).first(c).optional())
        })?;
        row.map(CronJob::try_from).transpose()
    }

    fn cron_job_by_idempotency_key(&self, key: &IdempotencyKey) -> Result<Option<CronJob>, StoreError> {
        let row = self.with_connection("read cron job by idempotency key", |connection| {
            on_backend!(connection, c => {
                cron_jobs::table
                    .filter(cron_jobs::idempotency_key.eq(key.as_str()))
                    .select(CronJobRow::as_select())
                    .first(c)
                    .optional()
            })
        })?;
        row.map(CronJob::try_from).transpose()
    }

    fn list_cron_jobs(&self, after_id: Option<i64>, limit: usize) -> Result<Vec<CronJob>, StoreError> {
        let rows = self.with_connection("list cron jobs", |connection| {
            on_backend!(connection, c => {
                cron_jobs::table
                    .filter(cron_jobs::id.gt(after_id.unwrap_or(i64::MIN)))
                    .order(cron_jobs::id.asc())
                    .limit(limit_to_db(limit))
                    .select(CronJobRow::as_select())
                    .load(c)
            })
        })?;
        jobs(rows)
    }

    fn delete_cron_job(&self, id: i64) -> Result<bool, StoreError> {
        let deleted = self.with_connection(
            "delete cron job",
            |connection| on_backend!(connection, c => diesel::delete(cron_jobs::table.find(id)).execute(c)),
        )?;
        Ok(deleted > 0)
    }

    fn count_cron_jobs(&self) -> Result<u64, StoreError> {
        let count: i64 = self.with_connection(
            "count cron jobs",
            |connection| on_backend!(connection, c => cron_jobs::table.count().get_result(c)),
        )?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn set_cron_job_paused(&self, id: i64, paused: bool) -> Result<Option<CronJob>, StoreError> {
        // One statement, so no transaction: the row as this write left it, or nothing for an unknown id. Not
        // fenced: like a delete it is an operator's write, which any instance may make.
        let update = diesel::update(cron_jobs::table.find(id)).set(cron_jobs::paused.eq(paused));
        let row = self.with_connection(if paused { "pause cron job" } else { "resume cron job" }, |connection| {
            on_backend!(connection, c => returned_row_if_any(update.returning(CronJobRow::as_returning()).get_results(c)))
        })?;
        row.map(CronJob::try_from).transpose()
    }

    fn count_one_time_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError> {
        self.count_jobs_of(agent_id, true, "count an agent's one-time jobs")
    }

    fn one_time_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError> {
        self.jobs_of(agent_id, true, limit, "list an agent's one-time jobs")
    }

    fn delete_one_time_job(&self, id: i64, agent_id: &AgentId, now: time::OffsetDateTime) -> Result<bool, StoreError> {
        let not_claimed = cron_jobs::claimed_until.is_null().or(cron_jobs::claimed_until.le(to_db(now)));
        let delete = diesel::delete(
            cron_jobs::table
                .filter(cron_jobs::id.eq(id))
                .filter(cron_jobs::agent_id.eq(agent_id.as_str()))
                .filter(cron_jobs::is_one_time.eq(true))
                .filter(not_claimed),
        );
        let deleted = self.with_connection(
            "delete an agent's one-time job",
            |connection| on_backend!(connection, c => delete.execute(c)),
        )?;
        Ok(deleted > 0)
    }

    fn count_recurring_jobs(&self, agent_id: &AgentId) -> Result<usize, StoreError> {
        self.count_jobs_of(agent_id, false, "count an agent's recurring jobs")
    }

    fn recurring_jobs_of(&self, agent_id: &AgentId, limit: usize) -> Result<Vec<CronJob>, StoreError> {
        self.jobs_of(agent_id, false, limit, "list an agent's recurring jobs")
    }

    fn delete_recurring_job(&self, id: i64, agent_id: &AgentId) -> Result<bool, StoreError> {
        let delete = diesel::delete(
            cron_jobs::table
                .filter(cron_jobs::id.eq(id))
                .filter(cron_jobs::agent_id.eq(agent_id.as_str()))
                .filter(cron_jobs::is_one_time.eq(false)),
        );
        let deleted = self.with_connection(
            "delete an agent's recurring job",
            |connection| on_backend!(connection, c => delete.execute(c)),
        )?;
        Ok(deleted > 0)
    }

    fn pending_fires(&self, before: time::OffsetDateTime, limit: usize) -> Result<Vec<PendingFire>, StoreError> {
        type Row = (i64, PrimitiveDateTime, Option<PrimitiveDateTime>, Option<i64>);
        let rows: Vec<Row> = self.with_connection("load due cron jobs", |connection| {
            let query = pending_fires_query(to_db(before), limit_to_db(limit));
            on_backend!(connection, c => query.load(c))
        })?;
        Ok(rows
            .into_iter()
            .map(|(job_id, scheduled_for, claimed_until, claim_token)| PendingFire {
                job_id,
                scheduled_for: from_db(scheduled_for),
                claimed_until: claimed_until.map(from_db),
                claim_token: claim_token.map(token_from_db),
            })
            .collect())
    }

    fn claim_fires(&self, job_ids: &[i64], lease: &ClaimLease) -> Result<Vec<CronJob>, StoreError> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.immediate_fenced("claim cron fires", |connection| {
            admit(connection, lease.token)?;
            Ok(claim(connection, job_ids, lease)?)
        })?;
        jobs(rows)
    }

    fn complete_fires(
        &self,
        owner: &str,
        token: FencingToken,
        completions: &[FireCompletion],
        fired: &[FiredReminder],
    ) -> Result<usize, StoreError> {
        if completions.is_empty() && fired.is_empty() {
            return Ok(0);
        }
        self.immediate_fenced("complete cron fires", |connection| {
            admit(connection, token)?;
            record_fires(connection, fired)?;
            Ok(complete(connection, owner, completions)?)
        })
    }

    fn complete_and_claim(
        &self,
        owner: &str,
        completions: &[FireCompletion],
        fired: &[FiredReminder],
        job_ids: &[i64],
        lease: &ClaimLease,
    ) -> Result<(usize, Vec<CronJob>), StoreError> {
        let (completed, rows) = self.immediate_fenced("complete and claim cron fires", |connection| {
            if let AnyConnection::Postgres(c) = connection {
                commit_without_waiting_for_the_flush(c, lease.token)?;
            }
            admit(connection, lease.token)?;
            record_fires(connection, fired)?;
            let completed = complete(connection, owner, completions)?;
            let rows = if job_ids.is_empty() { Vec::new() } else { claim(connection, job_ids, lease)? };
            Ok((completed, rows))
        })?;
        Ok((completed, jobs(rows)?))
    }

    fn record_skipped_runs(&self, token: FencingToken, skipped: &[SkippedRun]) -> Result<usize, StoreError> {
        if skipped.is_empty() {
            return Ok(0);
        }
        self.immediate_fenced("record skipped cron runs", |connection| {
            admit(connection, token)?;
            Ok(crate::runs::record_skips(connection, skipped)?)
        })
    }

    fn cron_job_runs(&self, job_id: i64, limit: usize) -> Result<Vec<CronJobRun>, StoreError> {
        crate::runs::job_runs(self, job_id, limit)
    }
}

/// Lets the firing loop's transaction commit without waiting for its WAL to reach the disk (PostgreSQL's
/// `synchronous_commit = off`, for this transaction only), unless it is a new term's first write. Returns whether it
/// did.
///
/// Why that is safe: the loop's write acknowledges nothing to anyone. The fires it records were published already
/// (before it), and if the server loses the write in a crash before its WAL is flushed, that is a write that failed:
/// the rows are still claimed, their claims expire, and they fire again with the same fire ids, recorded once then —
/// as after any failed write. The WAL is flushed in order, so the next synchronous commit (an insert group's, whose
/// callers are answered only once it is durable) makes this one durable too, and nothing committed after it can
/// survive without it. A new term's first write raises the fencing epoch (`admit`), which must not be lost, so that
/// one still waits: the condition reads the epoch before `admit` locks it; a rival that raises it in between fences
/// this transaction anyway. Why: each of the loop's commits was a second WAL flush per ~17-row insert group, and the
/// insert groups' commits queued behind it (docs/benchmarks.md, s31-c: the run's pace follows the flush's latency).
fn commit_without_waiting_for_the_flush(connection: &mut PgConnection, token: FencingToken) -> QueryResult<bool> {
    let relaxed = diesel::sql_query(
        "SELECT set_config('synchronous_commit', 'off', true) FROM gateway_leader_epoch WHERE id = 1 AND epoch = $1",
    )
    .bind::<BigInt, _>(token_to_db(token))
    .execute(connection)?;
    Ok(relaxed == 1)
}

/// The unpaused rows due before `before`, soonest first: a range scan of the `cron_jobs_due` index (`paused`, then
/// `next_fire_at`) in index order. A function of its own so that the plan test explains this very statement.
#[diesel::dsl::auto_type]
fn pending_fires_query(before: PrimitiveDateTime, limit: i64) -> _ {
    cron_jobs::table
        .filter(cron_jobs::paused.eq(false))
        .filter(cron_jobs::next_fire_at.lt(before))
        .order((cron_jobs::next_fire_at.asc(), cron_jobs::id.asc()))
        .limit(limit)
        .select((cron_jobs::id, cron_jobs::next_fire_at, cron_jobs::claimed_until, cron_jobs::claim_token))
}

/// `agent_id`'s one-time (`is_one_time`) or recurring rows: a range of the index on `(agent_id, is_one_time, …)`.
#[diesel::dsl::auto_type]
fn jobs_of_query<'a>(agent_id: &'a str, is_one_time: bool) -> _ {
    cron_jobs::table.filter(cron_jobs::agent_id.eq(agent_id)).filter(cron_jobs::is_one_time.eq(is_one_time))
}

impl DieselStore {
    /// How many of `agent_id`'s jobs of one kind there are.
    fn count_jobs_of(&self, agent_id: &AgentId, is_one_time: bool, operation: &str) -> Result<usize, StoreError> {
        let count: i64 = self.with_connection(operation, |connection| {
            let query = jobs_of_query(agent_id.as_str(), is_one_time).count();
            on_backend!(connection, c => query.get_result(c))
        })?;
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }

    /// `agent_id`'s jobs of one kind, soonest first, at most `limit`.
    fn jobs_of(
        &self,
        agent_id: &AgentId,
        is_one_time: bool,
        limit: usize,
        operation: &str,
    ) -> Result<Vec<CronJob>, StoreError> {
        let rows = self.with_connection(operation, |connection| {
            on_backend!(connection, c => {
                jobs_of_query(agent_id.as_str(), is_one_time)
                    .order((cron_jobs::next_fire_at.asc(), cron_jobs::id.asc()))
                    .limit(limit_to_db(limit))
                    .select(CronJobRow::as_select())
                    .load(c)
            })
        })?;
        jobs(rows)
    }
}

/// One statement for the whole batch: the condition and the write are one atomic step per row, and one
/// statement is prepared per batch instead of one per fire.
fn claim(connection: &mut AnyConnection<'_>, job_ids: &[i64], lease: &ClaimLease) -> QueryResult<Vec<CronJobRow>> {
    let now = to_db(lease.now);
    let token = token_to_db(lease.token);
    let due_by = to_db(lease.due_by);
    let expires_at = to_db(lease.expires_at);
    let connection = match connection {
        AnyConnection::Postgres(connection) => {
            let claim = ClaimCronJobs { owner: lease.owner.as_str(), expires_at, token, ids: job_ids, due_by, now };
            return claim.load(&mut **connection);
        }
        AnyConnection::Sqlite(connection) => connection,
    };
    let free =
        cron_jobs::claimed_until.is_null().or(cron_jobs::claimed_until.le(now)).or(cron_jobs::claim_token.lt(token));
    diesel::update(
        cron_jobs::table
            .filter(cron_jobs::id.eq_any(job_ids))
            .filter(cron_jobs::next_fire_at.le(due_by))
            .filter(cron_jobs::paused.eq(false))
            .filter(free),
    )
    .set((
        cron_jobs::claimed_by.eq(lease.owner.as_str()),
        cron_jobs::claimed_until.eq(expires_at),
        cron_jobs::claim_token.eq(token),
    ))
    .returning(CronJobRow::as_returning())
    .load(&mut **connection)
}

/// The claim on PostgreSQL: each id looked up through the primary key (a nested loop over the ids), the
/// conditions checked on the row it finds. Written as `id = ANY($1) AND next_fire_at <= …` the planner may
/// instead AND a bitmap of the ids with one of `cron_jobs_due`'s range `paused = false AND next_fire_at <= due_by`
/// — every row ever due, since the range's dead entries (fired and deleted rows) stay in the index until vacuum
/// removes them: measured in the cron bench, the range read 3,682 entries at the run's first claims and 74,906
/// at its last, and the claim's time grew from 0.3 to 2.3 ms until autovacuum came (docs/benchmarks.md, issue
/// 18, branch s27-c). Planned at each execution like the other lookups by id (`batch.rs`).
struct ClaimCronJobs<'a> {
    owner: &'a str,
    expires_at: PrimitiveDateTime,
    token: i64,
    ids: &'a [i64],
    due_by: PrimitiveDateTime,
    now: PrimitiveDateTime,
}

postgres_statement!(ClaimCronJobs -> (
    BigInt, Text, Nullable<Text>, Timestamp, Text, Bool, Bool, Text, Text, Nullable<BigInt>
));

impl QueryFragment<Pg> for ClaimCronJobs<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.unsafe_to_cache_prepared();
        push_sql_with_binds(
            &mut out,
            "UPDATE cron_jobs SET claimed_by = $, claimed_until = $, claim_token = $ \
             FROM (SELECT unnest($) AS id, $ AS due_by OFFSET 0) AS wanted \
             WHERE cron_jobs.id = wanted.id AND cron_jobs.next_fire_at <= wanted.due_by AND NOT cron_jobs.paused \
             AND (cron_jobs.claimed_until IS NULL OR cron_jobs.claimed_until <= $ OR cron_jobs.claim_token < $) \
             RETURNING cron_jobs.id, cron_jobs.agent_id, cron_jobs.schedule, cron_jobs.next_fire_at, \
             cron_jobs.payload, cron_jobs.is_one_time, cron_jobs.paused, cron_jobs.timezone, \
             cron_jobs.misfire_policy, cron_jobs.max_lateness_ms",
            |index, out| match index {
                0 => out.push_bind_param::<Text, _>(&self.owner),
                1 => out.push_bind_param::<Timestamp, _>(&self.expires_at),
                2 | 6 => out.push_bind_param::<BigInt, _>(&self.token),
                3 => out.push_bind_param::<Array<BigInt>, _>(&self.ids),
                4 => out.push_bind_param::<Timestamp, _>(&self.due_by),
                _ => out.push_bind_param::<Timestamp, _>(&self.now),
            },
        )
    }
}

/// Deletes in one statement (the owner identifies its claim); advances each row only from the instant that was
/// claimed, to its own next instant: row by row on SQLite, in one statement on PostgreSQL.
fn complete(connection: &mut AnyConnection<'_>, owner: &str, completions: &[FireCompletion]) -> QueryResult<usize> {
    let deleted: Vec<i64> = completions
        .iter()
        .filter_map(|completion| match completion {
            FireCompletion::Delete(fire) => Some(fire.job_id),
            FireCompletion::Advance { .. } => None,
        })
        .collect();
    let mut completed = 0;
    if !deleted.is_empty() {
        let delete = diesel::delete(
            cron_jobs::table.filter(cron_jobs::id.eq_any(&deleted)).filter(cron_jobs::claimed_by.eq(owner)),
        );
        completed += on_backend!(connection, c => delete.execute(c))?;
    }
    let advances = completions.iter().filter_map(|completion| match completion {
        FireCompletion::Advance { fire, next_fire_at } => Some((fire.job_id, fire.scheduled_for, *next_fire_at)),
        FireCompletion::Delete(_) => None,
    });
    if let AnyConnection::Postgres(connection) = connection {
        let advance = AdvanceCronJobs::of(owner, advances);
        if !advance.id.is_empty() {
            completed += advance.execute(&mut **connection)?;
        }
        return Ok(completed);
    }
    for (job_id, scheduled_for, next_fire_at) in advances {
        let advance = diesel::update(
            cron_jobs::table
                .filter(cron_jobs::id.eq(job_id))
                .filter(cron_jobs::next_fire_at.eq(to_db(scheduled_for)))
                .filter(cron_jobs::claimed_by.eq(owner)),
        )
        .set((
            cron_jobs::next_fire_at.eq(to_db(next_fire_at)),
            cron_jobs::claimed_by.eq(None::<String>),
            cron_jobs::claimed_until.eq(None::<PrimitiveDateTime>),
            cron_jobs::claim_token.eq(None::<i64>),
        ));
        completed += on_backend!(connection, c => advance.execute(c))?;
    }
    Ok(completed)
}

/// The advances of a batch as one `UPDATE … FROM unnest(…)` (`batch`). Of completions of the same instant of a
/// job, the first is kept: row by row it is the one that applies, and an `UPDATE … FROM` that joins a row twice
/// applies one join of its choosing. (Instants other than the row's own do not join at all.)
struct AdvanceCronJobs<'a> {
    owner: &'a str,
    id: Vec<i64>,
    scheduled_for: Vec<PrimitiveDateTime>,
    next_fire_at: Vec<PrimitiveDateTime>,
}

postgres_statement!(AdvanceCronJobs);

impl<'a> AdvanceCronJobs<'a> {
    fn of(owner: &'a str, advances: impl Iterator<Item = (i64, time::OffsetDateTime, time::OffsetDateTime)>) -> Self {
        let mut statement = Self { owner, id: Vec::new(), scheduled_for: Vec::new(), next_fire_at: Vec::new() };
        let mut seen = HashSet::new();
        for (job_id, scheduled_for, next_fire_at) in advances {
            if seen.insert((job_id, scheduled_for)) {
                statement.id.push(job_id);
                statement.scheduled_for.push(to_db(scheduled_for));
                statement.next_fire_at.push(to_db(next_fire_at));
            }
        }
        statement
    }
}

impl QueryFragment<Pg> for AdvanceCronJobs<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.unsafe_to_cache_prepared();
        push_sql_with_binds(
            &mut out,
            "UPDATE cron_jobs \
             SET next_fire_at = done.next_fire_at, claimed_by = NULL, claimed_until = NULL, claim_token = NULL \
             FROM unnest($, $, $) AS done (id, scheduled_for, next_fire_at) \
             WHERE cron_jobs.id = done.id AND cron_jobs.next_fire_at = done.scheduled_for \
             AND cron_jobs.claimed_by = $",
            |index, out| match index {
                0 => out.push_bind_param::<Array<BigInt>, _>(&self.id),
                1 => out.push_bind_param::<Array<Timestamp>, _>(&self.scheduled_for),
                2 => out.push_bind_param::<Array<Timestamp>, _>(&self.next_fire_at),
                _ => out.push_bind_param::<Text, _>(&self.owner),
            },
        )
    }
}

// The port's rules (claims, leases, completions, fencing, idempotency keys) run against this adapter in
// tests/conformance.rs; what only SQL can get wrong is tested here.
#[cfg(test)]
mod tests {
    use gateway_core::conformance::cron::lease;
    use serde_json::json;
    use time::macros::datetime;
    use time::{Duration, OffsetDateTime};

    use super::*;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    on_every_backend!(
        rival_claimers_never_hold_one_instant_together,
        a_large_group_answers_each_job_in_its_place,
        rival_groups_with_one_key_write_it_once,
        a_batch_advances_each_row_once_from_its_claimed_instant,
        an_inserted_job_comes_back_as_it_was_stored,
        rows_alike_but_for_their_payload_each_get_their_own_back,
    );

    fn one_time(at: OffsetDateTime) -> NewCronJob {
        NewCronJob {
            agent_id: AgentId::new("agent-7").unwrap(),
            schedule: None,
            next_fire_at: at,
            payload: json!({"task": "check_quota", "n": [1, 2]}).as_object().cloned().unwrap(),
            is_one_time: true,
            idempotency_key: None,
            timezone: gateway_core::DEFAULT_TIMEZONE.to_owned(),
            misfire_policy: MisfirePolicy::FireOnce,
            max_lateness_ms: None,
        }
    }

    fn keyed(at: OffsetDateTime, key: &str) -> NewCronJob {
        NewCronJob { idempotency_key: Some(IdempotencyKey::new(key).unwrap()), ..one_time(at) }
    }

    fn recurring(at: OffsetDateTime) -> NewCronJob {
        NewCronJob { schedule: Some("* * * * *".into()), is_one_time: false, ..one_time(at) }
    }

    /// Hundreds of jobs in one group, alike or not, with keys new, repeated within the group and held by earlier
    /// rows: each caller gets its own job back, in its own place (on PostgreSQL the group is one statement whose
    /// rows come back in the server's order). Then a group without keys (on PostgreSQL, outside a transaction).
    fn a_large_group_answers_each_job_in_its_place(store: &DieselStore) {
        let held = store.insert_cron_job(&keyed(START, "held")).unwrap();
        let group: Vec<NewCronJob> = (0..400i64)
            .map(|n| match n % 4 {
                0 => one_time(START),
                1 => one_time(START + Duration::milliseconds(n)),
                2 => keyed(START, &format!("k-{}", n % 40)),
                _ => keyed(START + Duration::seconds(n), "held"),
            })
            .collect();
        let outcomes = store.insert_cron_jobs(&group).unwrap();
        assert_eq!(outcomes.len(), group.len());
        let mut first_of_key = HashMap::new();
        for (n, (asked, outcome)) in group.iter().zip(&outcomes).enumerate() {
            match asked.idempotency_key.as_ref().map(IdempotencyKey::as_str) {
                Some("held") => assert_eq!((&outcome.job, outcome.inserted), (&held, false), "{n}"),
                Some(key) => match first_of_key.get(key) {
                    None => {
                        assert!(outcome.inserted, "{n}");
                        first_of_key.insert(key, outcome.job.clone());
                    }
                    Some(first) => assert_eq!((&outcome.job, outcome.inserted), (first, false), "{n}: its first row"),
                },
                None => {
                    assert!(outcome.inserted, "{n}");
                    assert_eq!(outcome.job.next_fire_at, asked.next_fire_at, "{n}");
                }
            }
        }
        let written: Vec<i64> =
            outcomes.iter().filter(|outcome| outcome.inserted).map(|outcome| outcome.job.id).collect();
        assert!(written.windows(2).all(|pair| pair[0] < pair[1]), "ids follow the group's order");
        assert_eq!(written.len(), 200 + 10);
        assert_eq!(crate::testing::count(store, "cron_jobs"), 1 + written.len() as i64);

        let plain: Vec<NewCronJob> = (0..300).map(|n| one_time(START + Duration::seconds(n))).collect();
        let outcomes = store.insert_cron_jobs(&plain).unwrap();
        let instants: Vec<OffsetDateTime> = outcomes.iter().map(|outcome| outcome.job.next_fire_at).collect();
        assert_eq!(instants, plain.iter().map(|job| job.next_fire_at).collect::<Vec<_>>());
        assert!(outcomes.iter().all(|outcome| outcome.inserted));
    }

    /// The job an insert answers with is the row as a read finds it, every column (on SQLite the insert builds it
    /// from what it bound and the id SQLite gave the row, rather than reading it back), alone and in a group, with
    /// and without the optional columns, after rows of other agents and after a deleted row.
    fn an_inserted_job_comes_back_as_it_was_stored(store: &DieselStore) {
        let gone = store.insert_cron_job(&one_time(START)).unwrap();
        assert!(store.delete_cron_job(gone.id).unwrap());
        let full = NewCronJob {
            agent_id: AgentId::new("agent-other").unwrap(),
            timezone: "Europe/Paris".to_owned(),
            misfire_policy: MisfirePolicy::Skip,
            max_lateness_ms: Some(1_500),
            payload: json!({"é": "ü", "n": [1.5, null]}).as_object().cloned().unwrap(),
            ..keyed(START + Duration::microseconds(123_457), "stored")
        };
        let alone = store.insert_cron_job(&full).unwrap();
        assert_eq!(store.cron_job(alone.id).unwrap().as_ref(), Some(&alone));
        assert!(alone.id > gone.id, "ids are never reused");
        let group = [
            recurring(START),
            one_time(START + Duration::days(400)),
            keyed(START, "fresh"),
            full.clone(),
            // Finer than the column: the answer must carry the instant as stored, not as asked.
            one_time(START + Duration::nanoseconds(123_456_789)),
            NewCronJob { max_lateness_ms: Some(u64::MAX), ..one_time(START) },
        ];
        let outcomes = store.insert_cron_jobs(&group).unwrap();
        for outcome in &outcomes {
            assert_eq!(store.cron_job(outcome.job.id).unwrap().as_ref(), Some(&outcome.job));
        }
        assert_eq!(outcomes[3].job, alone, "the held key's row");
    }

    /// Rows of one group that differ in nothing but their payload each get their own back, the one a read of their
    /// id finds, in a group with and without keys: the check that pairs PostgreSQL's returned rows with the rows
    /// sent must tell such rows apart (s29-c measured a group insert answering from what was sent; see
    /// docs/benchmarks.md).
    fn rows_alike_but_for_their_payload_each_get_their_own_back(store: &DieselStore) {
        for keyed_row in [None, Some(7)] {
            let group: Vec<NewCronJob> = (0..64)
                .map(|n| {
                    let job = if keyed_row == Some(n) { keyed(START, "the-one-key") } else { one_time(START) };
                    NewCronJob { payload: json!({"n": n}).as_object().cloned().unwrap(), ..job }
                })
                .collect();
            let outcomes = store.insert_cron_jobs(&group).unwrap();
            for (n, outcome) in outcomes.iter().enumerate() {
                assert!(outcome.inserted);
                assert_eq!(outcome.job.payload, group[n].payload, "{n}");
                assert_eq!(store.cron_job(outcome.job.id).unwrap().as_ref(), Some(&outcome.job), "{n}");
            }
        }
    }

    /// Groups on separate connections (separate transactions on PostgreSQL, where an insert of a key another
    /// uncommitted insert holds waits for it) all carrying one key: one of them writes it, every other gets that
    /// row back; the rest of each group is written.
    fn rival_groups_with_one_key_write_it_once(store: &DieselStore) {
        let barrier = std::sync::Barrier::new(4);
        let outcomes: Vec<Vec<CronJobInsert>> = std::thread::scope(|scope| {
            let rivals: Vec<_> = (0..4)
                .map(|_| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let group = [one_time(START), keyed(START, "shared"), one_time(START)];
                        barrier.wait();
                        store.insert_cron_jobs(&group).unwrap()
                    })
                })
                .collect();
            rivals.into_iter().map(|rival| rival.join().unwrap()).collect()
        });
        let shared: Vec<&CronJobInsert> = outcomes.iter().map(|group| &group[1]).collect();
        assert_eq!(shared.iter().filter(|outcome| outcome.inserted).count(), 1, "{shared:?}");
        assert!(shared.iter().all(|outcome| outcome.job == shared[0].job));
        assert!(outcomes.iter().all(|group| group[0].inserted && group[2].inserted));
        assert_eq!(crate::testing::count(store, "cron_jobs"), 4 * 2 + 1);
    }

    /// A batch of completions as the loop may send them: a row completed twice for its claimed instant (the first
    /// wins), one with a stale instant before its real one, a deleted row also advanced. Each row is completed
    /// once, from the instant that was claimed, as one by one.
    fn a_batch_advances_each_row_once_from_its_claimed_instant(store: &DieselStore) {
        let jobs: Vec<CronJob> = (0..3).map(|_| store.insert_cron_job(&recurring(START)).unwrap()).collect();
        let ids: Vec<i64> = jobs.iter().map(|job| job.id).collect();
        assert_eq!(store.claim_fires(&ids, &lease("a", 1, START)).unwrap().len(), 3);
        let fire = |job: &CronJob, at| gateway_core::FireKey { job_id: job.id, scheduled_for: at };
        let advance = |job: &CronJob, at, next| FireCompletion::Advance { fire: fire(job, at), next_fire_at: next };
        let minute = START + Duration::minutes(1);
        let completions = [
            advance(&jobs[0], START, minute),
            advance(&jobs[0], START, minute + Duration::minutes(1)),
            advance(&jobs[1], START - Duration::minutes(1), START),
            advance(&jobs[1], START, minute + Duration::minutes(5)),
            FireCompletion::Delete(fire(&jobs[2], START)),
            advance(&jobs[2], START, minute),
        ];
        assert_eq!(store.complete_fires("a", FencingToken(1), &completions, &[]).unwrap(), 3);
        let next: Vec<Option<OffsetDateTime>> =
            ids.iter().map(|id| store.cron_job(*id).unwrap().map(|job| job.next_fire_at)).collect();
        assert_eq!(next, [Some(minute), Some(minute + Duration::minutes(5)), None]);
        assert_eq!(store.complete_fires("a", FencingToken(1), &completions, &[]).unwrap(), 0, "completed already");
    }

    /// The statement `pending_fires` runs walks the `cron_jobs_due` index in order: neither a table scan nor a
    /// sort, however many rows wait further ahead.
    #[test]
    fn the_due_fires_query_is_an_index_range_scan_without_a_sort() {
        let fixture = crate::testing::sqlite();
        let query = pending_fires_query(to_db(START), 10);
        let plan = fixture.store.with_sqlite("explain", |connection| crate::explain::query_plan(connection, query));
        let plan = plan.unwrap().unwrap();
        assert!(
            plan.iter().any(|line| line.contains("USING INDEX cron_jobs_due (paused=? AND next_fire_at<?)")),
            "{plan:?}"
        );
        assert!(!plan.iter().any(|line| line.contains("TEMP B-TREE")), "the query sorts: {plan:?}");
        assert!(!plan.iter().any(|line| line.starts_with("SCAN")), "the query scans the table: {plan:?}");
    }

    /// Counting and listing an agent's reminders read the index of rows by agent, in its order (the count from
    /// the index alone): neither a table scan nor a sort, however many rows other agents have.
    #[test]
    fn an_agents_reminders_are_a_range_of_their_index() {
        let fixture = crate::testing::sqlite();
        let store = &fixture.store;
        let count = jobs_of_query("agent-7", true).count();
        let count = store.with_sqlite("explain", |c| crate::explain::query_plan(c, count)).unwrap().unwrap();
        assert!(
            count.iter().any(|line| line.contains("USING COVERING INDEX cron_jobs_agent_id_one_time")),
            "{count:?}"
        );
        let list = jobs_of_query("agent-7", true)
            .order((cron_jobs::next_fire_at.asc(), cron_jobs::id.asc()))
            .limit(10)
            .select(CronJobRow::as_select());
        let list = store.with_sqlite("explain", |c| crate::explain::query_plan(c, list)).unwrap().unwrap();
        assert!(list.iter().any(|line| line.contains("USING INDEX cron_jobs_agent_id_one_time")), "{list:?}");
        assert!(!list.iter().any(|line| line.contains("TEMP B-TREE")), "the query sorts: {list:?}");
    }

    /// What `explain` reads on a throwaway PostgreSQL whose `cron_jobs` holds 50,000 one-time rows of 100 agents with
    /// fresh statistics; `None` where there is no PostgreSQL to start (the fixture says so, and fails under CI).
    fn plans_over_filled_cron_jobs<T>(
        test: &str,
        explain: impl FnOnce(&mut PgConnection) -> QueryResult<T>,
    ) -> Option<T> {
        let fixture = crate::testing::postgres(test)?;
        Some(crate::testing::on_postgres(&fixture.store, |c| {
            crate::explain::fill_cron_jobs(c, 50_000)?;
            explain(c)
        }))
    }

    /// The same on PostgreSQL, on a table of 50,000 one-time rows of 100 agents with fresh statistics.
    #[test]
    fn an_agents_reminders_are_a_range_of_their_index_on_postgres() {
        let Some((count, list)) =
            plans_over_filled_cron_jobs("cron::tests::an_agents_reminders_are_a_range_of_their_index", |c| {
                let count = crate::explain::postgres_plan(c, jobs_of_query("agent-7", true).count())?;
                let list = crate::explain::postgres_plan(
                    c,
                    jobs_of_query("agent-7", true)
                        .order((cron_jobs::next_fire_at.asc(), cron_jobs::id.asc()))
                        .limit(10)
                        .select(CronJobRow::as_select()),
                )?;
                Ok((count.join("\n"), list.join("\n")))
            })
        else {
            return;
        };
        assert!(count.contains("cron_jobs_agent_id_one_time") && !count.contains("Seq Scan"), "{count}");
        assert!(list.contains("Index Scan using cron_jobs_agent_id_one_time"), "{list}");
        assert!(!list.contains("Sort"), "the query sorts: {list}");
    }

    /// PostgreSQL's plan of the same statement on a table of pending rows the planner has statistics for: the
    /// `cron_jobs_due` index walked in order under the limit, neither a sort nor a sequential scan.
    #[test]
    fn the_due_fires_query_walks_the_index_on_postgres() {
        let Some(plan) =
            plans_over_filled_cron_jobs("cron::tests::the_due_fires_query_walks_the_index_on_postgres", |c| {
                crate::explain::postgres_plan(c, pending_fires_query(to_db(START), 500))
            })
        else {
            return;
        };
        let plan = plan.join("\n");
        assert!(plan.contains("Index Scan using cron_jobs_due"), "{plan}");
        assert!(!plan.contains("Sort"), "the query sorts: {plan}");
        assert!(!plan.contains("Seq Scan"), "the query scans the table: {plan}");
    }

    /// PostgreSQL's plan of the claim when few rows are due by the statistics (as in a running gateway, whose
    /// `cron_jobs_due` range up to now holds every fired row's dead entry until vacuum): each id looked up through
    /// the primary key, and `cron_jobs_due` not read at all.
    #[test]
    fn a_claim_looks_its_rows_up_by_id_on_postgres() {
        let Some(plan) = plans_over_filled_cron_jobs("cron::tests::a_claim_looks_its_rows_up_by_id_on_postgres", |c| {
            // The first 300 rows, due 300 s after the first; the ids are the table's first.
            let due_by = to_db(START - Duration::seconds(24_700));
            let ids: Vec<i64> = (1..=300).collect();
            let claim = ClaimCronJobs { owner: "a", expires_at: due_by, token: 1, ids: &ids, due_by, now: due_by };
            crate::explain::postgres_plan(c, claim)
        }) else {
            return;
        };
        let plan = plan.join("\n");
        assert!(plan.contains("cron_jobs_pkey"), "{plan}");
        assert!(!plan.contains("cron_jobs_due"), "the claim reads the due index: {plan}");
    }

    /// The firing loop claims rows soon after their group inserted them; each claimed version stays on its row's
    /// page (a HOT update: no index of `cron_jobs` gets an entry for it), which migration `cron_jobs_fillfactor`
    /// leaves room for. On full pages the claimed versions move to other pages.
    #[test]
    fn a_claim_keeps_each_row_on_its_page_on_postgres() {
        #[derive(diesel::QueryableByName, PartialEq, Debug)]
        struct Place {
            #[diesel(sql_type = BigInt)]
            id: i64,
            #[diesel(sql_type = BigInt)]
            page: i64,
        }
        let Some(fixture) = crate::testing::postgres("cron::tests::a_claim_keeps_each_row_on_its_page_on_postgres")
        else {
            return;
        };
        let store = &fixture.store;
        let places = || {
            crate::testing::on_postgres(store, |c| {
                diesel::sql_query("SELECT id, (ctid::text::point)[0]::bigint AS page FROM cron_jobs ORDER BY id")
                    .load::<Place>(c)
            })
        };
        let group: Vec<NewCronJob> = (0..300).map(|n| one_time(START + Duration::milliseconds(n))).collect();
        let ids: Vec<i64> = store.insert_cron_jobs(&group).unwrap().iter().map(|insert| insert.job.id).collect();
        let before = places();
        let pages: HashSet<i64> = before.iter().map(|place| place.page).collect();
        assert!(pages.len() > 2, "the group fills several pages: {pages:?}");

        let claimed = store.claim_fires(&ids, &lease("a", 1, START + Duration::seconds(1))).unwrap();
        assert_eq!(claimed.len(), ids.len());
        assert_eq!(places(), before, "every claimed version stays on its row's page");
    }

    /// The firing loop's transaction commits without waiting for its WAL flush only under the epoch's own term: a new
    /// term's first write (it raises the epoch) and a stale one still wait, and the setting ends with the
    /// transaction, so the pooled connection's next transaction (an insert group, whose callers are answered once it
    /// is durable) waits for its flush again.
    #[test]
    fn the_loops_commit_skips_the_flush_only_under_the_current_epoch_on_postgres() {
        #[derive(diesel::QueryableByName)]
        struct Setting {
            #[diesel(sql_type = Text)]
            setting: String,
        }
        let Some(fixture) = crate::testing::postgres(
            "cron::tests::the_loops_commit_skips_the_flush_only_under_the_current_epoch_on_postgres",
        ) else {
            return;
        };
        let setting = |c: &mut PgConnection| {
            diesel::sql_query("SELECT current_setting('synchronous_commit') AS setting")
                .get_result::<Setting>(c)
                .map(|row| row.setting)
        };
        // One write's decision and the setting inside its transaction, then `admit` as the loop's write does.
        let write = |c: &mut PgConnection, token: u64| {
            c.transaction(|c| {
                let relaxed = commit_without_waiting_for_the_flush(c, FencingToken(token))?;
                let inside = setting(c)?;
                admit(&mut AnyConnection::Postgres(c), FencingToken(token))
                    .map_err(|_| diesel::result::Error::RollbackTransaction)?;
                Ok::<_, diesel::result::Error>((relaxed, inside))
            })
        };
        let (first, current, after, stale) = crate::testing::on_postgres(&fixture.store, |c| {
            // Test servers do not wait for flushes at all; this connection does, as a production server's.
            diesel::sql_query("SET synchronous_commit = on").execute(c)?;
            let first = write(c, 1)?;
            let current = write(c, 1)?;
            let after = setting(c)?;
            let stale = c.transaction(|c| commit_without_waiting_for_the_flush(c, FencingToken(0)))?;
            Ok((first, current, after, stale))
        });
        assert_eq!(first, (false, "on".to_owned()), "a new term's first write raises the epoch: it waits");
        assert_eq!(current, (true, "off".to_owned()), "a write under the epoch's own term does not wait");
        assert_eq!(after, "on", "the connection's next transaction waits for its flush again");
        assert!(!stale, "a stale term's write (fenced by admit) is not relaxed either");
    }

    /// A group without idempotency keys is inserted plainly on PostgreSQL, not speculatively: `ON CONFLICT` writes
    /// each row's heap tuple as a speculative insertion and then a second WAL record (`HEAP_CONFIRM`) for it, and
    /// probes the arbiter index first, which a keyless row can never conflict in. Read from the WAL itself
    /// (`pg_walinspect`, PostgreSQL ≥ 15; skipped with a line where the extension is missing): a group with keys
    /// still confirms each row (so the count below sees them when they are there), a keyless group none.
    #[test]
    fn a_keyless_group_is_inserted_without_speculative_insertion_on_postgres() {
        #[derive(diesel::QueryableByName)]
        struct Lsn {
            #[diesel(sql_type = Text)]
            lsn: String,
        }
        #[derive(diesel::QueryableByName)]
        struct Confirmed {
            #[diesel(sql_type = BigInt)]
            rows: i64,
        }
        let Some(fixture) = crate::testing::postgres(
            "cron::tests::a_keyless_group_is_inserted_without_speculative_insertion_on_postgres",
        ) else {
            return;
        };
        let store = &fixture.store;
        let extension = store.with_connection("inspect the WAL", |connection| {
            on_backend!(connection, c => diesel::sql_query("CREATE EXTENSION IF NOT EXISTS pg_walinspect").execute(c))
        });
        if let Err(missing) = extension {
            assert!(std::env::var_os("CI").is_none(), "pg_walinspect is missing: {missing}");
            println!("skipped: pg_walinspect is missing ({missing})");
            return;
        }
        let lsn = || {
            crate::testing::on_postgres(store, |c| {
                // Test servers run without fsync and commit without waiting for the flush; a switch to the next WAL
                // file flushes everything before it.
                diesel::sql_query("SELECT pg_switch_wal()::text AS lsn").execute(c)?;
                diesel::sql_query("SELECT pg_current_wal_flush_lsn()::text AS lsn").get_result::<Lsn>(c)
            })
            .lsn
        };
        // The HEAP_CONFIRM records on this database's cron_jobs heap between two flushed positions (each insert's
        // commit flushes its records; other tests share the server, and their tables may have the same file
        // number in another database).
        let confirmed = |from: &str, to: &str| {
            crate::testing::on_postgres(store, |c| {
                diesel::sql_query(
                    "SELECT count(*) AS rows FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) \
                         WHERE resource_manager = 'Heap' AND record_type = 'HEAP_CONFIRM' \
                         AND block_ref LIKE '%rel ' || (SELECT dattablespace FROM pg_database \
                         WHERE datname = current_database()) || '/' || (SELECT oid FROM pg_database \
                         WHERE datname = current_database()) || '/' || pg_relation_filenode('cron_jobs') || ' %'",
                )
                .bind::<Text, _>(from)
                .bind::<Text, _>(to)
                .get_result::<Confirmed>(c)
            })
            .rows
        };
        let before = lsn();
        let keyed: Vec<NewCronJob> = (0..5).map(|n| keyed(START, &format!("k-{n}"))).collect();
        assert_eq!(store.insert_cron_jobs(&keyed).unwrap().len(), 5);
        let between = lsn();
        let keyless: Vec<NewCronJob> = (0..20).map(|n| one_time(START + Duration::milliseconds(n))).collect();
        let inserted = store.insert_cron_jobs(&keyless).unwrap();
        assert!(inserted.iter().all(|insert| insert.inserted), "every keyless row is new");
        let after = lsn();
        assert_eq!(confirmed(&before, &between), 5, "a keyed group confirms each row it inserts speculatively");
        assert_eq!(confirmed(&between, &after), 0, "a keyless group was inserted speculatively");
    }

    /// Two claimers racing for the same rows from separate connections (on PostgreSQL, separate transactions that
    /// wait for each other's row locks): every row is claimed exactly once.
    fn rival_claimers_never_hold_one_instant_together(store: &DieselStore) {
        let ids: Vec<i64> =
            (0..200).map(|n| store.insert_cron_job(&one_time(START + Duration::milliseconds(n))).unwrap().id).collect();
        let due_at = START + Duration::seconds(1);
        let claimed: Vec<Vec<CronJob>> = std::thread::scope(|scope| {
            let rivals: Vec<_> = ["a", "b", "c", "d"]
                .into_iter()
                .map(|owner| {
                    let ids = &ids;
                    scope.spawn(move || {
                        let mut mine = Vec::new();
                        for chunk in ids.chunks(20) {
                            mine.extend(store.claim_fires(chunk, &lease(owner, 1, due_at)).unwrap());
                        }
                        mine
                    })
                })
                .collect();
            rivals.into_iter().map(|rival| rival.join().unwrap()).collect()
        });
        let mut all: Vec<i64> = claimed.iter().flatten().map(|job| job.id).collect();
        all.sort_unstable();
        assert_eq!(all, ids, "every row claimed once");
    }
}
