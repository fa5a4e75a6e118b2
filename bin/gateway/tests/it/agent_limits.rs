//! Per-agent bounds (DESIGN §14, issue 16): open streams per agent, refused tokens per client address, token expiry,
//! the storage quota, read-only tool answers not stored, and the rate limit with Redis stopped. Each test re-runs one
//! of the attacks against the real binary.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};

use serde_json::{Value, json};

use std::time::{Duration, Instant};

use crate::support::{Gateway, PATIENCE, TOKEN, count_rows, eventually};

/// A connection to the gateway from `source`, a loopback address of this machine (127.0.0.0/8 is all loopback on
/// Linux), so that tests can be several clients.
fn connect_from(gateway: &Gateway, source: Ipv4Addr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&gateway.authority().parse::<SocketAddr>().unwrap().into()).unwrap();
    let connection: TcpStream = socket.into();
    connection.set_read_timeout(Some(PATIENCE)).unwrap();
    connection
}

/// Opens `agent:<agent>:scheduled` from `source` (a loopback address of this machine) with an optional bearer token,
/// and reads the answer's head; for a refusal, its body too. The connection stays open for a stream.
fn open_stream(gateway: &Gateway, source: Ipv4Addr, agent: &str, token: Option<&str>) -> (u16, Value, TcpStream) {
    let mut connection = connect_from(gateway, source);
    let authorization = token.map(|token| format!("authorization: Bearer {token}\r\n")).unwrap_or_default();
    write!(
        connection,
        "GET /gateway/events?topic=agent%3A{agent}%3Ascheduled HTTP/1.1\r\nhost: {}\r\n{authorization}\r\n",
        gateway.authority()
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
    eventually("the closed stream's place is given back", || {
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
}

/// A request from `source` over a connection of its own (`connection: close`): the status and the JSON body.
fn send_from(
    gateway: &Gateway,
    source: Ipv4Addr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let mut connection = connect_from(gateway, source);
    let authorization = token.map(|token| format!("authorization: Bearer {token}\r\n")).unwrap_or_default();
    let body = if body.is_null() { String::new() } else { body.to_string() };
    write!(
        connection,
        "{method} {path} HTTP/1.1\r\nhost: {}\r\n{authorization}content-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        gateway.authority(),
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    connection.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn tool(gateway: &Gateway, name: &str, agent: &str, tool_call_id: &str, params: Value) -> (u16, Value) {
    gateway.post_json(
        &format!("/gateway/tools/{name}"),
        &json!({"agent_id": agent, "tool_call_id": tool_call_id, "params": params}),
    )
}

/// `gateway_agent_credential_reads_total` as `/metrics` says it now.
fn credential_reads(gateway: &Gateway) -> u64 {
    let (_, text) =
        crate::support::raw_request(gateway, &format!("GET /metrics HTTP/1.1\r\nauthorization: Bearer {TOKEN}"), b"")
            .split_once("\r\n\r\n")
            .map(|(head, body)| (head.to_owned(), body.to_owned()))
            .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("gateway_agent_credential_reads_total "))
        .map(|value| value.trim().parse::<f64>().unwrap() as u64)
        .unwrap_or_else(|| panic!("no credential reads metric in {text}"))
}

/// Issue 16: forty `list_reminders` calls stored 41.6 MB. Now a list's answer is never recorded: forty lists of a
/// 60 KB payload leave one row in `tool_calls` (the `schedule_reminder` that made it), and a retry lists again.
#[test]
fn forty_lists_store_nothing() {
    let gateway = Gateway::start(&[]);
    let blob = "x".repeat(60_000);
    let (status, body) =
        tool(&gateway, "schedule_reminder", "lister", "s-1", json!({"delay_ms": 3_600_000, "payload": {"blob": blob}}));
    assert_eq!(status, 200, "{body}");
    for n in 0..40 {
        let (status, body) = tool(&gateway, "list_reminders", "lister", &format!("l-{n}"), json!({}));
        assert_eq!(status, 200);
        assert_eq!(body["result"]["reminders"].as_array().unwrap().len(), 1);
    }
    assert_eq!(count_rows(&gateway.database_path(), "tool_calls"), 1, "only the schedule_reminder's answer");
    let (_, again) = tool(&gateway, "list_reminders", "lister", "l-0", json!({}));
    assert_eq!(again["result"]["reminders"].as_array().unwrap().len(), 1, "a retry lists again");
}

/// Schedules reminders for `agent` until the gateway answers 429 `quota_exceeded`; how many it accepted before.
fn schedule_until_over_quota(gateway: &Gateway, agent: &str, delay_ms: u64, payload: &Value) -> usize {
    for accepted in 0..20 {
        let params = json!({"delay_ms": delay_ms, "payload": payload});
        let (status, body) = tool(gateway, "schedule_reminder", agent, &format!("s-{accepted}"), params);
        if status == 429 {
            assert_eq!(body["reason"], "quota_exceeded", "{body}");
            return accepted;
        }
        assert_eq!(status, 200, "{body}");
    }
    panic!("20 reminders of {agent} accepted: the quota never refused one");
}

/// The storage quota, with a small `--agent-storage-quota-bytes`: an agent schedules until 429 `quota_exceeded`;
/// then a DecisionLog asking for a reminder is still accepted (202) and schedules nothing; another agent is not
/// held back.
#[test]
fn an_agent_at_its_quota_is_refused_and_its_decision_log_schedules_nothing() {
    let gateway = Gateway::start(&["--agent-storage-quota-bytes", "8192"]);
    let payload = json!({"note": "n".repeat(900)});
    let accepted = schedule_until_over_quota(&gateway, "hoarder", 3_600_000, &payload);
    assert!(accepted >= 5, "{accepted} accepted before the quota");
    let log = json!({
        "meta": {"trace_id": "t-quota", "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": "hoarder", "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder", "tool_input": {"delay_ms": 3_600_000, "payload": payload}}
    });
    let (status, body) = gateway.post_json("/gateway/messages", &log);
    assert_eq!((status, body["status"].as_str()), (202, Some("accepted")), "{body}");
    let (_, listed) = tool(&gateway, "list_reminders", "hoarder", "l-1", json!({}));
    assert_eq!(listed["result"]["reminders"].as_array().unwrap().len(), accepted, "the log scheduled nothing");
    assert!(gateway.logs().contains("reminder not scheduled"), "the refusal is a warning in the log");
    let (status, body) =
        tool(&gateway, "schedule_reminder", "modest", "s-0", json!({"delay_ms": 3_600_000, "payload": payload}));
    assert_eq!(status, 200, "another agent has its own quota: {body}");
}

/// Reminders with `delay_ms: 1` fire at once and never wait among the pending ones: their mailbox entries count
/// against the quota all the same, and the agent is refused once they fill it. A reminder accepted before (charged
/// from then on) still fires and reaches the agent's mailbox while the agent is at its quota.
#[test]
fn reminders_that_fire_at_once_count_and_an_accepted_one_is_delivered_at_the_quota() {
    let gateway = Gateway::start(&["--agent-storage-quota-bytes", "8192"]);
    let payload = json!({"note": "n".repeat(900)});
    let (status, early) =
        tool(&gateway, "schedule_reminder", "flash", "early", json!({"delay_ms": 3_000, "payload": payload}));
    assert_eq!(status, 200, "{early}");
    let started = Instant::now();
    let accepted = schedule_until_over_quota(&gateway, "flash", 1, &payload);
    assert!(started.elapsed() < Duration::from_secs(3) || accepted > 0);
    let mailbox = |gateway: &Gateway| {
        let (status, body) = gateway.get("/gateway/agents/flash/reminders");
        assert_eq!(status, 200, "{body}");
        body["reminders"].as_array().unwrap().iter().map(|entry| entry["job_id"].clone()).collect::<Vec<_>>()
    };
    eventually("the reminders that fire at once are in the mailbox", || mailbox(&gateway).len() >= accepted);
    eventually("the reminder accepted first fires at the quota and is kept for the agent", || {
        mailbox(&gateway).contains(&early["result"]["job_id"])
    });
    assert_eq!(mailbox(&gateway).len(), accepted + 1, "everything accepted was delivered");
    let (status, body) =
        tool(&gateway, "schedule_reminder", "flash", "after", json!({"delay_ms": 1, "payload": payload}));
    assert_eq!((status, body["reason"].as_str()), (429, Some("quota_exceeded")), "still at the quota: {body}");
}

/// One burst from 127.0.0.1: a warm valid token, then 20 made-up tokens (401 each, one credential read each),
/// then more made-up ones and the valid token, which must all be 429 `too_many_refusals` without a read. `None`
/// when the burst straddled the gateway's second (then nothing can be told from it).
fn refusal_burst(gateway: &Gateway, valid: &str, attempt: u32) -> Option<u64> {
    let beat = json!({"type": "heartbeat", "agent_id": "agent-a", "cluster_id": "c-1"});
    let reads = credential_reads(gateway);
    let made_up = |n: u32| format!("agt_{:012x}{:012x}_{}", attempt + 1, n, "ab".repeat(32));
    for n in 0..20 {
        let (status, body) =
            send_from(gateway, Ipv4Addr::LOCALHOST, "POST", "/gateway/heartbeat", Some(&made_up(n)), &beat);
        if status != 401 {
            return None;
        }
        assert_eq!(body["reason"], "unauthorized");
    }
    for token in [made_up(20), made_up(21), valid.to_owned()] {
        let (status, body) = send_from(gateway, Ipv4Addr::LOCALHOST, "POST", "/gateway/heartbeat", Some(&token), &beat);
        if status != 429 {
            return None;
        }
        assert_eq!(body["reason"], "too_many_refusals");
    }
    // Another address is not held back, whatever the second.
    let (status, body) =
        send_from(gateway, Ipv4Addr::new(127, 0, 0, 2), "POST", "/gateway/heartbeat", Some(valid), &beat);
    assert_eq!(status, 200, "{body}");
    Some(credential_reads(gateway) - reads)
}

/// Issue 16: 280,000 made-up tokens in 12 s cost 280,000 database reads. Past 20 refused tokens in a second, an
/// address gets 429 `too_many_refusals` for any agent token (the valid one included) without a read; another
/// address is unaffected, and the next second the valid token works again.
#[test]
fn an_address_presenting_made_up_tokens_is_throttled_without_database_reads() {
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let (status, issued) = gateway.operator_post("/gateway/agents/agent-a/credentials", &json!({}));
    assert_eq!(status, 201, "{issued}");
    let valid = issued["token"].as_str().unwrap().to_owned();
    let beat = json!({"type": "heartbeat", "agent_id": "agent-a", "cluster_id": "c-1"});
    let (status, _) = send_from(&gateway, Ipv4Addr::LOCALHOST, "POST", "/gateway/heartbeat", Some(&valid), &beat);
    assert_eq!(status, 200);
    // A burst may straddle a second of the gateway's; a few tries make that as good as impossible.
    let reads = (0..5)
        .find_map(|attempt| {
            let reads = refusal_burst(&gateway, &valid, attempt);
            if reads.is_none() {
                std::thread::sleep(Duration::from_millis(1_100));
            }
            reads
        })
        .expect("five bursts, each across a second boundary");
    assert_eq!(reads, 20, "one read per made-up token until the address was throttled, none after");
    std::thread::sleep(Duration::from_millis(1_100));
    let (status, body) = send_from(&gateway, Ipv4Addr::LOCALHOST, "POST", "/gateway/heartbeat", Some(&valid), &beat);
    assert_eq!(status, 200, "the next second works: {body}");
}

/// Token expiry: `expires_in_s` out of range is 422; a token issued with `expires_in_s: 1` works, is listed with its
/// `expires_at`, and once that passes is 401 `token_expired` (not `unauthorized`), and the stream opened with it is
/// closed. A token issued without it lists `expires_at: null`.
#[test]
fn a_token_issued_with_an_expiry_is_refused_as_expired_after_it() {
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let path = "/gateway/agents/agent-e/credentials";
    for body in [
        json!({"expires_in_s": 0}),
        json!({"expires_in_s": 315_360_001_u64}),
        json!({"expires_in_s": "1"}),
        json!({"expires_in_s": 1.5}),
        json!({"expires_at": 1}),
    ] {
        let (status, refused) = gateway.operator_post(path, &body);
        assert_eq!(status, 422, "{body}: {refused}");
        assert!(!refused.to_string().contains("315360001"), "the value is not echoed: {refused}");
    }
    let (status, lasting) = gateway.operator_post(path, &json!({}));
    assert_eq!((status, &lasting["expires_at"]), (201, &Value::Null));
    // Taken before the request: the gateway's issue instant is at or after it.
    let issued_at = Instant::now();
    let (status, issued) = gateway.operator_post(path, &json!({"expires_in_s": 1}));
    assert_eq!(status, 201, "{issued}");
    let token = issued["token"].as_str().unwrap().to_owned();
    assert!(issued["expires_at"].is_string(), "{issued}");
    let (_, listed) = gateway.operator_get(path);
    let listed: Vec<&Value> = listed["credentials"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .any(|row| row["expires_at"] == issued["expires_at"] && row["credential_id"] == issued["credential_id"])
    );
    assert!(listed.iter().any(|row| row["expires_at"].is_null()));

    let beat = json!({"type": "heartbeat", "agent_id": "agent-e", "cluster_id": "c-1"});
    let (status, body) = send_from(&gateway, Ipv4Addr::LOCALHOST, "POST", "/gateway/heartbeat", Some(&token), &beat);
    assert_eq!(status, 200, "{body}");
    let stream =
        crate::support::EventStream::open(&gateway.url("/gateway/events?topic=agent:agent-e:scheduled"), Some(&token));
    assert!(issued_at.elapsed() < Duration::from_secs(1), "too slow a machine to see the token before its expiry");
    assert_eq!(stream.status, 200);
    assert!(stream.ended_within(PATIENCE), "the stream opened with the token is closed at its expiry");
    eventually("the token is refused as expired", || {
        let (status, body) =
            send_from(&gateway, Ipv4Addr::LOCALHOST, "POST", "/gateway/heartbeat", Some(&token), &beat);
        assert!(status == 200 || (status, body["reason"].as_str()) == (401, Some("token_expired")), "{status} {body}");
        status == 401
    });
    // `expires_at` is kept to the millisecond (every backend stores that exactly), so it may be up to 1 ms early.
    assert!(issued_at.elapsed() >= Duration::from_millis(999), "not before its expiry");
}

/// With Redis stopped, the per-agent rate limit falls back to each instance's own count (issue 16: it failed open,
/// no ceiling at all): the fourth message of a minute is 429 `rate_limited` with a limit of three.
#[test]
fn with_redis_stopped_the_rate_limit_still_refuses_past_the_limit() {
    let Some(mut cluster) = crate::support::cluster::Cluster::start(
        "agent_limits::with_redis_stopped_the_rate_limit_still_refuses_past_the_limit",
        1,
        &["--agent-rate-limit-per-minute", "3"],
    ) else {
        return;
    };
    cluster.redis.stop();
    let gateway = cluster.gateway(0);
    let log = |trace: usize| {
        json!({
            "meta": {"trace_id": format!("t-{trace}"), "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": "runaway", "agent_type": "researcher", "capability_version": "1.0"},
            "action": {"status": "success"}
        })
    };
    let statuses: Vec<u16> = (0..5).map(|trace| gateway.post_json("/gateway/messages", &log(trace)).0).collect();
    assert_eq!(statuses, [202, 202, 202, 429, 429], "counted in-process while Redis is down");
    assert!(gateway.logs().contains("counted by each instance"), "the outage is a warning");
}
