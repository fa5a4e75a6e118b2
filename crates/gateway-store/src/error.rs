//! Error policy of this crate.
//!
//! Setting the store up ([`OpenError`]) fails loudly: the binary reports it and exits. Once open, every port
//! method returns gateway-core's `StoreError`, classified here in one place: conditions that may pass (pool
//! exhausted, SQLite busy past its timeout, I/O) are `Unavailable`, so loops retry and `/readyz` reports them;
//! constraint violations are `Conflict`; anything else is `Internal`. Messages name the failing operation but
//! never carry row values (they may hold secrets or payloads).

use std::path::PathBuf;

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use gateway_core::StoreError;

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid database url: {0}")]
    InvalidUrl(String),
    #[error("PostgreSQL is not supported yet (phase 2); use sqlite://PATH")]
    PostgresNotSupported,
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

/// SQLite reports lock timeouts, I/O and full disks only as text through Diesel.
fn is_transient(message: &str) -> bool {
    ["database is locked", "database table is locked", "disk I/O error", "database or disk is full", "unable to open"]
        .iter()
        .any(|needle| message.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_not_found_style_errors_as_internal() {
        assert!(matches!(classify("op", DieselError::NotFound), StoreError::Internal(_)));
    }
}
