//! `GET /gateway/history` against the real binary (docs/api.md, "History"): what the instance counted reaches the
//! hourly history within a flush (`--history-flush-interval-ms 200` here), overall and per webhook config, and
//! stays there across a restart (it is in the database, not in the process).

use serde_json::{Value, json};

use crate::receiver::{Behaviour, Receiver};
use crate::support::{Gateway, eventually};

fn config(gateway: &Gateway, source: &str, target_url: &str) -> i64 {
    let (status, body) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": source, "event_type": "pull_request.opened", "agent_intent": "code_review",
                "target_session": "reviewer-cluster", "target_url": target_url, "secret": "s3cret"}),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

fn enqueue(gateway: &Gateway, webhook_id: i64) {
    let (status, body) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": webhook_id, "session_id": "s", "payload": {"n": 1}}),
    );
    assert_eq!(status, 201, "{body}");
}

/// The largest value of `series` in the hours answered (a gauge).
fn peak_of(history: &Value, series: &str) -> i64 {
    history["series"][series].as_array().map_or(0, |values| values.iter().filter_map(Value::as_i64).max().unwrap_or(0))
}

/// The sum of `series` over the hours answered: the tests ask for the last two, so that a run across the start of
/// an hour counts the same.
fn sum_of(history: &Value, series: &str) -> i64 {
    history["series"][series].as_array().map_or(0, |values| values.iter().filter_map(Value::as_i64).sum())
}

#[test]
fn what_the_gateway_did_shows_in_its_hourly_history_overall_and_per_webhook() {
    let failing = Receiver::start(Behaviour::Status(500));
    let answering = Receiver::start(Behaviour::Status(200));
    let args = [
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "1",
        "--webhook-poll-interval-ms",
        "200",
        "--history-flush-interval-ms",
        "200",
    ];
    let mut gateway = Gateway::start(&args);
    let (status, empty) = gateway.operator_get("/gateway/history");
    assert_eq!(status, 200, "{empty}");
    let hour_starts = empty["hour_starts"].as_array().unwrap();
    assert_eq!((empty["hours"].as_i64(), hour_starts.len()), (Some(24), 24));
    let current = gateway_core::encoding::rfc3339::parse(hour_starts[23].as_str().unwrap()).unwrap();
    let now = time::OffsetDateTime::now_utc();
    assert!(current <= now && now - current < time::Duration::HOUR, "the last point is the current hour: {current}");
    assert_eq!(sum_of(&empty, "deliveries") + sum_of(&empty, "heartbeats"), 0, "{empty}");

    let dead_one = config(&gateway, "failing", &failing.url("/hook"));
    let good_one = config(&gateway, "answering", &answering.url("/hook"));
    enqueue(&gateway, dead_one);
    enqueue(&gateway, good_one);
    enqueue(&gateway, good_one);
    for agent in ["history-a", "history-b"] {
        let (status, _) = gateway
            .post_json("/gateway/heartbeat", &json!({"type": "heartbeat", "agent_id": agent, "cluster_id": "c"}));
        assert_eq!(status, 200);
    }
    let reminder = json!({
        "meta": {"trace_id": "trace-h", "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": "history-a", "agent_type": "researcher", "capability_version": "1.0"},
        "action": {"status": "pending", "tool_call": "schedule_reminder",
                   "tool_input": {"delay_ms": 100, "payload": {"n": 1}}}
    });
    assert_eq!(gateway.post_json("/gateway/messages", &reminder).0, 202);

    let mut history = Value::Null;
    eventually("the history to show the deliveries, the dead letter, the heartbeats and the fire", || {
        history = gateway.operator_get("/gateway/history?hours=2").1;
        sum_of(&history, "deliveries") >= 2
            && sum_of(&history, "dead_letters") >= 1
            && sum_of(&history, "heartbeats") >= 2
            && sum_of(&history, "cron_fires") >= 1
    });
    assert_eq!(history["hour_starts"].as_array().unwrap().len(), 2);
    assert_eq!(sum_of(&history, "deliveries"), 2, "{history}");
    assert_eq!(sum_of(&history, "failed_attempts"), 2, "the first attempt and its retry, which went dead: {history}");
    assert_eq!(sum_of(&history, "dead_letters"), 1, "{history}");
    assert_eq!(sum_of(&history, "heartbeats"), 2, "{history}");
    assert_eq!(peak_of(&history, "live_agents"), 2, "{history}");
    assert_eq!(sum_of(&history, "cron_fires"), 1, "{history}");
    let sampled = |series: &str| history["series"][series].as_array().unwrap().iter().filter(|v| v.is_i64()).count();
    assert!(sampled("cron_lateness_max_ms") >= 1 && sampled("cron_lateness_avg_ms") >= 1, "{history}");
    assert!(history["series"]["live_agents"][0].is_null() || sampled("live_agents") == 2, "{history}");

    let (_, of_failing) = gateway.operator_get(&format!("/gateway/history?hours=2&webhook_id={dead_one}"));
    assert_eq!(of_failing["webhook_id"], dead_one);
    assert_eq!(
        (
            sum_of(&of_failing, "deliveries"),
            sum_of(&of_failing, "failed_attempts"),
            sum_of(&of_failing, "dead_letters")
        ),
        (0, 2, 1),
        "{of_failing}"
    );
    assert!(of_failing["series"]["heartbeats"].is_null(), "only delivery series per webhook: {of_failing}");
    let (_, of_answering) = gateway.operator_get(&format!("/gateway/history?hours=2&webhook_id={good_one}"));
    assert_eq!((sum_of(&of_answering, "deliveries"), sum_of(&of_answering, "failed_attempts")), (2, 0));

    for (query, detail) in [
        ("hours=0", "hours"),
        ("hours=49", "hours"),
        ("hours=x", "hours"),
        ("webhook_id=0", "webhook_id"),
        ("webhook_id=abc", "webhook_id"),
        ("days=1", "days"),
    ] {
        let (status, body) = gateway.operator_get(&format!("/gateway/history?{query}"));
        assert_eq!((status, body["reason"].as_str()), (400, Some("invalid_query")), "{query}: {body}");
        assert!(body["detail"].as_str().unwrap_or_default().contains(detail), "{query}: {body}");
    }
    assert_eq!(gateway.get("/gateway/history").0, 401, "operator only");

    // Durable: another process on the same database answers the same hour.
    gateway.terminate();
    let again = Gateway::start_in(std::sync::Arc::clone(&gateway.dir), &args);
    let (_, after) = again.operator_get("/gateway/history?hours=2");
    assert_eq!(sum_of(&after, "deliveries"), 2, "{after}");
    assert_eq!(sum_of(&after, "heartbeats"), 2, "{after}");
}
