//! `DieselStore` against gateway-core's conformance suites: every rule of every store port it implements, each on a
//! fresh database, and the fencing rule across its ports (they share one epoch). What only one backend can get wrong
//! (query plans, pragmas, the file lock, recovery, timestamp precision) stays in the adapter's unit tests.
//!
//! A backend is one `backend!` line: a module name and an expression that gives a fresh store, or `None` when the
//! backend is not available here (the test then passes without running; a fixture that skips prints why, and panics
//! instead under `CI=true`).

#![allow(clippy::unwrap_used)]

use std::ops::Deref;

use gateway_core::conformance::{START, fencing};
use gateway_store::{DatabaseUrl, DieselStore};

/// Every suite of the ports `DieselStore` implements, in a module `$backend`, each test on a fresh store from
/// `$fixture`: an `Option<F>` where `F` dereferences to a `DieselStore`.
macro_rules! backend {
    ($backend:ident, $fixture:expr) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;

            gateway_core::heartbeat_store_conformance!($fixture);
            gateway_core::cron_store_conformance!($fixture);
            gateway_core::webhook_store_conformance!($fixture);

            /// One epoch for the whole store: a token raised through the cron port fences the webhook poll, and
            /// the other way round.
            #[test]
            fn a_token_raised_through_one_port_fences_every_port() {
                let Some(store) = $fixture else { return };
                let writes: Vec<fencing::FencedWrite<'_>> = fencing::cron_writes(&*store, START)
                    .into_iter()
                    .chain(fencing::webhook_writes(&*store, START))
                    .collect();
                fencing::a_token_raised_through_one_port_fences_every_port(&*store, &writes);
            }
        }
    };
}

backend!(sqlite, sqlite_store());
backend!(postgres, postgres_store(module_path!()));

/// A store on a fresh SQLite file, which lives as long as the store.
struct SqliteStore {
    store: DieselStore,
    _dir: tempfile::TempDir,
}

impl Deref for SqliteStore {
    type Target = DieselStore;

    fn deref(&self) -> &DieselStore {
        &self.store
    }
}

fn sqlite_store() -> Option<SqliteStore> {
    let dir = tempfile::tempdir().unwrap();
    let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
    Some(SqliteStore { store, _dir: dir })
}

/// A store on a new database of the shared throwaway PostgreSQL server, dropped with it.
struct PostgresStore {
    store: DieselStore,
    _database: gateway_testkit::postgres::TempDatabase,
}

impl Deref for PostgresStore {
    type Target = DieselStore;

    fn deref(&self) -> &DieselStore {
        &self.store
    }
}

/// `None` (after one printed line, or a panic under `CI=true`) where PostgreSQL is not installed.
fn postgres_store(test: &str) -> Option<PostgresStore> {
    let database = gateway_testkit::postgres::database(test)?;
    let store = DieselStore::open(&DatabaseUrl::parse(database.url()).unwrap()).unwrap();
    Some(PostgresStore { store, _database: database })
}
