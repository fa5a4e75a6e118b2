//! `HeartbeatStore` over `gateway_heartbeats`.

use std::marker::PhantomData;

use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Text, Timestamp};
use diesel::sqlite::{Sqlite, SqliteConnection};
use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore, StoreError};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::batch::push_sql_with_binds;
use crate::connection::{AnyConnection, DieselStore};
use crate::liveness::receipt_minute;
use crate::schema::gateway_heartbeats;
use crate::timestamp::{from_db, push_sqlite_text, to_db};

/// Rows per SQLite upsert statement: 3 or 6 parameters each, far below SQLite's 32,766.
const MAX_ROWS_PER_UPSERT: usize = 500;

#[derive(Queryable)]
#[diesel(table_name = gateway_heartbeats)]
struct HeartbeatRow {
    agent_id: String,
    cluster_id: String,
    last_seen_at: PrimitiveDateTime,
}

impl HeartbeatStore for DieselStore {
    fn upsert_heartbeats(&self, records: &[HeartbeatRecord]) -> Result<(), StoreError> {
        let rows = latest_rows(records);
        if rows.is_empty() {
            return Ok(());
        }
        let work = |connection: &mut AnyConnection<'_>| match connection {
            AnyConnection::Sqlite(c) => write_rows_sqlite(c, &HEARTBEAT_ROWS, &rows),
            AnyConnection::Postgres(c) => {
                UnnestAgentRows::<HeartbeatRows>::new(vec![Columns::of(&rows)]).execute(&mut **c).map(drop)
            }
        };
        if self.is_sqlite() {
            return self.immediate("upsert heartbeats", work);
        }
        // One statement, atomic and durable on its own: no BEGIN and COMMIT round trips around it.
        self.with_connection("upsert heartbeats", work)
    }

    fn heartbeat(&self, agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError> {
        let row = self.with_connection("read heartbeat", |connection| {
            on_backend!(connection, c => {
                gateway_heartbeats::table
                    .find(agent_id.as_str())
                    .select((gateway_heartbeats::agent_id, gateway_heartbeats::cluster_id, gateway_heartbeats::last_seen_at))
                    .first::<HeartbeatRow>(c)
                    .optional()
            })
        })?;
        row.map(|row| {
            Ok(HeartbeatRecord {
                agent_id: AgentId::new(row.agent_id)
                    .map_err(|error| StoreError::Internal(format!("stored agent_id invalid: {error}")))?,
                cluster_id: ClusterId::new(row.cluster_id)
                    .map_err(|error| StoreError::Internal(format!("stored cluster_id invalid: {error}")))?,
                last_seen_at: from_db(row.last_seen_at),
            })
        })
        .transpose()
    }
}

/// The rows a group of heartbeats writes, one per agent, in agent id order.
pub(crate) fn latest_rows(records: &[HeartbeatRecord]) -> Vec<AgentRow<'_>> {
    // In agent id order: two PostgreSQL transactions that upsert overlapping agents lock their rows in the same
    // order, so they queue instead of deadlocking. The sort is stable, so an agent's records stay in the order
    // sent and the last of each run is its latest: only it is written (one row per agent per statement is also
    // what PostgreSQL requires of a multi-row upsert). No hash map: hashing every id cost more than the sort.
    let mut rows: Vec<&HeartbeatRecord> = records.iter().collect();
    rows.sort_by(|a, b| a.agent_id.as_str().cmp(b.agent_id.as_str()));
    let mut latest: Vec<AgentRow<'_>> = Vec::with_capacity(rows.len());
    for record in rows {
        let row = (record.agent_id.as_str(), record.cluster_id.as_str(), record.last_seen_at);
        match latest.last_mut() {
            Some(last) if last.0 == row.0 => *last = row,
            _ => latest.push(row),
        }
    }
    latest
}

/// The heartbeat rows alone, on SQLite.
pub(crate) const HEARTBEAT_ROWS: SqliteRows = SqliteRows {
    insert: "INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at)",
    on_conflict: "ON CONFLICT (agent_id) DO UPDATE SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at",
    with_receipts: false,
};

/// A row of an agent table: agent id, cluster id, an instant.
pub(crate) type AgentRow<'a> = (&'a str, &'a str, OffsetDateTime);

/// The text of a SQLite multi-row upsert of [`AgentRow`]s ([`ValuesAgentRows`]): `insert` (`INSERT INTO table
/// (columns)`), the rows' values, then `on_conflict`. Each row binds its three values, and with `with_receipts`
/// its instant and cluster id again and the instant's minute, as the receipt's three columns that follow
/// (`received_at, received_cluster_id, received_minute`; [`receipt_minute`], as on PostgreSQL).
pub(crate) struct SqliteRows {
    pub(crate) insert: &'static str,
    pub(crate) on_conflict: &'static str,
    pub(crate) with_receipts: bool,
}

/// Writes `rows` with `sql`, in statements of up to [`MAX_ROWS_PER_UPSERT`] rows, in the caller's transaction.
/// Multi-row statements: compiling one statement per row was 13 % of the gateway's CPU under heartbeat load.
pub(crate) fn write_rows_sqlite(
    connection: &mut SqliteConnection,
    sql: &SqliteRows,
    rows: &[AgentRow<'_>],
) -> QueryResult<()> {
    for chunk in rows.chunks(MAX_ROWS_PER_UPSERT) {
        ValuesAgentRows::new(sql, chunk).execute(connection)?;
    }
    Ok(())
}

/// Groups of up to this many rows keep their statement compiled (one per size, per connection); a larger group's
/// is compiled for it and dropped. Under load a heartbeat group is about as large as the connections sending
/// heartbeats (32–64 in the benchmarks); a few statements of this size per connection are small.
const MAX_CACHED_ROWS: usize = 64;

/// SQLite's statement for a group of [`AgentRow`]s: one `(?, ?, ?)` per row (six with [`SqliteRows::with_receipts`]),
/// kept in Diesel's statement cache
/// (keyed by the text: no static query id), so a group of a size seen before is not compiled again; compiling it
/// for every group was about 3,800 instructions per heartbeat (docs/benchmarks.md). Each instant is bound as the
/// text Diesel would bind for it, formatted by hand ([`push_sqlite_text`]), so the stored values are the same.
/// Measured against one fixed text reading the rows as a JSON parameter with `json_each`: SQLite's JSON functions
/// cost more per row than binding three parameters.
struct ValuesAgentRows<'a> {
    sql: &'a SqliteRows,
    rows: &'a [AgentRow<'a>],
    /// Every row's instant, as text, one after the other: 19 bytes, or 21–26 with a fraction.
    instants: String,
    /// Where each row's instant ends in `instants`.
    ends: Vec<usize>,
    /// Each row's [`receipt_minute`] of the stored instant, with [`SqliteRows::with_receipts`]; empty otherwise.
    minutes: Vec<i64>,
}

impl<'a> ValuesAgentRows<'a> {
    fn new(sql: &'a SqliteRows, rows: &'a [AgentRow<'a>]) -> Self {
        let mut instants = String::with_capacity(rows.len() * 26);
        let mut minutes = Vec::with_capacity(if sql.with_receipts { rows.len() } else { 0 });
        let ends = rows
            .iter()
            .map(|(_, _, at)| {
                let stored = to_db(*at);
                push_sqlite_text(stored, &mut instants);
                if sql.with_receipts {
                    minutes.push(receipt_minute(stored.assume_utc()));
                }
                instants.len()
            })
            .collect();
        Self { sql, rows, instants, ends, minutes }
    }
}

impl QueryFragment<Sqlite> for ValuesAgentRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        if self.rows.len() > MAX_CACHED_ROWS {
            out.unsafe_to_cache_prepared();
        }
        out.push_sql(self.sql.insert);
        out.push_sql(" VALUES ");
        let mut start = 0;
        for (n, ((agent_id, cluster_id, _), end)) in self.rows.iter().zip(&self.ends).enumerate() {
            let at = self.instants.get(start..*end).unwrap_or_default();
            out.push_sql(if n == 0 { "(" } else { ", (" });
            out.push_bind_param::<Text, _>(*agent_id)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(*cluster_id)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(at)?;
            if self.sql.with_receipts {
                out.push_sql(", ");
                out.push_bind_param::<Text, _>(at)?;
                out.push_sql(", ");
                out.push_bind_param::<Text, _>(*cluster_id)?;
                out.push_sql(", ");
                out.push_bind_param::<BigInt, _>(self.minutes.get(n).unwrap_or(&0))?;
            }
            out.push_sql(")");
            start = *end;
        }
        out.push_sql(" ");
        out.push_sql(self.sql.on_conflict);
        Ok(())
    }
}

impl QueryId for ValuesAgentRows<'_> {
    type QueryId = ();
    // Not static: Diesel then keys its statement cache by the text, one entry per group size.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl RunQueryDsl<SqliteConnection> for ValuesAgentRows<'_> {}

/// PostgreSQL's statement for groups of [`AgentRow`]s: each column of a group is one array parameter, `unnest`ed,
/// so the text is the same for any group size and the statement is prepared once per connection (a text that
/// changes with the row count is parsed and planned by the server at every group: about half its CPU per
/// heartbeat group, measured with benches/ingest_table.rs). `K` gives the text; each kind is its own prepared
/// statement.
pub(crate) struct UnnestAgentRows<'a, K> {
    /// One set of columns per `unnest($, $, $)` of the text, in order.
    sets: Vec<Columns<'a>>,
    kind: PhantomData<K>,
}

/// The text of an [`UnnestAgentRows`]: `$` for each parameter, three per set of rows (agent ids, cluster ids,
/// instants) or four for a set listed in [`Self::WITH_MINUTES`] (then the instants' minutes, [`receipt_minute`]),
/// each set inserted in the order sent (`WITH ORDINALITY … ORDER BY`): the rows are sorted by agent id, and every
/// writer of them locks them in that order.
pub(crate) trait AgentRowsSql: 'static {
    const SQL: &'static str;
    /// Whether each set, in order, binds a fourth array, the minutes (a set past the list binds three).
    const WITH_MINUTES: &'static [bool] = &[];
}

/// The heartbeat rows alone.
pub(crate) struct HeartbeatRows;

impl AgentRowsSql for HeartbeatRows {
    const SQL: &'static str = "INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at) \
         SELECT agent_id, cluster_id, at FROM unnest($, $, $) WITH ORDINALITY AS sent (agent_id, cluster_id, at, n) \
         ORDER BY n \
         ON CONFLICT (agent_id) DO UPDATE SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at";
}

/// A group's columns.
pub(crate) struct Columns<'a> {
    agent_id: Vec<&'a str>,
    cluster_id: Vec<&'a str>,
    at: Vec<PrimitiveDateTime>,
    /// Each instant's minute, for a set whose statement writes it ([`Self::with_minutes`]); empty otherwise.
    minute: Vec<i64>,
}

impl<'a> Columns<'a> {
    pub(crate) fn of(rows: &[AgentRow<'a>]) -> Self {
        Self {
            agent_id: rows.iter().map(|row| row.0).collect(),
            cluster_id: rows.iter().map(|row| row.1).collect(),
            at: rows.iter().map(|row| to_db(row.2)).collect(),
            minute: Vec::new(),
        }
    }

    /// [`Self::of`] with each stored instant's [`receipt_minute`].
    pub(crate) fn with_minutes(rows: &[AgentRow<'a>]) -> Self {
        let mut columns = Self::of(rows);
        columns.minute = columns.at.iter().map(|at| receipt_minute(at.assume_utc())).collect();
        columns
    }
}

impl<'a, K: AgentRowsSql> UnnestAgentRows<'a, K> {
    pub(crate) fn new(sets: Vec<Columns<'a>>) -> Self {
        Self { sets, kind: PhantomData }
    }
}

impl<K: AgentRowsSql> QueryFragment<Pg> for UnnestAgentRows<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        // Each parameter's set and column, in the text's order.
        let layout: Vec<(&'b Columns<'_>, usize)> = self
            .sets
            .iter()
            .enumerate()
            .flat_map(|(n, set)| {
                let columns = if K::WITH_MINUTES.get(n).copied().unwrap_or(false) { 4 } else { 3 };
                (0..columns).map(move |column| (set, column))
            })
            .collect();
        push_sql_with_binds(&mut out, K::SQL, |index, out| {
            let (set, column) = layout.get(index).copied().ok_or_else(|| {
                diesel::result::Error::QueryBuilderError("more parameters than sets of agent rows".into())
            })?;
            match column {
                0 => out.push_bind_param::<Array<Text>, _>(&set.agent_id),
                1 => out.push_bind_param::<Array<Text>, _>(&set.cluster_id),
                2 => out.push_bind_param::<Array<Timestamp>, _>(&set.at),
                _ => out.push_bind_param::<Array<BigInt>, _>(&set.minute),
            }
        })
    }
}

impl<K: AgentRowsSql> QueryId for UnnestAgentRows<'_, K> {
    type QueryId = UnnestAgentRows<'static, K>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<K: AgentRowsSql> RunQueryDsl<PgConnection> for UnnestAgentRows<'_, K> {}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00.5 UTC);

    fn record(agent_id: &str, cluster_id: &str, at: OffsetDateTime) -> HeartbeatRecord {
        HeartbeatRecord {
            agent_id: AgentId::new(agent_id).unwrap(),
            cluster_id: ClusterId::new(cluster_id).unwrap(),
            last_seen_at: at,
        }
    }

    // Ids with quotes, backslashes and non-ASCII read back as sent; groups of several sizes, one of them again
    // (its statement then comes from the cache), past the cached sizes and past one statement's rows.
    on_every_backend!(odd_ids_and_every_group_size_read_back_as_written);

    fn odd_ids_and_every_group_size_read_back_as_written(store: &DieselStore) {
        let odd = ["quote\"d", "back\\slash", "ünïcødé-代理", "sp ace", "{\"json\":[1]}", "\\u0041"];
        let records: Vec<_> = odd
            .iter()
            .enumerate()
            .map(|(n, id)| record(id, odd[odd.len() - 1 - n], START + time::Duration::microseconds(n as i64 * 10)))
            .collect();
        store.upsert_heartbeats(&records).unwrap();
        for expected in &records {
            assert_eq!(store.heartbeat(&expected.agent_id).unwrap().as_ref(), Some(expected));
        }
        for size in [1, 2, 31, 2, MAX_CACHED_ROWS + 1, MAX_ROWS_PER_UPSERT + 1] {
            let at = START + time::Duration::seconds(size as i64) + time::Duration::nanoseconds(1_234_567);
            let group: Vec<_> = (0..size).map(|n| record(&format!("agent-{n}"), "c", at)).collect();
            store.upsert_heartbeats(&group).unwrap();
            for n in [0, size - 1] {
                let stored = store.heartbeat(&group[n].agent_id).unwrap().unwrap();
                assert_eq!(stored.last_seen_at, crate::timestamp::normalize(at), "group of {size}");
            }
        }
    }

    /// The instant's text in the row is the one Diesel binds for a `Timestamp`: SQLite compares these as text
    /// (`WHERE last_seen_at < ?`), so a different spelling of the same instant would order differently.
    #[test]
    fn sqlite_rows_hold_diesels_text_for_the_instant() {
        let fixture = crate::testing::sqlite();
        let store = &fixture.store;
        for at in [START, datetime!(2026-02-22 12:00:00 UTC), datetime!(2026-02-22 12:00:00.100200 UTC)] {
            store.upsert_heartbeats(&[record("agent-1", "c", at)]).unwrap();
            let (stored, expected) = store
                .with_connection("read", |connection| match connection {
                    AnyConnection::Sqlite(c) => diesel::select((
                        diesel::dsl::sql::<Text>("(SELECT last_seen_at FROM gateway_heartbeats)"),
                        diesel::dsl::sql::<Text>("").bind::<Timestamp, _>(to_db(at)),
                    ))
                    .get_result::<(String, String)>(&mut **c),
                    AnyConnection::Postgres(_) => unreachable!("a SQLite store"),
                })
                .unwrap();
            assert_eq!(stored, expected);
        }
    }
}
