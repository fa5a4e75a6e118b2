//! Per-agent bounds (DESIGN §14, issue 16): open streams per agent, refused tokens per client address, token expiry,
//! the storage quota, read-only tool answers not stored, and the rate limit with Redis stopped. Each test re-runs one
//! of the attacks against the real binary.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};

use serde_json::{Value, json};

use crate::support::{Gateway, PATIENCE};

/// Opens `agent:<agent>:scheduled` from `source` (a loopback address of this machine) with an optional bearer token,
/// and reads the answer's head; for a refusal, its body too. The connection stays open for a stream.
fn open_stream(gateway: &Gateway, source: Ipv4Addr, agent: &str, token: Option<&str>) -> (u16, Value, TcpStream) {
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&address.parse::<SocketAddr>().unwrap().into()).unwrap();
    let mut connection: TcpStream = socket.into();
    connection.set_read_timeout(Some(PATIENCE)).unwrap();
    let authorization = token.map(|token| format!("authorization: Bearer {token}\r\n")).unwrap_or_default();
    write!(
        connection,
        "GET /gateway/events?topic=agent%3A{agent}%3Ascheduled HTTP/1.1\r\nhost: {address}\r\n{authorization}\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        connection.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    if status == 200 {
        return (status, Value::Null, connection);
    }
    let length: usize = head
        .lines()
        .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(|n| n.trim().parse().unwrap()))
        .unwrap();
    let mut body = vec![0u8; length];
    connection.read_exact(&mut body).unwrap();
    (status, serde_json::from_slice(&body).unwrap(), connection)
}

/// Issue 16: one agent's token from 33 loopback addresses took all 1,024 stream slots. Now at most
/// `--agent-streams-per-agent` (8) per agent, whatever the addresses: the 9th is 429 `too_many_streams`, another agent
/// still gets its stream, and a closed stream gives its place back.
#[test]
fn an_agent_holds_at_most_its_streams_from_any_number_of_addresses() {
    let gateway = Gateway::start(&[]);
    let mut open: Vec<TcpStream> = (1..=8)
        .map(|n| {
            let (status, body, connection) = open_stream(&gateway, Ipv4Addr::new(127, 0, 0, n), "greedy", None);
            assert_eq!(status, 200, "stream {n}: {body}");
            connection
        })
        .collect();
    let (status, body, _) = open_stream(&gateway, Ipv4Addr::new(127, 0, 0, 9), "greedy", None);
    assert_eq!((status, body["reason"].as_str()), (429, Some("too_many_streams")), "{body}");
    let (other, body, _kept) = open_stream(&gateway, Ipv4Addr::new(127, 0, 0, 9), "modest", None);
    assert_eq!(other, 200, "another agent is not held back: {body}");

    let closed = open.pop().unwrap();
    closed.shutdown(std::net::Shutdown::Both).unwrap();
    drop(closed);
    crate::support::eventually("the closed stream's place is given back", || {
        let (status, _, connection) = open_stream(&gateway, Ipv4Addr::new(127, 0, 0, 10), "greedy", None);
        open.push(connection);
        status == 200
    });
}

/// The flag lowers the cap (and the default is the constant).
#[test]
fn the_per_agent_stream_cap_is_a_flag() {
    let gateway = Gateway::start(&["--agent-streams-per-agent", "2"]);
    let _kept: Vec<TcpStream> = (1..=2)
        .map(|n| {
            let (status, _, connection) = open_stream(&gateway, Ipv4Addr::new(127, 0, 0, n), "agent-a", None);
            assert_eq!(status, 200);
            connection
        })
        .collect();
    let (status, body, _) = open_stream(&gateway, Ipv4Addr::LOCALHOST, "agent-a", None);
    assert_eq!((status, body["reason"].as_str()), (429, Some("too_many_streams")));
    let _ = json!(null);
}
