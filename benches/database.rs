//! Which database a benchmark runs on: SQLite (a file in a temporary directory), or with `BENCH_DATABASE=postgres`
//! a throwaway PostgreSQL server of the benchmark's own (gateway_testkit::postgres::durable_server: loopback,
//! commits flushed to disk as PostgreSQL does by default), a fresh database per scenario.
#![allow(dead_code, reason = "shared by the benchmarks; not each uses every part")]

use std::path::PathBuf;

use gateway_store::DatabaseUrl;
use gateway_testkit::postgres::{TempDatabase, TempPostgres};

pub enum Backend {
    Sqlite,
    Postgres(TempPostgres),
}

/// One scenario's database, removed when dropped.
pub struct BenchDatabase {
    pub url: DatabaseUrl,
    /// The SQLite file, for the parts that write it directly.
    pub sqlite_path: Option<PathBuf>,
    /// The PostgreSQL URL, for the parts that write it directly.
    pub postgres_url: Option<String>,
    _keep: Keep,
}

impl BenchDatabase {
    /// The `--database-url` of a gateway on this database.
    pub fn url_text(&self) -> String {
        match (&self.sqlite_path, &self.postgres_url) {
            (Some(path), _) => format!("sqlite://{}", path.display()),
            (None, Some(url)) => url.clone(),
            (None, None) => unreachable!("a database is one or the other"),
        }
    }
}

enum Keep {
    Directory(#[allow(dead_code, reason = "held for its drop")] tempfile::TempDir),
    Database(#[allow(dead_code, reason = "held for its drop")] TempDatabase),
}

impl Backend {
    pub fn from_env(bench: &str) -> Self {
        match std::env::var("BENCH_DATABASE").as_deref() {
            Ok("postgres") => Self::Postgres(
                gateway_testkit::postgres::durable_server(bench).expect("BENCH_DATABASE=postgres needs PostgreSQL"),
            ),
            Ok("sqlite") | Err(_) => Self::Sqlite,
            Ok(other) => panic!("BENCH_DATABASE={other}: expected sqlite or postgres"),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite WAL",
            Self::Postgres(_) => "PostgreSQL",
        }
    }

    pub fn is_sqlite(&self) -> bool {
        matches!(self, Self::Sqlite)
    }

    pub fn fresh(&self, scenario: &str) -> BenchDatabase {
        match self {
            Self::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("bench.db");
                BenchDatabase {
                    url: DatabaseUrl::Sqlite(path.clone()),
                    sqlite_path: Some(path),
                    postgres_url: None,
                    _keep: Keep::Directory(dir),
                }
            }
            Self::Postgres(server) => {
                let database = server.create_database(scenario);
                BenchDatabase {
                    url: DatabaseUrl::parse(database.url()).unwrap(),
                    sqlite_path: None,
                    postgres_url: Some(database.url().to_owned()),
                    _keep: Keep::Database(database),
                }
            }
        }
    }
}
