//! POST /gateway/heartbeat (FR-10.1..10.4).

use diesel::prelude::*;
use gateway_core::{AgentId, ClusterId, HeartbeatRecord};
use gateway_store::schema::gateway_heartbeats;
use gateway_store::timestamp::from_db;
use serde_json::json;

use crate::support::{Gateway, count_rows, raw_request};

/// The agent's row, read with plain SQL: the running gateway holds the database's lock, so a second
/// `DieselStore` cannot open it.
fn stored_heartbeat(gateway: &Gateway, agent_id: &str) -> Option<HeartbeatRecord> {
    let mut connection = SqliteConnection::establish(gateway.database_path().to_str().unwrap()).unwrap();
    let row: Option<(String, time::PrimitiveDateTime)> = gateway_heartbeats::table
        .find(agent_id)
        .select((gateway_heartbeats::cluster_id, gateway_heartbeats::last_seen_at))
        .first(&mut connection)
        .optional()
        .unwrap();
    row.map(|(cluster_id, last_seen_at)| HeartbeatRecord {
        agent_id: AgentId::new(agent_id).unwrap(),
        cluster_id: ClusterId::new(cluster_id).unwrap(),
        last_seen_at: from_db(last_seen_at),
    })
}

fn ping(agent_id: &str, timestamp: &str) -> serde_json::Value {
    json!({"type": "heartbeat", "agent_id": agent_id, "cluster_id": "cluster-west", "timestamp": timestamp})
}

#[test]
fn a_heartbeat_is_recorded_in_memory_and_in_its_row() {
    let gateway = Gateway::start(&[]);
    let (status, body) = gateway.post_json("/gateway/heartbeat", &ping("agent-42", "2026-02-22T12:00:00Z"));
    assert_eq!((status, body), (200, json!({"status": "ok"})));

    let row = stored_heartbeat(&gateway, "agent-42").unwrap();
    assert_eq!(row.cluster_id.as_str(), "cluster-west");
    assert_eq!(row.last_seen_at, time::macros::datetime!(2026-02-22 12:00:00 UTC));

    let (status, agents) = gateway.operator_get("/gateway/agents");
    assert_eq!(status, 200);
    assert_eq!(agents["agents"][0]["agent_id"], "agent-42");
    assert_eq!(agents["agents"][0]["cluster_id"], "cluster-west");
}

#[test]
fn an_unparsable_timestamp_falls_back_to_the_receipt_time() {
    let gateway = Gateway::start(&[]);
    let before = time::OffsetDateTime::now_utc() - time::Duration::seconds(1);
    assert_eq!(gateway.post_json("/gateway/heartbeat", &ping("agent-1", "not a time")).0, 200);
    let row = stored_heartbeat(&gateway, "agent-1").unwrap();
    assert!(row.last_seen_at >= before, "{} < {before}", row.last_seen_at);
}

#[test]
fn one_hundred_heartbeats_leave_one_row_with_the_last_timestamp() {
    let gateway = Gateway::start(&[]);
    for second in 0..100 {
        let timestamp = format!("2026-02-22T12:{:02}:{:02}Z", second / 60, second % 60);
        assert_eq!(gateway.post_json("/gateway/heartbeat", &ping("agent-42", &timestamp)).0, 200);
    }
    assert_eq!(count_rows(&gateway.database_path(), "gateway_heartbeats"), 1);
    let row = stored_heartbeat(&gateway, "agent-42").unwrap();
    assert_eq!(row.last_seen_at, time::macros::datetime!(2026-02-22 12:01:39 UTC));
}

#[test]
fn invalid_heartbeats_are_refused_without_touching_anything() {
    let gateway = Gateway::start(&[]);
    let cases = [
        (json!({"type": "status_update", "agent_id": "a", "cluster_id": "c"}), "invalid_heartbeat_type"),
        (json!({"agent_id": "a", "cluster_id": "c"}), "invalid_heartbeat_type"),
        (json!({"type": "heartbeat", "cluster_id": "c"}), "missing_required_fields"),
        (json!({"type": "heartbeat", "agent_id": "", "cluster_id": "c"}), "missing_required_fields"),
        (json!({"type": "heartbeat", "agent_id": 42, "cluster_id": "c"}), "missing_required_fields"),
        (json!({"type": "heartbeat", "agent_id": "a"}), "missing_required_fields"),
        (json!({"type": "heartbeat", "agent_id": "a", "cluster_id": null}), "missing_required_fields"),
        (json!({"type": "heartbeat", "agent_id": "a\nb", "cluster_id": "c"}), "invalid_field"),
    ];
    for (body, reason) in cases {
        let (status, response) = gateway.post_json("/gateway/heartbeat", &body);
        assert_eq!(
            (status, response["status"].as_str(), response["reason"].as_str()),
            (422, Some("error"), Some(reason)),
            "{body}"
        );
    }
    assert_eq!(count_rows(&gateway.database_path(), "gateway_heartbeats"), 0);
    assert_eq!(gateway.operator_get("/gateway/agents").1["agents"], json!([]));
}

#[test]
fn malformed_and_oversized_bodies_get_400_and_413() {
    let gateway = Gateway::start(&[]);
    let (status, body) = gateway.post("/gateway/heartbeat", "{\"type\": \"heartbeat\"");
    assert_eq!((status, body["reason"].as_str()), (400, Some("invalid_json")));
    // Exactly 1 MiB is accepted.
    let prefix = r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","pad":""#;
    let limit = 1024 * 1024;
    let at_limit = format!("{prefix}{}\"}}", "x".repeat(limit - prefix.len() - 2));
    assert_eq!(at_limit.len(), limit);
    assert_eq!(gateway.post("/gateway/heartbeat", &at_limit).0, 200);
    // A declared length over the limit is refused before the body is read.
    let response =
        raw_request(&gateway, &format!("POST /gateway/heartbeat HTTP/1.1\r\ncontent-length: {}", limit + 1), b"");
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("payload_too_large"), "{response}");
    // A chunked body that grows past the limit is cut off at the limit.
    let mut chunked = Vec::new();
    for _ in 0..20 {
        chunked.extend_from_slice(format!("{:x}\r\n", 64 * 1024).as_bytes());
        chunked.extend(std::iter::repeat_n(b' ', 64 * 1024));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let response = raw_request(&gateway, "POST /gateway/heartbeat HTTP/1.1\r\ntransfer-encoding: chunked", &chunked);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    // The gateway is still fine afterwards.
    assert_eq!(gateway.post_json("/gateway/heartbeat", &ping("a", "2026-02-22T12:00:00Z")).0, 200);
}

#[test]
fn the_tracked_agent_cap_refuses_new_agents_with_503() {
    let gateway = Gateway::start(&["--max-tracked-agents", "2"]);
    assert_eq!(gateway.post_json("/gateway/heartbeat", &ping("a", "2026-02-22T12:00:00Z")).0, 200);
    assert_eq!(gateway.post_json("/gateway/heartbeat", &ping("b", "2026-02-22T12:00:00Z")).0, 200);
    let (status, body) = gateway.post_json("/gateway/heartbeat", &ping("c", "2026-02-22T12:00:00Z"));
    assert_eq!((status, body["reason"].as_str()), (503, Some("heartbeat_manager_unavailable")));
    assert_eq!(
        gateway.post_json("/gateway/heartbeat", &ping("a", "2026-02-22T12:00:05Z")).0,
        200,
        "known agents still update"
    );
    assert!(stored_heartbeat(&gateway, "c").is_none());
}
