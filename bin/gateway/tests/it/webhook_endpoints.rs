//! Webhook endpoints as operators of webhook services know them (issue 20, DESIGN.md §18), against the real binary
//! on SQLite with local receivers: fan-out of one event to every subscribed config.

use ring::hmac;
use serde_json::{Value, json};

use crate::receiver::{Behaviour, Receiver};
use crate::support::{Gateway, eventually};

/// A gateway that may deliver to receivers on 127.0.0.1 (the SSRF guard is off, as its flag allows).
fn start(args: &[&str]) -> Gateway {
    let mut all = vec!["--webhook-allow-private-targets"];
    all.extend_from_slice(args);
    Gateway::start(&all)
}

fn signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(hmac::sign(&key, body).as_ref()))
}

fn create_config(gateway: &Gateway, source: &str, event_type: &str, target_url: &str, secret: &str) -> i64 {
    let (status, body) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": source, "event_type": event_type, "agent_intent": "notify",
                "target_session": format!("{source}-session"), "target_url": target_url, "secret": secret}),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

/// `POST /gateway/webhook-events` with an optional `Idempotency-Key`: status, whether the answer is marked
/// replayed, body.
fn publish(gateway: &Gateway, event: &Value, key: Option<&str>) -> (u16, bool, Value) {
    let headers: Vec<(&str, &str)> = key.map(|key| ("idempotency-key", key)).into_iter().collect();
    let (status, headers, body) = gateway.operator_post_with_headers("/gateway/webhook-events", event, &headers);
    (status, headers.get("idempotent-replayed").is_some_and(|value| value == "true"), body)
}

fn ids(body: &Value) -> Vec<i64> {
    body["delivery_ids"].as_array().unwrap().iter().map(|id| id.as_i64().unwrap()).collect()
}

fn delivery_count(gateway: &Gateway) -> usize {
    let (status, body) = gateway.operator_get("/gateway/deliveries?limit=500");
    assert_eq!(status, 200, "{body}");
    body["deliveries"].as_array().unwrap().len()
}

#[test]
fn an_event_reaches_every_subscribed_config_signed_with_its_own_secret_once_per_key() {
    let paid = Receiver::start(Behaviour::Status(204));
    let everything = Receiver::start(Behaviour::Status(200));
    let refunds = Receiver::start(Behaviour::Status(204));
    let gateway = start(&[]);
    let paid_id = create_config(&gateway, "shop", "order.paid", &paid.url("/paid"), "paid-secret");
    let wildcard_id = create_config(&gateway, "billing", "*", &everything.url("/all"), "all-secret");
    create_config(&gateway, "shop", "order.refunded", &refunds.url("/refunds"), "refund-secret");

    let payload = r#"{"order": 17, "total": 1.50}"#;
    let event = json!({"event_type": "order.paid", "payload": serde_json::from_str::<Value>(payload).unwrap()});
    let (status, replayed, published) = publish(&gateway, &event, Some("order-17-paid"));
    assert_eq!((status, replayed), (202, false), "{published}");
    let delivery_ids = ids(&published);
    assert_eq!(delivery_ids.len(), 2, "the type's config and the wildcard: {published}");
    let event_id = published["event_id"].as_i64().unwrap();

    for (receiver, webhook_id, secret) in [(&paid, paid_id, "paid-secret"), (&everything, wildcard_id, "all-secret")] {
        let request = &receiver.wait_for(1)[0];
        assert_eq!(request.header("x-observatory-signature"), Some(signature(secret, &request.body).as_str()));
        let envelope: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(envelope["event_id"], event_id);
        assert_eq!(envelope["event_type"], "order.paid");
        assert_eq!(envelope["webhook_id"], webhook_id);
        assert_eq!(envelope["payload"], json!({"order": 17, "total": 1.5}));
        assert!(delivery_ids.contains(&request.delivery_id()), "{request:?}");
    }
    for id in &delivery_ids {
        eventually("each delivery is marked delivered", || {
            gateway.operator_get(&format!("/gateway/deliveries/{id}")).1["status"] == "delivered"
        });
    }

    // The same request again: the same answer, nothing new written or sent.
    let (status, replayed, again) = publish(&gateway, &event, Some("order-17-paid"));
    assert_eq!((status, replayed), (202, true), "{again}");
    assert_eq!(again, published);
    assert_eq!(delivery_count(&gateway), 2);
    // The key with another request is refused.
    let other = json!({"event_type": "order.paid", "payload": {"order": 18}});
    let (status, _, refused) = publish(&gateway, &other, Some("order-17-paid"));
    assert_eq!((status, refused["reason"].as_str()), (422, Some("idempotency_key_reused")), "{refused}");

    // Narrowed to one source: the wildcard config (of another source) is left out.
    let narrowed = json!({"event_type": "order.paid", "source_identifier": "shop", "payload": {"order": 19}});
    let (status, _, body) = publish(&gateway, &narrowed, None);
    assert_eq!(status, 202, "{body}");
    assert_eq!(gateway.operator_get(&format!("/gateway/deliveries/{}", ids(&body)[0])).1["webhook_id"], paid_id);
    assert_eq!(ids(&body).len(), 1);
    paid.wait_for(2);

    // No config subscribed: accepted, no delivery.
    let unheard = json!({"event_type": "order.paid", "source_identifier": "nobody", "payload": {}});
    let (status, _, body) = publish(&gateway, &unheard, None);
    assert_eq!((status, ids(&body)), (202, vec![]), "{body}");

    // The wildcard is a subscription, not a type.
    let (status, _, body) = publish(&gateway, &json!({"event_type": "*", "payload": {}}), None);
    assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "{body}");
    let (status, _, body) = publish(&gateway, &json!({"event_type": "order.paid"}), None);
    assert_eq!(status, 422, "{body}");

    assert_eq!(delivery_count(&gateway), 3);
    assert_eq!(refunds.count(), 0, "a config of another type received the event");
    assert_eq!(everything.count(), 1, "{:?}", everything.received());
}

fn enqueue(gateway: &Gateway, webhook_id: i64, n: i64) -> i64 {
    let (status, body) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": webhook_id, "session_id": "s", "payload": {"n": n}}),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

fn config(gateway: &Gateway, id: i64) -> Value {
    let (status, body) = gateway.operator_get(&format!("/gateway/webhook-configs/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

fn delivery(gateway: &Gateway, id: i64) -> Value {
    let (status, body) = gateway.operator_get(&format!("/gateway/deliveries/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn a_failing_endpoint_is_disabled_once_its_deliveries_are_held_and_enabling_it_sends_them() {
    let receiver = Receiver::start(Behaviour::Status(500));
    let gateway = start(&[
        "--webhook-disable-after-failures",
        "3",
        "--webhook-retry-schedule-s",
        "1,1,1,1,1",
        "--webhook-poll-interval-ms",
        "100",
    ]);
    let events = gateway.subscribe("gateway:webhooks");
    let webhook_id = create_config(&gateway, "shop", "order.paid", &receiver.url("/hook"), "shop-secret");
    let fresh = config(&gateway, webhook_id);
    assert_eq!(
        (&fresh["enabled"], &fresh["disabled_reason"], &fresh["consecutive_failures"], &fresh["last_success_at"]),
        (&json!(true), &Value::Null, &json!(0), &Value::Null),
        "{fresh}"
    );
    assert_eq!(fresh["stats_24h"], json!({"delivered": 0, "failed_attempts": 0, "dead": 0}));
    let first = enqueue(&gateway, webhook_id, 1);
    let second = enqueue(&gateway, webhook_id, 2);

    let disabled = events.expect("webhook_endpoint_disabled");
    assert_eq!(disabled.data["webhook_id"], webhook_id);
    assert_eq!(disabled.data["consecutive_failures"], 3);
    assert_eq!(disabled.data["disabled_reason"], "failing");
    let stored = config(&gateway, webhook_id);
    assert_eq!((&stored["enabled"], &stored["disabled_reason"]), (&json!(false), &json!("failing")), "{stored}");
    let attempts = receiver.count();
    assert!(attempts >= 3, "{attempts}");
    let frozen: Vec<Value> =
        [first, second].iter().map(|id| delivery(&gateway, *id)["attempt_count"].clone()).collect();

    // Held while disabled: a new delivery is accepted but not sent, a published event leaves the config out, and
    // several retry periods (1 s each, polled every 100 ms) pass without an attempt or an aging one.
    let third = enqueue(&gateway, webhook_id, 3);
    let (status, published) =
        gateway.operator_post("/gateway/webhook-events", &json!({"event_type": "order.paid", "payload": {"order": 1}}));
    assert_eq!((status, &published["delivery_ids"]), (202, &json!([])), "{published}");
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    assert_eq!(receiver.count(), attempts, "nothing is sent to a disabled endpoint");
    for (id, attempt_count) in [first, second].iter().zip(&frozen) {
        let row = delivery(&gateway, *id);
        assert_eq!(&row["attempt_count"], attempt_count, "the attempt count is frozen: {row}");
        assert_eq!((&row["status"], &row["next_retry_at"]), (&json!("failed"), &Value::Null), "held: {row}");
    }
    let held = delivery(&gateway, third);
    assert_eq!((&held["status"], &held["next_retry_at"]), (&json!("pending"), &Value::Null), "{held}");
    assert_eq!(config(&gateway, webhook_id)["stats_24h"]["failed_attempts"], json!(attempts));

    receiver.set(Behaviour::Status(204));
    let (status, resumed) =
        gateway.operator_patch(&format!("/gateway/webhook-configs/{webhook_id}"), &json!({"enabled": true}));
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(
        (&resumed["enabled"], &resumed["disabled_reason"], &resumed["consecutive_failures"]),
        (&json!(true), &Value::Null, &json!(0)),
        "{resumed}"
    );
    for id in [first, second, third] {
        eventually("each held delivery is sent once the endpoint is enabled", || {
            delivery(&gateway, id)["status"] == "delivered"
        });
    }
    let healthy = config(&gateway, webhook_id);
    assert!(healthy["last_success_at"].is_string(), "{healthy}");
    assert_eq!(healthy["stats_24h"]["delivered"], 3, "{healthy}");

    let (status, manual) =
        gateway.operator_patch(&format!("/gateway/webhook-configs/{webhook_id}"), &json!({"enabled": false}));
    assert_eq!(status, 200, "{manual}");
    assert_eq!((&manual["enabled"], &manual["disabled_reason"]), (&json!(false), &json!("manual")), "{manual}");
    let (status, refused) =
        gateway.operator_patch(&format!("/gateway/webhook-configs/{webhook_id}"), &json!({"enabled": "yes"}));
    assert_eq!(status, 422, "{refused}");
}
