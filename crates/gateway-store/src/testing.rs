//! Test support: a fresh store on each backend, and `on_every_backend!`, which runs a test function once on
//! SQLite and once on PostgreSQL (skipped, with one printed line, where PostgreSQL is not installed; see
//! `gateway_testkit::postgres`).

use diesel::RunQueryDsl;
use diesel::sql_types::BigInt;
use gateway_testkit::postgres::TempDatabase;

use crate::{DatabaseUrl, DieselStore};

/// A store and what keeps its database alive; the store is dropped first.
pub(crate) struct TestStore {
    pub(crate) store: DieselStore,
    _database: Database,
}

enum Database {
    Sqlite(#[allow(dead_code, reason = "held for its drop")] tempfile::TempDir),
    Postgres(#[allow(dead_code, reason = "held for its drop")] TempDatabase),
}

/// A store on a new SQLite file.
pub(crate) fn sqlite() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
    TestStore { store, _database: Database::Sqlite(dir) }
}

/// A store on a new database of the shared test server, or `None` when the test is skipped.
pub(crate) fn postgres(test: &str) -> Option<TestStore> {
    let database = gateway_testkit::postgres::database(test)?;
    let store = DieselStore::open(&postgres_url(database.url())).unwrap();
    Some(TestStore { store, _database: Database::Postgres(database) })
}

pub(crate) fn postgres_url(url: &str) -> DatabaseUrl {
    DatabaseUrl::parse(url).unwrap()
}

/// Rows in `table`, whichever the backend.
pub(crate) fn count(store: &DieselStore, table: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    store
        .with_connection("count", |connection| {
            on_backend!(connection, c => diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}")).get_result::<Count>(c))
        })
        .unwrap()
        .n
}

/// Runs `statements` on a PostgreSQL store's connection (a test that started one with [`postgres`]).
pub(crate) fn on_postgres<T>(
    store: &DieselStore,
    statements: impl FnOnce(&mut diesel::PgConnection) -> diesel::QueryResult<T>,
) -> T {
    store
        .with_connection("a test's statements", |connection| {
            let crate::connection::AnyConnection::Postgres(c) = connection else { unreachable!("a PostgreSQL store") };
            statements(c)
        })
        .unwrap()
}

/// For each named function `fn name(store: &DieselStore)` of the enclosing module, a test `sqlite::name` and a
/// test `postgres::name`, each on a fresh store.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    let fixture = $crate::testing::sqlite();
                    super::$name(&fixture.store);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    let test = concat!(module_path!(), "::", stringify!($name));
                    let Some(fixture) = $crate::testing::postgres(test) else { return };
                    super::$name(&fixture.store);
                }
            )*
        }
    };
}
