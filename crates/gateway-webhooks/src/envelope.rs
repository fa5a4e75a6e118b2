//! The delivery payloads the router makes (docs/webhooks.md): from a verified inbound webhook, and from an event
//! published to every config of its type.

use std::borrow::Cow;

use gateway_core::WebhookConfig;
use serde::Serialize;
use serde_json::value::RawValue;
use time::OffsetDateTime;

#[derive(Serialize)]
struct InboundEnvelope<'a> {
    webhook_id: i64,
    source_identifier: &'a str,
    event_type: &'a str,
    agent_intent: &'a str,
    target_session: &'a str,
    #[serde(with = "gateway_core::encoding::rfc3339::serde")]
    received_at: OffsetDateTime,
    /// A body that is not JSON, carried as a string (invalid UTF-8 replaced by U+FFFD). A JSON body is appended
    /// after serializing, as its exact text ([`inbound_envelope`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<Cow<'a, str>>,
}

/// `{"webhook_id","source_identifier","event_type","agent_intent","target_session","received_at","body"}`,
/// where `body` is the inbound JSON value itself, or a string when the inbound body is not JSON.
///
/// A JSON body is embedded as the exact text received, whitespace around it included (JSON allows it there), not
/// parsed and re-serialized: numbers, key order and spacing stay what the sender signed, so the inbound signature can
/// be recomputed from the stored envelope.
pub fn inbound_envelope(config: &WebhookConfig, received_at: OffsetDateTime, body: &[u8]) -> String {
    let json = serde_json::from_slice::<&RawValue>(body).ok().and_then(|_| std::str::from_utf8(body).ok());
    let envelope = InboundEnvelope {
        webhook_id: config.id,
        source_identifier: &config.source_identifier,
        event_type: &config.event_type,
        agent_intent: &config.agent_intent,
        target_session: &config.target_session,
        received_at,
        body: json.is_none().then(|| String::from_utf8_lossy(body)),
    };
    // Serializing strings, integers and a timestamp cannot fail.
    let mut text = serde_json::to_string(&envelope).unwrap_or_else(|_| String::from("{}"));
    if let Some(json) = json {
        text.pop();
        text.reserve(json.len() + 9);
        text.push_str(r#","body":"#);
        text.push_str(json);
        text.push('}');
    }
    text
}

#[derive(Serialize)]
struct EventEnvelope<'a> {
    event_id: i64,
    event_type: &'a str,
    webhook_id: i64,
    #[serde(with = "gateway_core::encoding::rfc3339::serde")]
    published_at: OffsetDateTime,
}

/// `{"event_id","event_type","webhook_id","published_at","payload"}`: what each config subscribed to a published
/// event receives. `payload` is the publisher's JSON text as it came (already checked to be JSON), so every
/// endpoint gets the same bytes and the publisher's numbers and key order survive.
pub fn event_envelope(
    event_id: i64,
    event_type: &str,
    webhook_id: i64,
    published_at: OffsetDateTime,
    payload: &str,
) -> String {
    let envelope = EventEnvelope { event_id, event_type, webhook_id, published_at };
    // Serializing strings, integers and a timestamp cannot fail.
    let mut text = serde_json::to_string(&envelope).unwrap_or_else(|_| String::from("{}"));
    text.pop();
    text.reserve(payload.len() + 12);
    text.push_str(r#","payload":"#);
    text.push_str(payload);
    text.push('}');
    text
}

#[derive(Serialize)]
struct TestEnvelope<'a> {
    event_type: &'a str,
    webhook_id: i64,
    #[serde(with = "gateway_core::encoding::rfc3339::serde")]
    published_at: OffsetDateTime,
    payload: TestPayload<'a>,
}

#[derive(Serialize)]
struct TestPayload<'a> {
    test: bool,
    message: &'a str,
}

/// `{"event_type":"gateway.test","webhook_id","published_at","payload":{"test":true,"message"}}`: what a test
/// delivery (`POST /gateway/webhook-configs/{id}/test`) carries. Shaped like a published event's envelope, without
/// an `event_id` (no event is stored), so a receiver's parser reads it the same way.
pub fn test_envelope(webhook_id: i64, published_at: OffsetDateTime) -> String {
    let envelope = TestEnvelope {
        event_type: crate::router::TEST_EVENT_TYPE,
        webhook_id,
        published_at,
        payload: TestPayload { test: true, message: "A test event from the gateway; it needs no action." },
    };
    // Serializing strings, integers and a timestamp cannot fail.
    serde_json::to_string(&envelope).unwrap_or_else(|_| String::from("{}"))
}

#[cfg(test)]
mod tests {
    use gateway_core::WebhookSecret;
    use serde_json::{Value, json};
    use time::macros::datetime;

    use super::*;

    fn config() -> WebhookConfig {
        WebhookConfig {
            id: 7,
            source_identifier: "github".into(),
            event_type: "pull_request.opened".into(),
            agent_intent: "code_review".into(),
            target_session: "reviewer-cluster".into(),
            target_url: "https://example.com/hook".into(),
            secret: WebhookSecret::new("s"),
            created_at: datetime!(2026-02-22 11:00:00 UTC),
            previous_secret: None,
            secret_rotated_at: None,
            inbound_secret: None,
            previous_inbound_secret: None,
            inbound_secret_rotated_at: None,
            inbound_require_timestamp: false,
            rate_limit_per_second: None,
            enabled: true,
            disabled_reason: None,
            consecutive_failures: 0,
            last_success_at: None,
        }
    }

    #[test]
    fn a_json_body_is_embedded_byte_for_byte() {
        let received = datetime!(2026-02-22 12:00:00 UTC);
        let body = b" {\"n\": 1.50, \"z\": 1, \"a\": [true]}\n";
        let envelope = inbound_envelope(&config(), received, body);
        assert!(envelope.ends_with(",\"body\": {\"n\": 1.50, \"z\": 1, \"a\": [true]}\n}"), "{envelope}");
        let parsed: Value = serde_json::from_str(&envelope).unwrap();
        assert_eq!(
            parsed,
            json!({"webhook_id": 7, "source_identifier": "github", "event_type": "pull_request.opened",
                   "agent_intent": "code_review", "target_session": "reviewer-cluster",
                   "received_at": "2026-02-22T12:00:00Z", "body": {"n": 1.5, "z": 1, "a": [true]}})
        );
    }

    #[test]
    fn a_body_that_is_not_json_is_carried_as_a_string() {
        let received = datetime!(2026-02-22 12:00:00 UTC);
        for (body, expected) in [
            (&b"a=1&b=2"[..], json!("a=1&b=2")),
            (&b""[..], json!("")),
            (&b"{\"unterminated\""[..], json!("{\"unterminated\"")),
            (&[0x66, 0xff, 0x6f][..], json!("f\u{fffd}o")),
        ] {
            let parsed: Value = serde_json::from_str(&inbound_envelope(&config(), received, body)).unwrap();
            assert_eq!(parsed["body"], expected);
        }
    }

    #[test]
    fn an_event_envelope_carries_the_payload_as_sent() {
        let text = event_envelope(3, "order.paid", 7, datetime!(2026-02-22 11:00:00 UTC), r#"{"b":1.50,"a":[1]}"#);
        assert!(text.ends_with(r#","payload":{"b":1.50,"a":[1]}}"#), "{text}");
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            json!({"event_id": 3, "event_type": "order.paid", "webhook_id": 7,
                   "published_at": "2026-02-22T11:00:00Z", "payload": {"b": 1.5, "a": [1]}})
        );
    }

    #[test]
    fn a_test_envelope_names_gateway_test_and_its_endpoint() {
        let text = test_envelope(7, datetime!(2026-02-22 11:00:00 UTC));
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["event_type"], "gateway.test");
        assert_eq!(value["webhook_id"], 7);
        assert_eq!(value["published_at"], "2026-02-22T11:00:00Z");
        assert_eq!(value["payload"]["test"], true);
    }
}
