//! Graceful shutdown and restart on the same database.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::json;

use crate::support::{Gateway, PATIENCE};

#[test]
fn sigterm_lets_in_flight_requests_finish_ends_streams_and_exits_cleanly() {
    let mut gateway = Gateway::start(&[]);
    let stream = gateway.subscribe("gateway:agents");

    // A request whose body is still arriving when SIGTERM lands.
    let body = json!({"type": "heartbeat", "agent_id": "agent-in-flight", "cluster_id": "c"}).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut connection = TcpStream::connect(&address).unwrap();
    connection.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        connection,
        "POST /gateway/heartbeat HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{first}",
        body.len()
    )
    .unwrap();
    connection.flush().unwrap();
    thread::sleep(Duration::from_millis(200));

    let pid = gateway.pid().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    thread::sleep(Duration::from_millis(200));
    connection.write_all(rest.as_bytes()).unwrap();
    let mut response = String::new();
    connection.read_to_string(&mut response).unwrap();
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
fn requests_after_shutdown_began_are_not_accepted() {
    let mut gateway = Gateway::start(&[]);
    let status = gateway.terminate();
    assert!(status.success());
    let address = gateway.base.trim_start_matches("http://").to_owned();
    assert!(TcpStream::connect(address).is_err(), "the listener is closed after shutdown");
}
