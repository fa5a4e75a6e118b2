//! `Idempotency-Key` on the creating endpoints: a retried create returns the first result and creates nothing.

use serde_json::json;

use crate::support::{Gateway, count_rows};

fn create_config(gateway: &Gateway) -> i64 {
    // A loopback target without --webhook-allow-private-targets: attempts are refused by the SSRF guard, so the
    // test needs no receiver and sends nothing anywhere.
    let (status, config) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": "billing", "event_type": "invoice.paid", "agent_intent": "reconcile",
                "target_session": "session-1", "target_url": "http://127.0.0.1:9/hook", "secret": "shh"}),
    );
    assert_eq!(status, 201, "{config}");
    config["id"].as_i64().unwrap()
}

#[test]
fn a_retried_delivery_enqueue_returns_the_first_delivery_and_creates_nothing() {
    let gateway = Gateway::start(&[]);
    let webhook_id = create_config(&gateway);
    let body = json!({"webhook_id": webhook_id, "session_id": "session-1", "payload": {"invoice": 42}});
    let key = [("idempotency-key", "invoice-42-paid")];

    let (status, headers, first) = gateway.operator_post_with_headers("/gateway/deliveries", &body, &key);
    assert_eq!(status, 201, "{first}");
    assert!(headers.get("idempotent-replayed").is_none());

    let (status, headers, again) = gateway.operator_post_with_headers("/gateway/deliveries", &body, &key);
    assert_eq!(status, 200, "{again}");
    assert_eq!(headers.get("idempotent-replayed").and_then(|value| value.to_str().ok()), Some("true"));
    assert_eq!(again["id"], first["id"]);

    // The same JSON with other spacing is the same request.
    let respaced = r#"{"webhook_id": WID, "session_id": "session-1", "payload": {"invoice":   42}}"#
        .replace("WID", &webhook_id.to_string());
    let respaced: serde_json::Value = serde_json::from_str(&respaced).unwrap();
    assert_eq!(gateway.operator_post_with_headers("/gateway/deliveries", &respaced, &key).0, 200);

    let different = json!({"webhook_id": webhook_id, "session_id": "session-1", "payload": {"invoice": 43}});
    let (status, _, refused) = gateway.operator_post_with_headers("/gateway/deliveries", &different, &key);
    assert_eq!((status, refused["reason"].as_str()), (422, Some("idempotency_key_reused")));

    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 1);

    // Without a key, every request creates.
    assert_eq!(gateway.operator_post("/gateway/deliveries", &body).0, 201);
    assert_eq!(gateway.operator_post("/gateway/deliveries", &body).0, 201);
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 3);
}

#[test]
fn a_malformed_idempotency_key_is_400() {
    let gateway = Gateway::start(&[]);
    let webhook_id = create_config(&gateway);
    let body = json!({"webhook_id": webhook_id, "session_id": "s", "payload": {}});
    let long = "k".repeat(256);
    for key in ["has space", long.as_str()] {
        let (status, _, refused) =
            gateway.operator_post_with_headers("/gateway/deliveries", &body, &[("idempotency-key", key)]);
        assert_eq!((status, refused["reason"].as_str()), (400, Some("invalid_idempotency_key")), "{key}");
    }
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 0);
    // Reminder keys live in the same column as cron job keys: an operator cannot take one.
    let job = json!({"agent_id": "agent-7", "schedule": "@daily", "payload": {}});
    let reserved = [("idempotency-key", "reminder:sha256:0123")];
    let (status, _, refused) = gateway.operator_post_with_headers("/gateway/cron/jobs", &job, &reserved);
    assert_eq!((status, refused["reason"].as_str()), (400, Some("invalid_idempotency_key")));
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 0);
}

#[test]
fn a_retried_cron_job_create_returns_the_first_job() {
    let gateway = Gateway::start(&[]);
    let body = json!({"agent_id": "agent-7", "schedule": "0 9 * * MON-FRI", "payload": {"task": "standup"}});
    let key = [("idempotency-key", "standup-agent-7")];
    let (status, _, first) = gateway.operator_post_with_headers("/gateway/cron/jobs", &body, &key);
    assert_eq!(status, 201, "{first}");
    let (status, headers, again) = gateway.operator_post_with_headers("/gateway/cron/jobs", &body, &key);
    assert_eq!((status, again["id"].clone()), (200, first["id"].clone()));
    assert_eq!(headers.get("idempotent-replayed").and_then(|value| value.to_str().ok()), Some("true"));

    let other = json!({"agent_id": "agent-7", "schedule": "0 10 * * MON-FRI", "payload": {"task": "standup"}});
    let (status, _, refused) = gateway.operator_post_with_headers("/gateway/cron/jobs", &other, &key);
    assert_eq!((status, refused["reason"].as_str()), (422, Some("idempotency_key_reused")));
    assert_eq!(count_rows(&gateway.database_path(), "cron_jobs"), 1);
}
