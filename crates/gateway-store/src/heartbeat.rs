//! `HeartbeatStore` over `gateway_heartbeats`.

use diesel::prelude::*;
use diesel::upsert::excluded;
use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore, StoreError};
use time::PrimitiveDateTime;

use crate::connection::DieselStore;
use crate::schema::gateway_heartbeats;
use crate::timestamp::{from_db, to_db};

#[derive(Queryable, Insertable)]
#[diesel(table_name = gateway_heartbeats)]
struct HeartbeatRow {
    agent_id: String,
    cluster_id: String,
    last_seen_at: PrimitiveDateTime,
}

impl HeartbeatStore for DieselStore {
    fn upsert_heartbeats(&self, records: &[HeartbeatRecord]) -> Result<(), StoreError> {
        let rows: Vec<HeartbeatRow> = records
            .iter()
            .map(|record| HeartbeatRow {
                agent_id: record.agent_id.as_str().to_owned(),
                cluster_id: record.cluster_id.as_str().to_owned(),
                last_seen_at: to_db(record.last_seen_at),
            })
            .collect();
        // One statement per row rather than one multi-row INSERT: PostgreSQL refuses an upsert that touches
        // the same row twice, and two heartbeats of one agent can share a group commit.
        self.immediate("upsert heartbeats", |connection| {
            for row in &rows {
                diesel::insert_into(gateway_heartbeats::table)
                    .values(row)
                    .on_conflict(gateway_heartbeats::agent_id)
                    .do_update()
                    .set((
                        gateway_heartbeats::cluster_id.eq(excluded(gateway_heartbeats::cluster_id)),
                        gateway_heartbeats::last_seen_at.eq(excluded(gateway_heartbeats::last_seen_at)),
                    ))
                    .execute(connection)?;
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

#[cfg(test)]
mod tests {
    use time::Duration;
    use time::macros::datetime;

    use super::*;
    use crate::DatabaseUrl;

    #[test]
    fn the_last_heartbeat_wins_and_one_row_per_agent_remains() {
        let dir = tempfile::tempdir().unwrap();
        let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
        let agent_id = AgentId::new("agent-42").unwrap();
        let start = datetime!(2026-02-22 12:00:00 UTC);
        for second in 0..100 {
            store
                .upsert_heartbeat(&HeartbeatRecord {
                    agent_id: agent_id.clone(),
                    cluster_id: ClusterId::new(format!("cluster-{}", second % 3)).unwrap(),
                    last_seen_at: start + Duration::seconds(second),
                })
                .unwrap();
        }
        let stored = store.heartbeat(&agent_id).unwrap().unwrap();
        assert_eq!(stored.last_seen_at, start + Duration::seconds(99));
        // In one call, records apply in order: the last of an agent wins.
        let batch: Vec<_> = [120, 110]
            .iter()
            .map(|second| HeartbeatRecord {
                agent_id: agent_id.clone(),
                cluster_id: ClusterId::new("c").unwrap(),
                last_seen_at: start + Duration::seconds(*second),
            })
            .collect();
        store.upsert_heartbeats(&batch).unwrap();
        assert_eq!(store.heartbeat(&agent_id).unwrap().unwrap().last_seen_at, start + Duration::seconds(110));
        assert_eq!(stored.cluster_id.as_str(), "cluster-0");
        let rows: i64 = store
            .with_connection("count", |connection| gateway_heartbeats::table.count().get_result(connection))
            .unwrap();
        assert_eq!(rows, 1);
        assert_eq!(store.heartbeat(&AgentId::new("nobody").unwrap()).unwrap(), None);
    }
}
