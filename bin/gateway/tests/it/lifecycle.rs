//! Graceful shutdown and restart on the same database.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;

use serde_json::json;

use crate::support::{Gateway, PATIENCE, eventually};

/// A heartbeat POST whose body is half sent. Returns once the gateway is reading that body (it answered
/// `Expect: 100-continue`), so the request is in flight in the server, not waiting in the listen backlog; and the
/// rest of the body, to send later.
fn half_sent_heartbeat(gateway: &Gateway, agent_id: &str) -> (TcpStream, String) {
    let body = json!({"type": "heartbeat", "agent_id": agent_id, "cluster_id": "c"}).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut connection = TcpStream::connect(&address).unwrap();
    connection.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        connection,
        "POST /gateway/heartbeat HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         expect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut interim = [0; b"HTTP/1.1 100 Continue\r\n\r\n".len()];
    connection.read_exact(&mut interim).unwrap();
    assert_eq!(String::from_utf8_lossy(&interim), "HTTP/1.1 100 Continue\r\n\r\n");
    connection.write_all(first.as_bytes()).unwrap();
    connection.flush().unwrap();
    (connection, rest.to_owned())
}

/// Sends SIGTERM and returns once the gateway has logged that it is shutting down.
fn begin_shutdown(gateway: &Gateway) {
    assert!(Command::new("kill").args(["-TERM", &gateway.pid().to_string()]).status().unwrap().success());
    gateway.wait_for_log("shutdown requested");
}

/// Sends the rest of a half-sent request and returns the whole response.
fn finish(mut connection: TcpStream, rest: &str) -> String {
    connection.write_all(rest.as_bytes()).unwrap();
    let mut response = String::new();
    connection.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn sigterm_lets_in_flight_requests_finish_ends_streams_and_exits_cleanly() {
    let mut gateway = Gateway::start(&[]);
    let stream = gateway.subscribe("gateway:agents");

    let (connection, rest) = half_sent_heartbeat(&gateway, "agent-in-flight");
    begin_shutdown(&gateway);
    let response = finish(connection, &rest);
    assert!(response.starts_with("HTTP/1.1 200"), "in-flight request was not completed: {response}");

    assert!(stream.ended_within(PATIENCE), "the event stream was not closed on shutdown");
    let status = gateway.wait();
    assert!(status.success(), "exit status {status:?}; logs:\n{}", gateway.logs());
    gateway.wait_for_log("gateway stopped");

    // The store was closed cleanly: a new process on the same file sees the row.
    let dir = Arc::clone(&gateway.dir);
    drop(gateway);
    let restarted = Gateway::start_in(dir, &[]);
    assert_eq!(crate::support::count_rows(&restarted.database_path(), "gateway_heartbeats"), 1);
    assert_eq!(restarted.get("/readyz").0, 200);
}

#[test]
fn new_connections_are_refused_while_in_flight_requests_drain() {
    let mut gateway = Gateway::start(&[]);
    let (connection, rest) = half_sent_heartbeat(&gateway, "agent-draining");
    begin_shutdown(&gateway);

    let address = gateway.base.trim_start_matches("http://").to_owned();
    eventually("the listener is closed", || TcpStream::connect(&address).is_err());
    // The half-sent request keeps the process draining, so the refusal came from the closed listener, not from
    // a process that had already gone.
    assert!(gateway.is_running(), "the gateway exited with a request still in flight; logs:\n{}", gateway.logs());

    let response = finish(connection, &rest);
    assert!(response.starts_with("HTTP/1.1 200"), "in-flight request was not completed: {response}");
    let status = gateway.wait();
    assert!(status.success(), "exit status {status:?}; logs:\n{}", gateway.logs());
}

#[test]
fn a_clean_start_says_nothing_about_claims_left_by_a_previous_process() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    for start in ["a fresh database", "after a graceful stop"] {
        let mut gateway = Gateway::start_in(Arc::clone(&dir), &[]);
        gateway.terminate();
        let logs = gateway.logs_after_exit();
        assert!(logs.contains("cron scheduler started"), "{start}: the log is captured: {logs}");
        assert!(!logs.contains("released claims"), "{start}: nothing was left claimed: {logs}");
    }
}

/// A log pipe whose reader has gone (a log shipper that died, `gateway | head`, journald restarted) makes every write
/// to stderr fail. Logging must then drop lines, not stop the gateway: the eviction loop, which logs each eviction,
/// goes on evicting, heartbeats are answered, and SIGTERM still drains and exits cleanly (its handler logs too).
#[test]
fn a_log_pipe_nobody_reads_stops_neither_the_loops_nor_a_graceful_exit() {
    use std::io::BufRead;
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("gateway.db").display());
    let mut child = Reaped(
        crate::support::gateway_command()
            .args(["--listen", "127.0.0.1:0", "--database-url", &database, "--admin-token", crate::support::TOKEN])
            .args(["--heartbeat-check-interval-ms", "100", "--heartbeat-eviction-threshold-s", "1"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let mut banner = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut banner).unwrap();
    let base = banner.trim().strip_prefix("gateway listening on ").expect("the banner").to_owned();
    // The banner's reader is gone with the line above, the logs' goes here: from now on every line the gateway
    // writes fails with a broken pipe.
    drop(child.stderr.take());

    let agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent();
    let heartbeat = |agent_id: &str| {
        let body = json!({"type": "heartbeat", "agent_id": agent_id, "cluster_id": "c"}).to_string();
        agent.post(format!("{base}/gateway/heartbeat")).content_type("application/json").send(body).unwrap().status()
    };
    let listed = |agent_id: &str| {
        let mut response = agent
            .get(format!("{base}/gateway/agents"))
            .header("authorization", format!("Bearer {}", crate::support::TOKEN))
            .call()
            .unwrap();
        response.body_mut().read_to_string().unwrap().contains(agent_id)
    };
    // Two evictions one after the other: the second shows the loop outlived the line the first one logged.
    for agent_id in ["agent-before", "agent-after"] {
        assert_eq!(heartbeat(agent_id), 200);
        assert!(listed(agent_id));
        eventually(&format!("{agent_id} evicted"), || !listed(agent_id));
    }

    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let mut status = None;
    eventually("the gateway to exit on SIGTERM with its log pipe broken", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.is_some_and(|status| status.success()), "exit status {status:?}");
}

/// A child process killed when the test ends, passed or not.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
