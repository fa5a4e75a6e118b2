//! `HeartbeatStore` over `gateway_heartbeats`.

use std::collections::HashMap;
use std::marker::PhantomData;

use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{Array, Text, Timestamp};
use diesel::sqlite::Sqlite;
use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore, StoreError};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::batch::push_sql_with_binds;
use crate::connection::{AnyConnection, DieselStore};
use crate::schema::gateway_heartbeats;
use crate::timestamp::{from_db, to_db};

/// Rows per upsert statement: 3 parameters each, far below SQLite's 32,766 (and PostgreSQL's 65,535).
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
        if self.is_sqlite() {
            return self.immediate("upsert heartbeats", |connection| write_heartbeats(connection, records));
        }
        // One statement, atomic and durable on its own: no BEGIN and COMMIT round trips around it.
        let rows = latest_rows(records);
        self.with_connection("upsert heartbeats", |connection| match connection {
            AnyConnection::Postgres(c) if !rows.is_empty() => {
                UnnestAgentRows::<HeartbeatRows>::new(vec![Columns::of(&rows)]).execute(&mut **c).map(drop)
            }
            _ => write_heartbeats(connection, records),
        })
    }

    fn heartbeat(&self, agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError> {
        let row = self.with_connection("read heartbeat", |connection| {
            on_backend!(connection, c => {
                gateway_heartbeats::table.find(agent_id.as_str()).first::<HeartbeatRow>(c).optional()
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

/// Upserts `records` inside the caller's transaction (the shared liveness map writes its receipts in the same one).
pub(crate) fn write_heartbeats(connection: &mut AnyConnection<'_>, records: &[HeartbeatRecord]) -> QueryResult<()> {
    let rows = latest_rows(records);
    upsert_agent_rows(connection, &HEARTBEAT_UPSERT, &rows)
}

/// The rows a group of heartbeats writes, one per agent, in agent id order.
pub(crate) fn latest_rows(records: &[HeartbeatRecord]) -> Vec<AgentRow<'_>> {
    // The last record of an agent wins, so only it is written: one row per agent per statement is also what
    // PostgreSQL requires of a multi-row upsert.
    let mut latest: HashMap<&str, &HeartbeatRecord> = HashMap::with_capacity(records.len());
    for record in records {
        latest.insert(record.agent_id.as_str(), record);
    }
    let mut rows: Vec<&HeartbeatRecord> = latest.into_values().collect();
    // In one order, whatever the hash map's: two PostgreSQL transactions that upsert overlapping agents lock
    // their rows in the same order, so they queue instead of deadlocking.
    rows.sort_unstable_by(|a, b| a.agent_id.as_str().cmp(b.agent_id.as_str()));
    rows.iter().map(|record| (record.agent_id.as_str(), record.cluster_id.as_str(), record.last_seen_at)).collect()
}

const HEARTBEAT_UPSERT: AgentRowsUpsert = AgentRowsUpsert {
    insert: "INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at)",
    on_conflict: "ON CONFLICT (agent_id) DO UPDATE SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at",
};

/// A row of an agent table: agent id, cluster id, an instant.
pub(crate) type AgentRow<'a> = (&'a str, &'a str, OffsetDateTime);

/// A multi-row upsert of [`AgentRow`]s: `insert` (`INSERT INTO table (three columns)`), the rows' values, then
/// `on_conflict`.
pub(crate) struct AgentRowsUpsert {
    pub(crate) insert: &'static str,
    pub(crate) on_conflict: &'static str,
}

/// Runs `upsert` over `rows`, in statements of up to [`MAX_ROWS_PER_UPSERT`] rows, in the caller's transaction.
///
/// Multi-row statements: SQLite compiles each statement Diesel sends (neither the query-builder upsert nor
/// `sql_query` is kept in the statement cache), and compiling one per row was 13 % of the gateway's CPU under
/// heartbeat load.
pub(crate) fn upsert_agent_rows(
    connection: &mut AnyConnection<'_>,
    upsert: &AgentRowsUpsert,
    rows: &[AgentRow<'_>],
) -> QueryResult<()> {
    for chunk in rows.chunks(MAX_ROWS_PER_UPSERT) {
        match connection {
            AnyConnection::Sqlite(connection) => {
                bind_rows(diesel::sql_query(upsert.sql(chunk.len(), |_| "?".to_owned())).into_boxed::<Sqlite>(), chunk)
                    .execute(&mut **connection)?
            }
            AnyConnection::Postgres(connection) => {
                bind_rows(diesel::sql_query(upsert.sql(chunk.len(), |n| format!("${n}"))).into_boxed::<Pg>(), chunk)
                    .execute(&mut **connection)?
            }
        };
    }
    Ok(())
}

impl AgentRowsUpsert {
    /// The statement for `rows` rows, with `placeholder(n)` for the n-th parameter (from 1): `?` on SQLite, `$n` on
    /// PostgreSQL.
    fn sql(&self, rows: usize, placeholder: impl Fn(usize) -> String) -> String {
        let values: Vec<String> = (0..rows)
            .map(|row| {
                format!("({}, {}, {})", placeholder(3 * row + 1), placeholder(3 * row + 2), placeholder(3 * row + 3))
            })
            .collect();
        format!("{} VALUES {} {}", self.insert, values.join(", "), self.on_conflict)
    }
}

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
/// instants), each set inserted in the order sent (`WITH ORDINALITY … ORDER BY`): the rows are sorted by agent id,
/// and every writer of them locks them in that order.
pub(crate) trait AgentRowsSql: 'static {
    const SQL: &'static str;
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
}

impl<'a> Columns<'a> {
    pub(crate) fn of(rows: &[AgentRow<'a>]) -> Self {
        Self {
            agent_id: rows.iter().map(|row| row.0).collect(),
            cluster_id: rows.iter().map(|row| row.1).collect(),
            at: rows.iter().map(|row| to_db(row.2)).collect(),
        }
    }
}

impl<'a, K: AgentRowsSql> UnnestAgentRows<'a, K> {
    pub(crate) fn new(sets: Vec<Columns<'a>>) -> Self {
        Self { sets, kind: PhantomData }
    }
}

impl<K: AgentRowsSql> QueryFragment<Pg> for UnnestAgentRows<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        push_sql_with_binds(&mut out, K::SQL, |index, out| {
            let set = self.sets.get(index / 3).ok_or_else(|| {
                diesel::result::Error::QueryBuilderError("more parameters than sets of agent rows".into())
            })?;
            match index % 3 {
                0 => out.push_bind_param::<Array<Text>, _>(&set.agent_id),
                1 => out.push_bind_param::<Array<Text>, _>(&set.cluster_id),
                _ => out.push_bind_param::<Array<Timestamp>, _>(&set.at),
            }
        })
    }
}

impl<K: AgentRowsSql> QueryId for UnnestAgentRows<'_, K> {
    type QueryId = UnnestAgentRows<'static, K>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<K: AgentRowsSql> RunQueryDsl<PgConnection> for UnnestAgentRows<'_, K> {}

/// Binds the chunk's rows in the statement's parameter order.
fn bind_rows<'a, DB>(
    mut upsert: diesel::query_builder::BoxedSqlQuery<'a, DB, diesel::query_builder::SqlQuery>,
    chunk: &[AgentRow<'a>],
) -> diesel::query_builder::BoxedSqlQuery<'a, DB, diesel::query_builder::SqlQuery>
where
    DB: diesel::backend::Backend + diesel::sql_types::HasSqlType<Text> + diesel::sql_types::HasSqlType<Timestamp>,
    &'a str: diesel::serialize::ToSql<Text, DB>,
    PrimitiveDateTime: diesel::serialize::ToSql<Timestamp, DB>,
{
    for (agent_id, cluster_id, at) in chunk {
        upsert = upsert.bind::<Text, _>(*agent_id).bind::<Text, _>(*cluster_id).bind::<Timestamp, _>(to_db(*at));
    }
    upsert
}
