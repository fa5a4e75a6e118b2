//! The reminder mailbox through the real binary (docs/scheduler.md, "The mailbox"): a reminder that fires while its
//! agent has no stream (the gateway restarting, the agent offline) arrives once the agent connects, once; a
//! `Last-Event-ID` replays what came after it; `GET /gateway/agents/{agent_id}/reminders` pages through the
//! retained fires.
//!
//! "Once" is checked with a sentinel: after what the test expects, it schedules one more reminder and reads the
//! stream up to it, so anything sent twice (or out of place) shows up before the sentinel instead of being waited
//! for with a fixed sleep.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{EventStream, Gateway, SseEvent, TOKEN, count_rows, eventually};

/// Schedules a one-time reminder for `agent` through a DecisionLog; `trace` must differ between the reminders a
/// test wants (a repeated trace id is a retry, scheduled once).
fn schedule(gateway: &Gateway, agent: &str, trace: &str, delay_ms: u64, payload: Value) {
    let log = json!({
        "meta": {"trace_id": trace, "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": agent, "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder",
                   "tool_input": {"delay_ms": delay_ms, "payload": payload}}
    });
    assert_eq!(gateway.post_json("/gateway/messages", &log).0, 202);
}

/// An agent's reminder stream, without a token (agent topics need none while agent auth is off), whose connection
/// closes when it is dropped, as an agent that goes offline closes it (`support::EventStream` keeps reading until
/// its next event arrives, which would take that event off the gateway's hands).
struct AgentStream {
    events: EventStream,
    socket: TcpStream,
}

impl std::ops::Deref for AgentStream {
    type Target = EventStream;

    fn deref(&self) -> &EventStream {
        &self.events
    }
}

impl Drop for AgentStream {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

/// Opens `agent`'s stream over a plain HTTP/1.0 connection (the body then ends with the connection, no chunking to
/// decode), with extra request headers.
fn stream(gateway: &Gateway, agent: &str, headers: &[(&str, &str)]) -> AgentStream {
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut socket = TcpStream::connect(&address).unwrap();
    let mut request = format!("GET /gateway/events?topic=agent%3A{agent}%3Ascheduled HTTP/1.0\r\nhost: {address}\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    socket.write_all(request.as_bytes()).unwrap();
    let events = EventStream::from_http10(socket.try_clone().unwrap());
    assert_eq!(events.status, 200);
    AgentStream { events, socket }
}

/// Schedules a sentinel reminder and returns every reminder the stream sends up to it, the sentinel excluded, as
/// `(fire_id, payload)`: what was replayed or sent live before it.
fn reminders_before_a_sentinel(gateway: &Gateway, stream: &EventStream, agent: &str) -> Vec<(String, Value)> {
    static SENTINELS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let sentinel = format!("sentinel-{}", SENTINELS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    schedule(gateway, agent, &sentinel, 50, json!({"sentinel": sentinel}));
    let mut before = Vec::new();
    loop {
        let event = stream.expect("reminder");
        if event.data["payload"]["sentinel"] == sentinel.as_str() {
            return before;
        }
        before.push(fire_of(&event));
    }
}

fn fire_of(event: &SseEvent) -> (String, Value) {
    let fire_id = event.data["fire_id"].as_str().unwrap().to_owned();
    assert_eq!(event.id.as_deref(), Some(fire_id.as_str()), "the SSE id is the fire_id");
    assert_eq!(event.data["id"], fire_id.as_str());
    (fire_id, event.data["payload"].clone())
}

/// `(entries, unreceived entries)` of the mailbox in the SQLite file at `path`.
fn mailbox_rows(path: &Path) -> (i64, i64) {
    use diesel::{Connection, QueryableByName, RunQueryDsl, sql_types::BigInt};
    #[derive(QueryableByName)]
    struct Counts {
        #[diesel(sql_type = BigInt)]
        entries: i64,
        #[diesel(sql_type = BigInt)]
        unreceived: i64,
    }
    let mut connection = diesel::SqliteConnection::establish(path.to_str().unwrap()).unwrap();
    let counts: Counts =
        diesel::sql_query("SELECT COUNT(*) AS entries, COUNT(*) - COUNT(received_at) AS unreceived FROM agent_mailbox")
            .get_result(&mut connection)
            .unwrap();
    (counts.entries, counts.unreceived)
}

/// Waits until the mailbox holds `entries` entries, `unreceived` of them not received by any stream.
fn wait_for_mailbox(gateway: &Gateway, entries: i64, unreceived: i64) {
    let path = gateway.database_path();
    eventually(&format!("{entries} mailbox entries, {unreceived} unreceived"), || {
        mailbox_rows(&path) == (entries, unreceived)
    });
}

/// Waits until every reminder scheduled has fired: no job row left.
fn wait_until_fired(gateway: &Gateway) {
    let path = gateway.database_path();
    eventually("every reminder fired", || count_rows(&path, "cron_jobs") == 0);
}

#[test]
fn a_reminder_that_fires_at_restart_with_no_stream_arrives_once_when_the_agent_connects() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut gateway = Gateway::start_in(Arc::clone(&dir), &[]);
    schedule(&gateway, "agent-m1", "restart", 1_000, json!({"task": "after the restart"}));
    let due = Instant::now() + Duration::from_millis(1_000);
    gateway.kill();
    // The gateway is down when the reminder falls due: it fires at start, before any agent could reconnect.
    eventually("the reminder to be overdue", || Instant::now() > due);
    let restarted = Gateway::start_in(dir, &[]);
    wait_until_fired(&restarted);
    wait_for_mailbox(&restarted, 1, 1);

    let agent = stream(&restarted, "agent-m1", &[]);
    let replayed = agent.expect("reminder");
    // The leader epoch that fired it (issue 19): the restarted instance's term, kept in the mailbox for the replay.
    let term = restarted.operator_get("/gateway/cluster").1["leader"]["epoch"].clone();
    assert!(term.as_u64().is_some_and(|term| term >= 1), "{term}");
    assert_eq!(replayed.data["epoch"], term, "{}", replayed.data);
    let first = fire_of(&replayed);
    assert_eq!(first.1, json!({"task": "after the restart"}));
    assert!(first.0.ends_with('Z') && first.0.contains(':'), "{}", first.0);
    assert_eq!(reminders_before_a_sentinel(&restarted, &agent, "agent-m1"), [], "sent once");
    wait_for_mailbox(&restarted, 2, 0);
}

#[test]
fn fires_while_an_agent_is_offline_are_replayed_in_order_once_then_live_ones_flow() {
    let gateway = Gateway::start(&[]);
    let online = stream(&gateway, "agent-m2", &[]);
    schedule(&gateway, "agent-m2", "before", 50, json!({"n": 0}));
    assert_eq!(fire_of(&online.expect("reminder")).1, json!({"n": 0}));
    wait_for_mailbox(&gateway, 1, 0);
    drop(online);

    // Offline: four reminders fire with nobody listening, and one of another agent.
    for n in 1..=4 {
        schedule(&gateway, "agent-m2", &format!("offline-{n}"), 100 * n, json!({"n": n}));
    }
    schedule(&gateway, "agent-other", "other", 100, json!({"n": "other"}));
    wait_until_fired(&gateway);
    wait_for_mailbox(&gateway, 6, 5);

    let back = stream(&gateway, "agent-m2", &[]);
    let replayed = reminders_before_a_sentinel(&gateway, &back, "agent-m2");
    let payloads: Vec<&Value> = replayed.iter().map(|(_, payload)| payload).collect();
    assert_eq!(payloads, [&json!({"n": 1}), &json!({"n": 2}), &json!({"n": 3}), &json!({"n": 4})]);
    // The sentinel came live; so does the next one, and nothing else.
    assert_eq!(reminders_before_a_sentinel(&gateway, &back, "agent-m2"), []);
    wait_for_mailbox(&gateway, 8, 1);
    let (entries, unreceived) = mailbox_rows(&gateway.database_path());
    assert_eq!((entries, unreceived), (8, 1), "only agent-other's fire is left unreceived");
}

#[test]
fn last_event_id_replays_every_retained_fire_after_it_and_an_unknown_one_everything() {
    let gateway = Gateway::start(&[]);
    let online = stream(&gateway, "agent-m3", &[]);
    for n in 1..=4 {
        schedule(&gateway, "agent-m3", &format!("live-{n}"), 100 * n, json!({"n": n}));
    }
    let live: Vec<(String, Value)> = (0..4).map(|_| fire_of(&online.expect("reminder"))).collect();
    wait_for_mailbox(&gateway, 4, 0);
    drop(online);
    let ids = |fires: &[(String, Value)]| fires.iter().map(|(fire_id, _)| fire_id.clone()).collect::<Vec<_>>();

    let after_second = stream(&gateway, "agent-m3", &[("last-event-id", &live[1].0)]);
    let replayed = reminders_before_a_sentinel(&gateway, &after_second, "agent-m3");
    assert_eq!(ids(&replayed), ids(&live[2..]), "received already, replayed after the id given");
    drop(after_second);
    // The sentinel is retained too, once its completion (or its receipt) has written it.
    wait_for_mailbox(&gateway, 5, 0);

    let unknown = stream(&gateway, "agent-m3", &[("last-event-id", "999:2020-01-01T00:00:00Z")]);
    let replayed = reminders_before_a_sentinel(&gateway, &unknown, "agent-m3");
    assert_eq!(replayed.len(), 5, "an unknown id replays everything retained: {replayed:?}");
    assert_eq!(ids(&replayed[..4]), ids(&live), "in firing order");
    assert_eq!(replayed[4].1["sentinel"].as_str().map(|text| text.starts_with("sentinel-")), Some(true));
}

#[test]
fn the_reminders_endpoint_pages_after_a_fire_id_and_marks_nothing() {
    let gateway = Gateway::start(&[]);
    for n in 1..=5 {
        schedule(&gateway, "agent-m4", &format!("page-{n}"), 50 * n, json!({"n": n}));
    }
    schedule(&gateway, "agent-other", "other", 50, json!({}));
    wait_until_fired(&gateway);
    wait_for_mailbox(&gateway, 6, 6);

    let path = "/gateway/agents/agent-m4/reminders";
    let (status, first) = gateway.operator_get(&format!("{path}?limit=2"));
    assert_eq!(status, 200, "{first}");
    let page = first["reminders"].as_array().unwrap();
    assert_eq!(page.len(), 2);
    let reminder = &page[0];
    let fields: Vec<&str> = reminder.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(fields, ["epoch", "fire_id", "fired_at", "job_id", "payload", "scheduled_for"]);
    assert_eq!(reminder["payload"], json!({"n": 1}));
    assert_eq!(
        reminder["epoch"],
        gateway.operator_get("/gateway/cluster").1["leader"]["epoch"],
        "the term that fired it"
    );
    let fire_id = format!("{}:{}", reminder["job_id"], reminder["scheduled_for"].as_str().unwrap());
    assert_eq!(reminder["fire_id"], fire_id.as_str());

    let mut all: Vec<Value> = page.clone();
    let mut cursor = page[1]["fire_id"].as_str().unwrap().to_owned();
    loop {
        let query = form_query(&[("after", &cursor), ("limit", "2")]);
        let (status, next) = gateway.operator_get(&format!("{path}?{query}"));
        assert_eq!(status, 200, "{next}");
        let page = next["reminders"].as_array().unwrap().clone();
        let Some(last) = page.last() else { break };
        cursor = last["fire_id"].as_str().unwrap().to_owned();
        all.extend(page);
    }
    let payloads: Vec<Value> = all.iter().map(|reminder| reminder["payload"].clone()).collect();
    assert_eq!(payloads, (1..=5).map(|n| json!({"n": n})).collect::<Vec<_>>(), "each once, in firing order");
    assert_eq!(mailbox_rows(&gateway.database_path()), (6, 6), "reading marked nothing received");

    let unknown = form_query(&[("after", "999:2020-01-01T00:00:00Z")]);
    assert_eq!(gateway.operator_get(&format!("{path}?{unknown}")).1["reminders"].as_array().unwrap().len(), 5);
    assert_eq!(gateway.operator_get("/gateway/agents/nobody/reminders").1, json!({"reminders": []}));

    // Like the agent's stream, the endpoint needs no token while agent auth is off (a loopback listener here);
    // with it on, the agent's or the operator's (it/agent_auth.rs).
    assert_eq!(gateway.get(path).0, 200);
    // Refusals: a bad limit, an unknown parameter, an agent id that cannot be one.
    for bad in ["?limit=0", "?limit=1001", "?limit=x", "?after=", "?since=1"] {
        let (status, body) = gateway.operator_get(&format!("{path}{bad}"));
        assert_eq!((status, body["reason"].as_str()), (400, Some("invalid_query")), "{bad}");
    }
    let (status, body) = gateway.operator_get("/gateway/agents/bad%00id/reminders");
    assert_eq!((status, body["reason"].as_str()), (404, Some("unknown_agent")));
    let (status, _) = gateway.operator_post("/gateway/agents/agent-m4/reminders", &json!({}));
    assert_eq!(status, 405);
}

#[test]
fn an_agent_id_with_reserved_characters_is_percent_decoded_from_the_path() {
    let gateway = Gateway::start(&[]);
    schedule(&gateway, "team/a b", "encoded", 50, json!({"n": 1}));
    wait_until_fired(&gateway);
    let (status, body) = gateway.operator_get("/gateway/agents/team%2Fa%20b/reminders");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reminders"][0]["payload"], json!({"n": 1}));
}

fn form_query(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(name, value)| format!("{name}={}", encode(value))).collect::<Vec<_>>().join("&")
}

/// Percent-encodes everything but unreserved characters.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The stream needs no token for an agent topic today; with the operator's it works too.
#[test]
fn the_operator_may_read_an_agents_stream_and_its_replay() {
    let gateway = Gateway::start(&[]);
    schedule(&gateway, "agent-m5", "operator", 50, json!({"n": 1}));
    wait_until_fired(&gateway);
    let url = gateway.url("/gateway/events?topic=agent%3Aagent-m5%3Ascheduled");
    let stream = EventStream::open(&url, Some(TOKEN));
    assert_eq!(stream.status, 200);
    let (fire_id, payload) = fire_of(&stream.expect("reminder"));
    assert_eq!(payload, json!({"n": 1}));
    drop(stream);
    // The operator only looked: the agent's own stream still gets the reminder replayed.
    let agent = EventStream::open(&url, None);
    assert_eq!(fire_of(&agent.expect("reminder")), (fire_id, json!({"n": 1})));
}
