//! One validation policy on every endpoint, seen from a client: unknown body fields and query parameters are
//! refused, refusals name the field and what was expected but never repeat the value, every unknown id gets the
//! same 404 shape, and out-of-range instants are a 400, not a crash.

use serde_json::json;

use crate::support::Gateway;

#[test]
fn unknown_body_fields_are_refused_on_every_creating_endpoint() {
    let gateway = Gateway::start(&[]);
    let config = json!({"source_identifier": "ci", "event_type": "build", "agent_intent": "report",
                        "target_session": "s", "target_url": "https://example.com/hook", "secret": "k", "extra": 1});
    let job = json!({"agent_id": "a", "schedule": "* * * * *", "extra": 1});
    for (path, body) in [("/gateway/webhook-configs", &config), ("/gateway/cron/jobs", &job)] {
        let (status, answer) = gateway.operator_post(path, body);
        assert_eq!(status, 422, "{path}: {answer}");
        assert_eq!(answer["reason"], "invalid_field", "{path}");
        assert!(answer["detail"].as_str().unwrap().starts_with("unknown field `extra`"), "{path}: {answer}");
    }
    let delivery = json!({"webhook_id": 1, "session_id": "s", "payload": {}, "extra": 1});
    let (status, answer) = gateway.operator_post("/gateway/deliveries", &delivery);
    assert_eq!((status, answer["reason"].as_str()), (422, Some("invalid_field")), "{answer}");
}

#[test]
fn a_wrong_type_names_the_field_and_the_expected_type_never_the_value() {
    let gateway = Gateway::start(&[]);
    let secret_looking = "sk-live-4242424242424242";
    let cases = [
        (
            "/gateway/deliveries",
            json!({"webhook_id": secret_looking, "session_id": "s", "payload": {}}),
            "webhook_id: expected an integer",
        ),
        (
            "/gateway/cron/jobs",
            json!({"agent_id": "a", "schedule": "* * * * *", "payload": secret_looking}),
            "payload: expected a JSON object",
        ),
        (
            "/gateway/webhook-configs",
            json!({"source_identifier": 42, "event_type": "e", "agent_intent": "i",
            "target_session": "s", "target_url": "https://example.com", "secret": secret_looking}),
            "source_identifier: expected a string",
        ),
    ];
    for (path, body, detail) in cases {
        let (status, answer) = gateway.operator_post(path, &body);
        assert_eq!((status, answer["detail"].as_str()), (422, Some(detail)), "{path}: {answer}");
        assert!(!answer.to_string().contains("4242"), "{path} repeated the value: {answer}");
    }
    assert!(!gateway.logs().contains("4242"), "a refused value reached the log");
}

#[test]
fn unknown_query_parameters_are_refused_on_every_list_endpoint() {
    let gateway = Gateway::start(&[]);
    for path in [
        "/gateway/deliveries?colour=red",
        "/gateway/cron/jobs?limt=5",
        "/gateway/agents?page=2",
        "/gateway/webhook-configs?all=1",
        "/gateway/deliveries?limit=5&limit=6",
    ] {
        let (status, answer) = gateway.operator_get(path);
        assert_eq!((status, answer["reason"].as_str()), (400, Some("invalid_query")), "{path}: {answer}");
    }
}

#[test]
fn instants_whose_utc_form_overflows_are_a_400() {
    let gateway = Gateway::start(&[]);
    for query in ["to=9999-12-31T23:59:59-01:00", "from=0000-01-01T00:00:00%2B01:00", "to=yesterday"] {
        let (status, answer) = gateway.operator_get(&format!("/gateway/deliveries?{query}"));
        assert_eq!((status, answer["reason"].as_str()), (400, Some("invalid_query")), "{query}: {answer}");
    }
    let (status, _) = gateway.operator_get("/gateway/deliveries?to=9999-12-31T23:59:59Z");
    assert_eq!(status, 200, "the last representable instant is fine");
    assert_eq!(gateway.get("/readyz").0, 200, "and the gateway is still up");
}

#[test]
fn every_unknown_id_gets_one_not_found_shape_numeric_or_not() {
    let gateway = Gateway::start(&[]);
    for (kind, reason) in [
        ("/gateway/deliveries", "unknown_delivery"),
        ("/gateway/webhook-configs", "unknown_webhook"),
        ("/gateway/cron/jobs", "unknown_cron_job"),
    ] {
        let numeric = gateway.operator_get(&format!("{kind}/999999"));
        let text = gateway.operator_get(&format!("{kind}/not-an-id"));
        assert_eq!(numeric.0, 404, "{kind}");
        assert_eq!(numeric, text, "{kind}: the same answer whatever the id looks like");
        assert_eq!(numeric.1["reason"], reason);
        assert!(numeric.1["detail"].as_str().unwrap().ends_with("has this id"), "{kind}: {}", numeric.1);
    }
    let (status, answer) = gateway.post("/gateway/webhooks/not-an-id", "{}");
    assert_eq!((status, answer["reason"].as_str()), (404, Some("unknown_webhook")));
    let (status, answer) = gateway.get("/no/such/route");
    assert_eq!((status, answer["reason"].as_str()), (404, Some("not_found")));
}
