//! Webhook configs changed in place (`PATCH`), secret rotation with its inbound grace, Standard Webhooks dual
//! signing (checked by the official `standardwebhooks` Python library), and the inspector's `payload_raw`: the
//! real binary, its SQLite file and a local receiver.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use gateway_core::WebhookSecret;
use gateway_webhooks::standard;
use ring::hmac;
use serde_json::{Value, json};

use crate::receiver::{Behaviour, Received, Receiver};
use crate::support::python::python_with_or_skip;
use crate::support::{Gateway, PATIENCE, TOKEN, eventually};

const SECRET: &str = "It's a Secret to Everybody";
const NEW_SECRET: &str = "the secret after the rotation";
/// A Standard Webhooks style secret: the key is the base64 after the prefix.
const WHSEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn allow_private() -> Vec<&'static str> {
    vec![
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "1,1,1,1,1",
        "--webhook-poll-interval-ms",
        "100",
    ]
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent()
}

fn read(response: Result<http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut response = response.unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn patch(gateway: &Gateway, id: &str, body: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = agent().patch(gateway.url(&format!("/gateway/webhook-configs/{id}")));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    read(request.content_type("application/json").send(body))
}

fn patch_ok(gateway: &Gateway, id: i64, body: &Value) -> Value {
    let (status, shown) = patch(gateway, &id.to_string(), &body.to_string(), Some(TOKEN));
    assert_eq!(status, 200, "{shown}");
    shown
}

fn observatory_signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(hmac::sign(&key, body).as_ref()))
}

fn create_config(gateway: &Gateway, source: &str, target_url: &str, secret: &str) -> Value {
    let (status, body) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": source, "event_type": "push", "agent_intent": "code_review",
                "target_session": "reviewer-cluster", "target_url": target_url, "secret": secret}),
    );
    assert_eq!(status, 201, "{body}");
    body
}

/// Enqueues `payload` as the exact text given.
fn enqueue_raw(gateway: &Gateway, webhook_id: i64, payload: &str) -> i64 {
    let body = format!(r#"{{"webhook_id": {webhook_id}, "session_id": "session-1", "payload": {payload}}}"#);
    let (status, created) = read(
        agent()
            .post(gateway.url("/gateway/deliveries"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .content_type("application/json")
            .send(body),
    );
    assert_eq!(status, 201, "{created}");
    created["id"].as_i64().unwrap()
}

fn delivery(gateway: &Gateway, id: i64) -> Value {
    let (status, body) = gateway.operator_get(&format!("/gateway/deliveries/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

fn post_inbound(gateway: &Gateway, webhook_id: i64, body: &[u8], headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = agent().post(gateway.url(&format!("/gateway/webhooks/{webhook_id}")));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    read(request.content_type("application/json").send(body))
}

/// Standard Webhooks headers for `body` signed with `secret` at `timestamp`.
fn standard_headers(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> [(&'static str, String); 3] {
    [
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", standard::sign(&WebhookSecret::new(secret), id, timestamp, body)),
    ]
}

fn as_pairs<'a>(headers: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(name, value)| (*name, value.as_str())).collect()
}

fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// The request `delivery_id` reached the receiver with, the latest one.
fn last_request_of(receiver: &Receiver, delivery_id: i64) -> Received {
    receiver.received().into_iter().rev().find(|request| request.delivery_id() == delivery_id).unwrap()
}

#[test]
fn a_new_target_url_takes_the_undelivered_deliveries_along_and_retry_now_reaches_it() {
    let failing = Receiver::start(Behaviour::Status(500));
    let fixed = Receiver::start(Behaviour::Status(204));
    let gateway = Gateway::start(&allow_private());
    let id = create_config(&gateway, "github", &failing.url("/old"), SECRET)["id"].as_i64().unwrap();
    let dead = enqueue_raw(&gateway, id, r#"{"n": 1}"#);
    eventually("the delivery to the failing receiver is dead", || delivery(&gateway, dead)["status"] == "dead");

    patch_ok(&gateway, id, &json!({"target_url": fixed.url("/new")}));
    assert_eq!(delivery(&gateway, dead)["target_url"].as_str(), Some(fixed.url("/new").as_str()));
    let (status, reset) = gateway.operator_post(&format!("/gateway/deliveries/{dead}/retry"), &json!({}));
    assert_eq!(status, 200, "{reset}");
    eventually("the retried delivery is delivered", || delivery(&gateway, dead)["status"] == "delivered");
    assert_eq!(fixed.received().iter().filter(|request| request.delivery_id() == dead).count(), 1);
    assert!(failing.received().iter().all(|request| request.path == "/old"));
}

#[test]
fn patch_changes_each_field_keeps_the_id_and_the_history_and_never_shows_the_secret() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let gateway = Gateway::start(&allow_private());
    let created = create_config(&gateway, "github", &receiver.url("/before"), SECRET);
    let id = created["id"].as_i64().unwrap();
    assert_eq!(created["secret_rotated_at"], Value::Null);
    let before = enqueue_raw(&gateway, id, r#"{"n": 1}"#);
    eventually("the first delivery is delivered", || delivery(&gateway, before)["status"] == "delivered");

    let moved = patch_ok(&gateway, id, &json!({"target_url": receiver.url("/after")}));
    assert_eq!((moved["id"].as_i64(), moved["target_url"].as_str()), (Some(id), Some(receiver.url("/after").as_str())));
    assert_eq!(moved["secret_rotated_at"], Value::Null, "no secret was given");
    let renamed = patch_ok(&gateway, id, &json!({"agent_intent": "triage", "target_session": "triage-cluster"}));
    assert_eq!(
        (renamed["agent_intent"].as_str(), renamed["target_session"].as_str()),
        (Some("triage"), Some("triage-cluster"))
    );
    let (status, shown) = gateway.operator_get(&format!("/gateway/webhook-configs/{id}"));
    assert_eq!((status, &shown), (200, &renamed), "PATCH answers with the config as GET shows it");
    assert_eq!(shown["source_identifier"], "github");
    assert_eq!(shown["created_at"], created["created_at"]);

    let rotated = patch_ok(&gateway, id, &json!({"secret": NEW_SECRET}));
    assert!(rotated["secret_rotated_at"].is_string(), "{rotated}");
    for body in [&created, &moved, &renamed, &rotated] {
        assert!(body.get("secret").is_none() && !body.to_string().contains(NEW_SECRET), "{body}");
    }

    let after = enqueue_raw(&gateway, id, r#"{"n": 2}"#);
    eventually("the second delivery is delivered", || delivery(&gateway, after)["status"] == "delivered");
    let paths: Vec<String> = receiver.received().iter().map(|request| request.path.clone()).collect();
    assert_eq!(paths, ["/before", "/after"]);
    let old = delivery(&gateway, before);
    assert_eq!(
        (old["status"].as_str(), old["target_url"].as_str()),
        (Some("delivered"), Some(receiver.url("/before").as_str()))
    );
    assert_eq!(old["attempts"].as_array().unwrap().len(), 1, "the history stays");

    // The same refusals as on create, unknown keys named; nothing is written by a refused PATCH.
    let refusals = [
        ("{}", "at least one"),
        (r#"{"secret": null}"#, "at least one"),
        (r#"{"target_url": "ftp://example.com/x"}"#, "target_url"),
        (r#"{"agent_intent": ""}"#, "agent_intent"),
        (r#"{"secret": ""}"#, "secret"),
        (r#"{"secret": "whsec_not base64!"}"#, "secret"),
        (r#"{"target_session": 7}"#, "target_session"),
        (r#"{"agent_intent": "x", "source_identifier": "gitlab"}"#, "source_identifier"),
        (r#"{"agent_intent": "x", "colour": "blue"}"#, "colour"),
    ];
    for (body, named) in refusals {
        let (status, refused) = patch(&gateway, &id.to_string(), body, Some(TOKEN));
        assert_eq!(status, 422, "{body}: {refused}");
        assert!(refused["detail"].as_str().unwrap_or_default().contains(named), "{body}: {refused}");
    }
    let (status, _) = patch(&gateway, &id.to_string(), "{not json", Some(TOKEN));
    assert_eq!(status, 400);
    // Health moves with the deliveries still going out (not with a PATCH): compared without it.
    let settings = |mut config: Value| {
        for health in ["consecutive_failures", "last_success_at", "stats_24h"] {
            config.as_object_mut().unwrap().remove(health);
        }
        config
    };
    let now = gateway.operator_get(&format!("/gateway/webhook-configs/{id}")).1;
    assert_eq!(settings(now), settings(rotated), "refusals wrote nothing");

    for unknown in ["999", "not-a-number"] {
        let (status, missing) = patch(&gateway, unknown, r#"{"agent_intent": "x"}"#, Some(TOKEN));
        let (get_status, get_missing) = gateway.operator_get(&format!("/gateway/webhook-configs/{unknown}"));
        assert_eq!((status, &missing), (get_status, &get_missing), "{unknown}");
        assert_eq!((status, missing["reason"].as_str()), (404, Some("unknown_webhook")));
    }
    let (status, _) = patch(&gateway, &id.to_string(), r#"{"agent_intent": "x"}"#, None);
    assert_eq!(status, 401);
    let logs = gateway.logs();
    assert!(!logs.contains(NEW_SECRET) && !logs.contains(SECRET), "a secret reached the log");
}

/// Sets the config's `secret_rotated_at` back by `hours` in the stopped gateway's SQLite file: the grace period
/// is a day, which a test does not wait for.
fn age_rotation(database: &Path, webhook_id: i64, hours: i64) {
    use diesel::{Connection, RunQueryDsl};
    let mut connection = diesel::SqliteConnection::establish(database.to_str().unwrap()).unwrap();
    let aged = diesel::sql_query(format!(
        "UPDATE webhook_configs SET secret_rotated_at = \
         strftime('%Y-%m-%d %H:%M:%f', secret_rotated_at, '-{hours} hours') WHERE id = {webhook_id}"
    ))
    .execute(&mut connection)
    .unwrap();
    assert_eq!(aged, 1);
}

#[test]
fn a_rotated_secret_signs_outbound_at_once_and_inbound_accepts_the_old_one_until_the_grace_ends() {
    let receiver = Receiver::start(Behaviour::Status(503));
    // The first retry waits 3 s: time enough for the rotation to land before it, however slow the machine.
    let args = [
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "3,1,1,1,1",
        "--webhook-poll-interval-ms",
        "100",
    ];
    let mut gateway = Gateway::start(&args);
    let events = gateway.subscribe("gateway:webhooks");
    let id = create_config(&gateway, "github", &receiver.url("/hooks"), SECRET)["id"].as_i64().unwrap();
    let pending = enqueue_raw(&gateway, id, r#"{"cost": 1.50}"#);
    let first = receiver.wait_for(1).remove(0);
    assert_eq!(first.header("x-observatory-signature"), Some(observatory_signature(SECRET, &first.body).as_str()));

    // Rotated while the delivery waits for its retry: the retry is signed with the new secret, both ways.
    patch_ok(&gateway, id, &json!({"secret": NEW_SECRET}));
    receiver.set(Behaviour::Status(204));
    eventually("the retry is delivered", || delivery(&gateway, pending)["status"] == "delivered");
    let retry = last_request_of(&receiver, pending);
    let new_signature = observatory_signature(NEW_SECRET, &retry.body);
    assert_eq!(retry.header("x-observatory-signature"), Some(new_signature.as_str()));
    let timestamp: i64 = retry.header("webhook-timestamp").unwrap().parse().unwrap();
    let expected = standard::sign(&WebhookSecret::new(NEW_SECRET), &pending.to_string(), timestamp, &retry.body);
    assert_eq!(retry.header("webhook-signature"), Some(expected.as_str()));
    assert_eq!(delivery(&gateway, pending)["signature"], new_signature, "the row shows what was sent");

    let body = br#"{"action": "opened"}"#;
    let signed = |secret: &str| [("x-observatory-signature", observatory_signature(secret, body))];
    for secret in [SECRET, NEW_SECRET] {
        let (status, accepted) = post_inbound(&gateway, id, body, &as_pairs(&signed(secret)));
        assert_eq!(status, 202, "{accepted}");
        let standard = standard_headers(secret, &format!("msg_{secret}"), unix_now(), body);
        assert_eq!(post_inbound(&gateway, id, body, &as_pairs(&standard)).0, 202);
    }
    let (status, refused) = post_inbound(&gateway, id, body, &as_pairs(&signed("a third secret")));
    assert_eq!((status, refused["reason"].as_str()), (401, Some("signature_mismatch")));
    assert_eq!(events.expect("webhook_signature_failure").data["webhook_id"], id);

    // A day and a bit later the old secret is refused, the new one still accepted.
    gateway.terminate();
    let dir = Arc::clone(&gateway.dir);
    let database = gateway.database_path();
    drop(gateway);
    age_rotation(&database, id, 25);
    let gateway = Gateway::start_in(dir, &args);
    let (status, refused) = post_inbound(&gateway, id, body, &as_pairs(&signed(SECRET)));
    assert_eq!((status, refused["reason"].as_str()), (401, Some("signature_mismatch")));
    let standard = standard_headers(SECRET, "msg_2", unix_now(), body);
    assert_eq!(post_inbound(&gateway, id, body, &as_pairs(&standard)).0, 401);
    // The same body signed with the new secret was accepted a day ago (in test time: just now), which the replay
    // window remembers; a new body is accepted.
    assert_eq!(post_inbound(&gateway, id, body, &as_pairs(&signed(NEW_SECRET))).0, 200, "a duplicate");
    let fresh = br#"{"action": "closed"}"#;
    let new_signature = [("x-observatory-signature", observatory_signature(NEW_SECRET, fresh))];
    assert_eq!(post_inbound(&gateway, id, fresh, &as_pairs(&new_signature)).0, 202);
}

#[test]
fn payload_raw_is_the_exact_bytes_the_receiver_got_and_both_signatures_recompute_from_it() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let gateway = Gateway::start(&allow_private());
    let id = create_config(&gateway, "github", &receiver.url("/hooks"), SECRET)["id"].as_i64().unwrap();
    // Key order, spacing and number formatting that a re-serializer would change.
    let payload = r#"{"z": 1, "cost": 1.50,  "a": [true, 1e3]}"#;
    let delivery_id = enqueue_raw(&gateway, id, payload);
    eventually("the delivery is delivered", || delivery(&gateway, delivery_id)["status"] == "delivered");
    let received = last_request_of(&receiver, delivery_id);
    let shown = delivery(&gateway, delivery_id);
    let raw = shown["payload_raw"].as_str().unwrap();
    assert_eq!(raw.as_bytes(), received.body.as_slice());
    assert_eq!(raw, payload);
    assert_eq!(shown["payload"], json!({"z": 1, "cost": 1.5, "a": [true, 1000.0]}), "payload keeps its meaning");

    // What an operator recomputes from the inspector: the signature, and the Standard Webhooks one from the
    // delivery id and the attempt's start (its unix second is the webhook-timestamp).
    assert_eq!(shown["signature"], observatory_signature(SECRET, raw.as_bytes()));
    assert_eq!(received.header("x-observatory-signature"), shown["signature"].as_str());
    assert_eq!(received.header("webhook-id"), Some(delivery_id.to_string().as_str()));
    let started_at = shown["attempts"][0]["started_at"].as_str().unwrap();
    let started_at = time::OffsetDateTime::parse(started_at, &time::format_description::well_known::Rfc3339).unwrap();
    let timestamp = started_at.unix_timestamp();
    assert_eq!(received.header("webhook-timestamp"), Some(timestamp.to_string().as_str()));
    let expected = standard::sign(&WebhookSecret::new(SECRET), &delivery_id.to_string(), timestamp, raw.as_bytes());
    assert_eq!(received.header("webhook-signature"), Some(expected.as_str()));

    // An inbound webhook's delivery: the envelope as sent, with the sender's body inside byte for byte (its trailing
    // newline included), so the inbound signature recomputes from it too.
    let body = b"{ \"number\" : 1.50 }\n";
    let (status, accepted) =
        post_inbound(&gateway, id, body, &[("x-observatory-signature", &observatory_signature(SECRET, body))]);
    assert_eq!(status, 202, "{accepted}");
    let inbound_id = accepted["delivery_id"].as_i64().unwrap();
    eventually("the inbound delivery is delivered", || delivery(&gateway, inbound_id)["status"] == "delivered");
    let raw = delivery(&gateway, inbound_id)["payload_raw"].as_str().unwrap().to_owned();
    assert_eq!(raw.as_bytes(), last_request_of(&receiver, inbound_id).body.as_slice());
    let embedded = raw.rsplit_once(r#","body":"#).unwrap().1.strip_suffix('}').unwrap();
    assert_eq!(embedded.as_bytes(), body, "{raw}");
}

#[test]
fn stale_or_future_standard_webhooks_signatures_are_refused_inbound() {
    let gateway = Gateway::start(&[]);
    let events = gateway.subscribe("gateway:webhooks");
    // Never reached: without --webhook-allow-private-targets the guard refuses the loopback literal.
    let id = create_config(&gateway, "github", "http://127.0.0.1:9/hooks", SECRET)["id"].as_i64().unwrap();
    let body = br#"{"n": 1}"#;
    let fresh = standard_headers(SECRET, "msg_fresh", unix_now(), body);
    assert_eq!(post_inbound(&gateway, id, body, &as_pairs(&fresh)).0, 202);
    for (name, timestamp) in [("msg_old", unix_now() - 600), ("msg_future", unix_now() + 600)] {
        let stale = standard_headers(SECRET, name, timestamp, body);
        let (status, refused) = post_inbound(&gateway, id, body, &as_pairs(&stale));
        assert_eq!((status, refused["reason"].as_str()), (401, Some("signature_mismatch")), "{name}");
    }
    assert_eq!(events.expect("webhook_signature_failure").data["webhook_id"], id);
    let mut tampered = standard_headers(SECRET, "msg_tampered", unix_now(), body);
    tampered[0].1 = "msg_other".into();
    assert_eq!(post_inbound(&gateway, id, body, &as_pairs(&tampered)).0, 401);
}

/// Verifies each captured request with the official library and the config's secret (a `whsec_` secret as the
/// library takes it, any other as its UTF-8 bytes, the documented way), and signs one inbound body per secret.
const PYTHON_CHECK: &str = r#"
import json, sys
from datetime import datetime, timezone
from standardwebhooks.webhooks import Webhook

def hook(secret):
    return Webhook(secret) if secret.startswith("whsec_") else Webhook(secret.encode())

cases = json.load(sys.stdin)
for case in cases["verify"]:
    hook(case["secret"]).verify(case["body"].encode(), case["headers"])
signed = []
for case in cases["sign"]:
    now = datetime.now(tz=timezone.utc)
    signature = hook(case["secret"]).sign(case["id"], now, case["body"])
    signed.append({"webhook-id": case["id"], "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": signature})
print(json.dumps({"verified": len(cases["verify"]), "signed": signed}))
"#;

#[test]
fn the_official_standardwebhooks_library_verifies_outbound_requests_and_signs_accepted_inbound_ones() {
    let test = "the_official_standardwebhooks_library_verifies_outbound_requests_and_signs_accepted_inbound_ones";
    let Some(python) = python_with_or_skip(test, "standardwebhooks", "standardwebhooks") else { return };
    let receiver = Receiver::start(Behaviour::Status(204));
    let gateway = Gateway::start(&allow_private());
    let mut cases = Vec::new();
    let mut configs = Vec::new();
    for (source, secret) in [("plain", SECRET), ("whsec", WHSEC_SECRET)] {
        let id = create_config(&gateway, source, &receiver.url(&format!("/{source}")), secret)["id"].as_i64().unwrap();
        let delivery_id = enqueue_raw(&gateway, id, r#"{"cost": 1.50, "note": "héllo"}"#);
        eventually("the delivery is delivered", || delivery(&gateway, delivery_id)["status"] == "delivered");
        let request = last_request_of(&receiver, delivery_id);
        let headers: serde_json::Map<String, Value> =
            request.headers.iter().map(|(name, value)| (name.clone(), Value::String(value.clone()))).collect();
        cases.push(json!({"secret": secret, "body": String::from_utf8(request.body).unwrap(), "headers": headers}));
        configs.push((id, secret));
    }
    let inbound_body = r#"{"event": "push", "n": 1.50}"#;
    let sign: Vec<Value> = configs
        .iter()
        .map(|(id, secret)| json!({"secret": secret, "id": format!("msg_{id}"), "body": inbound_body}))
        .collect();

    let mut child = Command::new(&python)
        .args(["-c", PYTHON_CHECK])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(json!({"verify": cases, "sign": sign}).to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the official library refused a request: {stderr}");
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["verified"], 2);

    for ((id, _), headers) in configs.iter().zip(answer["signed"].as_array().unwrap()) {
        let headers: Vec<(&str, &str)> =
            headers.as_object().unwrap().iter().map(|(name, value)| (name.as_str(), value.as_str().unwrap())).collect();
        let (status, accepted) = post_inbound(&gateway, *id, inbound_body.as_bytes(), &headers);
        assert_eq!(status, 202, "config {id}: {accepted}");
    }
}
