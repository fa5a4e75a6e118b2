//! POST /gateway/messages (docs/api.md).

use serde_json::json;

use crate::support::{Gateway, raw_request};

fn valid_log() -> serde_json::Value {
    json!({
        "meta": {"trace_id": "trace-123", "timestamp": "2026-02-22T12:00:00Z"},
        "identity": {"agent_id": "agent-7", "agent_type": "researcher", "capability_version": "1.4.0"},
        "cognition": {"intent": "summarize", "confidence_score": 0.8},
        "action": {"status": "success", "tool_call": "search", "tool_input": "{\"q\":\"rust\"}"},
        "state_delta": {"tokens_consumed": 512},
        "control": {"is_terminal": false}
    })
}

#[test]
fn a_valid_log_is_accepted_and_published_on_gateway_messages() {
    let gateway = Gateway::start(&[]);
    let messages = gateway.subscribe("gateway:messages");
    let (status, body) = gateway.post_json("/gateway/messages", &valid_log());
    assert_eq!((status, body), (202, json!({"status": "accepted", "trace_id": "trace-123"})));

    let event = messages.expect("decision_log");
    assert_eq!(event.data["event_type"], "decision_log");
    assert_eq!(event.data["meta"]["trace_id"], "trace-123");
    assert_eq!(event.data["identity"]["agent_id"], "agent-7");
    assert_eq!(event.data["control"]["hitl_required"], false);
    assert_eq!(event.id.as_deref(), event.data["id"].as_str());
}

#[test]
fn a_log_without_meta_is_accepted_with_a_null_trace_id() {
    let gateway = Gateway::start(&[]);
    let (status, body) = gateway.post_json("/gateway/messages", &json!({"action": {"status": "pending"}}));
    assert_eq!((status, body), (202, json!({"status": "accepted", "trace_id": null})));
}

#[test]
fn a_schema_violation_is_422_and_publishes_only_the_hash() {
    let gateway = Gateway::start(&[]);
    let violations = gateway.subscribe("gateway:violations");
    let secret = "sk-live-do-not-log-me";
    let mut log = valid_log();
    log["identity"]["agent_type"] = json!(null);
    log["cognition"]["intent"] = json!(secret);
    let raw = log.to_string();

    let (status, body) = gateway.post("/gateway/messages", &raw);
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"status": "rejected", "reason": "schema_violation", "detail": "identity.agent_type: is required", "trace_id": log["meta"]["trace_id"]})
    );
    assert!(body["trace_id"].is_string(), "the log's own trace_id comes back");

    let event = violations.expect("schema_violation");
    let expected_hash = gateway_core::intake::interceptor::sha256_tag(raw.as_bytes());
    assert_eq!(event.data["raw_payload_hash"], expected_hash.as_str());
    assert_eq!(event.data["agent_id"], "agent-7");
    assert_eq!(event.data["capability_version"], "1.4.0");
    assert_eq!(event.data["violation_reason"], "identity.agent_type: is required");
    assert!(!event.data.to_string().contains(secret), "the event must not carry the body");
    assert!(!gateway.logs().contains(secret), "a rejected body must never reach a log line");
}

#[test]
fn malformed_json_is_400_and_oversized_is_413() {
    let gateway = Gateway::start(&[]);
    let (status, body) = gateway.post("/gateway/messages", "{\"meta\": ");
    assert_eq!((status, body), (400, json!({"status": "error", "reason": "invalid_json"})));
    let response = raw_request(&gateway, "POST /gateway/messages HTTP/1.1\r\ncontent-length: 2097152", b"[[[");
    assert!(response.starts_with("HTTP/1.1 413") && response.contains("payload_too_large"), "{response}");
    let (status, body) = gateway.post("/gateway/messages", &"[".repeat(100_000));
    assert_eq!((status, body["reason"].as_str()), (400, Some("invalid_json")), "deep nesting is refused, not a crash");
}

#[test]
fn a_log_from_a_live_agent_fills_its_capability_map_entry() {
    let gateway = Gateway::start(&[]);
    let heartbeat =
        json!({"type": "heartbeat", "agent_id": "agent-7", "cluster_id": "c", "timestamp": "2026-02-22T12:00:00Z"});
    assert_eq!(gateway.post_json("/gateway/heartbeat", &heartbeat).0, 200);
    assert_eq!(gateway.post_json("/gateway/messages", &valid_log()).0, 202);
    let (_, agents) = gateway.operator_get("/gateway/agents");
    let capabilities = &agents["agents"][0]["capabilities"];
    assert_eq!(capabilities["agent_type"], "researcher");
    assert_eq!(capabilities["capability_version"], "1.4.0");
}
