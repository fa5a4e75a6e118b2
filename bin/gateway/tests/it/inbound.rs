//! Inbound webhooks as an attacker meets them (DESIGN.md §14, issue 16): bodies are not read before the config is
//! known, replays are duplicates (across a restart, across instances, when sent at once), a config may demand
//! timestamps and keep an inbound secret of its own against reflection, and a leaked secret can be revoked at
//! once. The real binary, its SQLite file (or PostgreSQL), and a local receiver.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use gateway_core::WebhookSecret;
use gateway_webhooks::standard;
use ring::hmac;
use serde_json::{Value, json};

use crate::receiver::{Behaviour, Receiver};
use crate::support::cluster::Cluster;
use crate::support::{Gateway, PATIENCE, TOKEN, count_rows, eventually};

const SECRET: &str = "It's a Secret to Everybody";
const NEW_SECRET: &str = "the secret after the rotation";
const INBOUND_SECRET: &str = "the secret senders sign inbound webhooks with";
/// The contract's body limit.
const MAX_BODY: usize = 1024 * 1024;

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent()
}

fn observatory_signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", gateway_core::encoding::hex::encode(hmac::sign(&key, body).as_ref()))
}

fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Standard Webhooks headers for `body` signed with `secret` at `timestamp`.
fn standard_headers(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Vec<(String, String)> {
    vec![
        ("webhook-id".into(), id.to_owned()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        ("webhook-signature".into(), standard::sign(&WebhookSecret::new(secret), id, timestamp, body)),
    ]
}

fn signed(secret: &str, body: &[u8]) -> Vec<(String, String)> {
    vec![("x-observatory-signature".into(), observatory_signature(secret, body))]
}

fn post_inbound(gateway: &Gateway, webhook_id: i64, body: &[u8], headers: &[(String, String)]) -> (u16, Value) {
    let mut request = agent().post(gateway.url(&format!("/gateway/webhooks/{webhook_id}")));
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let mut response = request.content_type("application/json").send(body).unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn create_config(gateway: &Gateway, source: &str, target_url: &str, extra: &Value) -> Value {
    let mut config = json!({"source_identifier": source, "event_type": "push", "agent_intent": "code_review",
                            "target_session": "reviewer-cluster", "target_url": target_url, "secret": SECRET});
    for (field, value) in extra.as_object().unwrap() {
        config[field] = value.clone();
    }
    let (status, body) = gateway.operator_post("/gateway/webhook-configs", &config);
    assert_eq!(status, 201, "{body}");
    body
}

fn patch_ok(gateway: &Gateway, id: i64, change: &Value) -> Value {
    let (status, body) = gateway.operator_patch(&format!("/gateway/webhook-configs/{id}"), change);
    assert_eq!(status, 200, "{body}");
    body
}

fn accepted_id(answer: &(u16, Value)) -> i64 {
    assert_eq!((answer.0, answer.1["status"].as_str()), (202, Some("accepted")), "{answer:?}");
    answer.1["delivery_id"].as_i64().unwrap()
}

fn assert_duplicate_of(answer: &(u16, Value), first: i64) {
    assert_eq!(answer, &(200, json!({"status": "duplicate", "delivery_id": first})));
}

/// Sends only a request head declaring `content_length` body bytes, sends none of them, and returns the raw
/// answer, read until the gateway closes the connection. The read gives up after 10 s: a gateway that waited for
/// the body would answer only at its 30 s body timeout (408), so an answer at all means it did not.
fn head_only(gateway: &Gateway, path: &str, content_length: usize) -> String {
    let address = gateway.base.trim_start_matches("http://");
    let mut connection = TcpStream::connect(address).unwrap();
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        connection,
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         x-observatory-signature: sha256={}\r\ncontent-length: {content_length}\r\n\r\n",
        "0".repeat(64)
    )
    .unwrap();
    let mut answer = Vec::new();
    let read = connection.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(read.is_ok(), "no answer (or the connection was kept open) before any body byte was sent: {answer:?}");
    answer
}

fn metric(gateway: &Gateway, name: &str) -> f64 {
    let mut response = agent()
        .get(gateway.url("/metrics"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", "text/plain;version=0.0.4")
        .call()
        .unwrap();
    let text = response.body_mut().read_to_string().unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} is not in /metrics"))
}

#[test]
fn an_unknown_id_is_answered_before_any_body_byte_and_an_oversized_declared_length_is_413() {
    let gateway = Gateway::start(&[]);
    let id = create_config(&gateway, "github", "http://127.0.0.1:9/hooks", &json!({}))["id"].as_i64().unwrap();

    for path in ["/gateway/webhooks/999", "/gateway/webhooks/not-a-number"] {
        let answer = head_only(&gateway, path, MAX_BODY);
        assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
        assert!(answer.contains(r#""reason":"unknown_webhook""#), "{path}: {answer}");
    }
    let answer = head_only(&gateway, &format!("/gateway/webhooks/{id}"), MAX_BODY + 1);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains(r#""reason":"payload_too_large""#), "{answer}");
    // Even an unknown id with an oversized declared length: 413, from the head alone.
    assert!(head_only(&gateway, "/gateway/webhooks/999", MAX_BODY + 1).starts_with("HTTP/1.1 413"));

    // Made-up ids cost at most one read of the config ids a second, not one each.
    let started = Instant::now();
    for made_up in 10_000..10_200 {
        let (status, refused) = post_inbound(&gateway, made_up, b"{}", &signed(SECRET, b"{}"));
        assert_eq!((status, refused["reason"].as_str()), (404, Some("unknown_webhook")));
    }
    let reads = metric(&gateway, "gateway_webhook_config_id_reads_total");
    let seconds = started.elapsed().as_secs_f64().ceil();
    assert!(reads <= seconds + 1.0, "{reads} reads of the config ids for 200 made-up ids in {seconds} s");
    // The known id still works after all that.
    let (status, _) = post_inbound(&gateway, id, b"{}", &signed(SECRET, b"{}"));
    assert_eq!(status, 202);
}

#[test]
fn senders_dribbling_bodies_to_unknown_ids_hold_no_memory() {
    const CONNECTIONS: usize = 100;
    let gateway = Gateway::start(&[]);
    let before = gateway.rss();
    let address = gateway.base.trim_start_matches("http://").to_owned();
    // Each sends a head declaring 1 MiB and then all but the last byte of it: a gateway that reads bodies before
    // looking the id up holds ~1 MiB per connection, waiting for that byte.
    let barrier = Barrier::new(CONNECTIONS + 1);
    let held = thread::scope(|scope| {
        let senders: Vec<_> = (0..CONNECTIONS)
            .map(|index| {
                let (address, barrier) = (&address, &barrier);
                scope.spawn(move || {
                    let mut connection = TcpStream::connect(address).unwrap();
                    let head = format!(
                        "POST /gateway/webhooks/{} HTTP/1.1\r\nhost: {address}\r\ncontent-length: {MAX_BODY}\r\n\r\n",
                        100_000 + index
                    );
                    let _ = connection.write_all(head.as_bytes());
                    // The gateway answers and closes at once: writing the body then fails, which is the point.
                    let _ = connection.write_all(&vec![b' '; MAX_BODY - 1]);
                    barrier.wait();
                    // Held open until the memory was read.
                    barrier.wait();
                    drop(connection);
                })
            })
            .collect();
        barrier.wait();
        // The senders' writes may have ended in the kernel's socket buffers: give a gateway that reads them the
        // time to, and keep the most it held.
        let sampling = Instant::now();
        let mut held = gateway.rss();
        while sampling.elapsed() < Duration::from_secs(2) {
            thread::sleep(Duration::from_millis(50));
            held = held.max(gateway.rss());
        }
        barrier.wait();
        for sender in senders {
            sender.join().unwrap();
        }
        held
    });
    let grown = held.saturating_sub(before);
    assert!(
        grown < 32 * 1024 * 1024,
        "{CONNECTIONS} connections to unknown ids grew the gateway by {} MiB",
        grown / (1024 * 1024)
    );
    assert_eq!(gateway.get("/healthz").0, 200);
}

#[test]
fn a_replayed_request_is_one_delivery_and_its_repeats_name_it_also_after_a_restart() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let mut gateway = Gateway::start(&["--webhook-allow-private-targets"]);
    let id = create_config(&gateway, "github", &receiver.url("/hooks"), &json!({}))["id"].as_i64().unwrap();
    let body = br#"{"action": "opened", "number": 7}"#;
    let first = accepted_id(&post_inbound(&gateway, id, body, &signed(SECRET, body)));
    for _ in 0..2 {
        assert_duplicate_of(&post_inbound(&gateway, id, body, &signed(SECRET, body)), first);
    }
    // The same signature written in upper case is the same signature.
    let shouted = observatory_signature(SECRET, body).replace("sha256=", "").to_uppercase();
    let shouted = vec![("x-observatory-signature".to_owned(), format!("sha256={shouted}"))];
    assert_duplicate_of(&post_inbound(&gateway, id, body, &shouted), first);

    let standard_body = br#"{"event": "push"}"#;
    let message = accepted_id(&post_inbound(
        &gateway,
        id,
        standard_body,
        &standard_headers(SECRET, "msg_2f1c", unix_now(), standard_body),
    ));
    // The sender's retry: the same id, signed again a second later.
    let retry = standard_headers(SECRET, "msg_2f1c", unix_now() + 1, standard_body);
    assert_duplicate_of(&post_inbound(&gateway, id, standard_body, &retry), message);

    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 2, "a duplicate was stored");
    eventually("both deliveries are delivered", || {
        gateway.operator_get("/gateway/deliveries?status=delivered").1["deliveries"].as_array().unwrap().len() == 2
    });
    assert_eq!(receiver.count(), 2, "a duplicate reached the target");
    assert!(!gateway.logs().contains("2f1c"), "a sender's message id reached the log");

    // The receipts are in the database: a restart forgets nothing.
    gateway.terminate();
    let dir = std::sync::Arc::clone(&gateway.dir);
    drop(gateway);
    let gateway = Gateway::start_in(dir, &["--webhook-allow-private-targets"]);
    assert_duplicate_of(&post_inbound(&gateway, id, body, &signed(SECRET, body)), first);
    let retry = standard_headers(SECRET, "msg_2f1c", unix_now(), standard_body);
    assert_duplicate_of(&post_inbound(&gateway, id, standard_body, &retry), message);
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 2);
    assert!(metric(&gateway, "gateway_webhook_inbound_duplicates_total") >= 2.0);
}

#[test]
fn a_config_requiring_timestamps_refuses_the_observatory_scheme_and_a_ten_minute_old_signature() {
    let gateway = Gateway::start(&[]);
    let created =
        create_config(&gateway, "github", "http://127.0.0.1:9/hooks", &json!({"inbound_require_timestamp": true}));
    assert_eq!(created["inbound_require_timestamp"], true);
    let id = created["id"].as_i64().unwrap();
    let body = br#"{"n": 1}"#;
    let (status, refused) = post_inbound(&gateway, id, body, &signed(SECRET, body));
    assert_eq!((status, refused["reason"].as_str()), (401, Some("timestamp_required")), "{refused}");
    let mut stale = standard_headers(SECRET, "msg_old", unix_now() - 600, body);
    stale.extend(signed(SECRET, body));
    let (status, refused) = post_inbound(&gateway, id, body, &stale);
    assert_eq!((status, refused["reason"].as_str()), (401, Some("signature_mismatch")), "{refused}");
    accepted_id(&post_inbound(&gateway, id, body, &standard_headers(SECRET, "msg_new", unix_now(), body)));
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 1);

    let relaxed = patch_ok(&gateway, id, &json!({"inbound_require_timestamp": false}));
    assert_eq!(relaxed["inbound_require_timestamp"], false);
    accepted_id(&post_inbound(&gateway, id, body, &signed(SECRET, body)));
    let (status, refused) =
        gateway.operator_patch(&format!("/gateway/webhook-configs/{id}"), &json!({"inbound_require_timestamp": "yes"}));
    assert_eq!((status, refused["reason"].as_str()), (422, Some("invalid_field")), "{refused}");
}

#[test]
fn an_outbound_delivery_posted_back_in_is_refused_when_the_config_has_an_inbound_secret() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let gateway = Gateway::start(&["--webhook-allow-private-targets"]);
    let guarded =
        create_config(&gateway, "guarded", &receiver.url("/guarded"), &json!({"inbound_secret": INBOUND_SECRET}));
    let open = create_config(&gateway, "open", &receiver.url("/open"), &json!({}));
    assert_eq!(
        (guarded["has_inbound_secret"].as_bool(), open["has_inbound_secret"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(!guarded.to_string().contains(INBOUND_SECRET), "{guarded}");

    // What a receiver of each config's outbound deliveries captured, posted back to the config's inbound URL.
    for (config, expected) in [(&open, 202), (&guarded, 401)] {
        let id = config["id"].as_i64().unwrap();
        let (status, enqueued) = gateway.operator_post(
            "/gateway/deliveries",
            &json!({"webhook_id": id, "session_id": "s-1", "payload": {"order": id}}),
        );
        assert_eq!(status, 201, "{enqueued}");
        let delivery_id = enqueued["id"].as_i64().unwrap();
        eventually("the receiver got the delivery", || {
            receiver.received().iter().any(|request| request.delivery_id() == delivery_id)
        });
        let captured = receiver.received().into_iter().find(|request| request.delivery_id() == delivery_id).unwrap();
        let headers: Vec<(String, String)> = captured
            .headers
            .iter()
            .filter(|(name, _)| name.starts_with("webhook-") || name == "x-observatory-signature")
            .cloned()
            .collect();
        assert_eq!(headers.len(), 4, "{headers:?}");
        let (status, answer) = post_inbound(&gateway, id, &captured.body, &headers);
        assert_eq!(status, expected, "config {}: {answer}", config["source_identifier"]);
        if expected == 401 {
            assert_eq!(answer["reason"], "signature_mismatch");
        }
    }
    // Senders sign with the inbound secret.
    let id = guarded["id"].as_i64().unwrap();
    let body = br#"{"from": "sender"}"#;
    accepted_id(&post_inbound(&gateway, id, body, &signed(INBOUND_SECRET, body)));
    let (status, refused) =
        gateway.operator_patch(&format!("/gateway/webhook-configs/{id}"), &json!({"secret": INBOUND_SECRET}));
    assert_eq!((status, refused["reason"].as_str()), (422, Some("invalid_field")), "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("inbound_secret"), "{refused}");
    assert!(!gateway.logs().contains(INBOUND_SECRET), "the inbound secret reached the log");
}

#[test]
fn revoke_previous_refuses_the_old_secret_at_once_where_a_plain_rotation_keeps_its_grace() {
    let gateway = Gateway::start(&[]);
    let graced = create_config(&gateway, "graced", "http://127.0.0.1:9/a", &json!({}))["id"].as_i64().unwrap();
    let revoked = create_config(&gateway, "revoked", "http://127.0.0.1:9/b", &json!({}))["id"].as_i64().unwrap();
    patch_ok(&gateway, graced, &json!({"secret": NEW_SECRET}));
    patch_ok(&gateway, revoked, &json!({"secret": NEW_SECRET, "revoke_previous": true}));
    let body = br#"{"n": 1}"#;
    accepted_id(&post_inbound(&gateway, graced, body, &signed(SECRET, body)));
    let (status, refused) = post_inbound(&gateway, revoked, body, &signed(SECRET, body));
    assert_eq!((status, refused["reason"].as_str()), (401, Some("signature_mismatch")));
    let standard = standard_headers(SECRET, "msg_1", unix_now(), body);
    assert_eq!(post_inbound(&gateway, revoked, body, &standard).0, 401, "either scheme");
    accepted_id(&post_inbound(&gateway, revoked, body, &signed(NEW_SECRET, body)));

    // Learned of the leak later: revoke_previous alone ends the running grace.
    patch_ok(&gateway, graced, &json!({"revoke_previous": true}));
    let other_body = br#"{"n": 2}"#;
    assert_eq!(post_inbound(&gateway, graced, other_body, &signed(SECRET, other_body)).0, 401);
    accepted_id(&post_inbound(&gateway, graced, other_body, &signed(NEW_SECRET, other_body)));
    let (status, refused) =
        gateway.operator_patch(&format!("/gateway/webhook-configs/{graced}"), &json!({"revoke_previous": 1}));
    assert_eq!((status, refused["reason"].as_str()), (422, Some("invalid_field")), "{refused}");
}

/// `rounds` times, `contenders` identical signed requests released together: exactly one is accepted and every
/// other answers the duplicate of it. Returns the accepted delivery ids.
fn race_identical_requests(gateways: &[&Gateway], id: i64, rounds: usize, contenders: usize) -> Vec<i64> {
    (0..rounds)
        .map(|round| {
            let body = format!(r#"{{"round": {round}}}"#);
            let headers = signed(SECRET, body.as_bytes());
            let barrier = Barrier::new(contenders);
            let answers: Vec<(u16, Value)> = thread::scope(|scope| {
                let racers: Vec<_> = (0..contenders)
                    .map(|contender| {
                        let (barrier, body, headers) = (&barrier, &body, &headers);
                        let gateway = gateways[contender % gateways.len()];
                        scope.spawn(move || {
                            barrier.wait();
                            post_inbound(gateway, id, body.as_bytes(), headers)
                        })
                    })
                    .collect();
                racers.into_iter().map(|racer| racer.join().unwrap()).collect()
            });
            let accepted: Vec<i64> = answers.iter().filter(|(status, _)| *status == 202).map(accepted_id).collect();
            assert_eq!(accepted.len(), 1, "round {round}: {answers:?}");
            for answer in answers.iter().filter(|(status, _)| *status != 202) {
                assert_duplicate_of(answer, accepted[0]);
            }
            accepted[0]
        })
        .collect()
}

#[test]
fn identical_requests_at_once_make_one_delivery() {
    let gateway = Gateway::start(&[]);
    let id = create_config(&gateway, "github", "http://127.0.0.1:9/hooks", &json!({}))["id"].as_i64().unwrap();
    let accepted = race_identical_requests(&[&gateway], id, 5, 8);
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), 5, "{accepted:?}");
}

#[test]
fn on_postgres_identical_requests_at_once_make_one_delivery_and_replays_stay_duplicates_after_a_restart() {
    let Some(database) = gateway_testkit::postgres::database("it::inbound::on_postgres") else { return };
    let mut gateway = Gateway::start_on(database.url(), &[]);
    let id = create_config(&gateway, "github", "http://127.0.0.1:9/hooks", &json!({}))["id"].as_i64().unwrap();
    let accepted = race_identical_requests(&[&gateway], id, 5, 8);
    gateway.terminate();
    drop(gateway);
    let gateway = Gateway::start_on(database.url(), &[]);
    for (round, first) in accepted.iter().enumerate() {
        let body = format!(r#"{{"round": {round}}}"#);
        assert_duplicate_of(&post_inbound(&gateway, id, body.as_bytes(), &signed(SECRET, body.as_bytes())), *first);
    }
    let (_, listed) = gateway.operator_get("/gateway/deliveries");
    assert_eq!(listed["deliveries"].as_array().unwrap().len(), 5, "{listed}");
}

#[test]
fn across_instances_a_replay_is_a_duplicate_and_a_config_created_elsewhere_is_found_within_the_refresh_bound() {
    let test = "it::inbound::across_instances";
    let Some(cluster) = Cluster::start(test, 2, &[]) else { return };
    let (a, b) = (cluster.gateway(0), cluster.gateway(1));
    // Instance b has read the config ids (and found none) just before a creates one.
    assert_eq!(post_inbound(b, 4_242, b"{}", &signed(SECRET, b"{}")).0, 404);
    let id = create_config(a, "github", "http://127.0.0.1:9/hooks", &json!({}))["id"].as_i64().unwrap();
    let created = Instant::now();
    let body = br#"{"n": 1}"#;
    // Within the refresh interval (1 s) b may still say 404; after it, b finds the config. The wait is bounded
    // generously for a loaded machine.
    let first = loop {
        let answer = post_inbound(b, id, body, &signed(SECRET, body));
        if answer.0 == 202 {
            break accepted_id(&answer);
        }
        assert_eq!(answer.0, 404, "{answer:?}");
        assert!(created.elapsed() < Duration::from_secs(5), "b still does not know config {id}");
        thread::sleep(Duration::from_millis(50));
    };
    assert_duplicate_of(&post_inbound(a, id, body, &signed(SECRET, body)), first);
    race_identical_requests(&[a, b], id, 3, 6);
    // Deleted on a: b answers 404 at once (it reads the config of a known id, finds none, forgets it).
    let (status, _) = a.operator_delete(&format!("/gateway/webhook-configs/{id}"));
    assert_eq!(status, 200);
    let other = br#"{"n": 2}"#;
    assert_eq!(post_inbound(b, id, other, &signed(SECRET, other)).0, 404);
}
