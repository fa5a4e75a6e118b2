//! The connection pool of each backend, migrations, and the ways port methods reach a connection.
//!
//! One [`DieselStore`] holds either a SQLite pool or a PostgreSQL pool. Port methods are written once, against
//! [`AnyConnection`], and `on_backend!` compiles the same Diesel code for each backend's own
//! connection type (docs/architecture.md says why this and not Diesel's `MultiConnection`). What differs between
//! the backends lives here: how a transaction that reads then writes keeps its reads valid, how the schema is
//! migrated, and how the pool checks its connections.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use diesel::connection::{Instrumentation, InstrumentationEvent, SimpleConnection};
use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, ManageConnection, Pool, PooledConnection};
use diesel::result::DatabaseErrorKind;
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
/// How long a PostgreSQL connection may sit unused in the pool before the pool checks it (`SELECT 1`) as it hands
/// it out. A connection used more recently than this is handed out unchecked: under load every connection is, so
/// the check's round trip (and the transaction it costs the server) would be paid on every store call for nothing.
/// One second as Go's pgxpool does: long enough that a busy pool never pings, short enough that connections a
/// restart or a proxy's idle timeout killed while nobody used them are replaced before anyone sees them.
pub const POSTGRES_PING_AFTER_IDLE: Duration = Duration::from_secs(1);
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
/// with strace) the log grows by some 9,000 pages between two of the checkpointer's turns, so 1,000 (7% of the cron
/// benchmark's CPU) and then 8,000 (cron on SQLite 37-42k jobs/s against 44-49k with 32,000, docs/benchmarks.md "Cron:
/// the automatic checkpoint off the writer's path") still checkpointed inside commits. 32,000 pages (128 MB at 4 KiB:
/// about the WAL file's size on disk at its largest, and what a restart after a crash reads back) leaves it to the
/// background thread with room for a late turn, and keeps the backstop for when it falls behind.
const WAL_AUTOCHECKPOINT_PAGES: u32 = 32_000;

/// Applies the pragmas to every connection the pool hands out (and to the one that migrates). `busy_timeout` comes
/// first so that the statements after it already wait for a lock instead of failing at once.
#[derive(Debug, Clone, Copy)]
struct SqlitePragmas {
    /// `PRAGMA temp_store = MEMORY`: the pooled connections keep their statement journals in memory. SQLite gives
    /// every write statement inside a transaction that may touch several rows (the firing loop's claims, deletes and
    /// mailbox records) a statement journal holding the pages it changes, so that the statement alone can be undone;
    /// past 64 KiB it spills to a temporary file, created, written and unlinked per transaction. In memory, the cron
    /// benchmark on SQLite went from 44,400 to 52,600 jobs/s together with the inserts without `RETURNING`
    /// (docs/benchmarks.md, "Cron on SQLite: statement journals in memory"). What it holds is bounded by the
    /// statements the pool runs: each writes a bounded group (a fire batch, an insert group, a prune batch) and
    /// reads in index order, without temporary sorts (the plan tests say so for each listing). The connection that
    /// migrates keeps the default (files), since building an index over a large table sorts it in temporary storage.
    temp_store_memory: bool,
}

impl SqlitePragmas {
    const POOLED: Self = Self { temp_store_memory: true };
    const MIGRATING: Self = Self { temp_store_memory: false };
}

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, connection: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        connection
            .batch_execute(&format!(
                "PRAGMA busy_timeout = {}; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
                 PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES};{}",
                BUSY_TIMEOUT.as_millis(),
                if self.temp_store_memory { " PRAGMA temp_store = MEMORY;" } else { "" }
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
    Postgres(Pool<PostgresManager>, Arc<PostgresPoolHealth>),
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
        let (backend, state, health) = match &self.pools {
            Pools::Sqlite(pool) => ("sqlite", pool.state(), None),
            Pools::Postgres(pool, health) => ("postgres", pool.state(), Some(health)),
        };
        let mut debug = f.debug_struct("DieselStore");
        debug
            .field("backend", &backend)
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections);
        if let Some(health) = health {
            debug.field("checks", health);
        }
        debug.finish()
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
            Pools::Postgres(pool, _) => work(&mut AnyConnection::Postgres(&mut checkout(pool, operation)?.connection)),
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
            Pools::Postgres(pool, _) => checkout(pool, operation)?
                .connection
                .transaction(|connection| work(&mut AnyConnection::Postgres(connection))),
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
            Pools::Postgres(..) => None,
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

fn checkout<M: ManageConnection>(pool: &Pool<M>, operation: &str) -> Result<PooledConnection<M>, StoreError> {
    pool.get().map_err(|error| StoreError::Unavailable(format!("{operation}: no connection: {error}")))
}

fn open_sqlite(database: &std::path::Path) -> Result<(DieselStore, usize), OpenError> {
    let path = database.to_str().ok_or_else(|| OpenError::InvalidUrl("the path is not valid UTF-8".into()))?;
    // Before anything touches the file, migrations included: a second gateway must not migrate a database the
    // first is serving from.
    let lock = DatabaseLock::acquire(database)?;

    // WAL is a property of the database file: set it once, with migrations, on a dedicated connection.
    let mut setup = SqliteConnection::establish(path).map_err(|error| OpenError::Connect(error.to_string()))?;
    SqlitePragmas::MIGRATING.on_acquire(&mut setup).map_err(|error| OpenError::Connect(error.to_string()))?;
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
        .connection_customizer(Box::new(SqlitePragmas::POOLED))
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
        .connection_customizer(Box::new(SqlitePragmas::POOLED))
        .build(ConnectionManager::new(path))
        .map_err(|error| OpenError::Connect(error.to_string()))?;
    Ok(DieselStore { pools: Pools::Sqlite(pool), _lock: None })
}

/// No file lock and no claim release here: a PostgreSQL database is shared, and claims found at start may be live
/// instances' (see `recovery`).
fn open_postgres(url: &PostgresUrl) -> Result<(DieselStore, usize), OpenError> {
    open_postgres_pinging_after(url, POSTGRES_PING_AFTER_IDLE)
}

/// [`open_postgres`] with the pool's idle threshold given: tests make it a few milliseconds (or hours) rather than
/// wait out [`POSTGRES_PING_AFTER_IDLE`].
fn open_postgres_pinging_after(
    url: &PostgresUrl,
    ping_after_idle: Duration,
) -> Result<(DieselStore, usize), OpenError> {
    let connect_error = |error: &dyn fmt::Display| OpenError::Connect(url.redact(&error.to_string()));
    let mut setup = PgConnection::establish(&url.for_libpq()).map_err(|error| connect_error(&error))?;
    let migrated = migrate_postgres(&mut setup).map_err(|error| OpenError::Migrate(url.redact(&error)))?;
    drop(setup);

    let health = Arc::new(PostgresPoolHealth::default());
    let manager = PostgresManager {
        connections: ConnectionManager::new(url.for_libpq()),
        ping_after_idle,
        health: Arc::clone(&health),
    };
    let pool = Pool::builder()
        .max_size(POSTGRES_POOL_SIZE)
        .connection_timeout(POSTGRES_CHECKOUT_TIMEOUT)
        // r2d2 asks the manager on every checkout; `PostgresManager::is_valid` decides whether that costs a round
        // trip (a connection idle for a while, or one that may have seen a restart) or nothing.
        .test_on_check_out(true)
        .error_handler(Box::new(ConnectErrors { url: url.clone(), last: std::sync::Mutex::default() }))
        .build(manager)
        .map_err(|error| connect_error(&error))?;
    Ok((DieselStore { pools: Pools::Postgres(pool, health), _lock: None }, migrated))
}

/// The PostgreSQL pool's connections, checked only where one may be stale.
///
/// A network database drops connections (a restart, a failover, a proxy's idle timeout), and it drops them all at
/// once: the connection whose statement found it out is discarded (Diesel 2.3 marks its transaction manager broken
/// when libpq no longer knows the transaction status), but the others sit in the pool looking healthy, and each
/// would fail one caller. Diesel's own answer, a `SELECT 1` on every checkout, costs a round trip and a server
/// transaction per store call (about a tenth of heartbeat ingest: docs/benchmarks.md). Instead:
/// - a connection whose statement failed at the connection level is discarded when it comes back (`has_broken`:
///   our own flag, which does not depend on how Diesel tracks transactions, and Diesel's check), as is one whose
///   transaction manager is broken for another reason, or one returned while its thread panics;
/// - a connection is pinged as it is handed out (`is_valid`) only when it sat unused for longer than
///   `ping_after_idle`, or when any connection of the pool has failed at the connection level since this one was
///   last handed out (the pool's failure generation): after a restart, the first failure makes the pool check
///   every connection older than it, so a restart costs the requests in flight on killed connections and those
///   that took a connection used within the idle threshold before the first failure came back (one, for callers
///   one at a time: `a_connection_killed_while_fresh_fails_one_call_and_the_pool_checks_the_rest`).
#[derive(Debug)]
struct PostgresManager {
    connections: ConnectionManager<PgConnection>,
    ping_after_idle: Duration,
    health: Arc<PostgresPoolHealth>,
}

/// What the pool's connections report to it, shared by the manager, each connection's [`FailureWatch`] and the
/// store (for tests and for the store's `Debug`).
#[derive(Debug, Default)]
struct PostgresPoolHealth {
    /// Raised each time a connection first fails at the connection level; a connection last handed out under an
    /// older generation is pinged before it is handed out again.
    failure_generation: AtomicU64,
    /// Connections opened, the first [`POSTGRES_POOL_SIZE`] included.
    opened: AtomicU64,
    /// Checkouts that ran the `SELECT 1`, and those of them that failed (the connection was dropped).
    pings: AtomicU64,
    failed_pings: AtomicU64,
    /// Connections discarded as they came back (`has_broken`).
    discarded_on_return: AtomicU64,
}

/// A pooled PostgreSQL connection, with what its pool needs to decide whether to check it.
pub(crate) struct PostgresConnection {
    pub(crate) connection: PgConnection,
    /// Set by the connection's [`FailureWatch`] when one of its statements failed at the connection level.
    failed: Arc<AtomicBool>,
    /// When it was opened or last came back to the pool.
    returned_at: std::time::Instant,
    /// The pool's failure generation when it was opened or last handed out.
    generation: u64,
}

/// Watches every statement of one connection (Diesel reports each one's outcome to its instrumentation, those a
/// caller's closure swallowed and `BEGIN`/`COMMIT` included) for a failure that means the connection is gone.
struct FailureWatch {
    failed: Arc<AtomicBool>,
    health: Arc<PostgresPoolHealth>,
}

impl Instrumentation for FailureWatch {
    fn on_connection_event(&mut self, event: InstrumentationEvent<'_>) {
        if let InstrumentationEvent::FinishQuery { error: Some(error), .. } = event
            && is_connection_failure(error)
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            self.health.failure_generation.fetch_add(1, Ordering::Release);
        }
    }
}

/// Diesel reports `ClosedConnection` when libpq says the connection is bad (the server closed it, a network error)
/// or for SQLSTATE class 08, and `UnableToSendCommand` when libpq could not send the query at all.
fn is_connection_failure(error: &diesel::result::Error) -> bool {
    matches!(
        error,
        diesel::result::Error::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _
        )
    )
}

impl ManageConnection for PostgresManager {
    type Connection = PostgresConnection;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<PostgresConnection, diesel::r2d2::Error> {
        // Read before connecting: a failure reported while this connection was being opened may predate it.
        let generation = self.health.failure_generation.load(Ordering::Acquire);
        let mut connection = self.connections.connect()?;
        let failed = Arc::new(AtomicBool::new(false));
        connection.set_instrumentation(FailureWatch { failed: Arc::clone(&failed), health: Arc::clone(&self.health) });
        self.health.opened.fetch_add(1, Ordering::Relaxed);
        Ok(PostgresConnection { connection, failed, returned_at: std::time::Instant::now(), generation })
    }

    fn is_valid(&self, pooled: &mut PostgresConnection) -> Result<(), diesel::r2d2::Error> {
        // Read before pinging, so that a failure reported during the ping still makes the next checkout check.
        let generation = self.health.failure_generation.load(Ordering::Acquire);
        let stale = generation != pooled.generation || pooled.returned_at.elapsed() > self.ping_after_idle;
        pooled.generation = generation;
        if !stale {
            return Ok(());
        }
        self.health.pings.fetch_add(1, Ordering::Relaxed);
        self.connections.is_valid(&mut pooled.connection).inspect_err(|_| {
            self.health.failed_pings.fetch_add(1, Ordering::Relaxed);
        })
    }

    fn has_broken(&self, pooled: &mut PostgresConnection) -> bool {
        // Diesel's own check: a panicking thread, or a transaction that could not be closed.
        let broken = pooled.failed.load(Ordering::Relaxed) || self.connections.has_broken(&mut pooled.connection);
        if broken {
            self.health.discarded_on_return.fetch_add(1, Ordering::Relaxed);
        } else {
            pooled.returned_at = std::time::Instant::now();
        }
        broken
    }
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
        assert_eq!(pragma(&store, "temp_store", "temp_store"), "2", "statement journals in memory");
        // Opening again (once the first store has let go of the file) runs no migration twice.
        drop(store);
        DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
    }

    /// The bundled SQLite is built as the workspace's .cargo/config.toml says (its comment says why): without the
    /// per-connection mutexes of serialized mode, and with each connection's page cache its own. A build that lost
    /// the flags still works, only slower, so nothing else would notice.
    #[test]
    fn the_bundled_sqlite_is_built_for_one_thread_per_connection() {
        let dir = tempfile::tempdir().unwrap();
        let store = DieselStore::open(&DatabaseUrl::Sqlite(dir.path().join("g.db"))).unwrap();
        let options: Vec<String> = store
            .with_sqlite("compile options", |connection| {
                diesel::sql_query("SELECT compile_options AS value FROM pragma_compile_options")
                    .load::<Pragma>(connection)
            })
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|option| option.value)
            .collect();
        let hint = "built without the flags of .cargo/config.toml (is LIBSQLITE3_FLAGS set in the environment?)";
        assert!(options.iter().any(|option| option == "THREADSAFE=2"), "{hint}: {options:?}");
        assert!(!options.iter().any(|option| option == "ENABLE_MEMORY_MANAGEMENT"), "{hint}: {options:?}");
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

    /// Migration 2026-12-21-000021 on a database at 000020 with live and evicted agents: `received_minute`, a
    /// generated column before, is a plain one after with the same value in every row (NULL for the evicted), the
    /// gateway's `receipt_minute` of the receipt, and still indexed; reverted, it is generated again.
    #[test]
    fn sqlite_upgrade_to_a_written_receipt_minute_keeps_every_rows_minute() {
        use diesel::migration::MigrationSource;
        use diesel::sql_types::{BigInt, Nullable};
        use time::macros::datetime;

        #[derive(diesel::QueryableByName, Debug, PartialEq)]
        struct Minute {
            #[diesel(sql_type = Text)]
            agent_id: String,
            #[diesel(sql_type = Nullable<BigInt>)]
            received_minute: Option<i64>,
        }
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let minutes = |c: &mut SqliteConnection| {
            diesel::sql_query("SELECT agent_id, received_minute FROM gateway_heartbeats ORDER BY agent_id")
                .load::<Minute>(c)
                .unwrap()
        };
        let count = |c: &mut SqliteConnection, sql: &str| diesel::sql_query(sql).get_result::<Count>(c).unwrap().n;
        // 2 for a VIRTUAL generated column, 0 for a plain one.
        let hidden = "SELECT hidden AS n FROM pragma_table_xinfo('gateway_heartbeats') WHERE name = 'received_minute'";
        let indexed = "SELECT count(*) AS n FROM pragma_index_info('gateway_heartbeats_received_minute') \
                       WHERE name = 'received_minute'";

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.db");
        let mut c = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
        SqlitePragmas::MIGRATING.on_acquire(&mut c).unwrap();
        let migrations = MigrationSource::<diesel::sqlite::Sqlite>::migrations(&SQLITE_MIGRATIONS).unwrap().len();
        for _ in 0..migrations {
            if c.run_next_migration(SQLITE_MIGRATIONS).unwrap().to_string() == "20261221000020" {
                break;
            }
        }
        assert_eq!(count(&mut c, hidden), 2, "generated at 000020");

        // Receipts as the gateway writes them (Diesel's text for a timestamp), either side of minute boundaries.
        let receipts = [
            ("a-live", Some(datetime!(2026-02-22 12:00:59.999999 UTC))),
            ("b-live", Some(datetime!(2026-02-22 12:01:00 UTC))),
            ("c-live", Some(datetime!(2026-02-22 12:01:00.000001 UTC))),
            ("d-evicted", None),
            ("e-live", Some(datetime!(2030-07-01 23:59:30.5 UTC))),
            ("f-evicted", None),
        ];
        for (agent_id, receipt) in receipts {
            let received_at = receipt.map(|at| {
                let mut text = String::new();
                crate::timestamp::push_sqlite_text(crate::timestamp::to_db(at), &mut text);
                format!("'{text}'")
            });
            c.batch_execute(&format!(
                "INSERT INTO gateway_heartbeats (agent_id, cluster_id, last_seen_at, received_at, received_cluster_id) \
                 VALUES ('{agent_id}', 'west', '2026-02-22 12:00:00', {at}, {cluster})",
                at = received_at.as_deref().unwrap_or("NULL"),
                cluster = if receipt.is_some() { "'west'" } else { "NULL" },
            ))
            .unwrap();
        }
        let before = minutes(&mut c);
        let expected: Vec<Minute> = receipts
            .iter()
            .map(|(agent_id, receipt)| Minute {
                agent_id: (*agent_id).to_owned(),
                received_minute: receipt.map(crate::liveness::receipt_minute),
            })
            .collect();
        assert_eq!(before, expected, "the generated column agrees with receipt_minute");

        c.run_pending_migrations(SQLITE_MIGRATIONS).unwrap();
        assert_eq!(minutes(&mut c), before, "the same minutes, written");
        assert_eq!(count(&mut c, hidden), 0, "a plain column");
        assert_eq!(count(&mut c, indexed), 1, "indexed");
        // Plain: a write of the receipt alone no longer moves it (every statement of the gateway writes both).
        c.batch_execute("UPDATE gateway_heartbeats SET received_at = '2026-02-22 13:00:00' WHERE agent_id = 'a-live'")
            .unwrap();
        assert_eq!(minutes(&mut c)[0].received_minute, before[0].received_minute);

        c.revert_last_migration(SQLITE_MIGRATIONS).unwrap();
        assert_eq!(count(&mut c, hidden), 2, "generated again");
        assert_eq!(count(&mut c, indexed), 1, "indexed");
        let mut reverted = before;
        reverted[0].received_minute = Some(crate::liveness::receipt_minute(datetime!(2026-02-22 13:00:00 UTC)));
        assert_eq!(minutes(&mut c), reverted, "computed from the receipts again");
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
        use gateway_core::HeartbeatStore;
        let test = "connection::the_store_is_unavailable_while_postgres_is_down";
        let Some(server) = gateway_testkit::postgres::server(test) else { return };
        let database = server.create_database(test);
        let store = DieselStore::open(&crate::testing::postgres_url(database.url())).unwrap();
        let beat = beat();
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

    /// A PostgreSQL store whose pool checks connections idle longer than `ping_after_idle`.
    fn postgres_checking_after(url: &str, ping_after_idle: Duration) -> DieselStore {
        let DatabaseUrl::Postgres(url) = crate::testing::postgres_url(url) else { panic!("not a PostgreSQL url") };
        open_postgres_pinging_after(&url, ping_after_idle).unwrap().0
    }

    fn health(store: &DieselStore) -> &PostgresPoolHealth {
        match &store.pools {
            Pools::Postgres(_, health) => health,
            Pools::Sqlite(_) => panic!("a SQLite store"),
        }
    }

    fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Ends every other session on `admin`'s database, as a server restart or a proxy would, and waits until the
    /// server has let them go. Returns how many there were.
    fn terminate_other_backends(admin: &mut PgConnection) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
        let terminated =
            diesel::sql_query(format!("SELECT COUNT(*) FILTER (WHERE pg_terminate_backend(pid)) AS n {others}"))
                .get_result::<Count>(admin)
                .unwrap()
                .n;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while diesel::sql_query(format!("SELECT COUNT(*) AS n {others}")).get_result::<Count>(admin).unwrap().n > 0 {
            assert!(std::time::Instant::now() < deadline, "the terminated sessions did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
        terminated
    }

    /// One store call of each way a port method reaches a connection: a single statement, a transaction, and the
    /// heartbeat path (a single statement with no transaction around it).
    fn store_calls(store: &DieselStore, beat: &gateway_core::HeartbeatRecord) -> [Result<(), StoreError>; 3] {
        use gateway_core::HeartbeatStore;
        [
            store.ping(),
            store.immediate("select", |c| on_backend!(c, c => diesel::sql_query("SELECT 1").execute(c).map(drop))),
            store.upsert_heartbeat(beat),
        ]
    }

    fn beat() -> gateway_core::HeartbeatRecord {
        gateway_core::HeartbeatRecord {
            agent_id: gateway_core::AgentId::new("a").unwrap(),
            cluster_id: gateway_core::ClusterId::new("c").unwrap(),
            last_seen_at: OffsetDateTime::now_utc(),
        }
    }

    /// Connections the server ended while they sat unused in the pool (a restart, a failover, a proxy's idle
    /// timeout) are found dead by the check an idle connection gets, and replaced before any caller sees them.
    #[test]
    fn connections_killed_while_idle_are_replaced_unseen() {
        let Some(database) = gateway_testkit::postgres::database("connection::connections_killed_while_idle") else {
            return;
        };
        let store = postgres_checking_after(database.url(), Duration::from_millis(5));
        store.ping().unwrap();
        let mut admin = PgConnection::establish(database.url()).unwrap();
        assert_eq!(terminate_other_backends(&mut admin), i64::from(POSTGRES_POOL_SIZE));
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..3 {
            for outcome in store_calls(&store, &beat()) {
                outcome.unwrap();
            }
        }
        let health = health(&store);
        assert!(count(&health.failed_pings) >= 1, "{store:?}");
        assert!(count(&health.opened) > u64::from(POSTGRES_POOL_SIZE), "{store:?}");
        assert_eq!(count(&health.discarded_on_return), 0, "no caller's statement failed: {store:?}");
    }

    /// A connection the server ended while it was in use a moment ago is handed out unchecked (the documented
    /// cost): that one call fails as unavailable, the connection is discarded as it comes back, and its failure makes
    /// the pool check every other connection before handing it out, so of all the calls after the server killed
    /// every session only the first fails.
    #[test]
    fn a_connection_killed_while_fresh_fails_one_call_and_the_pool_checks_the_rest() {
        let Some(database) = gateway_testkit::postgres::database("connection::a_connection_killed_while_fresh") else {
            return;
        };
        let store = postgres_checking_after(database.url(), Duration::from_secs(3600));
        store.ping().unwrap();
        let mut admin = PgConnection::establish(database.url()).unwrap();
        assert_eq!(terminate_other_backends(&mut admin), i64::from(POSTGRES_POOL_SIZE));
        let outcomes: Vec<Result<(), StoreError>> =
            (0..POSTGRES_POOL_SIZE).flat_map(|_| store_calls(&store, &beat())).collect();
        assert!(matches!(&outcomes[0], Err(StoreError::Unavailable(_))), "{:?}", outcomes[0]);
        let failed: Vec<_> = outcomes[1..].iter().filter(|outcome| outcome.is_err()).collect();
        assert!(failed.is_empty(), "after the first, {} calls failed: {failed:?}", failed.len());
        let health = health(&store);
        assert_eq!(count(&health.discarded_on_return), 1, "{store:?}");
        assert!(count(&health.failed_pings) >= 1, "the others were checked: {store:?}");
        assert!(count(&health.opened) > u64::from(POSTGRES_POOL_SIZE), "{store:?}");
    }

    /// Connections in use are handed out without a round trip, and a statement's own failure (not the
    /// connection's) neither discards its connection nor makes the pool check the others.
    #[test]
    fn connections_in_use_are_not_checked_and_a_failing_statement_keeps_its_connection() {
        let Some(database) = gateway_testkit::postgres::database("connection::connections_in_use_are_not_checked")
        else {
            return;
        };
        let store = postgres_checking_after(database.url(), Duration::from_secs(3600));
        for _ in 0..20 {
            for outcome in store_calls(&store, &beat()) {
                outcome.unwrap();
            }
            let division = store.with_connection(
                "divide",
                |c| on_backend!(c, c => diesel::sql_query("SELECT 1 / 0").execute(c).map(drop)),
            );
            assert!(matches!(division, Err(StoreError::Internal(_))), "{division:?}");
        }
        let health = health(&store);
        assert_eq!(count(&health.pings), 0, "{store:?}");
        assert_eq!(count(&health.discarded_on_return), 0, "{store:?}");
        assert_eq!(count(&health.opened), u64::from(POSTGRES_POOL_SIZE), "{store:?}");
        assert_eq!(count(&health.failure_generation), 0, "{store:?}");
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
