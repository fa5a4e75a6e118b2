//! No malformed request crashes the gateway or gets a 5xx: every body in a corpus of hostile inputs, sent to every
//! endpoint that reads a body, gets a 2xx or a 4xx with a JSON error body, and the gateway stays ready.

use serde_json::Value;

use crate::support::{Gateway, TOKEN, raw_request};

fn hostile_bodies() -> Vec<Vec<u8>> {
    let mut bodies: Vec<Vec<u8>> = [
        "", " ", "null", "true", "0", "-1", "1e999", "\"\"", "[]", "{}", "[{}]", "{\"a\":", "}", "{\"\u{0}\":1}",
        "{\"type\":\"heartbeat\",\"agent_id\":{},\"cluster_id\":[]}",
        "{\"type\":\"heartbeat\",\"agent_id\":\"a\",\"cluster_id\":\"c\",\"timestamp\":99999999999999999999}",
        "{\"meta\":{\"trace_id\":1,\"timestamp\":[]}}",
        "{\"identity\":{\"agent_id\":\"\\u0000\",\"agent_type\":\"t\",\"capability_version\":\"1\"}}",
        "{\"action\":{\"status\":\"success\",\"tool_call\":\"schedule_reminder\",\"tool_input\":\"{\\\"delay_ms\\\":1e300}\"}}",
        "{\"action\":{\"status\":\"success\",\"tool_call\":\"schedule_reminder\",\"tool_input\":{\"delay_ms\":18446744073709551615,\"payload\":{}}},\"identity\":{\"agent_id\":\"a\",\"agent_type\":\"t\",\"capability_version\":\"1\"}}",
        "{\"agent_id\":\"a\",\"schedule\":\"* * * * * * * *\",\"payload\":{}}",
        "{\"agent_id\":\"a\",\"schedule\":\"@reboot\",\"payload\":{}}",
        "{\"agent_id\":\"a\",\"schedule\":\"0 0 31 2 *\",\"payload\":{}}",
        "{\"source_identifier\":\"s\",\"event_type\":\"e\",\"agent_intent\":\"i\",\"target_session\":\"t\",\"target_url\":\"file:///etc/passwd\",\"secret\":\"x\"}",
        "{\"source_identifier\":\"s\",\"event_type\":\"e\",\"agent_intent\":\"i\",\"target_session\":\"t\",\"target_url\":\"http://[::1\",\"secret\":\"\"}",
        "{\"webhook_id\":-1,\"session_id\":\"s\",\"payload\":{}}",
        "{\"webhook_id\":9223372036854775807,\"session_id\":\"s\",\"payload\":null}",
    ]
    .iter()
    .map(|text| text.as_bytes().to_vec())
    .collect();
    bodies.push(vec![0xff, 0xfe, 0x00, 0x7b]);
    bodies.push(format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes());
    bodies.push(format!("{{\"k\":\"{}\"}}", "\u{202e}".repeat(10_000)).into_bytes());
    bodies
}

const BODY_ENDPOINTS: [&str; 7] = [
    "/gateway/heartbeat",
    "/gateway/messages",
    "/gateway/webhooks/1",
    "/gateway/webhook-configs",
    "/gateway/deliveries",
    "/gateway/deliveries/1/retry",
    "/gateway/cron/jobs",
];

fn status_and_body(response: &str) -> (u16, &str) {
    let status = response.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, body)
}

#[test]
fn hostile_bodies_get_4xx_never_5xx_and_the_gateway_stays_ready() {
    let gateway = Gateway::start(&[]);
    for path in BODY_ENDPOINTS {
        for body in hostile_bodies() {
            let head = format!(
                "POST {path} HTTP/1.1\r\nauthorization: Bearer {TOKEN}\r\nx-observatory-signature: sha256=00\r\ncontent-type: application/json\r\ncontent-length: {}",
                body.len()
            );
            let response = raw_request(&gateway, &head, &body);
            let (status, json) = status_and_body(&response);
            let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
            assert!((200..500).contains(&status), "POST {path} {shown:?} -> {response}");
            if status >= 400 {
                let parsed: Value = serde_json::from_str(json).unwrap_or_else(|_| panic!("non-JSON error: {response}"));
                assert!(parsed["reason"].is_string(), "POST {path} {shown:?} -> {response}");
            }
        }
    }
    assert_eq!(gateway.get("/readyz").0, 200, "{}", gateway.logs());
    assert!(!gateway.logs().contains("panicked"), "{}", gateway.logs());
}

#[test]
fn hostile_request_heads_get_4xx() {
    let gateway = Gateway::start(&[]);
    let heads = [
        "GET /gateway/agents?limit=-1 HTTP/1.1\r\nauthorization: Bearer integration-test-operator-token".to_owned(),
        format!("GET /gateway/agents?after={} HTTP/1.1\r\nauthorization: Bearer {TOKEN}", "%00".repeat(10)),
        format!("GET /gateway/deliveries?limit=100000&from=yesterday HTTP/1.1\r\nauthorization: Bearer {TOKEN}"),
        format!("GET /gateway/deliveries?status=exploded HTTP/1.1\r\nauthorization: Bearer {TOKEN}"),
        format!("GET /gateway/cron/jobs/99999999999999999999 HTTP/1.1\r\nauthorization: Bearer {TOKEN}"),
        "GET /gateway/events?topic=%ZZ HTTP/1.1".to_owned(),
        "POST /gateway/heartbeat HTTP/1.1\r\ncontent-length: nonsense".to_owned(),
        "GET /gateway/agents HTTP/1.1\r\nauthorization: Bearer \u{7f}".to_owned(),
    ];
    for head in heads {
        let response = raw_request(&gateway, &head, b"");
        let (status, _) = status_and_body(&response);
        assert!((400..500).contains(&status), "{head:?} -> {response}");
    }
    assert_eq!(gateway.get("/readyz").0, 200);
}
