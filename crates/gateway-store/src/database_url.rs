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
    /// `postgres://…` or `postgresql://…`. It may hold a password, so Debug hides it.
    Postgres(PostgresUrl),
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
            return PostgresUrl::parse(url).map(Self::Postgres);
        }
        Err(OpenError::InvalidUrl("expected sqlite://PATH or postgres://…".into()))
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Self::Postgres(url) => f.debug_tuple("Postgres").field(url).finish(),
        }
    }
}

/// `sslmode` values that insist on TLS. This build's libpq has no TLS (it is bundled without OpenSSL, so that
/// building needs only a C compiler), and libpq's default (`prefer`) would then quietly connect in clear text:
/// a URL that asks for TLS is refused instead.
const TLS_SSLMODES: [&str; 3] = ["require", "verify-ca", "verify-full"];
/// How long libpq tries to connect before giving up, unless the URL says otherwise: without it, a server that
/// drops packets would hold a start-up (or the pool's background connect) for the operating system's TCP timeout.
const DEFAULT_CONNECT_TIMEOUT_S: u32 = 10;

/// A PostgreSQL connection URL as the operator gave it, and its password (if any) so that messages can be
/// scrubbed of it.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    url: String,
    passwords: Vec<String>,
}

impl PostgresUrl {
    fn parse(url: &str) -> Result<Self, OpenError> {
        let query = url.split_once('?').map(|(_, query)| query).unwrap_or("");
        for (name, value) in query.split('&').filter_map(|pair| pair.split_once('=')) {
            if name == "sslmode" && TLS_SSLMODES.contains(&value) {
                return Err(OpenError::InvalidUrl(format!(
                    "sslmode={value} needs TLS, which this build of the gateway does not include (libpq is bundled \
                     without OpenSSL); see docs/operations.md for reaching PostgreSQL over TLS"
                )));
            }
        }
        Ok(Self { url: url.to_owned(), passwords: passwords_in(url) })
    }

    /// The URL handed to libpq: the operator's, with a connect timeout unless it sets one.
    pub(crate) fn for_libpq(&self) -> String {
        if self.url.contains("connect_timeout=") {
            return self.url.clone();
        }
        let separator = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{separator}connect_timeout={DEFAULT_CONNECT_TIMEOUT_S}", self.url)
    }

    /// `message` without the URL or its password, for errors and logs. libpq does not repeat passwords in its
    /// messages; this makes sure of it.
    pub fn redact(&self, message: &str) -> String {
        let mut redacted = message.replace(&self.url, "<database url>");
        for password in &self.passwords {
            redacted = redacted.replace(password.as_str(), "<redacted>");
        }
        redacted
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The password of `postgres://user:password@host/db` (as written and percent-decoded), and any `password=`
/// query parameter's.
fn passwords_in(url: &str) -> Vec<String> {
    let mut passwords = Vec::new();
    let (before_query, query) = url.split_once('?').unwrap_or((url, ""));
    let after_scheme = before_query.split_once("://").map_or(before_query, |(_, rest)| rest);
    if let Some((userinfo, _)) = after_scheme.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        passwords.push(password.to_owned());
    }
    for (name, value) in query.split('&').filter_map(|pair| pair.split_once('=')) {
        if name == "password" {
            passwords.push(value.to_owned());
        }
    }
    let decoded: Vec<String> = passwords.iter().map(|password| percent_decode(password)).collect();
    passwords.extend(decoded);
    passwords.retain(|password| !password.is_empty());
    passwords.sort();
    passwords.dedup();
    // The longest first, so that a password containing a shorter one is replaced whole.
    passwords.sort_by_key(|password| std::cmp::Reverse(password.len()));
    passwords
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes.get(index + 1..index + 3).and_then(|pair| std::str::from_utf8(pair).ok());
        match (bytes[index], hex.and_then(|pair| u8::from_str_radix(pair, 16).ok())) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                index += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sqlite_paths_and_refuses_nonsense() {
        assert_eq!(DatabaseUrl::parse("sqlite://gateway.db").unwrap(), DatabaseUrl::Sqlite("gateway.db".into()));
        assert_eq!(DatabaseUrl::parse("sqlite:///var/lib/g.db").unwrap(), DatabaseUrl::Sqlite("/var/lib/g.db".into()));
        assert!(matches!(DatabaseUrl::parse("postgres://u:pw@h/db").unwrap(), DatabaseUrl::Postgres(_)));
        assert!(matches!(DatabaseUrl::parse("postgresql://h/db").unwrap(), DatabaseUrl::Postgres(_)));
        assert!(!format!("{:?}", DatabaseUrl::parse("postgres://u:pw@h/db").unwrap()).contains("pw"));
        for bad in ["", "sqlite://", "mysql://x", "gateway.db", "sqlite:gateway.db"] {
            assert!(DatabaseUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_url_that_asks_for_tls_is_refused_with_the_reason() {
        for mode in TLS_SSLMODES {
            let error = DatabaseUrl::parse(&format!("postgres://u:hunter2@h/db?sslmode={mode}")).unwrap_err();
            let message = error.to_string();
            assert!(message.contains(&format!("sslmode={mode} needs TLS")), "{message}");
            assert!(!message.contains("hunter2"), "{message}");
        }
        for mode in ["disable", "allow", "prefer"] {
            assert!(DatabaseUrl::parse(&format!("postgres://h/db?sslmode={mode}")).is_ok(), "{mode}");
        }
    }

    #[test]
    fn messages_are_scrubbed_of_the_url_and_its_password() {
        let DatabaseUrl::Postgres(url) =
            DatabaseUrl::parse("postgres://gw:p%40ss@db.internal:5432/g?password=other").unwrap()
        else {
            panic!("not postgres")
        };
        let message = "failed: postgres://gw:p%40ss@db.internal:5432/g?password=other, p@ss, p%40ss, other";
        let redacted = url.redact(message);
        for secret in ["p@ss", "p%40ss", "other"] {
            assert!(!redacted.contains(secret), "{redacted}");
        }
        assert!(redacted.starts_with("failed: <database url>"), "{redacted}");
    }

    #[test]
    fn libpq_gets_a_connect_timeout_unless_the_url_sets_one() {
        let url = |text| match DatabaseUrl::parse(text).unwrap() {
            DatabaseUrl::Postgres(url) => url.for_libpq(),
            DatabaseUrl::Sqlite(_) => panic!("not postgres"),
        };
        assert_eq!(url("postgres://h/db"), "postgres://h/db?connect_timeout=10");
        assert_eq!(url("postgres://h/db?sslmode=disable"), "postgres://h/db?sslmode=disable&connect_timeout=10");
        assert_eq!(url("postgres://h/db?connect_timeout=3"), "postgres://h/db?connect_timeout=3");
    }
}
