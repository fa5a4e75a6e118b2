//! Error policy of this crate.
//!
//! Setting the store up ([`OpenError`]) fails loudly: the binary reports it and exits. Once open, every port
//! method returns gateway-core's `StoreError`, classified here in one place: conditions that may pass (pool
//! exhausted, SQLite busy past its timeout, I/O, a file or mount that turned read-only; a PostgreSQL server that
//! is unreachable, shutting down, out of connections, or that chose this transaction as a deadlock's or a
//! serialization conflict's victim) are `Unavailable`, so loops retry and `/readyz` reports them; a full disk (or
//! database size limit) is `Full`, which loops retry the same way and requests answer with 507; constraint
//! violations are `Conflict`; anything else is `Internal`. Messages name the failing operation but never carry
//! row values (they may hold secrets or payloads), nor the database URL.

use std::path::PathBuf;

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use gateway_core::{FencingToken, StoreError};

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid database url: {0}")]
    InvalidUrl(String),
    #[error("cannot open the database: {0}")]
    Connect(String),
    #[error("cannot run migrations: {0}")]
    Migrate(String),
    /// Another live process holds the database's lock (DESIGN.md §8, one process per SQLite file).
    #[error("{} is in use by another gateway{}", .path.display(), pid_suffix(*.holder_pid))]
    InUse { path: PathBuf, holder_pid: Option<u32> },
    #[error("cannot lock {}: {source}", .path.display())]
    Lock { path: PathBuf, source: std::io::Error },
}

/// " (pid N)" when the holder's pid is known: it has not always written it yet when a second gateway looks.
fn pid_suffix(pid: Option<u32>) -> String {
    pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
}

/// What a transaction that may be fenced fails with (`DieselStore::immediate_fenced`, `fencing::admit`).
#[derive(Debug)]
pub(crate) enum FencedError {
    Database(DieselError),
    Fenced { token: FencingToken, newest: FencingToken },
}

impl From<DieselError> for FencedError {
    fn from(error: DieselError) -> Self {
        Self::Database(error)
    }
}

impl FencedError {
    pub(crate) fn into_store_error(self, operation: &str) -> StoreError {
        match self {
            Self::Database(error) => classify(operation, error),
            Self::Fenced { token, newest } => StoreError::Fenced { token, newest },
        }
    }
}

pub(crate) fn classify(operation: &str, error: DieselError) -> StoreError {
    match error {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _) => {
            StoreError::Conflict(format!("{operation}: unique constraint"))
        }
        DieselError::DatabaseError(DatabaseErrorKind::ForeignKeyViolation, _) => {
            StoreError::Conflict(format!("{operation}: referenced row missing"))
        }
        DieselError::DatabaseError(DatabaseErrorKind::CheckViolation, _) => {
            StoreError::Conflict(format!("{operation}: check constraint"))
        }
        DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection
            | DatabaseErrorKind::UnableToSendCommand
            | DatabaseErrorKind::SerializationFailure,
            info,
        ) => StoreError::Unavailable(format!("{operation}: {}", info.message())),
        DieselError::DatabaseError(_, info) if is_full(info.message()) => {
            StoreError::Full(format!("{operation}: {}", info.message()))
        }
        DieselError::DatabaseError(_, info) if is_transient(info.message()) => {
            StoreError::Unavailable(format!("{operation}: {}", info.message()))
        }
        DieselError::DatabaseError(_, info) => StoreError::Internal(format!("{operation}: {}", info.message())),
        DieselError::DeserializationError(error) => {
            StoreError::Internal(format!("{operation}: unreadable row: {error}"))
        }
        other => StoreError::Internal(format!("{operation}: {other}")),
    }
}

/// A write refused for want of space: SQLITE_FULL ("database or disk is full": the disk, or `max_page_count`),
/// and PostgreSQL's disk_full (53100, "could not extend file … No space left on device"). Its own class, not a
/// passing unavailability: the operator has to free space (docs/operations.md), and a client is told so (507).
fn is_full(message: &str) -> bool {
    ["database or disk is full", "could not extend file", "No space left on device"]
        .iter()
        .any(|needle| message.contains(needle))
}

/// SQLite reports lock timeouts, I/O and refused writes only as text through Diesel. A refused write
/// (SQLITE_READONLY: the file, its directory or its mount became read-only) is the operator's to fix, like a full
/// disk, and the gateway works again once they have: so it is a 503 that loops retry, not a 500.
///
/// PostgreSQL's error classes do not reach Diesel's error kinds either (Diesel keeps the SQLSTATE to itself), so
/// the server's messages for its transient classes are matched the same way: deadlock_detected (40P01),
/// too_many_connections (53300), admin_shutdown and crash_shutdown (57P01, 57P02), cannot_connect_now (57P03),
/// lock_not_available (55P03). Connection failures and serialization failures arrive as their own kinds
/// (`classify`); a full disk is [`is_full`].
fn is_transient(message: &str) -> bool {
    [
        "database is locked",
        "database table is locked",
        "disk I/O error",
        "unable to open",
        "attempt to write a readonly database",
        "deadlock detected",
        "too many clients already",
        "too many connections",
        "terminating connection due to administrator command",
        "terminating connection because of crash of another server process",
        "the database system is starting up",
        "the database system is shutting down",
        "the database system is in recovery mode",
        "could not obtain lock",
        "could not serialize access",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, SqliteConnection};

    use super::*;

    #[test]
    fn classifies_not_found_style_errors_as_internal() {
        assert!(matches!(classify("op", DieselError::NotFound), StoreError::Internal(_)));
    }

    /// What SQLite itself says when its database may not grow (SQLITE_FULL, here through `max_page_count`, as a
    /// full disk says it), classified as the adapter would: the store is full, which is neither passing nor a bug.
    #[test]
    fn a_database_that_cannot_grow_is_full() {
        let mut connection = SqliteConnection::establish(":memory:").unwrap();
        connection.batch_execute("CREATE TABLE t (b BLOB); PRAGMA max_page_count = 2;").unwrap();
        let refused = connection.batch_execute("INSERT INTO t VALUES (zeroblob(100000))").unwrap_err();
        let classified = classify("insert", refused);
        assert!(
            matches!(&classified, StoreError::Full(message) if message == "insert: database or disk is full"),
            "{classified:?}"
        );
    }

    /// What SQLite itself says when it may not write (a read-only file or mount, `query_only`), classified as the
    /// adapter would. The process runs as root in CI, so file permissions cannot be what stops the write.
    #[test]
    fn a_database_that_refuses_writes_is_unavailable_not_internal() {
        let mut connection = SqliteConnection::establish(":memory:").unwrap();
        connection.batch_execute("CREATE TABLE t (n INTEGER); PRAGMA query_only = 1;").unwrap();
        let refused = connection.batch_execute("INSERT INTO t VALUES (1)").unwrap_err();
        let DieselError::DatabaseError(_, info) = &refused else { panic!("{refused:?}") };
        assert!(info.message().contains("attempt to write a readonly database"), "{}", info.message());
        let classified = classify("insert", refused);
        assert!(
            matches!(&classified, StoreError::Unavailable(message) if message.starts_with("insert: ")),
            "{classified:?}"
        );
    }
}
