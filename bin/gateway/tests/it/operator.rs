//! The operator API's token, routing errors, health endpoints, and the generated token.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::json;

use crate::support::{Gateway, gateway_command};

#[test]
fn the_operator_api_needs_the_bearer_token() {
    let gateway = Gateway::start(&[]);
    let (status, body) = gateway.get("/gateway/agents");
    assert_eq!((status, body), (401, json!({"status": "error", "reason": "unauthorized"})));
    assert_eq!(gateway.operator_get("/gateway/agents").0, 200);
}

#[test]
fn unknown_paths_are_404_and_wrong_methods_405() {
    let gateway = Gateway::start(&[]);
    let (status, body) = gateway.get("/gateway/nothing-here");
    assert_eq!((status, body["reason"].as_str()), (404, Some("not_found")));
    let (status, body) = gateway.get("/gateway/heartbeat");
    assert_eq!((status, body["reason"].as_str()), (405, Some("method_not_allowed")));
    let (status, _) = gateway.operator_delete("/gateway/agents");
    assert_eq!(status, 405);
}

#[test]
fn health_and_readiness_need_no_token() {
    let gateway = Gateway::start(&[]);
    assert_eq!(gateway.get("/healthz"), (200, json!({"status": "ok"})));
    assert_eq!(
        gateway.get("/readyz"),
        (200, json!({"status": "ready", "role": "single"})),
        "no details without the token"
    );
    let (status, body) = gateway.operator_get("/readyz");
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ready");
    assert!(body["checks"]["components"].as_array().unwrap().iter().all(|c| c["running"] == true));
}

#[test]
fn agents_are_paginated() {
    let gateway = Gateway::start(&[]);
    for id in ["a", "b", "c"] {
        let ping = json!({"type": "heartbeat", "agent_id": id, "cluster_id": "c"});
        assert_eq!(gateway.post_json("/gateway/heartbeat", &ping).0, 200);
    }
    let (_, first) = gateway.operator_get("/gateway/agents?limit=2");
    assert_eq!(first["agents"].as_array().unwrap().len(), 2);
    assert_eq!(first["next_after"], "b");
    let (_, rest) = gateway.operator_get("/gateway/agents?limit=2&after=b");
    assert_eq!(rest["agents"][0]["agent_id"], "c");
    assert_eq!(rest["next_after"], serde_json::Value::Null);
    assert_eq!(gateway.operator_get("/gateway/agents?limit=0").0, 400);
}

#[test]
fn without_a_configured_token_one_is_generated_printed_once_and_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("g.db").display());
    let mut child = gateway_command()
        .args(["--listen", "127.0.0.1:0", "--database-url", &database])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = lines.next().unwrap().unwrap().strip_prefix("gateway listening on ").unwrap().to_owned();
    let token_line = lines.next().unwrap().unwrap();
    let token = token_line.strip_prefix("admin token (generated, shown once): ").unwrap().to_owned();
    assert_eq!(token.len(), 64);

    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
    let with = agent.get(format!("{base}/gateway/agents")).header("authorization", format!("Bearer {token}")).call();
    assert_eq!(with.unwrap().status(), 200);
    let without = agent.get(format!("{base}/gateway/agents")).call();
    assert_eq!(without.unwrap().status(), 401);
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn a_single_instance_shows_itself_as_its_own_leader() {
    let gateway = Gateway::start(&["--instance-id", "gw-test-1"]);
    assert_eq!(gateway.get("/gateway/cluster").0, 401, "operator only");
    let (status, cluster) = gateway.operator_get("/gateway/cluster");
    assert_eq!(status, 200);
    assert_eq!(cluster["instance_id"], "gw-test-1");
    assert_eq!(cluster["role"], "single");
    assert_eq!(cluster["redis"], "none");
    assert_eq!(cluster["leader"]["instance_id"], "gw-test-1");
    assert_eq!(cluster["leader"]["epoch"], 1);
    assert_eq!(gateway.get("/readyz").1["role"], "single");
}
