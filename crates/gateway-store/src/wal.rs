//! Checkpointing the SQLite write-ahead log off the commit path.
//!
//! By default SQLite checkpoints inside whichever commit takes the WAL past 1,000 pages: that commit copies the
//! log into the database file and fsyncs it, several milliseconds on an ordinary disk, and every writer queued
//! behind it waits. Checkpointing in the background often enough keeps the log short, so commits on the request
//! and timer paths almost never do it themselves (measured on the cron scheduler: fire lateness p99 8–9 ms →
//! about 4 ms; docs/benchmarks.md).

use std::time::Duration;

use diesel::connection::SimpleConnection;
use gateway_core::StoreError;

use crate::connection::DieselStore;

/// How often the gateway checkpoints the WAL in the background. A checkpoint with nothing to copy is a few
/// microseconds; one with work is bounded by what 100 ms of commits wrote.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);

impl DieselStore {
    /// A PASSIVE checkpoint: copies what it can of the WAL into the database file without waiting for readers
    /// or writers, so it never blocks them. Blocking: call it through `run_blocking`.
    pub fn checkpoint_wal(&self) -> Result<(), StoreError> {
        self.with_connection("checkpoint WAL", |connection| connection.batch_execute("PRAGMA wal_checkpoint(PASSIVE);"))
    }
}

#[cfg(test)]
mod tests {
    use diesel::RunQueryDsl;
    use diesel::sql_types::Integer;

    use super::*;
    use crate::DatabaseUrl;

    #[derive(diesel::QueryableByName)]
    struct WalState {
        #[diesel(sql_type = Integer)]
        log: i32,
        #[diesel(sql_type = Integer)]
        checkpointed: i32,
    }

    #[test]
    fn a_checkpoint_copies_the_log_into_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
        store
            .with_connection("write", |connection| {
                connection.batch_execute(
                    "INSERT INTO cron_jobs (agent_id, next_fire_at, payload, is_one_time) \
                     VALUES ('a', '2026-02-22 12:00:00', '{}', 1);",
                )
            })
            .unwrap();
        store.checkpoint_wal().unwrap();
        // A few frames never reach the automatic threshold: only the call above can have copied them.
        let state: WalState = store
            .with_connection("wal state", |connection| {
                diesel::sql_query("PRAGMA wal_checkpoint(NOOP)").get_result(connection)
            })
            .unwrap();
        assert!(state.log > 0, "the write went through the WAL");
        assert_eq!(state.checkpointed, state.log);
    }
}
