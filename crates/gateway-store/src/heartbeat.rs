//! `HeartbeatStore` over `gateway_heartbeats`.

use std::collections::HashMap;

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::sql_types::{Text, Timestamp};
use diesel::sqlite::Sqlite;
use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore, StoreError};
use time::PrimitiveDateTime;

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
        self.immediate("upsert heartbeats", |connection| write_heartbeats(connection, records))
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
    // Multi-row statements: SQLite compiles each statement Diesel sends (neither the query-builder upsert nor
    // `sql_query` is kept in the statement cache), and compiling one per row was 13 % of the gateway's CPU
    // under heartbeat load.
    for chunk in rows.chunks(MAX_ROWS_PER_UPSERT) {
        match connection {
            AnyConnection::Sqlite(connection) => {
                bind_rows(diesel::sql_query(upsert_sql(chunk.len(), |_| "?".to_owned())).into_boxed::<Sqlite>(), chunk)
                    .execute(&mut **connection)?
            }
            AnyConnection::Postgres(connection) => {
                bind_rows(diesel::sql_query(upsert_sql(chunk.len(), |n| format!("${n}"))).into_boxed::<Pg>(), chunk)
                    .execute(&mut **connection)?
            }
        };
    }
    Ok(())
}

/// The upsert of `rows` rows, with `placeholder(n)` for the n-th parameter (from 1): `?` on SQLite, `$n` on
/// PostgreSQL.
fn upsert_sql(rows: usize, placeholder: impl Fn(usize) -> String) -> String {
    let values: Vec<String> = (0..rows)
        .map(|row| {
            format!("({}, {}, {})", placeholder(3 * row + 1), placeholder(3 * row + 2), placeholder(3 * row + 3))
        })
        .collect();
    format!(
        "INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at) VALUES {} \
         ON CONFLICT (agent_id) DO UPDATE \
         SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at",
        values.join(", ")
    )
}

/// Binds the chunk's rows to the statement of [`upsert_sql`], in its parameter order.
fn bind_rows<'a, DB>(
    mut upsert: diesel::query_builder::BoxedSqlQuery<'a, DB, diesel::query_builder::SqlQuery>,
    chunk: &[&'a HeartbeatRecord],
) -> diesel::query_builder::BoxedSqlQuery<'a, DB, diesel::query_builder::SqlQuery>
where
    DB: diesel::backend::Backend + diesel::sql_types::HasSqlType<Text> + diesel::sql_types::HasSqlType<Timestamp>,
    &'a str: diesel::serialize::ToSql<Text, DB>,
    PrimitiveDateTime: diesel::serialize::ToSql<Timestamp, DB>,
{
    for record in chunk {
        upsert = upsert
            .bind::<Text, _>(record.agent_id.as_str())
            .bind::<Text, _>(record.cluster_id.as_str())
            .bind::<Timestamp, _>(to_db(record.last_seen_at));
    }
    upsert
}
