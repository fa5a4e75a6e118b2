//! What an operator does to an endpoint's deliveries (issue 20 item 4, DESIGN.md §18), against the real binary on
//! SQLite with local receivers: recover a window of dead deliveries, resend any delivery, send a test event.

use ring::hmac;
use serde_json::{Value, json};

use crate::receiver::{Behaviour, Receiver};
use crate::support::{Gateway, eventually};

/// A gateway that may deliver to receivers on 127.0.0.1, whose deliveries go dead after two attempts a second
/// apart, and whose poll looks every 200 ms.
fn start(args: &[&str]) -> Gateway {
    let mut all =
        vec!["--webhook-allow-private-targets", "--webhook-retry-schedule-s", "1", "--webhook-poll-interval-ms", "200"];
    all.extend_from_slice(args);
    Gateway::start(&all)
}

fn signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(hmac::sign(&key, body).as_ref()))
}

fn create_config(gateway: &Gateway, source: &str, target_url: &str, secret: &str) -> i64 {
    let (status, body) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": source, "event_type": "order.paid", "agent_intent": "notify",
                "target_session": format!("{source}-session"), "target_url": target_url, "secret": secret}),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

fn enqueue(gateway: &Gateway, webhook_id: i64, payload: &Value) -> Value {
    let (status, body) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": webhook_id, "session_id": "s", "payload": payload}),
    );
    assert_eq!(status, 201, "{body}");
    body
}

fn delivery(gateway: &Gateway, id: i64) -> Value {
    let (status, body) = gateway.operator_get(&format!("/gateway/deliveries/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

fn wait_for_status(gateway: &Gateway, id: i64, status: &str) {
    eventually(&format!("delivery {id} is {status}"), || delivery(gateway, id)["status"] == status);
}

fn requests_for(receiver: &Receiver, id: i64) -> Vec<crate::receiver::Received> {
    receiver.received().into_iter().filter(|request| request.delivery_id() == id).collect()
}

#[test]
fn recover_brings_back_the_dead_deliveries_of_one_config_created_in_the_window_and_nothing_else() {
    let failing = Receiver::start(Behaviour::Status(500));
    let other = Receiver::start(Behaviour::Status(500));
    let gateway = start(&[]);
    let webhook_id = create_config(&gateway, "shop", &failing.url("/shop"), "shop-secret");
    let other_id = create_config(&gateway, "billing", &other.url("/billing"), "billing-secret");

    let before = enqueue(&gateway, webhook_id, &json!({"n": 0}))["id"].as_i64().unwrap();
    wait_for_status(&gateway, before, "dead");
    let first = enqueue(&gateway, webhook_id, &json!({"n": 1}));
    let since = first["created_at"].as_str().unwrap().to_owned();
    let in_window =
        [first["id"].as_i64().unwrap(), enqueue(&gateway, webhook_id, &json!({"n": 2}))["id"].as_i64().unwrap()];
    let other_config = enqueue(&gateway, other_id, &json!({"n": 3}))["id"].as_i64().unwrap();
    for id in in_window.into_iter().chain([other_config]) {
        wait_for_status(&gateway, id, "dead");
    }
    let attempts_before = failing.count();

    failing.set(Behaviour::Status(204));
    let (status, body) =
        gateway.operator_post(&format!("/gateway/webhook-configs/{webhook_id}/recover"), &json!({"since": since}));
    assert_eq!((status, &body), (202, &json!({"recovered": 2})));
    for id in in_window {
        wait_for_status(&gateway, id, "delivered");
        let shown = delivery(&gateway, id);
        assert_eq!(shown["attempt_count"], 1, "a recovered delivery starts a full set of attempts again: {shown}");
        assert_eq!(requests_for(&failing, id).len(), 3, "two dead attempts, then the recovered one");
    }
    // Created before the window, and another config's: still dead, not attempted again.
    assert_eq!(delivery(&gateway, before)["status"], "dead");
    assert_eq!(requests_for(&failing, before).len(), 2);
    assert_eq!(delivery(&gateway, other_config)["status"], "dead");
    assert_eq!(other.count(), 2);
    assert_eq!(failing.count(), attempts_before + 2);

    // Nothing dead is left in the window: a second recover finds nothing.
    let (status, body) =
        gateway.operator_post(&format!("/gateway/webhook-configs/{webhook_id}/recover"), &json!({"since": since}));
    assert_eq!((status, &body), (202, &json!({"recovered": 0})));
}

#[test]
fn a_recover_window_is_checked_and_an_unknown_config_is_404() {
    let gateway = start(&["--retention-days", "1"]);
    let webhook_id = create_config(&gateway, "shop", "http://127.0.0.1:9/never", "shop-secret");
    let recover =
        |id: i64, body: Value| gateway.operator_post(&format!("/gateway/webhook-configs/{id}/recover"), &body);

    let (status, body) = recover(webhook_id, json!({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}));
    assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "{body}");
    assert!(body["detail"].as_str().unwrap().starts_with("since:"), "{body}");
    let (status, body) = recover(webhook_id, json!({"since": "2026-12-01T00:00:00Z", "until": "2026-12-02T00:00:01Z"}));
    assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "longer than the retention: {body}");
    assert!(body["detail"].as_str().unwrap().contains("retention"), "{body}");
    let (status, body) = recover(webhook_id, json!({"since": "2026-12-01T00:00:00Z", "until": "2026-12-02T00:00:00Z"}));
    assert_eq!((status, &body), (202, &json!({"recovered": 0})), "a window of exactly the retention");
    let (status, body) = recover(webhook_id, json!({"since": "yesterday"}));
    assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "{body}");
    assert!(body["detail"].as_str().unwrap().starts_with("since:"), "{body}");
    let (status, body) = recover(webhook_id, json!({"since": "2026-12-01T00:00:00Z", "until": 5}));
    assert_eq!((status, body["reason"].as_str()), (422, Some("invalid_field")), "{body}");
    let (status, body) = recover(webhook_id, json!({}));
    assert_eq!((status, body["reason"].as_str()), (422, Some("missing_required_fields")), "{body}");
    let (status, body) = recover(webhook_id, json!({"since": "2026-12-01T00:00:00Z", "from": "x"}));
    assert_eq!(status, 422, "an unknown field: {body}");
    let (status, body) =
        recover(webhook_id + 100, json!({"since": "2026-12-01T00:00:00Z", "until": "2026-12-01T01:00:00Z"}));
    assert_eq!((status, body["reason"].as_str()), (404, Some("unknown_webhook")), "{body}");
}

#[test]
fn resend_makes_a_new_delivery_of_the_same_payload_whether_delivered_or_dead() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let gateway = start(&[]);
    let webhook_id = create_config(&gateway, "shop", &receiver.url("/shop"), "shop-secret");
    let original = enqueue(&gateway, webhook_id, &json!({"order": 17, "total": 1.50}));
    let original_id = original["id"].as_i64().unwrap();
    wait_for_status(&gateway, original_id, "delivered");

    let (status, body) =
        gateway.operator_post(&format!("/gateway/webhook-deliveries/{original_id}/resend"), &json!({}));
    assert_eq!((status, body["status"].as_str()), (202, Some("accepted")), "{body}");
    let resent_id = body["delivery_id"].as_i64().unwrap();
    assert_ne!(resent_id, original_id);
    wait_for_status(&gateway, resent_id, "delivered");
    let (sent, resent) = (&requests_for(&receiver, original_id)[0], &requests_for(&receiver, resent_id)[0]);
    assert_eq!(resent.body, sent.body, "the same payload, byte for byte");
    assert_eq!(resent.header("x-observatory-signature"), Some(signature("shop-secret", &sent.body).as_str()));
    let shown = delivery(&gateway, resent_id);
    assert_eq!((shown["webhook_id"].as_i64(), shown["session_id"].as_str()), (Some(webhook_id), Some("s")));
    assert_eq!(delivery(&gateway, original_id)["status"], "delivered", "the original is left as it was");

    receiver.set(Behaviour::Status(500));
    let dead = enqueue(&gateway, webhook_id, &json!({"order": 18}))["id"].as_i64().unwrap();
    wait_for_status(&gateway, dead, "dead");
    receiver.set(Behaviour::Status(204));
    let (status, body) = gateway.operator_post(&format!("/gateway/webhook-deliveries/{dead}/resend"), &json!({}));
    assert_eq!(status, 202, "{body}");
    wait_for_status(&gateway, body["delivery_id"].as_i64().unwrap(), "delivered");
    assert_eq!(delivery(&gateway, dead)["status"], "dead");

    let (status, body) = gateway.operator_post("/gateway/webhook-deliveries/999999/resend", &json!({}));
    assert_eq!((status, body["reason"].as_str()), (404, Some("unknown_delivery")), "{body}");
}

#[test]
fn a_test_event_is_a_signed_gateway_test_delivery_retried_like_any_other() {
    let receiver = Receiver::start(Behaviour::Status(503));
    let gateway = start(&[]);
    let webhook_id = create_config(&gateway, "shop", &receiver.url("/shop"), "shop-secret");

    let (status, body) = gateway.operator_post(&format!("/gateway/webhook-configs/{webhook_id}/test"), &json!({}));
    assert_eq!((status, body["status"].as_str()), (202, Some("accepted")), "{body}");
    let id = body["delivery_id"].as_i64().unwrap();
    let first = &receiver.wait_for(1)[0];
    assert_eq!(first.delivery_id(), id);
    assert_eq!(first.path, "/shop");
    assert_eq!(first.header("x-observatory-signature"), Some(signature("shop-secret", &first.body).as_str()));
    let envelope: Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(envelope["event_type"], "gateway.test");
    assert_eq!(envelope["webhook_id"], webhook_id);
    assert_eq!(envelope["payload"]["test"], true);
    receiver.set(Behaviour::Status(204));
    wait_for_status(&gateway, id, "delivered");
    assert_eq!(delivery(&gateway, id)["attempt_count"], 2, "the failed first attempt was retried");
    assert_eq!(delivery(&gateway, id)["session_id"], "shop-session", "the config's target session");

    let (status, body) =
        gateway.operator_post(&format!("/gateway/webhook-configs/{}/test", webhook_id + 100), &json!({}));
    assert_eq!((status, body["reason"].as_str()), (404, Some("unknown_webhook")), "{body}");
}
