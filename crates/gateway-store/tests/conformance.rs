//! `DieselStore` against gateway-core's conformance suites: every rule of every store port it implements, each on a
//! fresh database, and the fencing rule across its ports (they share one epoch). What only one backend can get wrong
//! (query plans, pragmas, the file lock, recovery, timestamp precision) stays in the adapter's unit tests.
//!
//! A backend is one `backend!` line: a module name and an expression that gives a fresh store, or `None` when the
//! backend is not available here (the test then passes without running; a fixture that skips prints why, and panics
//! instead under CI).

#![allow(clippy::unwrap_used)]

use std::ops::Deref;

use gateway_core::conformance::{START, fencing, liveness};
use gateway_store::{DatabaseUrl, DieselStore, SharedLiveness};

/// Every suite of the ports `DieselStore` implements, in a module `$backend`, each test on a fresh store from
/// `$fixture`: an `Option<F>` where `F` dereferences to a `DieselStore`.
macro_rules! backend {
    ($backend:ident, $fixture:expr) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;

            gateway_core::heartbeat_store_conformance!($fixture);
            gateway_core::cron_store_conformance!($fixture);
            gateway_core::mailbox_store_conformance!($fixture);
            gateway_core::webhook_store_conformance!($fixture);
            gateway_core::agent_credential_store_conformance!($fixture);
            gateway_core::history_store_conformance!($fixture);
            gateway_core::admin_token_store_conformance!($fixture);
            gateway_core::tool_call_store_conformance!($fixture);
            gateway_core::agent_storage_conformance!($fixture, storage_parts);
            gateway_core::liveness_map_conformance!($fixture.map(|store| Shared::new(store, liveness::CAPACITY)));

            /// The shared map writes the heartbeat rows too (in the transaction of their receipts).
            mod through_shared_liveness {
                use super::*;

                gateway_core::heartbeat_store_conformance!($fixture.map(|store| Shared::new(store, 100)));
            }

            /// One epoch for the whole store: a token raised through the cron port fences the webhook poll and the
            /// eviction of the shared liveness map, and every other way round.
            #[test]
            fn a_token_raised_through_one_port_fences_every_port() {
                let Some(store) = $fixture else { return };
                let map = SharedLiveness::new((*store).clone(), liveness::CAPACITY);
                let writes: Vec<fencing::FencedWrite<'_>> = fencing::cron_writes(&*store, START)
                    .into_iter()
                    .chain(fencing::webhook_writes(&*store, START))
                    .chain(fencing::liveness_writes(&map, START))
                    .collect();
                fencing::a_token_raised_through_one_port_fences_every_port(&*store, &writes);
            }

            /// Two instances' maps on one database are one map.
            #[test]
            fn instances_share_one_liveness_map() {
                let Some(store) = $fixture else { return };
                let (a, b) = (Shared::new(&*store, 10), Shared::new(&*store, 10));
                liveness::instances_share_one_map(&*a, &*b, START);
            }
        }
    };
}

/// The one store as every port the storage suite drives.
fn storage_parts(store: &DieselStore) -> gateway_core::conformance::storage::StorageParts<'_> {
    gateway_core::conformance::storage::StorageParts { usage: store, jobs: store, mailbox: store, calls: store }
}

/// A shared liveness map over a fixture's store, which lives as long as the map.
struct Shared<F> {
    map: SharedLiveness,
    _store: F,
}

impl<F: Deref<Target = DieselStore>> Shared<F> {
    fn new(store: F, capacity: usize) -> Self {
        Self { map: SharedLiveness::new((*store).clone(), capacity), _store: store }
    }
}

impl<F> Deref for Shared<F> {
    type Target = SharedLiveness;

    fn deref(&self) -> &SharedLiveness {
        &self.map
    }
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

/// `None` (after one printed line, or a panic under CI) where PostgreSQL is not installed.
fn postgres_store(test: &str) -> Option<PostgresStore> {
    let database = gateway_testkit::postgres::database(test)?;
    let store = DieselStore::open(&DatabaseUrl::parse(database.url()).unwrap()).unwrap();
    Some(PostgresStore { store, _database: database })
}
