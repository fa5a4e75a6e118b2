//! `ToolCallStore` over `tool_calls` (migration `tool_calls`).
//!
//! Recording is `INSERT … ON CONFLICT (agent_id, tool_call_id) DO NOTHING RETURNING …`, then, when nothing was
//! inserted, a read of the holder, both in one transaction that reads then writes (SQLite: IMMEDIATE). On
//! PostgreSQL an insert whose key a concurrent, uncommitted insert holds waits for that transaction; once it
//! commits the insert does nothing and the read (a new statement, hence a new snapshot) finds its row.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Timestamp};
use gateway_core::{AgentId, StoreError, ToolCallId, ToolCallRecord, ToolCallStore};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::connection::{AnyConnection, DieselStore};
use crate::schema::tool_calls;
use crate::timestamp::{from_db, to_db};

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = tool_calls)]
struct ToolCallRow {
    agent_id: String,
    tool_call_id: String,
    tool_name: String,
    params_hash: String,
    result: String,
    created_at: PrimitiveDateTime,
}

impl ToolCallRow {
    fn of(call: &ToolCallRecord) -> Self {
        Self {
            agent_id: call.agent_id.as_str().to_owned(),
            tool_call_id: call.tool_call_id.as_str().to_owned(),
            tool_name: call.tool_name.clone(),
            params_hash: call.params_hash.clone(),
            result: call.result.to_string(),
            created_at: to_db(call.created_at),
        }
    }
}

impl TryFrom<ToolCallRow> for ToolCallRecord {
    type Error = StoreError;

    fn try_from(row: ToolCallRow) -> Result<Self, StoreError> {
        let invalid = |what: &str| StoreError::Internal(format!("tool call: stored {what} invalid"));
        Ok(Self {
            agent_id: AgentId::new(row.agent_id).map_err(|_| invalid("agent_id"))?,
            tool_call_id: ToolCallId::new(row.tool_call_id).map_err(|_| invalid("tool_call_id"))?,
            tool_name: row.tool_name,
            params_hash: row.params_hash,
            result: serde_json::from_str(&row.result).map_err(|_| invalid("result"))?,
            created_at: from_db(row.created_at),
        })
    }
}

fn holder(connection: &mut AnyConnection<'_>, agent_id: &str, tool_call_id: &str) -> QueryResult<Option<ToolCallRow>> {
    on_backend!(connection, c => {
        tool_calls::table
            .find((agent_id, tool_call_id))
            .select(ToolCallRow::as_select())
            .first(c)
            .optional()
    })
}

/// The oldest `limit` rows created before the cutoff, deleted by their keys: one statement, the same text on both
/// backends but for the placeholders.
const PRUNE_SQLITE: &str = "DELETE FROM tool_calls WHERE (agent_id, tool_call_id) IN (\
     SELECT agent_id, tool_call_id FROM tool_calls WHERE created_at < ? ORDER BY created_at LIMIT ?)";
const PRUNE_POSTGRES: &str = "DELETE FROM tool_calls WHERE (agent_id, tool_call_id) IN (\
     SELECT agent_id, tool_call_id FROM tool_calls WHERE created_at < $1 ORDER BY created_at LIMIT $2)";

impl ToolCallStore for DieselStore {
    fn tool_call(&self, agent_id: &AgentId, tool_call_id: &ToolCallId) -> Result<Option<ToolCallRecord>, StoreError> {
        let row = self.with_connection("read tool call", |connection| {
            holder(connection, agent_id.as_str(), tool_call_id.as_str())
        })?;
        row.map(ToolCallRecord::try_from).transpose()
    }

    fn record_tool_call(&self, call: &ToolCallRecord) -> Result<(ToolCallRecord, bool), StoreError> {
        let row = ToolCallRow::of(call);
        let (stored, written) = self.immediate("record tool call", |connection| {
            let inserted = on_backend!(connection, c => {
                diesel::insert_into(tool_calls::table)
                    .values(&row)
                    .on_conflict((tool_calls::agent_id, tool_calls::tool_call_id))
                    .do_nothing()
                    .returning(ToolCallRow::as_returning())
                    .get_result(c)
                    .optional()
            })?;
            match inserted {
                Some(row) => Ok((row, true)),
                // Deleted between the two statements (pruned): as if the insert had failed.
                None => holder(connection, &row.agent_id, &row.tool_call_id)?
                    .map(|holder| (holder, false))
                    .ok_or(diesel::result::Error::NotFound),
            }
        })?;
        Ok((stored.try_into()?, written))
    }

    fn prune_tool_calls(&self, created_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        let cutoff = to_db(created_before);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_connection("prune tool calls", |connection| {
            let sql = match connection {
                AnyConnection::Sqlite(_) => PRUNE_SQLITE,
                AnyConnection::Postgres(_) => PRUNE_POSTGRES,
            };
            on_backend!(connection, c => {
                diesel::sql_query(sql).bind::<Timestamp, _>(cutoff).bind::<BigInt, _>(limit).execute(c)
            })
        })
    }
}

// The port's rules run against this adapter in tests/conformance.rs; what only SQL can get wrong is tested here.
#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    on_every_backend!(rival_recorders_of_one_call_write_it_once);

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    /// Recorders of one call on separate connections (separate transactions on PostgreSQL, where the insert of a
    /// key another uncommitted insert holds waits for it): one writes, every other gets the winner's row.
    fn rival_recorders_of_one_call_write_it_once(store: &DieselStore) {
        let barrier = std::sync::Barrier::new(4);
        let outcomes: Vec<(ToolCallRecord, bool)> = std::thread::scope(|scope| {
            let rivals: Vec<_> = (0..4)
                .map(|n| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let call = ToolCallRecord {
                            agent_id: AgentId::new("agent-7").unwrap(),
                            tool_call_id: ToolCallId::new("call-1").unwrap(),
                            tool_name: "cancel_reminder".into(),
                            params_hash: "sha256:00".into(),
                            result: json!({"rival": n}),
                            created_at: START,
                        };
                        barrier.wait();
                        store.record_tool_call(&call).unwrap()
                    })
                })
                .collect();
            rivals.into_iter().map(|rival| rival.join().unwrap()).collect()
        });
        assert_eq!(outcomes.iter().filter(|(_, written)| *written).count(), 1, "{outcomes:?}");
        assert!(outcomes.iter().all(|(row, _)| *row == outcomes[0].0), "everyone got the one row");
        assert_eq!(crate::testing::count(store, "tool_calls"), 1);
    }

    /// The prune statement finds the oldest rows through the `created_at` index, and every port statement by the
    /// key reaches its row through the primary key.
    #[test]
    fn the_prune_statement_reads_the_created_at_index() {
        let fixture = crate::testing::sqlite();
        let plan = fixture
            .store
            .with_sqlite("explain", |connection| {
                #[derive(QueryableByName)]
                struct Line {
                    #[diesel(sql_type = diesel::sql_types::Text)]
                    detail: String,
                }
                diesel::sql_query(format!("EXPLAIN QUERY PLAN {PRUNE_SQLITE}"))
                    .bind::<Timestamp, _>(to_db(START))
                    .bind::<BigInt, _>(10)
                    .load::<Line>(connection)
                    .map(|lines| lines.into_iter().map(|line| line.detail).collect::<Vec<_>>())
            })
            .unwrap()
            .unwrap();
        assert!(plan.iter().any(|line| line.contains("USING INDEX tool_calls_created_at")), "{plan:?}");
        assert!(plan.iter().any(|line| line.contains("sqlite_autoindex_tool_calls_1")), "{plan:?}");
        assert!(!plan.iter().any(|line| line.contains("TEMP B-TREE FOR ORDER BY")), "{plan:?}");
    }
}
