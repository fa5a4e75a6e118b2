//! `MailboxStore` over `agent_mailbox` (migration `agent_mailbox`), and the recording of fires that the cron
//! completions call inside their own transaction (`record_fires`).
//!
//! Recording is an `INSERT … ON CONFLICT (fire_id) DO NOTHING`: a refire after a crash carries the same `fire_id`
//! and records nothing new. SQLite writes the group row by row with one cached statement (a function call each);
//! PostgreSQL in one statement over `unnest` arrays, as the cron writes do (`batch`).

use std::collections::HashSet;

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::sql_types::{Array, BigInt, Text, Timestamp};
use diesel::sqlite::{Sqlite, SqliteConnection};
use gateway_core::ports::mailbox::in_firing_order;
use gateway_core::{
    AgentId, FencingToken, FiredReminder, MailboxEntry, MailboxQuery, MailboxStore, Receipt, StoreError,
};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::batch::push_sql_with_binds;
use crate::connection::{AnyConnection, DieselStore};
use crate::fencing::{token_from_db, token_to_db};
use crate::schema::agent_mailbox;
use crate::timestamp::{from_db, to_db};

/// A fire as its row is written; every column bound (none as DEFAULT), so the statement's text is fixed and
/// Diesel keeps it prepared.
#[derive(Insertable)]
#[diesel(table_name = agent_mailbox, treat_none_as_default_value = false)]
struct NewEntryRow<'a> {
    fire_id: &'a str,
    agent_id: &'a str,
    job_id: i64,
    payload: String,
    scheduled_for: PrimitiveDateTime,
    fired_at: PrimitiveDateTime,
    epoch: i64,
}

impl<'a> NewEntryRow<'a> {
    fn of(reminder: &'a FiredReminder) -> Self {
        Self {
            fire_id: &reminder.fire_id,
            agent_id: reminder.agent_id.as_str(),
            job_id: reminder.job_id,
            payload: serde_json::to_string(&reminder.payload).unwrap_or_else(|_| "{}".to_owned()),
            scheduled_for: to_db(reminder.scheduled_for),
            fired_at: to_db(reminder.fired_at),
            epoch: token_to_db(FencingToken(reminder.epoch)),
        }
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = agent_mailbox)]
struct EntryRow {
    seq: i64,
    fire_id: String,
    agent_id: String,
    job_id: i64,
    payload: String,
    scheduled_for: PrimitiveDateTime,
    fired_at: PrimitiveDateTime,
    received_at: Option<PrimitiveDateTime>,
    epoch: i64,
}

impl TryFrom<EntryRow> for MailboxEntry {
    type Error = StoreError;

    fn try_from(row: EntryRow) -> Result<Self, StoreError> {
        let agent_id = AgentId::new(row.agent_id).map_err(|error| {
            StoreError::Internal(format!("mailbox entry {}: stored agent_id invalid: {error}", row.seq))
        })?;
        let payload = match serde_json::from_str(&row.payload) {
            Ok(serde_json::Value::Object(payload)) => payload,
            _ => {
                return Err(StoreError::Internal(format!(
                    "mailbox entry {}: stored payload is not a JSON object",
                    row.seq
                )));
            }
        };
        Ok(Self {
            seq: row.seq,
            reminder: FiredReminder {
                fire_id: row.fire_id,
                job_id: row.job_id,
                agent_id,
                payload,
                scheduled_for: from_db(row.scheduled_for),
                fired_at: from_db(row.fired_at),
                epoch: token_from_db(row.epoch).0,
            },
            received_at: row.received_at.map(from_db),
        })
    }
}

/// A completion's records as one `INSERT … SELECT … FROM unnest(…)`, in the order given; a fire recorded already
/// is left as it is.
struct InsertEntries<'a> {
    fire_id: Vec<&'a str>,
    agent_id: Vec<&'a str>,
    job_id: Vec<i64>,
    payload: Vec<&'a str>,
    scheduled_for: Vec<PrimitiveDateTime>,
    fired_at: Vec<PrimitiveDateTime>,
    epoch: Vec<i64>,
}

postgres_statement!(InsertEntries);

impl<'a> InsertEntries<'a> {
    fn of(rows: &'a [NewEntryRow<'a>]) -> Self {
        Self {
            fire_id: rows.iter().map(|row| row.fire_id).collect(),
            agent_id: rows.iter().map(|row| row.agent_id).collect(),
            job_id: rows.iter().map(|row| row.job_id).collect(),
            payload: rows.iter().map(|row| row.payload.as_str()).collect(),
            scheduled_for: rows.iter().map(|row| row.scheduled_for).collect(),
            fired_at: rows.iter().map(|row| row.fired_at).collect(),
            epoch: rows.iter().map(|row| row.epoch).collect(),
        }
    }

    /// Binds the seven arrays, for the `$`s of `unnest($, $, $, $, $, $, $)`.
    fn bind_arrays<'b>(&'b self, index: usize, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        match index {
            0 => out.push_bind_param::<Array<Text>, _>(&self.fire_id),
            1 => out.push_bind_param::<Array<Text>, _>(&self.agent_id),
            2 => out.push_bind_param::<Array<BigInt>, _>(&self.job_id),
            3 => out.push_bind_param::<Array<Text>, _>(&self.payload),
            4 => out.push_bind_param::<Array<Timestamp>, _>(&self.scheduled_for),
            5 => out.push_bind_param::<Array<Timestamp>, _>(&self.fired_at),
            _ => out.push_bind_param::<Array<BigInt>, _>(&self.epoch),
        }
    }
}

impl QueryFragment<Pg> for InsertEntries<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        push_sql_with_binds(
            &mut out,
            "INSERT INTO agent_mailbox (fire_id, agent_id, job_id, payload, scheduled_for, fired_at, epoch) \
             SELECT fire_id, agent_id, job_id, payload, scheduled_for, fired_at, epoch \
             FROM unnest($, $, $, $, $, $, $) WITH ORDINALITY \
             AS sent (fire_id, agent_id, job_id, payload, scheduled_for, fired_at, epoch, position) \
             ORDER BY position \
             ON CONFLICT (fire_id) DO NOTHING",
            |index, out| self.bind_arrays(index, out),
        )
    }
}

/// A mark of a group as one statement: the entries the receipts name, each by its fire id in its receipt's agent's
/// mailbox, locked in `seq` order (so that rival marks of the same entries never deadlock) and given `received_at`
/// unless they have one; returns the (agent, fire) pairs that name an entry, received before or now. (A statement of
/// its own: Diesel keeps one prepared statement per statement type.)
struct MarkReceived<'a> {
    received_at: PrimitiveDateTime,
    agent_id: Vec<&'a str>,
    fire_id: Vec<&'a str>,
}

postgres_statement!(MarkReceived -> (Text, Text));

impl QueryFragment<Pg> for MarkReceived<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        push_sql_with_binds(
            &mut out,
            "WITH named AS ( \
                 SELECT entry.seq, entry.agent_id, entry.fire_id, entry.received_at \
                 FROM unnest($, $) AS receipt (agent_id, fire_id) \
                 JOIN agent_mailbox AS entry \
                 ON entry.fire_id = receipt.fire_id AND entry.agent_id = receipt.agent_id \
             ), locked AS ( \
                 SELECT seq FROM agent_mailbox \
                 WHERE seq IN (SELECT seq FROM named WHERE received_at IS NULL) \
                 ORDER BY seq FOR UPDATE \
             ), marked AS ( \
                 UPDATE agent_mailbox SET received_at = $ FROM locked \
                 WHERE agent_mailbox.seq = locked.seq AND agent_mailbox.received_at IS NULL \
             ) \
             SELECT agent_id, fire_id FROM named",
            |index, out| match index {
                0 => out.push_bind_param::<Array<Text>, _>(&self.agent_id),
                1 => out.push_bind_param::<Array<Text>, _>(&self.fire_id),
                _ => out.push_bind_param::<Timestamp, _>(&self.received_at),
            },
        )
    }
}

/// Records `fired` unless already recorded, inside the caller's transaction (the cron completion's).
pub(crate) fn record_fires(connection: &mut AnyConnection<'_>, fired: &[FiredReminder]) -> QueryResult<()> {
    if fired.is_empty() {
        return Ok(());
    }
    let rows: Vec<NewEntryRow<'_>> = in_firing_order(fired).into_iter().map(NewEntryRow::of).collect();
    match connection {
        AnyConnection::Postgres(connection) => InsertEntries::of(&rows).execute(&mut **connection).map(drop),
        AnyConnection::Sqlite(connection) => {
            let mut rest = rows.as_slice();
            while !rest.is_empty() {
                rest = match rest.len() {
                    64.. => SqliteInsertEntries::<64>::execute_first(connection, rest)?,
                    8.. => SqliteInsertEntries::<8>::execute_first(connection, rest)?,
                    _ => SqliteInsertEntries::<1>::execute_first(connection, rest)?,
                };
            }
            Ok(())
        }
    }
}

/// `ROWS` records in one `INSERT … VALUES (…), (…) ON CONFLICT (fire_id) DO NOTHING` on SQLite. A statement per row
/// cost Diesel as much again as SQLite's own work (binding and the statement cache's lookup, per statement); a few
/// fixed sizes keep each text prepared once, and a group is written in pieces of those sizes.
struct SqliteInsertEntries<'a, const ROWS: usize> {
    rows: &'a [NewEntryRow<'a>],
}

impl<const ROWS: usize> diesel::query_builder::QueryId for SqliteInsertEntries<'_, ROWS> {
    type QueryId = SqliteInsertEntries<'static, ROWS>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<const ROWS: usize> RunQueryDsl<SqliteConnection> for SqliteInsertEntries<'_, ROWS> {}

impl<const ROWS: usize> QueryFragment<Sqlite> for SqliteInsertEntries<'_, ROWS> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO agent_mailbox (fire_id, agent_id, job_id, payload, scheduled_for, fired_at, epoch) VALUES ",
        );
        for (index, row) in self.rows.iter().enumerate() {
            out.push_sql(if index == 0 { "(" } else { ", (" });
            out.push_bind_param::<Text, _>(&row.fire_id)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(&row.agent_id)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.job_id)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(&row.payload)?;
            out.push_sql(", ");
            out.push_bind_param::<Timestamp, _>(&row.scheduled_for)?;
            out.push_sql(", ");
            out.push_bind_param::<Timestamp, _>(&row.fired_at)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.epoch)?;
            out.push_sql(")");
        }
        out.push_sql(" ON CONFLICT (fire_id) DO NOTHING");
        Ok(())
    }
}

impl<'a, const ROWS: usize> SqliteInsertEntries<'a, ROWS> {
    /// Writes the first `ROWS` of `rows` (there must be that many) and returns the rest.
    fn execute_first(
        connection: &mut SqliteConnection,
        rows: &'a [NewEntryRow<'a>],
    ) -> QueryResult<&'a [NewEntryRow<'a>]> {
        let (first, rest) = rows.split_at(ROWS);
        Self { rows: first }.execute(connection)?;
        Ok(rest)
    }
}

fn limit_to_db(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

impl MailboxStore for DieselStore {
    fn mailbox_position(&self, agent_id: &AgentId, fire_id: &str) -> Result<Option<i64>, StoreError> {
        self.with_connection("find a mailbox entry", |connection| {
            on_backend!(connection, c => {
                agent_mailbox::table
                    .filter(agent_mailbox::fire_id.eq(fire_id))
                    .filter(agent_mailbox::agent_id.eq(agent_id.as_str()))
                    .select(agent_mailbox::seq)
                    .first::<i64>(c)
                    .optional()
            })
        })
    }

    fn mailbox_entries(&self, query: &MailboxQuery) -> Result<Vec<MailboxEntry>, StoreError> {
        let (after, through, limit) = (query.after, query.through.unwrap_or(i64::MAX), limit_to_db(query.limit));
        let agent_id = query.agent_id.as_str();
        let rows: Vec<EntryRow> = self.with_connection("read the mailbox", |connection| {
            // Two statements rather than a boxed one: each stays prepared.
            if query.unreceived_only {
                let entries = unreceived_entries_query(agent_id, after, through, limit);
                on_backend!(connection, c => entries.load(c))
            } else {
                let entries = entries_query(agent_id, after, through, limit);
                on_backend!(connection, c => entries.load(c))
            }
        })?;
        rows.into_iter().map(MailboxEntry::try_from).collect()
    }

    fn mark_received(&self, receipts: &[Receipt], at: OffsetDateTime) -> Result<Vec<usize>, StoreError> {
        if receipts.is_empty() {
            return Ok(Vec::new());
        }
        let received_at = to_db(at);
        let work = |connection: &mut AnyConnection<'_>| -> QueryResult<HashSet<(String, String)>> {
            match connection {
                AnyConnection::Postgres(connection) => {
                    let mark = MarkReceived {
                        received_at,
                        agent_id: receipts.iter().map(|receipt| receipt.agent_id.as_str()).collect(),
                        fire_id: receipts.iter().map(|receipt| receipt.fire_id.as_str()).collect(),
                    };
                    Ok(mark.load::<(String, String)>(&mut **connection)?.into_iter().collect())
                }
                AnyConnection::Sqlite(connection) => {
                    let mut named = HashSet::new();
                    for receipt in receipts {
                        let entry = agent_mailbox::table
                            .filter(agent_mailbox::fire_id.eq(&receipt.fire_id))
                            .filter(agent_mailbox::agent_id.eq(receipt.agent_id.as_str()));
                        let marked = diesel::update(entry.filter(agent_mailbox::received_at.is_null()))
                            .set(agent_mailbox::received_at.eq(received_at))
                            .execute(&mut **connection)?;
                        // Not marked now: received before, or no entry at all.
                        let exists = marked > 0
                            || diesel::select(diesel::dsl::exists(entry)).get_result::<bool>(&mut **connection)?;
                        if exists {
                            named.insert((receipt.agent_id.as_str().to_owned(), receipt.fire_id.clone()));
                        }
                    }
                    Ok(named)
                }
            }
        };
        let named = if self.is_sqlite() {
            self.immediate("mark mailbox entries received", work)?
        } else {
            // One statement, atomic on its own: no BEGIN and COMMIT round trips.
            self.with_connection("mark mailbox entries received", work)?
        };
        Ok(receipts
            .iter()
            .enumerate()
            .filter(|(_, receipt)| !named.contains(&(receipt.agent_id.as_str().to_owned(), receipt.fire_id.clone())))
            .map(|(index, _)| index)
            .collect())
    }

    fn mailbox_head(&self) -> Result<i64, StoreError> {
        self.with_connection("read the mailbox's newest entry", |connection| {
            let head = agent_mailbox::table.select(diesel::dsl::max(agent_mailbox::seq));
            on_backend!(connection, c => head.first::<Option<i64>>(c))
        })
        .map(|head| head.unwrap_or(0))
    }

    fn mailbox_since(&self, after: i64, also: &[i64], limit: usize) -> Result<Vec<MailboxEntry>, StoreError> {
        let rows: Vec<EntryRow> = self.with_connection("read the newest mailbox entries", |connection| {
            // Two statements rather than a boxed one: each stays prepared. Both are ranges of the primary key.
            if also.is_empty() {
                let since = since_query(after, limit_to_db(limit));
                on_backend!(connection, c => since.load(c))
            } else {
                let since = since_or_query(after, also, limit_to_db(limit));
                on_backend!(connection, c => since.load(c))
            }
        })?;
        rows.into_iter().map(MailboxEntry::try_from).collect()
    }

    fn prune_mailbox(&self, fired_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        let cutoff = to_db(fired_before);
        // The first `limit` entries in firing order (a range of the primary key), then those of them fired before the
        // cutoff; the `fired_at` condition is checked again by the delete, which on PostgreSQL may find a row that
        // committed after the read.
        self.immediate("prune the mailbox", |connection| {
            // A job's skipped runs are kept as long as its fires (docs/scheduler.md "Runs"), so they go in the same
            // pass, and the pass goes on until neither has anything old left.
            let skips = crate::runs::prune_skips(connection, cutoff, limit_to_db(limit))?;
            let first = first_entries_query(limit_to_db(limit));
            let first: Vec<(i64, PrimitiveDateTime)> = on_backend!(connection, c => first.load(c))?;
            let old: Vec<i64> = first.iter().filter(|(_, fired_at)| *fired_at < cutoff).map(|(seq, _)| *seq).collect();
            if old.is_empty() {
                return Ok(skips);
            }
            let prune = diesel::delete(
                agent_mailbox::table.filter(agent_mailbox::seq.eq_any(&old)).filter(agent_mailbox::fired_at.lt(cutoff)),
            );
            on_backend!(connection, c => prune.execute(c)).map(|entries| entries + skips)
        })
    }
}

/// The columns of an entry, in the order every query of entries reads them.
#[diesel::dsl::auto_type]
fn entry_columns() -> _ {
    (
        agent_mailbox::seq,
        agent_mailbox::fire_id,
        agent_mailbox::agent_id,
        agent_mailbox::job_id,
        agent_mailbox::payload,
        agent_mailbox::scheduled_for,
        agent_mailbox::fired_at,
        agent_mailbox::received_at,
        agent_mailbox::epoch,
    )
}

/// One agent's entries with `after < seq <= through`, in `seq` order: a range of `agent_mailbox_agent_seq`. Functions
/// of their own, so that the plan test explains these very statements.
#[diesel::dsl::auto_type]
fn entries_query<'a>(agent_id: &'a str, after: i64, through: i64, limit: i64) -> _ {
    agent_mailbox::table
        .filter(agent_mailbox::agent_id.eq(agent_id))
        .filter(agent_mailbox::seq.gt(after))
        .filter(agent_mailbox::seq.le(through))
        .order(agent_mailbox::seq.asc())
        .limit(limit)
        .select(entry_columns())
}

/// [`entries_query`] of the entries nobody received: the same range, `received_at` checked in the index.
#[diesel::dsl::auto_type]
fn unreceived_entries_query<'a>(agent_id: &'a str, after: i64, through: i64, limit: i64) -> _ {
    let entries: entries_query<'a> = entries_query(agent_id, after, through, limit);
    entries.filter(agent_mailbox::received_at.is_null())
}

/// Every agent's entries after `after`, in `seq` order: the end of the primary key.
#[diesel::dsl::auto_type]
fn since_query(after: i64, limit: i64) -> _ {
    agent_mailbox::table
        .filter(agent_mailbox::seq.gt(after))
        .order(agent_mailbox::seq.asc())
        .limit(limit)
        .select(entry_columns())
}

/// [`since_query`] and the entries numbered in `also`.
#[diesel::dsl::auto_type]
fn since_or_query<'a>(after: i64, also: &'a [i64], limit: i64) -> _ {
    agent_mailbox::table
        .filter(agent_mailbox::seq.gt(after).or(agent_mailbox::seq.eq_any(also)))
        .order(agent_mailbox::seq.asc())
        .limit(limit)
        .select(entry_columns())
}

/// The first `limit` entries in firing order: the start of the primary key.
#[diesel::dsl::auto_type]
fn first_entries_query(limit: i64) -> _ {
    agent_mailbox::table
        .order(agent_mailbox::seq.asc())
        .limit(limit)
        .select((agent_mailbox::seq, agent_mailbox::fired_at))
}

// The port's rules run against this adapter in tests/conformance.rs; what only SQL can get wrong is tested here.
#[cfg(test)]
mod tests {
    use gateway_core::{CronJobStore, FencingToken};
    use time::Duration;
    use time::macros::datetime;

    use super::*;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    on_every_backend!(
        a_large_group_records_each_fire_once_in_order,
        rival_marks_of_one_fire_mark_it_once_and_record_nothing
    );

    fn fire(agent: &str, n: i64) -> FiredReminder {
        let scheduled_for = START + Duration::milliseconds(n);
        FiredReminder {
            fire_id: gateway_core::ports::mailbox::fire_id(n, scheduled_for),
            job_id: n,
            agent_id: AgentId::new(agent).unwrap(),
            payload: serde_json::json!({"n": n}).as_object().cloned().unwrap(),
            scheduled_for,
            fired_at: scheduled_for + Duration::microseconds(7),
            // Written by the group statement and read back as it was.
            epoch: n.unsigned_abs() + 3,
        }
    }

    /// A completion's group of a thousand fires, some repeated within it and some recorded by an earlier group:
    /// each recorded once, in the group's order (on PostgreSQL one statement, whose rows must keep their order).
    fn a_large_group_records_each_fire_once_in_order(store: &DieselStore) {
        let fires: Vec<FiredReminder> = (0..1_000).map(|n| fire("agent-7", n)).collect();
        store.complete_fires("a", FencingToken(1), &[], &fires[..10]).unwrap();
        let mut group: Vec<FiredReminder> = fires.clone();
        group.extend(fires[500..510].iter().cloned());
        store.complete_fires("a", FencingToken(1), &[], &group).unwrap();
        let query = MailboxQuery {
            agent_id: AgentId::new("agent-7").unwrap(),
            unreceived_only: true,
            after: 0,
            through: None,
            limit: 5_000,
        };
        let entries = store.mailbox_entries(&query).unwrap();
        assert_eq!(entries.iter().map(|entry| &entry.reminder).collect::<Vec<_>>(), fires.iter().collect::<Vec<_>>());
        assert_eq!(crate::testing::count(store, "agent_mailbox"), 1_000);
    }

    /// A refire recorded while the first recording's transaction is still open waits for it, then records nothing
    /// new and fails nothing (the port's "recorded once", under concurrency). `ON CONFLICT` waits on the first's
    /// speculative insertion; a form that only probed for committed entries would rely on the epoch row's lock
    /// (`fencing::admit`), which every recording takes first (docs/benchmarks.md, s30-c).
    #[test]
    fn a_refire_waits_for_the_recording_before_it_and_records_nothing_on_postgres() {
        let Some(fixture) = crate::testing::postgres(
            "mailbox::tests::a_refire_waits_for_the_recording_before_it_and_records_nothing_on_postgres",
        ) else {
            return;
        };
        let store = &fixture.store;
        // Term 1 is the epoch already, so no recording below raises it: only the epoch row's lock (`FOR UPDATE`)
        // orders them, not the raise's row update.
        store
            .immediate_fenced("term 1 begins", |connection| crate::fencing::admit(connection, FencingToken(1)))
            .unwrap();
        let first = fire("agent-7", 1);
        let refired = FiredReminder { fired_at: first.fired_at + Duration::seconds(10), ..first.clone() };
        let waiting_for_a_lock = || {
            #[derive(QueryableByName)]
            struct Count {
                #[diesel(sql_type = BigInt)]
                n: i64,
            }
            crate::testing::on_postgres(store, |c| {
                diesel::sql_query(
                    "SELECT COUNT(*) AS n FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .get_result::<Count>(c)
            })
            .n
        };
        let (holds, holding) = std::sync::mpsc::channel();
        let rival_done = std::sync::atomic::AtomicBool::new(false);
        let refire = std::thread::scope(|scope| {
            let held = scope.spawn(|| {
                store.immediate_fenced("the first recording", |connection| {
                    crate::fencing::admit(connection, FencingToken(1))?;
                    record_fires(connection, std::slice::from_ref(&first))?;
                    holds.send(()).unwrap();
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                    while !rival_done.load(std::sync::atomic::Ordering::SeqCst) && waiting_for_a_lock() == 0 {
                        assert!(std::time::Instant::now() < deadline, "the refire neither ended nor waited");
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Ok(())
                })
            });
            holding.recv().unwrap();
            let rival = scope.spawn(|| {
                let answer = store.complete_fires("a", FencingToken(1), &[], std::slice::from_ref(&refired));
                rival_done.store(true, std::sync::atomic::Ordering::SeqCst);
                answer
            });
            held.join().unwrap().unwrap();
            rival.join().unwrap()
        });
        assert_eq!(refire, Ok(0), "the refire's completion fails nothing");
        let query = MailboxQuery {
            agent_id: AgentId::new("agent-7").unwrap(),
            unreceived_only: false,
            after: 0,
            through: None,
            limit: 10,
        };
        let entries = store.mailbox_entries(&query).unwrap();
        assert_eq!(
            entries.iter().map(|entry| &entry.reminder).collect::<Vec<_>>(),
            [&first],
            "recorded once, as first"
        );
    }

    /// Streams on separate connections marking the same fires at once, each in its own order, while completions
    /// record more: each recorded fire received once, no writer deadlocks with another (on PostgreSQL every mark
    /// locks its entries in `seq` order), and the fires recorded by nobody are answered as unknown, not recorded.
    fn rival_marks_of_one_fire_mark_it_once_and_record_nothing(store: &DieselStore) {
        let fires: Vec<FiredReminder> = (0..60).map(|n| fire("agent-7", n)).collect();
        store.complete_fires("scheduler", FencingToken(1), &[], &fires[..50]).unwrap();
        let barrier = std::sync::Barrier::new(6);
        std::thread::scope(|scope| {
            for rival in 0..6 {
                let (barrier, fires) = (&barrier, &fires);
                scope.spawn(move || {
                    let mut mine: Vec<Receipt> = fires[..50]
                        .iter()
                        .map(|fire| Receipt { agent_id: fire.agent_id.clone(), fire_id: fire.fire_id.clone() })
                        .collect();
                    mine.rotate_left(rival * 10);
                    if rival % 2 == 0 {
                        mine.reverse();
                    }
                    barrier.wait();
                    if rival == 0 {
                        store.complete_fires("scheduler", FencingToken(1), &[], &fires[50..55]).unwrap();
                    }
                    let unknown = store.mark_received(&mine, START + Duration::seconds(1)).unwrap();
                    assert!(unknown.is_empty(), "{unknown:?}");
                });
            }
        });
        let never: Vec<Receipt> = fires[55..]
            .iter()
            .map(|fire| Receipt { agent_id: fire.agent_id.clone(), fire_id: fire.fire_id.clone() })
            .collect();
        assert_eq!(store.mark_received(&never, START).unwrap(), [0, 1, 2, 3, 4]);
        assert_eq!(crate::testing::count(store, "agent_mailbox"), 55);
        let query = MailboxQuery {
            agent_id: AgentId::new("agent-7").unwrap(),
            unreceived_only: true,
            after: 0,
            through: None,
            limit: 100,
        };
        let unreceived = store.mailbox_entries(&query).unwrap();
        assert_eq!(unreceived.iter().map(|entry| entry.reminder.job_id).collect::<Vec<_>>(), [50, 51, 52, 53, 54]);
    }

    /// The reads walk the agent's index in `seq` order: neither a table scan nor a sort; pruning reads the start
    /// of the primary key, in order.
    #[test]
    fn the_mailbox_queries_use_their_indexes_on_sqlite() {
        fn plan<Q>(store: &DieselStore, query: Q) -> Vec<String>
        where
            Q: QueryFragment<Sqlite> + diesel::query_builder::QueryId,
        {
            store.with_sqlite("explain", |connection| crate::explain::query_plan(connection, query)).unwrap().unwrap()
        }
        let fixture = crate::testing::sqlite();
        let unreceived = plan(&fixture.store, unreceived_entries_query("agent-7", 0, i64::MAX, 10));
        assert!(unreceived.iter().any(|line| line.contains("INDEX agent_mailbox_agent_seq")), "{unreceived:?}");
        let every = plan(&fixture.store, entries_query("agent-7", 0, i64::MAX, 10));
        assert!(every.iter().any(|line| line.contains("INDEX agent_mailbox_agent_seq")), "{every:?}");
        let first = plan(&fixture.store, first_entries_query(10));
        assert!(first.iter().any(|line| line.starts_with("SCAN agent_mailbox")), "the primary key in order: {first:?}");
        assert!(!first.iter().any(|line| line.contains("TEMP B-TREE")), "the query sorts: {first:?}");
        for lines in [&unreceived, &every] {
            assert!(!lines.iter().any(|line| line.contains("TEMP B-TREE")), "the query sorts: {lines:?}");
            assert!(!lines.iter().any(|line| line.starts_with("SCAN")), "the query scans the table: {lines:?}");
        }
    }

    /// PostgreSQL's plans of the same statements on a table of 50,000 entries of 100 agents it has statistics for:
    /// the agent's range of `agent_mailbox_agent_seq`, `received_at` checked in the index, never a sequential scan.
    /// (For the few hundred rows of one agent here it may well fetch them as a bitmap and sort them, which is cheaper
    /// than walking the index in order; the plan is about finding them without reading the others.)
    #[test]
    fn the_mailbox_reads_walk_the_agents_index_on_postgres() {
        let Some(fixture) =
            crate::testing::postgres("mailbox::tests::the_mailbox_reads_walk_the_agents_index_on_postgres")
        else {
            return;
        };
        let plans = fixture
            .store
            .with_connection("explain", |connection| {
                let AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
                crate::explain::fill_agent_mailbox(c, 50_000)?;
                let unreceived =
                    crate::explain::postgres_plan(c, unreceived_entries_query("agent-7", 0, i64::MAX, 1_000))?;
                let every = crate::explain::postgres_plan(c, entries_query("agent-7", 100, i64::MAX, 1_000))?;
                Ok([unreceived.join("\n"), every.join("\n")])
            })
            .unwrap();
        for plan in &plans {
            assert!(
                plan.contains("Index Scan on agent_mailbox_agent_seq")
                    || plan.contains("Index Scan using agent_mailbox_agent_seq"),
                "{plan}"
            );
            assert!(!plan.contains("Seq Scan"), "the query scans the table: {plan}");
        }
        let index_condition = plans[0].lines().find(|line| line.contains("Index Cond")).unwrap_or_default();
        assert!(index_condition.contains("received_at IS NULL"), "checked in the index: {}", plans[0]);
    }
}
