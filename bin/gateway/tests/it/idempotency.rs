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

/// Rows of `table` in the PostgreSQL database at `url`.
fn postgres_rows(url: &str, table: &str) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut connection = PgConnection::establish(url).unwrap();
    diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}")).get_result::<Count>(&mut connection).unwrap().n
}

/// Two clients enqueue the same delivery with one `Idempotency-Key` at the same moment (released together by a
/// barrier), `ROUNDS` times with a new key each: each time exactly one answer creates (201) and the other replays it
/// (200, `Idempotent-Replayed: true`), both name the same delivery, and the key made one row. Returns the rows made.
fn concurrent_enqueues_with_one_key_make_one_delivery(gateway: &Gateway) -> usize {
    const ROUNDS: usize = 20;
    let webhook_id = create_config(gateway);
    for round in 0..ROUNDS {
        let key = format!("race-{round}");
        let body = json!({"webhook_id": webhook_id, "session_id": "race", "payload": {"round": round}});
        let barrier = std::sync::Barrier::new(2);
        let answers: Vec<(u16, Option<String>, serde_json::Value)> = std::thread::scope(|scope| {
            let clients: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        let (status, headers, answer) = gateway.operator_post_with_headers(
                            "/gateway/deliveries",
                            &body,
                            &[("idempotency-key", key.as_str())],
                        );
                        let replayed =
                            headers.get("idempotent-replayed").and_then(|value| value.to_str().ok()).map(str::to_owned);
                        (status, replayed, answer)
                    })
                })
                .collect();
            clients.into_iter().map(|client| client.join().unwrap()).collect()
        });
        let mut statuses: Vec<u16> = answers.iter().map(|(status, _, _)| *status).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 201], "round {round}: {answers:?}");
        assert_eq!(answers[0].2["id"], answers[1].2["id"], "round {round}: both answers name one delivery");
        let replay = answers.iter().find(|(status, _, _)| *status == 200).unwrap();
        assert_eq!(replay.1.as_deref(), Some("true"), "round {round}: the replay says so");
    }
    ROUNDS
}

#[test]
fn concurrent_enqueues_with_one_key_make_one_delivery_on_sqlite() {
    let gateway = Gateway::start(&[]);
    let rounds = concurrent_enqueues_with_one_key_make_one_delivery(&gateway);
    assert_eq!(count_rows(&gateway.database_path(), "webhook_deliveries"), i64::try_from(rounds).unwrap());
}

#[test]
fn concurrent_enqueues_with_one_key_make_one_delivery_on_postgres() {
    let Some(database) = gateway_testkit::postgres::database(
        "idempotency::concurrent_enqueues_with_one_key_make_one_delivery_on_postgres",
    ) else {
        return;
    };
    let gateway = Gateway::start_on(database.url(), &[]);
    let rounds = concurrent_enqueues_with_one_key_make_one_delivery(&gateway);
    assert_eq!(postgres_rows(database.url(), "webhook_deliveries"), i64::try_from(rounds).unwrap());
}
