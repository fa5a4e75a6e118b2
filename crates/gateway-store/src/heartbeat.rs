//! `HeartbeatStore` over `gateway_heartbeats`.

use std::collections::HashMap;

use diesel::prelude::*;
use diesel::sql_types::{Text, Timestamp};
use diesel::sqlite::Sqlite;
use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore, StoreError};
use time::PrimitiveDateTime;

use crate::connection::DieselStore;
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
        // The last record of an agent wins, so only it is written: one row per agent per statement is also what
        // PostgreSQL requires of a multi-row upsert.
        let mut latest: HashMap<&str, &HeartbeatRecord> = HashMap::with_capacity(records.len());
        for record in records {
            latest.insert(record.agent_id.as_str(), record);
        }
        let rows: Vec<&HeartbeatRecord> = latest.into_values().collect();
        // Multi-row statements: SQLite compiles each statement Diesel sends (neither the query-builder upsert nor
        // `sql_query` is kept in the statement cache), and compiling one per row was 13 % of the gateway's CPU
        // under heartbeat load.
        self.immediate("upsert heartbeats", |connection| {
            for chunk in rows.chunks(MAX_ROWS_PER_UPSERT) {
                let values = vec!["(?, ?, ?)"; chunk.len()].join(", ");
                let mut upsert = diesel::sql_query(format!(
                    "INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at) VALUES {values} \
                     ON CONFLICT (agent_id) DO UPDATE \
                     SET cluster_id = excluded.cluster_id, last_seen_at = excluded.last_seen_at"
                ))
                .into_boxed::<Sqlite>();
                for record in chunk {
                    upsert = upsert
                        .bind::<Text, _>(record.agent_id.as_str())
                        .bind::<Text, _>(record.cluster_id.as_str())
                        .bind::<Timestamp, _>(to_db(record.last_seen_at));
                }
                upsert.execute(connection)?;
            }
            Ok(())
        })
    }

    fn heartbeat(&self, agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError> {
        let row = self.with_connection("read heartbeat", |connection| {
            gateway_heartbeats::table.find(agent_id.as_str()).first::<HeartbeatRow>(connection).optional()
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
