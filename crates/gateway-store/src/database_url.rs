//! `--database-url`: which backend, and where.

use std::fmt;
use std::path::PathBuf;

use crate::error::OpenError;

/// A parsed `--database-url`.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `sqlite://PATH`: `sqlite://gateway.db` is relative to the working directory, `sqlite:///var/lib/g.db`
    /// absolute. The file is created if missing.
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…` (phase 2). Kept whole; it may hold a password, so Debug hides it.
    Postgres(String),
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<Self, OpenError> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(OpenError::InvalidUrl("sqlite:// needs a file path, e.g. sqlite://gateway.db".into()));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        Err(OpenError::InvalidUrl("expected sqlite://PATH or postgres://…".into()))
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Self::Postgres(_) => f.write_str("Postgres(<redacted>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sqlite_paths_and_refuses_nonsense() {
        assert_eq!(DatabaseUrl::parse("sqlite://gateway.db").unwrap(), DatabaseUrl::Sqlite("gateway.db".into()));
        assert_eq!(DatabaseUrl::parse("sqlite:///var/lib/g.db").unwrap(), DatabaseUrl::Sqlite("/var/lib/g.db".into()));
        assert!(matches!(DatabaseUrl::parse("postgres://u:pw@h/db").unwrap(), DatabaseUrl::Postgres(_)));
        assert!(!format!("{:?}", DatabaseUrl::parse("postgres://u:pw@h/db").unwrap()).contains("pw"));
        for bad in ["", "sqlite://", "mysql://x", "gateway.db", "sqlite:gateway.db"] {
            assert!(DatabaseUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
