//! The webhook router end to end: the real binary, its SQLite file, and a local receiver.

use std::path::Path;
use std::sync::Arc;

use ring::hmac;
use serde_json::{Value, json};

use crate::receiver::{Behaviour, Receiver};
use crate::support::{Gateway, PATIENCE, count_rows, eventually};

const SECRET: &str = "It's a Secret to Everybody";

/// A gateway that may deliver to the receiver on 127.0.0.1 (the SSRF guard is off, as its flag allows).
fn start(args: &[&str]) -> Gateway {
    let mut all = vec!["--webhook-allow-private-targets"];
    all.extend_from_slice(args);
    Gateway::start(&all)
}

fn signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(hmac::sign(&key, body).as_ref()))
}

fn create_config(gateway: &Gateway, source: &str, target_url: &str) -> i64 {
    let (status, body) = gateway.operator_post(
        "/gateway/webhook-configs",
        &json!({"source_identifier": source, "event_type": "pull_request.opened", "agent_intent": "code_review",
                "target_session": "reviewer-cluster", "target_url": target_url, "secret": SECRET}),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

fn enqueue(gateway: &Gateway, webhook_id: i64, session_id: &str, payload: &Value) -> Value {
    let (status, body) = gateway.operator_post(
        "/gateway/deliveries",
        &json!({"webhook_id": webhook_id, "session_id": session_id, "payload": payload}),
    );
    assert_eq!(status, 201, "{body}");
    body
}

fn delivery(gateway: &Gateway, id: i64) -> Value {
    let (status, body) = gateway.operator_get(&format!("/gateway/deliveries/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

/// POSTs `body` to an inbound webhook URL with an optional signature header.
fn post_inbound(gateway: &Gateway, webhook_id: &str, body: &[u8], signature: Option<&str>) -> (u16, Value) {
    let agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent();
    let mut request = agent.post(gateway.url(&format!("/gateway/webhooks/{webhook_id}")));
    if let Some(signature) = signature {
        request = request.header("x-observatory-signature", signature);
    }
    let mut response = request.content_type("application/json").send(body).unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn status_of(gateway: &Gateway, id: i64) -> (String, i64) {
    let row = delivery(gateway, id);
    (row["status"].as_str().unwrap().to_owned(), row["attempt_count"].as_i64().unwrap())
}

#[test]
fn an_enqueued_delivery_arrives_signed_once_and_is_marked_delivered() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let gateway = start(&[]);
    let events = gateway.subscribe("gateway:webhooks");
    let webhook_id = create_config(&gateway, "github", &receiver.url("/hooks/in"));
    // The payload goes out byte for byte as posted, spacing and number formatting included.
    let payload = r#"{"task": "done", "cost": 1.50}"#;
    let (status, created) = gateway.operator_post_text(
        "/gateway/deliveries",
        &format!(r#"{{"webhook_id": {webhook_id}, "session_id": "session-1", "payload": {payload}}}"#),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_i64().unwrap();
    assert_eq!(created["status"], "pending");
    assert_eq!(created["attempt_count"], 0);

    let received = receiver.wait_for(1);
    let request = &received[0];
    assert_eq!(request.path, "/hooks/in");
    assert_eq!(request.body, payload.as_bytes());
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("x-observatory-signature"), Some(signature(SECRET, &request.body).as_str()));
    assert_eq!(request.delivery_id(), id);

    eventually("the delivery is marked delivered", || status_of(&gateway, id).0 == "delivered");
    let shown = delivery(&gateway, id);
    assert_eq!(shown["attempt_count"], 1);
    assert_eq!(shown["next_retry_at"], Value::Null);
    assert_eq!(shown["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(shown["attempts"][0]["status_code"], 204);
    assert_eq!(shown["payload"], json!({"task": "done", "cost": 1.5}));

    assert_eq!(events.expect("webhook_delivery_status").data["status"], "pending");
    let delivered = events.expect("webhook_delivery_status");
    assert_eq!(
        (delivered.data["status"].as_str(), delivered.data["delivery_id"].as_i64()),
        (Some("delivered"), Some(id))
    );
    assert_eq!(receiver.count(), 1, "delivered more than once");
    assert!(!gateway.logs().contains(SECRET), "the secret reached the log");
}

#[test]
fn inbound_webhooks_are_verified_on_raw_bytes_and_routed_to_the_target() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let gateway = start(&[]);
    let events = gateway.subscribe("gateway:webhooks");
    let webhook_id = create_config(&gateway, "github", &receiver.url("/agent"));
    // Spacing and number formatting a re-serializer would change: the signature covers these exact bytes.
    let body = br#"{ "action" : "opened", "number": 1.50 }"#;
    let (status, accepted) = post_inbound(&gateway, &webhook_id.to_string(), body, Some(&signature(SECRET, body)));
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["status"], "accepted");
    let delivery_id = accepted["delivery_id"].as_i64().unwrap();

    let received = receiver.wait_for(1);
    let envelope: Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(envelope["webhook_id"], webhook_id);
    assert_eq!(envelope["source_identifier"], "github");
    assert_eq!(envelope["event_type"], "pull_request.opened");
    assert_eq!(envelope["agent_intent"], "code_review");
    assert_eq!(envelope["target_session"], "reviewer-cluster");
    assert!(envelope["received_at"].is_string());
    assert_eq!(envelope["body"], json!({"action": "opened", "number": 1.5}));
    assert_eq!(received[0].delivery_id(), delivery_id);
    assert_eq!(delivery(&gateway, delivery_id)["session_id"], "reviewer-cluster");

    let tampered = br#"{ "action" : "opened", "number": 1.51 }"#;
    let (status, refused) = post_inbound(&gateway, &webhook_id.to_string(), tampered, Some(&signature(SECRET, body)));
    assert_eq!((status, refused["reason"].as_str()), (401, Some("signature_mismatch")));
    assert_eq!(events.expect("webhook_signature_failure").data["webhook_id"], webhook_id);
    let (status, _) = post_inbound(&gateway, &webhook_id.to_string(), body, None);
    assert_eq!(status, 401);
    let (status, _) = post_inbound(&gateway, &webhook_id.to_string(), body, Some("sha256=nothex"));
    assert_eq!(status, 401);
    for unknown in ["999", "not-a-number"] {
        let (status, missing) = post_inbound(&gateway, unknown, body, Some(&signature(SECRET, body)));
        assert_eq!((status, missing["reason"].as_str()), (404, Some("unknown_webhook")), "{unknown}");
    }
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 1, "a refused webhook was stored");
}

/// The requests the receiver got for delivery `id`.
fn attempts_seen(receiver: &Receiver, id: i64) -> usize {
    receiver.received().iter().filter(|request| request.delivery_id() == id).count()
}

#[test]
fn a_failing_receiver_is_retried_until_dead_and_retry_now_revives_it() {
    let receiver = Receiver::start(Behaviour::Status(500));
    // One attempt in flight at a time: an attempt that starts has seen every earlier one end.
    let gateway = start(&[
        "--webhook-retry-schedule-s",
        "1,1,1,1,1",
        "--webhook-poll-interval-ms",
        "200",
        "--webhook-max-per-cycle",
        "1",
    ]);
    let events = gateway.subscribe("gateway:webhooks");
    let webhook_id = create_config(&gateway, "github", &receiver.url("/failing"));
    let id = enqueue(&gateway, webhook_id, "s", &json!({"n": 1}))["id"].as_i64().unwrap();

    let dead = events.expect("webhook_dlq");
    assert_eq!(dead.data["delivery_id"], id);
    assert_eq!(dead.data["attempt_count"], 6);
    assert_eq!(dead.data["error_detail"], "http_500");
    let shown = delivery(&gateway, id);
    assert_eq!((shown["status"].as_str(), shown["attempt_count"].as_i64()), (Some("dead"), Some(6)));
    assert_eq!(shown["next_retry_at"], Value::Null);
    let attempts = shown["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.iter().map(|attempt| attempt["attempt_number"].as_i64().unwrap()).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    assert!(attempts.iter().all(|attempt| attempt["error_class"] == "http_500" && attempt["status_code"] == 500));
    assert_eq!(receiver.count(), 6);
    // Nothing retries a dead delivery by itself. A probe to the same failing receiver shows the poll carried on:
    // its third attempt comes from a poll cycle more than a second after the dead delivery's last attempt (when
    // a retry of it would have been due, and older rows go first), and with one slot, after any attempt started
    // before it has ended.
    let probe = enqueue(&gateway, webhook_id, "s", &json!({"probe": true}))["id"].as_i64().unwrap();
    eventually("the probe's third attempt", || attempts_seen(&receiver, probe) >= 3);
    assert_eq!(attempts_seen(&receiver, id), 6, "a dead delivery was retried automatically");
    assert_eq!(status_of(&gateway, id), ("dead".to_owned(), 6));

    receiver.set(Behaviour::Status(200));
    let (status, reset) = gateway.operator_post(&format!("/gateway/deliveries/{id}/retry"), &json!({}));
    assert_eq!(status, 200, "{reset}");
    assert_eq!((reset["status"].as_str(), reset["attempt_count"].as_i64()), (Some("pending"), Some(0)));
    eventually("the revived delivery is delivered", || status_of(&gateway, id) == ("delivered".to_owned(), 1));
    let (status, refused) = gateway.operator_post(&format!("/gateway/deliveries/{id}/retry"), &json!({}));
    assert_eq!((status, refused["reason"].as_str()), (409, Some("retry_not_allowed")));
    let (status, _) = gateway.operator_post("/gateway/deliveries/424242/retry", &json!({}));
    assert_eq!(status, 404);
}

/// Inserts `count` failed rows, due since a minute ago, straight into the database of a stopped gateway.
fn insert_due_rows(database: &Path, webhook_id: i64, target_url: &str, count: usize) {
    use diesel::sql_types::{BigInt, Text, Timestamp};
    use diesel::{Connection, RunQueryDsl};
    let mut connection = diesel::SqliteConnection::establish(database.to_str().unwrap()).unwrap();
    let now = time::OffsetDateTime::now_utc();
    for index in 0..count {
        let due = now - time::Duration::seconds(60) + time::Duration::milliseconds(index as i64);
        let payload = format!(r#"{{"row":{index}}}"#);
        diesel::sql_query(
            "INSERT INTO webhook_deliveries (webhook_id, session_id, payload, target_url, signature, status, \
             attempt_count, next_retry_at, created_at) VALUES (?, 'backlog', ?, ?, ?, 'failed', 1, ?, ?)",
        )
        .bind::<BigInt, _>(webhook_id)
        .bind::<Text, _>(&payload)
        .bind::<Text, _>(target_url)
        .bind::<Text, _>(signature(SECRET, payload.as_bytes()))
        .bind::<Timestamp, _>(time::PrimitiveDateTime::new(due.date(), due.time()))
        .bind::<Timestamp, _>(time::PrimitiveDateTime::new(due.date(), due.time()))
        .execute(&mut connection)
        .unwrap();
    }
}

/// How many attempts each poll cycle started, from the dispatcher's debug line per cycle that started any.
fn poll_cycles(gateway: &Gateway) -> Vec<usize> {
    gateway
        .logs()
        .lines()
        .filter_map(|line| line.split_once("webhook poll cycle started="))
        .map(|(_, started)| started.trim().parse().unwrap())
        .collect()
}

#[test]
fn twelve_due_rows_at_start_go_out_five_per_cycle() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let mut first = start(&[]);
    let webhook_id = create_config(&first, "github", &receiver.url("/backlog"));
    assert!(first.terminate().success());
    let dir = Arc::clone(&first.dir);
    drop(first);
    insert_due_rows(&dir.path().join("gateway.db"), webhook_id, &receiver.url("/backlog"), 12);

    // Debug logs for the dispatcher: its line per poll cycle says how many attempts that cycle started.
    let gateway = Gateway::start_logging(
        dir,
        "info,gateway_webhooks=debug",
        &["--webhook-allow-private-targets", "--webhook-max-per-cycle", "5", "--webhook-poll-interval-ms", "1500"],
    );
    let received = receiver.wait_for(12);
    eventually("the cycles that started all twelve are logged", || poll_cycles(&gateway).iter().sum::<usize>() == 12);
    let cycles = poll_cycles(&gateway);
    // The first cycle finds every slot free and the rate unspent; a later one may find slots still busy or the
    // rate spent, and start fewer (on an idle machine the cycles are 5, 5, 2).
    assert_eq!(cycles[0], 5, "attempts started per poll cycle: {cycles:?}");
    assert!(cycles.iter().all(|&started| started <= 5), "attempts started per poll cycle: {cycles:?}");
    let mut ids: Vec<i64> = received.iter().map(|request| request.delivery_id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 12, "every row exactly once");
    eventually("all twelve are delivered", || {
        let (_, page) = gateway.operator_get("/gateway/deliveries?status=delivered");
        page["deliveries"].as_array().unwrap().len() == 12
    });
}

#[test]
fn sigkill_mid_retry_then_restart_resumes_the_delivery() {
    let receiver = Receiver::start(Behaviour::Status(503));
    let args = [
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "1,1,1,1,1",
        "--webhook-poll-interval-ms",
        "200",
        "--webhook-timeout-ms",
        "2000",
    ];
    let mut gateway = Gateway::start(&args);
    let webhook_id = create_config(&gateway, "github", &receiver.url("/slow"));
    let id = enqueue(&gateway, webhook_id, "s", &json!({"n": 1}))["id"].as_i64().unwrap();
    // Attempt 1 fails; attempt 2 (the first retry) is held open by the receiver and the process dies in it.
    receiver.wait_for(1);
    receiver.set(Behaviour::Hold);
    receiver.wait_for(2);
    gateway.kill();
    let dir = Arc::clone(&gateway.dir);
    drop(gateway);

    receiver.set(Behaviour::Status(200));
    let restarted = Gateway::start_in(dir, &args);
    eventually("the interrupted retry is made again and succeeds", || status_of(&restarted, id).0 == "delivered");
    let shown = delivery(&restarted, id);
    assert_eq!(shown["attempt_count"], 2, "the interrupted attempt is not counted, nothing else is lost");
    assert!(receiver.received().iter().all(|request| request.delivery_id() == id));
    assert_eq!(receiver.count(), 3);
}

#[test]
fn private_targets_are_refused_without_the_allow_flag() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let gateway = Gateway::start(&["--webhook-retry-schedule-s", "3600"]);
    let webhook_id = create_config(&gateway, "github", &receiver.url("/internal"));
    let id = enqueue(&gateway, webhook_id, "s", &json!({}))["id"].as_i64().unwrap();
    eventually("the attempt is refused", || status_of(&gateway, id).0 == "failed");
    let shown = delivery(&gateway, id);
    let detail = shown["error_detail"].as_str().unwrap();
    assert!(detail.starts_with("ssrf_blocked: 127.0.0.1 is loopback"), "{detail}");
    assert_eq!(shown["attempts"][0]["error_class"], "ssrf_blocked");
    assert_eq!(receiver.count(), 0, "the guard let a request through");
}

#[test]
fn operator_endpoints_validate_hide_the_secret_and_page_the_inspector() {
    // The enqueued deliveries go out at once: to a receiver on loopback, never beyond.
    let receiver = Receiver::start(Behaviour::Status(200));
    let gateway = start(&[]);
    let target_url = receiver.url("/in");
    let body = json!({"source_identifier": "github", "event_type": "push", "agent_intent": "review",
                      "target_session": "s", "target_url": target_url, "secret": SECRET});
    assert_eq!(gateway.post("/gateway/webhook-configs", &body.to_string()).0, 401);
    let (status, created) = gateway.operator_post("/gateway/webhook-configs", &body);
    assert_eq!(status, 201);
    let id = created["id"].as_i64().unwrap();
    assert_eq!(gateway.operator_post("/gateway/webhook-configs", &body).0, 409);
    for (field, value) in
        [("target_url", json!("ftp://example.com/")), ("target_url", json!("/relative")), ("secret", json!(""))]
    {
        let mut invalid = body.clone();
        invalid["event_type"] = json!("other");
        invalid[field] = value;
        let (status, refused) = gateway.operator_post("/gateway/webhook-configs", &invalid);
        assert_eq!((status, refused["reason"].as_str()), (422, Some("invalid_field")), "{field}: {refused}");
    }
    let mut missing = body.clone();
    missing.as_object_mut().unwrap().remove("target_session");
    assert_eq!(gateway.operator_post("/gateway/webhook-configs", &missing).1["reason"], "missing_required_fields");
    assert_eq!(gateway.post("/gateway/webhook-configs", "{").0, 401, "the token is checked before the body");

    let (_, listed) = gateway.operator_get("/gateway/webhook-configs");
    let (_, shown) = gateway.operator_get(&format!("/gateway/webhook-configs/{id}"));
    for document in [&created, &listed, &shown] {
        assert!(!document.to_string().contains(SECRET), "the secret was returned: {document}");
    }
    assert_eq!(shown["target_url"], target_url.as_str());

    // The inspector: filters, keyset pages, bounds.
    for (index, session) in ["a", "b", "a", "a"].into_iter().enumerate() {
        enqueue(&gateway, id, session, &json!({"index": index}));
    }
    let (status, page) = gateway.operator_get("/gateway/deliveries?session_id=a&limit=2");
    assert_eq!(status, 200, "{page}");
    let first: Vec<i64> =
        page["deliveries"].as_array().unwrap().iter().map(|row| row["id"].as_i64().unwrap()).collect();
    assert_eq!(first.len(), 2);
    let after = page["next_after_id"].as_i64().unwrap();
    let (_, rest) = gateway.operator_get(&format!("/gateway/deliveries?session_id=a&limit=2&after_id={after}"));
    assert_eq!(rest["deliveries"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_after_id"], Value::Null);
    assert!(page["deliveries"][0].get("payload").is_none(), "pages carry no payloads");
    let (_, none) = gateway.operator_get("/gateway/deliveries?from=2000-01-01T00:00:00Z&to=2000-01-02T00:00:00Z");
    assert_eq!(none["deliveries"], json!([]));
    for bad in ["limit=501", "limit=0", "status=lost", "from=yesterday", "colour=red"] {
        let (status, refused) = gateway.operator_get(&format!("/gateway/deliveries?{bad}"));
        assert_eq!((status, refused["reason"].as_str()), (400, Some("invalid_query")), "{bad}");
    }
    let (status, refused) =
        gateway.operator_post("/gateway/deliveries", &json!({"webhook_id": 999, "session_id": "s", "payload": {}}));
    assert_eq!((status, refused["reason"].as_str()), (404, Some("unknown_webhook")));
    let (status, _) =
        gateway.operator_post("/gateway/deliveries", &json!({"webhook_id": id, "session_id": "", "payload": {}}));
    assert_eq!(status, 422);
    assert_eq!(gateway.operator_get("/gateway/deliveries/999999").0, 404);
    assert_eq!(gateway.get("/gateway/deliveries").0, 401);

    let (status, _) = gateway.operator_delete(&format!("/gateway/webhook-configs/{id}"));
    assert_eq!(status, 200);
    assert_eq!(gateway.operator_get(&format!("/gateway/webhook-configs/{id}")).0, 404);
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 0, "its deliveries went with it");

    let (status, ready) = gateway.operator_get("/readyz");
    assert_eq!(status, 200, "{ready}");
    let components = ready["checks"]["components"].as_array().unwrap();
    assert!(
        components
            .iter()
            .any(|component| component["component"] == "webhook_dispatcher" && component["healthy"] == true)
    );
}

/// The `X-Gateway-Epoch` of each attempt `receiver` got for delivery `id`, each checked against its
/// `X-Gateway-Epoch-Signature` as a receiver would.
fn epochs_seen(receiver: &Receiver, id: i64) -> Vec<u64> {
    let secret = gateway_core::WebhookSecret::new(SECRET);
    receiver
        .received()
        .iter()
        .filter(|request| request.delivery_id() == id)
        .map(|request| {
            let header = |name: &str| request.header(name).unwrap_or_else(|| panic!("no {name} header"));
            let timestamp: i64 = header("webhook-timestamp").parse().unwrap();
            let verified = gateway_webhooks::epoch::verify(
                &secret,
                &id.to_string(),
                timestamp,
                header("x-gateway-epoch"),
                header("x-gateway-epoch-signature"),
            );
            verified.unwrap_or_else(|error| panic!("the epoch's signature: {error}"))
        })
        .collect()
}

/// Every attempt carries the leader epoch that made it (issue 19, fencing visible to receivers): a single instance
/// is its own leader under the term `GET /gateway/cluster` shows, and a restart on the same database takes the
/// next term (the first one's fenced claims raised the store's epoch to its own), which the retries of the same
/// delivery then carry: a receiver keeping the highest epoch sees it rise, and would refuse the old term's work.
#[test]
fn every_attempt_carries_the_instances_term_signed_and_a_restart_takes_the_next() {
    let receiver = Receiver::start(Behaviour::Status(500));
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let args = [
        "--webhook-allow-private-targets",
        "--webhook-retry-schedule-s",
        "1,1,1,1,1",
        "--webhook-poll-interval-ms",
        "200",
        "--webhook-max-per-cycle",
        "1",
    ];
    let epoch_of = |gateway: &Gateway| gateway.operator_get("/gateway/cluster").1["leader"]["epoch"].as_u64().unwrap();
    let mut first = Gateway::start_in(Arc::clone(&dir), &args);
    let first_term = epoch_of(&first);
    let webhook_id = create_config(&first, "github", &receiver.url("/hooks"));
    let id = enqueue(&first, webhook_id, "s", &json!({"n": 1}))["id"].as_i64().unwrap();
    // The immediate attempt, then a retry the poll claimed under its term (a fenced write).
    eventually("two attempts", || attempts_seen(&receiver, id) >= 2);
    first.terminate();
    let before = epochs_seen(&receiver, id);
    assert!(before.iter().all(|epoch| *epoch == first_term), "{before:?} under term {first_term}");

    receiver.set(Behaviour::Status(200));
    let second = Gateway::start_in(dir, &args);
    let second_term = epoch_of(&second);
    assert_eq!(second_term, first_term + 1, "a restart leads under the term after the store's newest");
    eventually("delivered after the restart", || status_of(&second, id).0 == "delivered");
    let after = epochs_seen(&receiver, id);
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after.last(), Some(&second_term), "{after:?}");
}
