//! GET /gateway/events (SSE) and the eviction it reports.

use serde_json::json;

use crate::support::{EventStream, Gateway, PATIENCE};

#[test]
fn an_evicted_agent_is_announced_over_sse() {
    // One-second threshold, checks every 100 ms: the real loop, on a short fuse.
    let gateway = Gateway::start(&["--heartbeat-check-interval-ms", "100", "--heartbeat-eviction-threshold-s", "1"]);
    let agents = gateway.subscribe("gateway:agents");
    let ping = json!({"type": "heartbeat", "agent_id": "agent-99", "cluster_id": "cluster-west", "timestamp": "2026-02-22T12:00:00Z"});
    assert_eq!(gateway.post_json("/gateway/heartbeat", &ping).0, 200);

    let event = agents.expect("agent_evicted");
    assert_eq!(event.data["agent_id"], "agent-99");
    assert_eq!(event.data["cluster_id"], "cluster-west");
    assert!(event.data["last_seen"].is_string());
    gateway.wait_for_log("agent evicted");
    assert_eq!(gateway.operator_get("/gateway/agents").1["agents"], json!([]));
    assert_eq!(crate::support::count_rows(&gateway.database_path(), "gateway_heartbeats"), 1, "rows are kept");
}

#[test]
fn gateway_topics_need_the_operator_token_agent_topics_do_not() {
    let gateway = Gateway::start(&[]);
    let url = gateway.url("/gateway/events?topic=gateway:agents");
    assert_eq!(EventStream::open(&url, None).status, 401);
    assert_eq!(EventStream::open(&url, Some("wrong-token-wrong-token")).status, 401);
    let agent_topic = gateway.url("/gateway/events?topic=agent%3Aagent-7%3Ascheduled");
    assert_eq!(EventStream::open(&agent_topic, None).status, 200);
}

#[test]
fn unknown_topics_are_400() {
    let gateway = Gateway::start(&[]);
    for query in ["", "?topic=", "?topic=gateway:secrets", "?topic=agent::scheduled"] {
        let (status, body) = gateway.operator_get(&format!("/gateway/events{query}"));
        assert_eq!((status, body["reason"].as_str()), (400, Some("invalid_topic")), "{query}");
    }
}

#[test]
fn subscribers_of_other_topics_see_nothing() {
    let gateway = Gateway::start(&[]);
    let violations = gateway.subscribe("gateway:violations");
    let messages = gateway.subscribe("gateway:messages");
    assert_eq!(gateway.post_json("/gateway/messages", &json!({})).0, 202);
    messages.expect("decision_log");
    // Then a refused log, whose event does belong on the violations stream: it comes first there, so the
    // accepted log published nothing on that stream before it.
    let (status, _) = gateway.post_json("/gateway/messages", &json!({"meta": {"trace_id": 7}}));
    assert_eq!(status, 422);
    let first = violations.next_within(PATIENCE).expect("no event on gateway:violations");
    assert_eq!(first.event, "schema_violation", "{first:?}");
}

#[test]
fn operator_streams_have_their_own_budget() {
    // docs/operations.md: 64 `gateway:*` streams, counted apart from the 1,024 agent streams.
    const OPERATOR_STREAMS: usize = 64;
    let gateway = Gateway::start(&[]);
    let url = gateway.url("/gateway/events?topic=gateway:agents");
    let open: Vec<EventStream> =
        (0..OPERATOR_STREAMS).map(|_| EventStream::open(&url, Some(crate::support::TOKEN))).collect();
    assert!(open.iter().all(|stream| stream.status == 200));
    assert_eq!(EventStream::open(&url, Some(crate::support::TOKEN)).status, 503, "the operator budget is spent");
    let agent_topic = gateway.url("/gateway/events?topic=agent%3Aagent-7%3Ascheduled");
    assert_eq!(EventStream::open(&agent_topic, None).status, 200, "agent streams are counted apart");
    assert_eq!(gateway.get("/readyz").0, 200);
}
