//! Checkpointing the SQLite write-ahead log off the commit path.
//!
//! By default SQLite checkpoints inside whichever commit takes the WAL past 1,000 pages: that commit copies the
//! log into the database file and fsyncs it, several milliseconds on an ordinary disk, and every writer queued
//! behind it waits. A [`WalCheckpointer`] checkpoints in the background often enough to keep the log short, so
//! commits on the request and timer paths almost never do it themselves (measured on the cron scheduler: fire
//! lateness p99 8–9 ms → about 4 ms; docs/benchmarks.md). SQLite's automatic checkpoint stays on as the
//! backstop should the background thread fall behind.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use gateway_core::StoreError;

use crate::background::PeriodicThread;
use crate::connection::DieselStore;

/// How often the gateway checkpoints the WAL in the background. A checkpoint with nothing to copy is a few
/// microseconds; one with work is bounded by what 100 ms of commits wrote.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// Longest pause between checkpoint attempts while they fail.
pub const CHECKPOINT_RETRY_MAX: Duration = Duration::from_secs(30);

impl DieselStore {
    /// A PASSIVE checkpoint: copies what it can of the WAL into the database file without waiting for readers
    /// or writers, so it never blocks them. Blocking. Nothing to do on PostgreSQL, whose server checkpoints.
    pub fn checkpoint_wal(&self) -> Result<(), StoreError> {
        self.with_sqlite("checkpoint WAL", |connection| connection.batch_execute("PRAGMA wal_checkpoint(PASSIVE);"))
            .unwrap_or(Ok(()))
    }

    /// Starts checkpointing every `interval` on a thread of its own (checkpoints are blocking I/O, and a thread
    /// keeps them off the async runtime). It runs until the returned handle is dropped. On PostgreSQL the handle
    /// holds no thread.
    pub fn start_wal_checkpointer(&self, interval: Duration) -> std::io::Result<WalCheckpointer> {
        if !self.is_sqlite() {
            return Ok(PeriodicThread::idle());
        }
        let store = self.clone();
        PeriodicThread::spawn("wal-checkpoint", "WAL checkpoint", interval, CHECKPOINT_RETRY_MAX, move || {
            store.checkpoint_wal()
        })
    }
}

/// The background checkpoint thread; dropping the handle stops it and waits for it.
pub type WalCheckpointer = PeriodicThread;

#[cfg(test)]
mod tests {
    use diesel::RunQueryDsl;
    use diesel::sql_types::Integer;

    use super::*;
    use crate::DatabaseUrl;
    use std::thread;

    #[derive(diesel::QueryableByName)]
    struct WalState {
        #[diesel(sql_type = Integer)]
        log: i32,
        #[diesel(sql_type = Integer)]
        checkpointed: i32,
    }

    /// A fresh database with one committed row, still in the WAL.
    fn store_with_one_write() -> (tempfile::TempDir, DieselStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
        store
            .with_sqlite("write", |connection| {
                connection.batch_execute(
                    "INSERT INTO cron_jobs (agent_id, next_fire_at, payload, is_one_time) \
                     VALUES ('a', '2026-02-22 12:00:00', '{}', 1);",
                )
            })
            .unwrap()
            .unwrap();
        (dir, store)
    }

    /// WAL frames written and checkpointed so far, without checkpointing anything.
    fn wal_state(store: &DieselStore) -> WalState {
        store
            .with_sqlite("wal state", |connection| {
                diesel::sql_query("PRAGMA wal_checkpoint(NOOP)").get_result(connection)
            })
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_checkpoint_copies_the_log_into_the_database() {
        let (_dir, store) = store_with_one_write();
        store.checkpoint_wal().unwrap();
        // A few frames never reach the automatic threshold: only the call above can have copied them.
        let state = wal_state(&store);
        assert!(state.log > 0, "the write went through the WAL");
        assert_eq!(state.checkpointed, state.log);
    }

    #[test]
    fn the_checkpointer_thread_checkpoints_and_stops_when_dropped() {
        let (_dir, store) = store_with_one_write();
        assert!(wal_state(&store).log > wal_state(&store).checkpointed, "nothing checkpointed yet");
        let checkpointer = store.start_wal_checkpointer(Duration::from_millis(5)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let state = wal_state(&store);
            if state.checkpointed == state.log {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the background thread never checkpointed");
            thread::sleep(Duration::from_millis(5));
        }
        drop(checkpointer);
    }
}
