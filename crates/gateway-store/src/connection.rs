//! The connection pool of each backend, migrations, and the ways port methods reach a connection.
//!
//! One [`DieselStore`] holds either a SQLite pool or a PostgreSQL pool. Port methods are written once, against
//! [`AnyConnection`], and `on_backend!` compiles the same Diesel code for each backend's own
//! connection type (docs/architecture.md says why this and not Diesel's `MultiConnection`). What differs between
//! the backends lives here: how a transaction that reads then writes keeps its reads valid, how the schema is
//! migrated, and how the pool checks its connections.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, PooledConnection};
use diesel::sqlite::SqliteConnection;
use diesel::{Connection, QueryResult, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use gateway_core::{StoreError, StoreHealth};
use time::OffsetDateTime;

use crate::database_url::{DatabaseUrl, PostgresUrl};
use crate::error::{FencedError, OpenError, classify};
use crate::lock::DatabaseLock;
use crate::recovery::release_stranded_claims;

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// How long a connection waits for SQLite's write lock before reporting the store unavailable.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections in the pool. SQLite in WAL mode serves many readers and one writer; more connections than the
/// blocking pool can use only hold file handles.
pub const POOL_SIZE: u32 = 8;
/// How long a caller waits for a free pooled connection.
pub const POOL_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per gateway to PostgreSQL. Every store call is a short transaction (writers share commits through
/// group commits), so a few connections keep the blocking threads busy; each connection is a server process,
/// and several instances share the server's `max_connections` (100 by default): 10 each leaves room for eight
/// instances plus the server's reserved and an operator's sessions.
pub const POSTGRES_POOL_SIZE: u32 = 10;
/// How long a caller waits for a PostgreSQL connection. Shorter than SQLite's: while the server is down, every
/// call waits this long before it answers 503, and a load balancer's probe should see that in time.
pub const POSTGRES_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often, at most, the pool's failures to connect are logged: while PostgreSQL is down every checkout retries,
/// several times a second per instance, and one line per failure would bury everything else.
pub const CONNECT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// r2d2's handler of connection failures (it logs each one at ERROR by default): one warning per
/// [`CONNECT_ERROR_LOG_INTERVAL`], saying how many failures it stands for. Callers still get each failure as a
/// 503 (`StoreError::Unavailable`), and `/readyz` reports the store.
#[derive(Debug)]
struct ConnectErrors {
    /// Scrubs the messages of the URL and its password (libpq does not repeat them; this makes sure of it).
    url: PostgresUrl,
    /// When the last line was written, and the failures since.
    last: std::sync::Mutex<(Option<std::time::Instant>, u64)>,
}

impl<E: fmt::Display> diesel::r2d2::HandleError<E> for ConnectErrors {
    fn handle_error(&self, error: E) {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (logged, failures) = &mut *last;
        *failures += 1;
        if logged.is_some_and(|at| at.elapsed() < CONNECT_ERROR_LOG_INTERVAL) {
            return;
        }
        let error = self.url.redact(&error.to_string());
        tracing::warn!(error = error.trim_end(), failures = *failures, "cannot connect to the database");
        *logged = Some(std::time::Instant::now());
        *failures = 0;
    }
}

/// The advisory lock the migrating instance holds (any constant shared by every gateway works; this one is
/// "gateway" in ASCII).
pub const MIGRATION_LOCK: i64 = 0x0067_6174_6577_6179;

/// WAL pages after which a commit checkpoints by itself (SQLite's default is 1,000). The background checkpointer
/// (`wal.rs`, every 100 ms) is meant to do that work; the commit that crosses the line instead copies the log and
/// fsyncs the database on the writer's critical path. At 40,000 cron jobs a second (about 2 WAL frames a job, counted
/// with strace) the log grows by some 9,000 pages between two of the checkpointer's turns, so 1,000 (7% of the cron benchmark's CPU) and then
/// 8,000 (cron on SQLite 37-42k jobs/s against 44-49k with 32,000, docs/benchmarks.md "Cron: the automatic
/// checkpoint off the writer's path") still checkpointed inside commits. 32,000 pages (128 MB at 4 KiB: about the
/// WAL file's size on disk at its largest, and what a restart after a crash reads back) leaves it to the background thread
/// with room for a late turn, and keeps the backstop for when it falls behind.
const WAL_AUTOCHECKPOINT_PAGES: u32 = 32_000;

/// Applies the pragmas to every connection the pool hands out. `busy_timeout` comes first so that the
/// statements after it already wait for a lock instead of failing at once.
#[derive(Debug, Clone, Copy)]
struct SqlitePragmas;

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, connection: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        connection
            .batch_execute(&format!(
                "PRAGMA busy_timeout = {}; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
                 PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES};",
                BUSY_TIMEOUT.as_millis()
            ))
            .map_err(diesel::r2d2::Error::QueryError)
    }
}

/// A connection of either backend, as port methods see it; `on_backend!` runs the same
/// Diesel code on either.
pub(crate) enum AnyConnection<'a> {
    Sqlite(&'a mut SqliteConnection),
    Postgres(&'a mut PgConnection),
}

/// Runs `$body` with `$connection` (an `&mut AnyConnection`) bound as `$c` to the backend's own connection:
/// the body is compiled once per backend, each with that backend's SQL dialect and statement cache.
macro_rules! on_backend {
    ($connection:expr, $c:ident => $body:expr) => {
        match $connection {
            $crate::connection::AnyConnection::Sqlite($c) => {
                let $c: &mut ::diesel::sqlite::SqliteConnection = &mut **$c;
                $body
            }
            $crate::connection::AnyConnection::Postgres($c) => {
                let $c: &mut ::diesel::pg::PgConnection = &mut **$c;
                $body
            }
        }
    };
}

#[derive(Clone)]
enum Pools {
    Sqlite(Pool<ConnectionManager<SqliteConnection>>),
    Postgres(Pool<ConnectionManager<PgConnection>>),
}

/// Every store port over one pool. Cheap to clone.
#[derive(Clone)]
pub struct DieselStore {
    pools: Pools,
    /// SQLite only: this process's exclusive hold on the database file, released when the last clone is dropped
    /// (or the process ends, however it ends). A PostgreSQL database is shared by design.
    _lock: Option<Arc<DatabaseLock>>,
}

impl fmt::Debug for DieselStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (backend, state) = match &self.pools {
            Pools::Sqlite(pool) => ("sqlite", pool.state()),
            Pools::Postgres(pool) => ("postgres", pool.state()),
        };
        f.debug_struct("DieselStore")
            .field("backend", &backend)
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish()
    }
}

impl DieselStore {
    /// Opens the database `url` names, migrates it, and returns the store. Blocking: call it before the runtime
    /// serves traffic, or through `run_blocking`.
    ///
    /// SQLite: locks the file for this process first (another gateway holding it is [`OpenError::InUse`]),
    /// creates the file if needed, and after migrating releases the claims a killed predecessor left (see
    /// `recovery`). PostgreSQL: migrates under an advisory lock, so instances starting together migrate once,
    /// and releases nothing (other live instances may hold the claims).
    pub fn open(url: &DatabaseUrl) -> Result<Self, OpenError> {
        Self::open_counting_migrations(url).map(|(store, _)| store)
    }

    /// Opens the database for a one-off command (`gateway admin-token rotate`) that may run while a gateway serves
    /// it. As [`Self::open`], except that a SQLite file another gateway holds is opened beside it rather than
    /// refused: without the lock, without migrating (the holder did) and without releasing claims (the holder's
    /// own), on one connection that waits for SQLite's write lock like any other writer.
    pub fn open_for_command(url: &DatabaseUrl) -> Result<Self, OpenError> {
        match url {
            DatabaseUrl::Sqlite(path) => match open_sqlite(path) {
                Err(OpenError::InUse { .. }) => open_sqlite_beside_holder(path),
                opened => opened.map(|(store, _)| store),
            },
            DatabaseUrl::Postgres(url) => open_postgres(url).map(|(store, _)| store),
        }
    }

    /// [`Self::open`], also saying how many migrations this call ran.
    pub(crate) fn open_counting_migrations(url: &DatabaseUrl) -> Result<(Self, usize), OpenError> {
        match url {
            DatabaseUrl::Sqlite(path) => open_sqlite(path),
            DatabaseUrl::Postgres(url) => open_postgres(url),
        }
    }

    /// `true` on SQLite, whose file this process holds alone.
    pub fn is_sqlite(&self) -> bool {
        matches!(self.pools, Pools::Sqlite(_))
    }

    /// Runs `work` on a pooled connection. For single statements and read-only work.
    pub(crate) fn with_connection<T>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut AnyConnection<'_>) -> QueryResult<T>,
    ) -> Result<T, StoreError> {
        let outcome = match &self.pools {
            Pools::Sqlite(pool) => work(&mut AnyConnection::Sqlite(&mut *checkout(pool, operation)?)),
            Pools::Postgres(pool) => work(&mut AnyConnection::Postgres(&mut *checkout(pool, operation)?)),
        };
        outcome.map_err(|error| classify(operation, error))
    }

    /// Runs `work` in a transaction in which a read followed by a write can never be invalidated by another
    /// writer in between.
    ///
    /// SQLite: an IMMEDIATE transaction; the write lock is taken up front (so it also never fails half-way with
    /// SQLITE_BUSY on upgrade). PostgreSQL: a READ COMMITTED transaction, in which each statement sees what was
    /// committed before it started and waits for the rows it writes; so a read that decides a write locks its
    /// rows (`SELECT … FOR UPDATE`, through the backend's arm of the code) unless the write's own `WHERE` makes
    /// the decision again (a conditional `UPDATE` re-checks a row that changed while it waited).
    pub(crate) fn immediate<T>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut AnyConnection<'_>) -> QueryResult<T>,
    ) -> Result<T, StoreError> {
        self.transaction(operation, work)?.map_err(|error| classify(operation, error))
    }

    /// [`Self::immediate`] for a leader-only write: `work` calls `fencing::admit` first, and a refusal rolls the
    /// whole transaction back and comes out as [`StoreError::Fenced`].
    pub(crate) fn immediate_fenced<T>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut AnyConnection<'_>) -> Result<T, FencedError>,
    ) -> Result<T, StoreError> {
        self.transaction(operation, work)?.map_err(|error| error.into_store_error(operation))
    }

    /// The transaction of [`Self::immediate`]; the outer error is the checkout's.
    fn transaction<T, E>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut AnyConnection<'_>) -> Result<T, E>,
    ) -> Result<Result<T, E>, StoreError>
    where
        E: From<diesel::result::Error>,
    {
        Ok(match &self.pools {
            Pools::Sqlite(pool) => checkout(pool, operation)?
                .immediate_transaction(|connection| work(&mut AnyConnection::Sqlite(connection))),
            Pools::Postgres(pool) => {
                checkout(pool, operation)?.transaction(|connection| work(&mut AnyConnection::Postgres(connection)))
            }
        })
    }

    /// Runs SQLite-only work (WAL checkpoints, plans); `None` on PostgreSQL.
    pub(crate) fn with_sqlite<T>(
        &self,
        operation: &str,
        work: impl FnOnce(&mut SqliteConnection) -> QueryResult<T>,
    ) -> Option<Result<T, StoreError>> {
        match &self.pools {
            Pools::Sqlite(pool) => Some(
                checkout(pool, operation)
                    .and_then(|mut connection| work(&mut connection).map_err(|error| classify(operation, error))),
            ),
            Pools::Postgres(_) => None,
        }
    }
}

/// The row a write's `RETURNING` gave, from all its rows (`get_results`): never take it with `get_result`
/// outside a transaction. SQLite commits such a statement when it runs to its end; `get_result` stops at the first
/// row and drops what resetting the statement reports, so a commit that fails there (a full disk: SQLITE_FULL on
/// the WAL) came back as success, with a row that was never written. Read to the end, the failed commit is the
/// statement's error. `NotFound` when the write returned nothing.
pub(crate) fn returned_row<T>(rows: QueryResult<Vec<T>>) -> QueryResult<T> {
    returned_row_if_any(rows)?.ok_or(diesel::result::Error::NotFound)
}

/// [`returned_row`] for a write that may change no row (`None`).
pub(crate) fn returned_row_if_any<T>(rows: QueryResult<Vec<T>>) -> QueryResult<Option<T>> {
    Ok(rows?.into_iter().next())
}

fn checkout<C>(
    pool: &Pool<ConnectionManager<C>>,
    operation: &str,
) -> Result<PooledConnection<ConnectionManager<C>>, StoreError>
where
    C: diesel::r2d2::R2D2Connection + 'static,
{
    pool.get().map_err(|error| StoreError::Unavailable(format!("{operation}: no connection: {error}")))
}

fn open_sqlite(database: &std::path::Path) -> Result<(DieselStore, usize), OpenError> {
    let path = database.to_str().ok_or_else(|| OpenError::InvalidUrl("the path is not valid UTF-8".into()))?;
    // Before anything touches the file, migrations included: a second gateway must not migrate a database the
    // first is serving from.
    let lock = DatabaseLock::acquire(database)?;

    // WAL is a property of the database file: set it once, with migrations, on a dedicated connection.
    let mut setup = SqliteConnection::establish(path).map_err(|error| OpenError::Connect(error.to_string()))?;
    SqlitePragmas.on_acquire(&mut setup).map_err(|error| OpenError::Connect(error.to_string()))?;
    setup.batch_execute("PRAGMA journal_mode = WAL;").map_err(|error| OpenError::Connect(error.to_string()))?;
    let migrated =
        setup.run_pending_migrations(SQLITE_MIGRATIONS).map_err(|error| OpenError::Migrate(error.to_string()))?.len();
    // SQLite only, and only under the lock: see `recovery` for why a shared database must never do this.
    // Failing here does not stop the start: the claims would only wait for their leases, as before.
    match setup.immediate_transaction(|connection| release_stranded_claims(connection, OffsetDateTime::now_utc())) {
        // A clean start (a fresh database, or a process that stopped gracefully) released nothing: nothing to say.
        Ok(released) if released.is_empty() => {}
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
    Ok((DieselStore { pools: Pools::Sqlite(pool), _lock: Some(Arc::new(lock)) }, migrated))
}

/// See [`DieselStore::open_for_command`].
fn open_sqlite_beside_holder(database: &std::path::Path) -> Result<DieselStore, OpenError> {
    let path = database.to_str().ok_or_else(|| OpenError::InvalidUrl("the path is not valid UTF-8".into()))?;
    let pool = Pool::builder()
        .max_size(1)
        .connection_timeout(POOL_CHECKOUT_TIMEOUT)
        .test_on_check_out(false)
        .connection_customizer(Box::new(SqlitePragmas))
        .build(ConnectionManager::new(path))
        .map_err(|error| OpenError::Connect(error.to_string()))?;
    Ok(DieselStore { pools: Pools::Sqlite(pool), _lock: None })
}

/// No file lock and no claim release here: a PostgreSQL database is shared, and claims found at start may be live
/// instances' (see `recovery`).
fn open_postgres(url: &PostgresUrl) -> Result<(DieselStore, usize), OpenError> {
    let connect_error = |error: &dyn fmt::Display| OpenError::Connect(url.redact(&error.to_string()));
    let mut setup = PgConnection::establish(&url.for_libpq()).map_err(|error| connect_error(&error))?;
    let migrated = migrate_postgres(&mut setup).map_err(|error| OpenError::Migrate(url.redact(&error)))?;
    drop(setup);

    let pool = Pool::builder()
        .max_size(POSTGRES_POOL_SIZE)
        .connection_timeout(POSTGRES_CHECKOUT_TIMEOUT)
        // A network database drops connections (a restart, a failover, a proxy's idle timeout), and Diesel marks
        // a PostgreSQL connection broken only when a transaction could not be rolled back: without this check
        // a dead connection would go back to the pool after a failed read and fail the next caller too. The
        // check is one `SELECT 1` round trip per checkout (docs/benchmarks.md measures it).
        .test_on_check_out(true)
        .error_handler(Box::new(ConnectErrors { url: url.clone(), last: std::sync::Mutex::default() }))
        .build(ConnectionManager::new(url.for_libpq()))
        .map_err(|error| connect_error(&error))?;
    Ok((DieselStore { pools: Pools::Postgres(pool), _lock: None }, migrated))
}

/// Runs the pending migrations while holding the migration lock, so that of several instances starting together
/// one migrates and the others, once they get the lock, find nothing left to do. The lock is a session lock:
/// should this process die while migrating, the server releases it with the connection (and the migration's
/// own transaction rolls back).
fn migrate_postgres(connection: &mut PgConnection) -> Result<usize, String> {
    connection
        .batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))
        .map_err(|error| format!("cannot take the migration lock: {error}"))?;
    let migrated = connection.run_pending_migrations(POSTGRES_MIGRATIONS).map(|done| done.len());
    let unlocked = connection.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"));
    let migrated = migrated.map_err(|error| error.to_string())?;
    unlocked.map_err(|error| format!("cannot release the migration lock: {error}"))?;
    Ok(migrated)
}

impl StoreHealth for DieselStore {
    fn ping(&self) -> Result<(), StoreError> {
        self.with_connection(
            "ping",
            |connection| on_backend!(connection, c => diesel::sql_query("SELECT 1").execute(c).map(drop)),
        )
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
            .with_sqlite("pragma", |connection| {
                diesel::sql_query(format!("SELECT CAST({column} AS TEXT) AS value FROM pragma_{name}"))
                    .get_result::<Pragma>(connection)
            })
            .unwrap()
            .unwrap()
            .value
    }

    /// `wal_autocheckpoint` is no table-valued pragma (setting it is a side effect), so it is read by its statement.
    fn wal_autocheckpoint(store: &DieselStore) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Pages {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            wal_autocheckpoint: i64,
        }
        store
            .with_sqlite("pragma", |connection| {
                diesel::sql_query("PRAGMA wal_autocheckpoint").get_result::<Pages>(connection)
            })
            .unwrap()
            .unwrap()
            .wal_autocheckpoint
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
        assert_eq!(wal_autocheckpoint(&store), i64::from(WAL_AUTOCHECKPOINT_PAGES));
        // Opening again (once the first store has let go of the file) runs no migration twice.
        drop(store);
        DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
    }

    /// A command opens a file a gateway holds beside it, and what it writes the gateway reads; on a file nobody
    /// holds it opens as a gateway would (creating and migrating it), and lets go when it is done.
    #[test]
    fn a_command_opens_a_held_file_beside_its_holder() {
        use gateway_core::{AdminTokenRecord, AdminTokenStore, TokenHash};
        let dir = tempfile::tempdir().unwrap();
        let url = DatabaseUrl::Sqlite(dir.path().join("g.db"));
        let fresh = DieselStore::open_for_command(&url).unwrap();
        assert_eq!(fresh.admin_token().unwrap(), None, "created and migrated");
        drop(fresh);
        let holder = DieselStore::open(&url).unwrap();
        assert!(matches!(DieselStore::open(&url), Err(OpenError::InUse { .. })));
        let command = DieselStore::open_for_command(&url).unwrap();
        let record = AdminTokenRecord { token_hash: TokenHash::of("t"), set_at: OffsetDateTime::UNIX_EPOCH };
        command.replace_admin_token(&record).unwrap();
        assert_eq!(holder.admin_token().unwrap(), Some(record));
    }

    #[test]
    fn instances_starting_together_migrate_once() {
        let Some(database) =
            gateway_testkit::postgres::database("connection::instances_starting_together_migrate_once")
        else {
            return;
        };
        let url = crate::testing::postgres_url(database.url());
        let opened: Vec<(DieselStore, usize)> = std::thread::scope(|scope| {
            let starts: Vec<_> =
                (0..6).map(|_| scope.spawn(|| DieselStore::open_counting_migrations(&url).unwrap())).collect();
            starts.into_iter().map(|start| start.join().unwrap()).collect()
        });
        let migrations =
            diesel::migration::MigrationSource::<diesel::pg::Pg>::migrations(&POSTGRES_MIGRATIONS).unwrap().len();
        assert_eq!(opened.iter().map(|(_, migrated)| migrated).sum::<usize>(), migrations, "each migration ran once");
        assert_eq!(opened.iter().filter(|(_, migrated)| *migrated > 0).count(), 1, "one instance migrated");
        let (store, _) = &opened[0];
        assert_eq!(crate::testing::count(store, "__diesel_schema_migrations"), migrations as i64);
        store.ping().unwrap();
    }

    #[test]
    fn a_connect_error_names_the_problem_but_not_the_password() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = DatabaseUrl::parse(&format!("postgres://gw:hunter2@127.0.0.1:{port}/gateway")).unwrap();
        let error = DieselStore::open(&url).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, OpenError::Connect(_)), "{error:?}");
        assert!(message.contains("127.0.0.1") && message.contains(&port.to_string()), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    /// PostgreSQL going away makes every call `Unavailable` (`/readyz` reports 503), and the store works again
    /// once it is back, without a restart: the pool replaces the connections the restart killed.
    #[test]
    fn the_store_is_unavailable_while_postgres_is_down_and_recovers_when_it_is_back() {
        use gateway_core::{AgentId, ClusterId, HeartbeatRecord, HeartbeatStore};
        let test = "connection::the_store_is_unavailable_while_postgres_is_down";
        let Some(server) = gateway_testkit::postgres::server(test) else { return };
        let database = server.create_database(test);
        let store = DieselStore::open(&crate::testing::postgres_url(database.url())).unwrap();
        let beat = HeartbeatRecord {
            agent_id: AgentId::new("a").unwrap(),
            cluster_id: ClusterId::new("c").unwrap(),
            last_seen_at: OffsetDateTime::now_utc(),
        };
        store.upsert_heartbeat(&beat).unwrap();
        server.stop().unwrap();
        assert!(matches!(store.ping(), Err(StoreError::Unavailable(_))), "{:?}", store.ping());
        assert!(matches!(store.upsert_heartbeat(&beat), Err(StoreError::Unavailable(_))));
        server.start().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while store.ping().is_err() {
            assert!(std::time::Instant::now() < deadline, "the store did not recover: {:?}", store.ping());
            std::thread::sleep(Duration::from_millis(50));
        }
        store.upsert_heartbeat(&beat).unwrap();
        assert!(store.heartbeat(&beat.agent_id).unwrap().is_some());
    }

    /// PostgreSQL's own words for a deadlock victim are classified as a transient failure (loops retry it).
    #[test]
    fn a_deadlock_victim_is_unavailable_not_internal() {
        let Some(database) = gateway_testkit::postgres::database("connection::a_deadlock_victim_is_unavailable") else {
            return;
        };
        let mut setup = PgConnection::establish(database.url()).unwrap();
        setup
            .batch_execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER); INSERT INTO t VALUES (1, 0), (2, 0);")
            .unwrap();
        let barrier = std::sync::Barrier::new(2);
        let outcomes: Vec<QueryResult<()>> = std::thread::scope(|scope| {
            let sides: Vec<_> = [(1, 2), (2, 1)]
                .into_iter()
                .map(|(first, second)| {
                    let barrier = &barrier;
                    let url = database.url();
                    scope.spawn(move || {
                        let mut connection = PgConnection::establish(url).unwrap();
                        connection.transaction(|connection| {
                            connection.batch_execute(&format!("UPDATE t SET n = n + 1 WHERE id = {first}"))?;
                            barrier.wait();
                            connection.batch_execute(&format!("UPDATE t SET n = n + 1 WHERE id = {second}"))
                        })
                    })
                })
                .collect();
            sides.into_iter().map(|side| side.join().unwrap()).collect()
        });
        let victim = outcomes.into_iter().find_map(Result::err).expect("one side is the deadlock's victim");
        let classified = classify("update", victim);
        assert!(
            matches!(&classified, StoreError::Unavailable(message) if message.contains("deadlock")),
            "{classified:?}"
        );
    }
}
