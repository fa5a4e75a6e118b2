//! The connection pool, its per-connection pragmas, migrations, and the two ways port methods reach a
//! connection.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, PooledConnection};
use diesel::sqlite::SqliteConnection;
use diesel::{Connection, QueryResult, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use gateway_core::{StoreError, StoreHealth};
use time::OffsetDateTime;

use crate::database_url::DatabaseUrl;
use crate::error::{OpenError, classify};
use crate::lock::DatabaseLock;
use crate::recovery::release_stranded_claims;

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");

/// How long a connection waits for SQLite's write lock before reporting the store unavailable.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections in the pool. SQLite in WAL mode serves many readers and one writer; more connections than the
/// blocking pool can use only hold file handles.
pub const POOL_SIZE: u32 = 8;
/// How long a caller waits for a free pooled connection.
pub const POOL_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(10);

/// Applies the pragmas to every connection the pool hands out. `busy_timeout` comes first so that the
/// statements after it already wait for a lock instead of failing at once.
#[derive(Debug, Clone, Copy)]
struct SqlitePragmas;

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, connection: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        connection
            .batch_execute(&format!(
                "PRAGMA busy_timeout = {}; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
                BUSY_TIMEOUT.as_millis()
            ))
            .map_err(diesel::r2d2::Error::QueryError)
    }
}

/// Every store port over one pool. Cheap to clone.
#[derive(Clone)]
pub struct DieselStore {
    pool: Pool<ConnectionManager<SqliteConnection>>,
    /// This process's exclusive hold on the database file, released when the last clone is dropped (or the
    /// process ends, however it ends).
    _lock: Arc<DatabaseLock>,
}

impl fmt::Debug for DieselStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("DieselStore")
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish()
    }
}

impl DieselStore {
    /// Locks the database file for this process (another gateway holding it is [`OpenError::InUse`]), opens it
    /// (creating it if needed), migrates it, and releases the claims a killed predecessor left (see
    /// `recovery`). Blocking: call it before the runtime serves traffic, or through `run_blocking`.
    pub fn open(url: &DatabaseUrl) -> Result<Self, OpenError> {
        let database = match url {
            DatabaseUrl::Sqlite(path) => path,
            DatabaseUrl::Postgres(_) => return Err(OpenError::PostgresNotSupported),
        };
        let path = database.to_str().ok_or_else(|| OpenError::InvalidUrl("the path is not valid UTF-8".into()))?;
        // Before anything touches the file, migrations included: a second gateway must not migrate a database
        // the first is serving from.
        let lock = DatabaseLock::acquire(database)?;

        // WAL is a property of the database file: set it once, with migrations, on a dedicated connection.
        let mut setup = SqliteConnection::establish(path).map_err(|error| OpenError::Connect(error.to_string()))?;
        SqlitePragmas.on_acquire(&mut setup).map_err(|error| OpenError::Connect(error.to_string()))?;
        setup.batch_execute("PRAGMA journal_mode = WAL;").map_err(|error| OpenError::Connect(error.to_string()))?;
        setup.run_pending_migrations(SQLITE_MIGRATIONS).map_err(|error| OpenError::Migrate(error.to_string()))?;
        // SQLite only, and only under the lock: see `recovery` for why a shared database must never do this.
        // Failing here does not stop the start: the claims would only wait for their leases, as before.
        match setup.immediate_transaction(|connection| release_stranded_claims(connection, OffsetDateTime::now_utc())) {
            Ok(released) => tracing::info!(
                cron_claims = released.cron_claims,
                delivery_attempts_in_flight = released.delivery_attempts_in_flight,
                deliveries_never_attempted = released.deliveries_never_attempted,
                "released claims left by a previous process"
            ),
            Err(error) => {
                tracing::warn!(%error, "cannot release claims left by a previous process; they wait for their leases")
            }
        }
        drop(setup);

        let pool = Pool::builder()
            .max_size(POOL_SIZE)
            .connection_timeout(POOL_CHECKOUT_TIMEOUT)
            // r2d2 would run `SELECT 1` on every checkout: a round trip per query for a file that cannot drop a
            // connection the way a network database can. A broken connection still fails its query, and /readyz
            // pings the store.
            .test_on_check_out(false)
            .connection_customizer(Box::new(SqlitePragmas))
            .build(ConnectionManager::new(path))
            .map_err(|error| OpenError::Connect(error.to_string()))?;
        Ok(Self { pool, _lock: Arc::new(lock) })
    }

    fn connection(&self, operation: &str) -> Result<PooledConnection<ConnectionManager<SqliteConnection>>, StoreError> {
        self.pool.get().map_err(|error| StoreError::Unavailable(format!("{operation}: no connection: {error}")))
    }

    /// Runs `work` on a pooled connection. For single statements and read-only work.
    pub(crate) fn with_connection<T>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut SqliteConnection) -> QueryResult<T>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection(operation)?;
        work(&mut connection).map_err(|error| classify(operation, error))
    }

    /// Runs `work` in an IMMEDIATE transaction: the write lock is taken up front, so a read followed by a write
    /// can never be invalidated by another writer in between (and never fails half-way with SQLITE_BUSY on
    /// upgrade).
    pub(crate) fn immediate<T>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut SqliteConnection) -> QueryResult<T>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection(operation)?;
        connection.immediate_transaction(work).map_err(|error| classify(operation, error))
    }
}

impl DieselStore {
    /// [`Self::immediate`] for a leader-only write: `work` calls `fencing::admit` first, and a refusal rolls the
    /// whole transaction back and comes out as [`StoreError::Fenced`].
    pub(crate) fn immediate_fenced<T>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut SqliteConnection) -> Result<T, crate::fencing::FencedError>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection(operation)?;
        connection.immediate_transaction(work).map_err(|error| error.into_store_error(operation))
    }
}

impl StoreHealth for DieselStore {
    fn ping(&self) -> Result<(), StoreError> {
        self.with_connection("ping", |connection| diesel::sql_query("SELECT 1").execute(connection).map(drop))
    }
}

#[cfg(test)]
mod tests {
    use diesel::sql_types::Text;

    use super::*;

    #[derive(diesel::QueryableByName)]
    struct Pragma {
        #[diesel(sql_type = Text)]
        value: String,
    }

    fn pragma(store: &DieselStore, name: &str, column: &str) -> String {
        store
            .with_connection("pragma", |connection| {
                diesel::sql_query(format!("SELECT CAST({column} AS TEXT) AS value FROM pragma_{name}"))
                    .get_result::<Pragma>(connection)
            })
            .unwrap()
            .value
    }

    #[test]
    fn opens_migrates_and_sets_pragmas_on_pooled_connections() {
        let dir = tempfile::tempdir().unwrap();
        let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
        store.ping().unwrap();
        assert_eq!(pragma(&store, "journal_mode", "journal_mode"), "wal");
        assert_eq!(pragma(&store, "busy_timeout", "timeout"), "5000");
        assert_eq!(pragma(&store, "foreign_keys", "foreign_keys"), "1");
        assert_eq!(pragma(&store, "synchronous", "synchronous"), "1");
        // Opening again (once the first store has let go of the file) runs no migration twice.
        drop(store);
        DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
    }

    #[test]
    fn postgres_is_refused_in_phase_one() {
        assert!(matches!(
            DieselStore::open(&DatabaseUrl::Postgres("postgres://h/db".into())),
            Err(OpenError::PostgresNotSupported)
        ));
    }
}
