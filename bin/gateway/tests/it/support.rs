//! Starting the real binary and talking to it over HTTP and SSE.
#![allow(dead_code, reason = "shared by every test module; not each one uses every helper")]

pub mod cluster;
pub mod python;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The operator token every test gateway runs with.
pub const TOKEN: &str = "integration-test-operator-token";
/// Upper bound for anything the tests wait for; generous because CI machines are slow, never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A running `gateway` process. Killed when dropped.
pub struct Gateway {
    child: Child,
    pub base: String,
    pub dir: Arc<tempfile::TempDir>,
    stderr: Arc<Mutex<String>>,
    /// Set once the process's stderr has reached its end (the process is gone and every line is in `stderr`).
    stderr_closed: Arc<AtomicBool>,
    agent: ureq::Agent,
}

impl Gateway {
    /// Starts a gateway on a fresh temporary database with extra `args`.
    pub fn start(args: &[&str]) -> Self {
        Self::start_in(Arc::new(tempfile::tempdir().unwrap()), args)
    }

    /// Starts a gateway on the database in `dir` (to restart on the same file).
    pub fn start_in(dir: Arc<tempfile::TempDir>, args: &[&str]) -> Self {
        Self::start_with_env(dir, args, &[])
    }

    /// Starts a gateway on the database in `dir` with `RUST_LOG` set to `log_filter`: for a test that waits for
    /// a debug line.
    pub fn start_logging(dir: Arc<tempfile::TempDir>, log_filter: &str, args: &[&str]) -> Self {
        Self::start_with_env(dir, args, &[("RUST_LOG", log_filter)])
    }

    /// Starts a gateway on the database in `dir` with extra environment variables (they win over the
    /// defaults set here, such as `RUST_LOG=info`).
    pub fn start_with_env(dir: Arc<tempfile::TempDir>, args: &[&str], env: &[(&str, &str)]) -> Self {
        let database = format!("sqlite://{}", dir.path().join("gateway.db").display());
        Self::spawn(dir, &database, args, env)
    }

    /// Starts a gateway on the database `database_url` names (a PostgreSQL URL: nothing in the temporary
    /// directory is used).
    pub fn start_on(database_url: &str, args: &[&str]) -> Self {
        Self::start_on_with_env(database_url, args, &[])
    }

    /// [`Gateway::start_on`] with extra environment variables (as [`Gateway::start_with_env`]).
    pub fn start_on_with_env(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(Arc::new(tempfile::tempdir().unwrap()), database_url, args, env)
    }

    /// Starts a gateway listening on `listen` (`0.0.0.0:0`: every interface; the tests still connect over
    /// loopback only).
    pub fn start_listening(listen: &str, args: &[&str]) -> Self {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let database = format!("sqlite://{}", dir.path().join("gateway.db").display());
        Self::spawn_listening(dir, listen, &database, args, &[])
    }

    fn spawn(dir: Arc<tempfile::TempDir>, database: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_listening(dir, "127.0.0.1:0", database, args, env)
    }

    fn spawn_listening(
        dir: Arc<tempfile::TempDir>,
        listen: &str,
        database: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        // The tests send far more than 60 messages a minute for one agent, and only it/agent_auth.rs is about
        // that limit: it passes the flag itself.
        let unlimited: &[&str] = if args.iter().any(|arg| arg.starts_with("--agent-rate-limit-per-minute")) {
            &[]
        } else {
            &["--agent-rate-limit-per-minute", "0"]
        };
        let mut child = gateway_command()
            .args(["--listen", listen, "--database-url", database, "--admin-token", TOKEN])
            .args(unlimited)
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_closed = Arc::new(AtomicBool::new(false));
        drain_into(child.stderr.take().unwrap(), Arc::clone(&stderr), Arc::clone(&stderr_closed));
        let (lines_tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
        let base = loop {
            match lines.recv_timeout(PATIENCE) {
                Ok(line) => {
                    if let Some(address) = line.strip_prefix("gateway listening on ") {
                        // Listening on every interface includes loopback, which is where the tests connect.
                        break address.replace("http://0.0.0.0:", "http://127.0.0.1:");
                    }
                }
                Err(_) => panic!("gateway did not start; stderr:\n{}", stderr.lock().unwrap()),
            }
        };
        // Pooled connections are let go before the gateway's 10 s head deadline closes them (ureq's default keeps
        // them 15 s), so that a request never races the gateway closing the connection it was sent on.
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(PATIENCE))
            .max_idle_age(Duration::from_secs(5))
            .build()
            .new_agent();
        // No wait for /readyz here: the gateway prints its banner only once every background loop runs, and the
        // tests' first requests, sent straight after it, are what shows that (a heartbeat that beat the heartbeat
        // loop used to get 503 heartbeat_manager_unavailable).
        Self { child, base, dir, stderr, stderr_closed, agent }
    }

    pub fn database_path(&self) -> PathBuf {
        self.dir.path().join("gateway.db")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Everything the process logged so far.
    pub fn logs(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Everything the process logged, once it has exited (after [`Gateway::kill`] or [`Gateway::terminate`]):
    /// waits for the reader thread to reach the end of stderr, so no line written before the exit is missing.
    pub fn logs_after_exit(&self) -> String {
        eventually("the gateway's stderr to close", || self.stderr_closed.load(Ordering::SeqCst));
        self.logs()
    }

    /// Waits until `text` has appeared on stderr: the gateway writes a log line and the
    /// reader thread copies it here asynchronously, so a line written just before an SSE
    /// event or an exit may not have arrived yet when the test looks.
    pub fn wait_for_log(&self, text: &str) {
        eventually(&format!("log line containing {text:?}"), || self.logs().contains(text));
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
        read(self.agent.post(self.url(path)).content_type("application/json").send(body))
    }

    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post(path, &body.to_string())
    }

    pub fn operator_post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.operator_post_text(path, &body.to_string())
    }

    /// An operator POST of `text` as is, so that a test controls the exact bytes.
    pub fn operator_post_text(&self, path: &str, text: &str) -> (u16, Value) {
        read(
            self.agent
                .post(self.url(path))
                .header("authorization", format!("Bearer {TOKEN}"))
                .content_type("application/json")
                .send(text),
        )
    }

    pub fn operator_patch(&self, path: &str, body: &Value) -> (u16, Value) {
        read(
            self.agent
                .patch(self.url(path))
                .header("authorization", format!("Bearer {TOKEN}"))
                .content_type("application/json")
                .send(body.to_string()),
        )
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        read(self.agent.get(self.url(path)).call())
    }

    /// An operator POST with extra headers; also returns the response headers.
    pub fn operator_post_with_headers(
        &self,
        path: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> (u16, http::HeaderMap, Value) {
        let mut request = self.agent.post(self.url(path)).header("authorization", format!("Bearer {TOKEN}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.content_type("application/json").send(body.to_string()).unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.body_mut().read_to_string().unwrap();
        (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub fn operator_get(&self, path: &str) -> (u16, Value) {
        read(self.agent.get(self.url(path)).header("authorization", format!("Bearer {TOKEN}")).call())
    }

    /// [`Gateway::operator_get`], or the transport error (connection refused, reset, timed out).
    pub fn try_operator_get(&self, path: &str) -> Result<(u16, Value), ureq::Error> {
        let mut response = self.agent.get(self.url(path)).header("authorization", format!("Bearer {TOKEN}")).call()?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string()?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    pub fn operator_delete(&self, path: &str) -> (u16, Value) {
        read(self.agent.delete(self.url(path)).header("authorization", format!("Bearer {TOKEN}")).call())
    }

    /// Opens an SSE stream of `topic`, with the operator token. Returns once the stream is established, so
    /// every event published afterwards will be seen.
    pub fn subscribe(&self, topic: &str) -> EventStream {
        EventStream::open(&self.url(&format!("/gateway/events?topic={topic}")), Some(TOKEN))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `host:port` of the gateway, as a `Host` header names it.
    pub fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// The process's resident memory in bytes, from /proc (Linux).
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib * 1024
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -TERM failed");
        self.wait()
    }

    /// SIGTERM without waiting: the gateway begins its graceful shutdown; [`Gateway::wait`] waits for its exit.
    pub fn send_sigterm(&self) {
        self.signal("TERM");
    }

    /// SIGSTOP: the process freezes where it is, mid-instruction, as in a long pause of its VM or a partition it
    /// does not notice; its sockets stay open and nothing answers. [`Gateway::resume`] lets it go on.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after [`Gateway::pause`]: the process goes on from where it stopped, its clocks having moved on.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    /// SIGKILL: no chance to clean up, as in a crash.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "gateway did not exit; stderr:\n{}", self.logs());
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `gateway` binary, without the caller's `GATEWAY_*` variables. Every flag also reads one, and the child
/// would inherit whatever the shell running the tests has set (a developer's own gateway settings, a CI job's):
/// a stray `GATEWAY_LOG_FORMAT=json` or `GATEWAY_WEBHOOK_MAX_PER_CYCLE=1` would change what the tests observe.
/// Every gateway a test starts runs on the flags (and variables) the test gives it, and nothing else.
pub fn gateway_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gateway"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GATEWAY_") {
            command.env_remove(name);
        }
    }
    command
}

fn drain_into(stream: impl Read + Send + 'static, sink: Arc<Mutex<String>>, closed: Arc<AtomicBool>) {
    thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            let mut sink = sink.lock().unwrap();
            sink.push_str(&line);
            sink.push('\n');
        }
        closed.store(true, Ordering::SeqCst);
    });
}

fn read(result: Result<http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut response = result.unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    (status, body)
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: Value,
}

/// An open SSE stream, read by a background thread.
pub struct EventStream {
    events: Receiver<SseEvent>,
    pub status: u16,
}

impl EventStream {
    pub fn open(url: &str, token: Option<&str>) -> Self {
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
        let mut request = agent.get(url);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = request.call().unwrap();
        let status = response.status().as_u16();
        Self::read(BufReader::new(response.into_body().into_reader()), status)
    }

    /// A stream whose request was written to `connection` by hand as HTTP/1.0, so that the response body is the
    /// rest of the connection (no chunks): reads the status line and the headers, then the events.
    pub fn from_http10(connection: impl Read + Send + 'static) -> Self {
        let mut reader = BufReader::new(connection);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 || line.trim_end().is_empty() {
                break;
            }
        }
        Self::read(reader, status)
    }

    fn read(mut reader: impl BufRead + Send + 'static, status: u16) -> Self {
        let (events_tx, events) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        thread::spawn(move || {
            let mut event = String::new();
            let mut id = None;
            let mut data = String::new();
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let line = line.trim_end_matches('\n');
                if line == ": connected" {
                    let _ = ready_tx.send(());
                } else if let Some(value) = line.strip_prefix("event: ") {
                    event = value.to_owned();
                } else if let Some(value) = line.strip_prefix("id: ") {
                    id = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = value.to_owned();
                } else if line.is_empty() && !event.is_empty() {
                    let parsed = SseEvent {
                        event: std::mem::take(&mut event),
                        id: id.take(),
                        data: serde_json::from_str(&std::mem::take(&mut data)).unwrap_or(Value::Null),
                    };
                    if events_tx.send(parsed).is_err() {
                        return;
                    }
                }
            }
        });
        if status == 200 {
            ready.recv_timeout(PATIENCE).expect("the event stream did not start");
        }
        Self { events, status }
    }

    /// The next event, or `None` if none comes within `wait` (or the stream ended).
    pub fn next_within(&self, wait: Duration) -> Option<SseEvent> {
        self.events.recv_timeout(wait).ok()
    }

    /// The next event of type `event_type`, skipping others; panics if none comes within [`PATIENCE`].
    pub fn expect(&self, event_type: &str) -> SseEvent {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(event) if event.event == event_type => return event,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("no {event_type} event within {PATIENCE:?}"),
                Err(RecvTimeoutError::Disconnected) => panic!("stream ended before a {event_type} event"),
            }
        }
    }

    /// True once the server has closed the stream.
    pub fn ended_within(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            match self.events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => return true,
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
    }
}

/// Sends `head` (request line and headers, without the blank line) and `body` over a plain TCP connection and
/// returns the raw response. Write errors are ignored: the server may answer and close before reading it all.
pub fn raw_request(gateway: &Gateway, head: &str, body: &[u8]) -> String {
    use std::io::Write;
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut connection = std::net::TcpStream::connect(&address).unwrap();
    connection.set_read_timeout(Some(PATIENCE)).unwrap();
    let _ = write!(connection, "{head}\r\nhost: {address}\r\nconnection: close\r\n\r\n");
    let _ = connection.write_all(body);
    let mut response = Vec::new();
    let _ = connection.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

/// Rows of `table` in the SQLite file at `path`, read with Diesel directly.
pub fn count_rows(path: &Path, table: &str) -> i64 {
    use diesel::{Connection, QueryableByName, RunQueryDsl, sql_types::BigInt};
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let mut connection = diesel::SqliteConnection::establish(path.to_str().unwrap()).unwrap();
    diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}")).get_result::<Count>(&mut connection).unwrap().n
}

/// Polls `condition` until it holds or [`PATIENCE`] runs out.
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(25));
    }
}
