//! A throwaway PostgreSQL server for tests and benchmarks: `initdb` into a temporary directory, started on a free
//! loopback port with durability off (`fsync`, `synchronous_commit`, `full_page_writes`: a test's data is
//! disposable), trust authentication for the `postgres` superuser.
//!
//! - [`database`]: a fresh database on the process's shared server, started the first time a test asks and kept
//!   for the rest of the process, so tests share one server and run in parallel, each on its own database.
//! - [`server`]: a server of the test's own, for a test that stops and starts it.
//! - [`durable_server`]: a server of the caller's own with PostgreSQL's default durability (every commit flushed
//!   to disk), for benchmarks that compare it with SQLite.
//!
//! Both return `None`, after printing one line, when the PostgreSQL binaries are not on the machine, and panic
//! instead under CI ([`crate::running_in_ci`]) (CI installs them, so missing binaries there are a broken CI, not a skip).
//!
//! PostgreSQL refuses to run as root: as root (CI), every server command runs as the `postgres` user
//! (`runuser -u postgres --`), in a directory handed over to it.
//!
//! No server outlives its process: each has a sentinel, a `sh` that blocks reading a pipe whose only writer is
//! this process. When the process ends, however it ends (a panic, `exit`, SIGKILL), the kernel closes the pipe,
//! and the sentinel stops the server and removes its directory. Rust never drops statics, so without it the
//! shared server would be left running after every `cargo test`.

use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use diesel::connection::SimpleConnection as _;
use diesel::{Connection as _, PgConnection};

/// Where distributions put PostgreSQL's server binaries when they are not on `PATH` (Debian and Ubuntu: one
/// directory per major version).
const VERSIONED_BIN_DIRS: &str = "/usr/lib/postgresql";
/// The user every server command runs as when this process is root.
const SERVER_USER: &str = "postgres";
/// Attempts at starting on a free port: another process may take the port between the probe and the start.
const PORT_ATTEMPTS: usize = 5;

/// The one line a test prints when it skips for want of PostgreSQL.
pub fn skip_line(test: &str) -> String {
    format!("skipping {test}: PostgreSQL binaries not found (install postgresql)")
}

/// A fresh, empty database on the shared server, or `None` (and one printed line) when PostgreSQL is not
/// installed. Panics under CI when PostgreSQL is missing, or when the server cannot be started.
pub fn database(test: &str) -> Option<TempDatabase> {
    static SHARED: OnceLock<Result<TempPostgres, String>> = OnceLock::new();
    let binaries = binaries_or_skip(test)?;
    let shared = SHARED.get_or_init(|| TempPostgres::start_with(binaries, false));
    match shared {
        Ok(server) => Some(server.create_database(test)),
        Err(error) => panic!("cannot start the shared PostgreSQL server: {error}"),
    }
}

/// A server of the caller's own (stopped and removed when dropped), or `None` (and one printed line) when
/// PostgreSQL is not installed. Panics under CI when PostgreSQL is missing, or when it cannot start.
pub fn server(test: &str) -> Option<TempPostgres> {
    let binaries = binaries_or_skip(test)?;
    Some(TempPostgres::start_with(binaries, false).unwrap_or_else(|error| panic!("cannot start PostgreSQL: {error}")))
}

/// [`server`] with `fsync`, `synchronous_commit` and `full_page_writes` on, as a production server has them.
pub fn durable_server(test: &str) -> Option<TempPostgres> {
    let binaries = binaries_or_skip(test)?;
    Some(TempPostgres::start_with(binaries, true).unwrap_or_else(|error| panic!("cannot start PostgreSQL: {error}")))
}

fn binaries_or_skip(test: &str) -> Option<PathBuf> {
    let ci = crate::running_in_ci();
    match skip_or_fail(test, find_binaries(), ci) {
        Ok(Some(directory)) => Some(directory),
        Ok(None) => {
            #[allow(clippy::print_stderr, reason = "the one line a skipped test leaves")]
            {
                eprintln!("{}", skip_line(test));
            }
            None
        }
        Err(reason) => panic!("{reason}"),
    }
}

/// What a test does about the binaries it found (or not): use them, skip (`Ok(None)`), or fail under CI.
fn skip_or_fail(test: &str, found: Option<PathBuf>, ci: bool) -> Result<Option<PathBuf>, String> {
    match found {
        Some(directory) => Ok(Some(directory)),
        None if ci => Err(format!("{} (CI is set: a missing server fails the run)", skip_line(test))),
        None => Ok(None),
    }
}

/// The directory holding `initdb` and `pg_ctl`: the first `PATH` entry with both, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
pub fn find_binaries() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|directory| has_server_binaries(directory));
    if let Some(directory) = on_path {
        // Distributions link the binaries onto PATH; the server binary `pg_ctl` starts lives beside the target.
        return std::fs::canonicalize(directory.join("initdb")).ok()?.parent().map(Path::to_owned);
    }
    newest_versioned_bin_dir(Path::new(VERSIONED_BIN_DIRS))
}

fn has_server_binaries(directory: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"].iter().all(|name| directory.join(name).is_file())
}

/// `<root>/<version>/bin` with the highest numeric version that has the server binaries.
fn newest_versioned_bin_dir(root: &Path) -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.split('.').next()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_server_binaries(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// A running throwaway server. Dropping it stops it and removes its directory.
#[derive(Debug)]
pub struct TempPostgres {
    binaries: PathBuf,
    /// Owned by the server user; holds `data/`, the socket and `server.log`.
    root: PathBuf,
    port: u16,
    /// Set when this process is root: the server's commands run as [`SERVER_USER`].
    as_server_user: bool,
    /// Commits reach the disk before they are acknowledged (PostgreSQL's defaults), rather than never.
    durable: bool,
    /// The write end of the sentinel's pipe: never written, only closed (by the process ending, or by drop).
    sentinel: Mutex<Option<ChildStdin>>,
}

static DATABASES: AtomicU64 = AtomicU64::new(0);

impl TempPostgres {
    fn start_with(binaries: PathBuf, durable: bool) -> Result<Self, String> {
        let root = tempfile::Builder::new()
            .prefix("gateway-pg-")
            .tempdir()
            .map_err(|error| format!("cannot make a temporary directory: {error}"))?
            .keep();
        let as_server_user = std::fs::metadata(&root).map_err(|error| error.to_string())?.uid() == 0;
        if as_server_user {
            let (uid, gid) = server_user_ids()?;
            std::os::unix::fs::chown(&root, Some(uid), Some(gid))
                .map_err(|error| format!("cannot hand {} to {SERVER_USER}: {error}", root.display()))?;
        }
        // The sentinel first: from here on, whatever happens to this process, the directory goes.
        let sentinel = spawn_sentinel(&binaries, &root, as_server_user)?;
        let mut server =
            Self { binaries, root, port: 0, as_server_user, durable, sentinel: Mutex::new(Some(sentinel)) };
        server.run(
            "initdb",
            &[
                "-D",
                &server.data().display().to_string(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port()?;
            match server.start() {
                Ok(()) => return Ok(server),
                Err(error) => last_error = error,
            }
        }
        Err(format!("the server did not start on a free port: {last_error}"))
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id (from `postmaster.pid`), while the server runs: every connection is served by a
    /// child of it, so a benchmark can pin the server to CPUs or read its CPU time.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let pid_file = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        pid_file.lines().next()?.trim().parse().ok()
    }

    /// `postgres://postgres@127.0.0.1:PORT/DATABASE`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Starts the server (again, after [`Self::stop`]) on its port; returns once it accepts connections.
    pub fn start(&self) -> Result<(), String> {
        let durability = if self.durable { "on" } else { "off" };
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync={durability} -c synchronous_commit={durability} \
             -c full_page_writes={durability} -c max_connections=300",
            self.port,
            self.root.display()
        );
        // For a look inside a benchmark's server (`-c shared_preload_libraries=pg_stat_statements`, say); never set
        // by a test.
        if let Ok(extra) = std::env::var("TESTKIT_POSTGRES_OPTIONS") {
            options.push(' ');
            options.push_str(&extra);
        }
        let log = self.root.join("server.log").display().to_string();
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-l", &log, "-o", &options, "-w", "-t", "60", "start"])
            .map_err(|error| format!("{error}\nserver log:\n{}", std::fs::read_to_string(&log).unwrap_or_default()))
    }

    /// Stops the server (fast: open connections are closed); returns once it is down.
    pub fn stop(&self) -> Result<(), String> {
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "-t", "60", "stop"])
    }

    /// A new empty database named after `test` (and a counter, so that names never repeat).
    pub fn create_database(&self, test: &str) -> TempDatabase {
        let name = database_name(test, DATABASES.fetch_add(1, Ordering::Relaxed));
        let admin_url = self.url("postgres");
        let mut admin = PgConnection::establish(&admin_url)
            .unwrap_or_else(|error| panic!("cannot connect to the test server: {error}"));
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .unwrap_or_else(|error| panic!("cannot create database {name}: {error}"));
        TempDatabase { url: self.url(&name), name, admin_url }
    }

    fn command(&self, program: &str) -> Command {
        let program = self.binaries.join(program);
        if self.as_server_user {
            let mut command = Command::new("runuser");
            command.args(["-u", SERVER_USER, "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let output = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("cannot run {program}: {error}"))?;
        check(program, &output)
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let _ = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.root);
        // Nothing left for the sentinel to do: let it go now rather than at the process's end.
        drop(self.sentinel.lock().unwrap_or_else(PoisonError::into_inner).take());
    }
}

fn check(program: &str, output: &Output) -> Result<(), String> {
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{program} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// A database on a test server. Dropping it drops the database (closing whatever still uses it).
#[derive(Debug)]
pub struct TempDatabase {
    url: String,
    name: String,
    admin_url: String,
}

impl TempDatabase {
    /// `postgres://postgres@127.0.0.1:PORT/NAME`: no password (trust authentication).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        // Best effort: a stopped server takes its databases with it anyway.
        if let Ok(mut admin) = PgConnection::establish(&self.admin_url) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name));
        }
    }
}

/// `t<counter>_<test>`, lowercase letters, digits and underscores, within PostgreSQL's 63-byte names.
fn database_name(test: &str, counter: u64) -> String {
    let cleaned: String =
        test.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    let mut name = format!("t{counter}_{cleaned}");
    name.truncate(63);
    name
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|error| format!("no free port: {error}"))?;
    listener.local_addr().map(|address| address.port()).map_err(|error| error.to_string())
}

fn server_user_ids() -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let output =
            Command::new("id").args([flag, SERVER_USER]).output().map_err(|error| format!("cannot run id: {error}"))?;
        check("id", &output).map_err(|error| {
            format!("PostgreSQL refuses to run as root, and there is no {SERVER_USER} user: {error}")
        })?;
        String::from_utf8_lossy(&output.stdout).trim().parse().map_err(|error| format!("id {flag}: {error}"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// `sh`, in a process group of its own (a Ctrl-C at the terminal must not kill it before the test process), that
/// waits for the end of its standard input, then stops the server in `root` and removes `root`.
fn spawn_sentinel(binaries: &Path, root: &Path, as_server_user: bool) -> Result<ChildStdin, String> {
    let pg_ctl = quote(&binaries.join("pg_ctl").display().to_string());
    let data = quote(&root.join("data").display().to_string());
    let run_as = if as_server_user { format!("runuser -u {SERVER_USER} -- ") } else { String::new() };
    let script = format!(
        "cat >/dev/null; if [ -f {data}/postmaster.pid ]; then {run_as}{pg_ctl} -D {data} -m immediate -w stop; fi; \
         rm -rf {}",
        quote(&root.display().to_string())
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|error| format!("cannot start the cleanup sentinel: {error}"))?;
    let mut stdin = child.stdin.take().ok_or("the sentinel has no stdin")?;
    // Nothing is ever written; flushing an empty write only proves the pipe is open.
    stdin.write_all(b"").map_err(|error| format!("the sentinel's pipe: {error}"))?;
    Ok(stdin)
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Serializes tests of this module that start and stop servers of their own.
#[cfg(test)]
static SERVERS: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use diesel::RunQueryDsl as _;
    use diesel::sql_types::Text;

    use super::*;

    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = Text)]
        setting: String,
    }

    fn setting(url: &str, name: &str) -> String {
        let mut connection = PgConnection::establish(url).unwrap();
        diesel::sql_query(format!("SELECT setting FROM pg_settings WHERE name = '{name}'"))
            .get_result::<Setting>(&mut connection)
            .unwrap()
            .setting
    }

    #[test]
    fn names_are_valid_unique_identifiers() {
        assert_eq!(database_name("store::cron::tests::postgres::a-b", 7), "t7_store__cron__tests__postgres__a_b");
        assert_eq!(database_name(&"x".repeat(100), 12).len(), 63);
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn missing_binaries_skip_with_one_line_and_fail_under_ci() {
        assert_eq!(skip_line("store::x"), "skipping store::x: PostgreSQL binaries not found (install postgresql)");
        assert_eq!(skip_or_fail("t", None, false), Ok(None));
        let failure = skip_or_fail("t", None, true).unwrap_err();
        assert!(failure.starts_with(&skip_line("t")) && failure.contains("CI is set"), "{failure}");
        let found = PathBuf::from("/usr/lib/postgresql/15/bin");
        assert_eq!(skip_or_fail("t", Some(found.clone()), true), Ok(Some(found)));
    }

    #[test]
    fn the_newest_versioned_directory_with_the_binaries_wins() {
        let root = tempfile::tempdir().unwrap();
        for (version, complete) in [("13", true), ("16", true), ("17", false), ("notes", true)] {
            let bin = root.path().join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            let names: &[&str] = if complete { &["initdb", "pg_ctl", "postgres"] } else { &["initdb"] };
            for name in names {
                std::fs::write(bin.join(name), "").unwrap();
            }
        }
        assert_eq!(newest_versioned_bin_dir(root.path()), Some(root.path().join("16/bin")));
        assert_eq!(newest_versioned_bin_dir(&root.path().join("missing")), None);
    }

    #[test]
    fn databases_are_fresh_and_separate_on_a_disposable_server() {
        let Some(first) = database("testkit::postgres::first") else { return };
        let Some(second) = database("testkit::postgres::second") else { return };
        assert_ne!(first.name(), second.name());
        let mut connection = PgConnection::establish(first.url()).unwrap();
        connection.batch_execute("CREATE TABLE t (n INTEGER)").unwrap();
        // The second database does not see the first's table.
        let mut other = PgConnection::establish(second.url()).unwrap();
        assert!(other.batch_execute("SELECT * FROM t").is_err());
        assert_eq!(setting(first.url(), "fsync"), "off");
        assert_eq!(setting(first.url(), "listen_addresses"), "127.0.0.1");
        drop(connection);
        let name = first.name().to_owned();
        let admin = first.admin_url.clone();
        drop(first);
        let mut admin = PgConnection::establish(&admin).unwrap();
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let left: Count = diesel::sql_query(format!("SELECT COUNT(*) AS n FROM pg_database WHERE datname = '{name}'"))
            .get_result(&mut admin)
            .unwrap();
        assert_eq!(left.n, 0, "a dropped TempDatabase drops its database");
    }

    #[test]
    fn a_server_of_its_own_stops_starts_and_is_gone_after_drop() {
        let _serial = SERVERS.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(server) = server("testkit::postgres::own") else { return };
        let database = server.create_database("own");
        PgConnection::establish(database.url()).unwrap();
        let pid = server.postmaster_pid().unwrap();
        let command = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(command.contains("postgres"), "{command}");
        server.stop().unwrap();
        assert!(PgConnection::establish(database.url()).is_err(), "connected to a stopped server");
        assert_eq!(server.postmaster_pid(), None, "no postmaster.pid once stopped");
        server.start().unwrap();
        PgConnection::establish(database.url()).unwrap();
        assert_ne!(server.postmaster_pid(), None);
        let root = server.root.clone();
        drop(database);
        drop(server);
        assert!(!root.exists(), "{} is left behind", root.display());
    }

    /// The sentinel alone (as when the process dies without dropping anything): closing its pipe stops the server
    /// and removes its directory.
    #[test]
    fn closing_the_sentinel_pipe_stops_the_server_and_removes_its_directory() {
        let _serial = SERVERS.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(server) = server("testkit::postgres::sentinel") else { return };
        let root = server.root.clone();
        let pid_file = server.data().join("postmaster.pid");
        assert!(pid_file.exists());
        // Leak the server (no drop, as at a process exit) but close the pipe, as the kernel would.
        let sentinel = server.sentinel.lock().unwrap_or_else(PoisonError::into_inner).take();
        let port = server.port;
        std::mem::forget(server);
        drop(sentinel);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while root.exists() {
            assert!(std::time::Instant::now() < deadline, "the sentinel did not clean up {}", root.display());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err(), "the server still listens");
    }
}
