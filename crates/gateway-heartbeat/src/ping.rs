//! The heartbeat body (FR-10.3).

use std::borrow::Cow;

use gateway_core::ids::MAX_ID_BYTES;
use gateway_core::{AgentId, ClusterId};
use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::HeartbeatError;

/// A validated `{"type":"heartbeat","agent_id","cluster_id","timestamp"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatPing {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    /// The agent's own timestamp; `None` when absent or unparsable (the row then records the receipt time).
    pub timestamp: Option<OffsetDateTime>,
}

impl HeartbeatPing {
    /// Checks `type` first, then the two ids, so the error matches the contract's precedence.
    pub fn from_json(body: &Value) -> Result<Self, HeartbeatError> {
        if body.get("type").and_then(Value::as_str) != Some("heartbeat") {
            return Err(HeartbeatError::InvalidType);
        }
        let agent_id = required_id(body, "agent_id", AgentId::new)?;
        let cluster_id = required_id(body, "cluster_id", ClusterId::new)?;
        let timestamp = match body.get("timestamp").and_then(Value::as_str) {
            Some(text) if text.len() > MAX_ID_BYTES => {
                let reason = format!("must be at most {MAX_ID_BYTES} bytes");
                return Err(HeartbeatError::InvalidField { field: "timestamp", reason });
            }
            text => text.and_then(gateway_core::encoding::rfc3339::parse_utc),
        };
        Ok(Self { agent_id, cluster_id, timestamp })
    }

    /// The ping of a body that is certainly valid, read without a JSON tree; `None` for anything else (not JSON,
    /// a refused field, or a shape the direct reading leaves to the other, such as a timestamp that is not a
    /// string), which [`Self::from_json`] then decides. See `gateway_core::intake::direct_json`.
    pub fn from_valid_body(body: &[u8]) -> Option<Self> {
        let ping: PingFields<'_> = gateway_core::intake::direct_json::read(body)?;
        if ping.kind != "heartbeat" || ping.timestamp.as_ref().is_some_and(|text| text.len() > MAX_ID_BYTES) {
            return None;
        }
        Some(Self {
            agent_id: AgentId::new(ping.agent_id).ok()?,
            cluster_id: ClusterId::new(ping.cluster_id).ok()?,
            timestamp: ping.timestamp.as_deref().and_then(gateway_core::encoding::rfc3339::parse_utc),
        })
    }
}

/// The fields of a heartbeat as the direct reading takes them (strings borrowed from the body where they can be).
#[derive(Deserialize)]
struct PingFields<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    agent_id: String,
    cluster_id: String,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
}

fn required_id<T>(
    body: &Value,
    field: &'static str,
    make: impl FnOnce(String) -> Result<T, gateway_core::IdError>,
) -> Result<T, HeartbeatError> {
    match body.get(field).and_then(Value::as_str) {
        Some(text) if !text.is_empty() => {
            make(text.to_owned()).map_err(|error| HeartbeatError::InvalidField { field, reason: error.to_string() })
        }
        _ => Err(HeartbeatError::MissingRequiredField(field)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    /// The direct reading either agrees with the value reading or leaves the body to it. `None`: not a JSON
    /// value (the HTTP layer's 400).
    fn both_readings(body: &str) -> Option<Result<HeartbeatPing, HeartbeatError>> {
        let direct = HeartbeatPing::from_valid_body(body.as_bytes());
        let Ok(value) = serde_json::from_str::<Value>(body) else {
            assert_eq!(direct, None, "{body}");
            return None;
        };
        let by_value = HeartbeatPing::from_json(&value);
        if let Some(direct) = direct {
            assert_eq!(Ok(&direct), by_value.as_ref(), "{body}");
        }
        Some(by_value)
    }

    #[test]
    fn the_direct_reading_takes_plain_pings_and_agrees_with_the_value_reading() {
        let plain =
            r#"{"type":"heartbeat","agent_id":"agent-1","cluster_id":"c-1","timestamp":"2026-02-22T12:00:00Z"}"#;
        assert!(HeartbeatPing::from_valid_body(plain.as_bytes()).is_some());
        let escaped = r#"{"type":"heart\u0062eat","agent_\u0069d":"a\n","cluster_id":"c","extra":{"x":[1]}}"#;
        assert!(HeartbeatPing::from_valid_body(escaped.as_bytes()).is_none(), "a control character in the id");
        let deep = format!(
            r#"{{"type":"heartbeat","agent_id":"a","cluster_id":"c","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let bodies = [
            plain.to_owned(),
            escaped.to_owned(),
            deep,
            r#"{"type":"heart\u0062eat","agent_\u0069d":"a","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":12}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":null}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","cluster_id":"c","timestamp":"yesterday"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"a","agent_id":"b","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":"","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","agent_id":7,"cluster_id":"c"}"#.to_owned(),
            r#"{"type":"heartbeat","cluster_id":"c"}"#.to_owned(),
            r#"{"type":"status","agent_id":"a","cluster_id":"c"}"#.to_owned(),
            r#"["heartbeat","a","c",null]"#.to_owned(),
            format!(r#"{{"type":"heartbeat","agent_id":"{}","cluster_id":"c"}}"#, "x".repeat(300)),
        ];
        for body in &bodies {
            let _ = both_readings(body);
        }
        assert_eq!(both_readings(&bodies[2]), None, "too deep for the value reading");
        assert_eq!(both_readings(&bodies[3]).unwrap().unwrap().agent_id.as_str(), "a");
        assert_eq!(both_readings(&bodies[7]).unwrap().unwrap().agent_id.as_str(), "b", "the last of repeated keys");
        assert!(HeartbeatPing::from_valid_body(bodies[12].as_bytes()).is_none(), "an array is not a ping");
    }

    #[test]
    fn parses_a_well_formed_ping() {
        let ping = HeartbeatPing::from_json(&json!({"type": "heartbeat", "agent_id": "agent-42",
            "cluster_id": "cluster-west", "timestamp": "2026-02-22T12:00:00Z"}))
        .unwrap();
        assert_eq!(ping.agent_id.as_str(), "agent-42");
        assert_eq!(ping.timestamp, Some(datetime!(2026-02-22 12:00:00 UTC)));
    }

    #[test]
    fn missing_or_bad_timestamp_is_none_not_an_error() {
        for timestamp in [json!(null), json!("yesterday"), json!(12)] {
            let ping = HeartbeatPing::from_json(
                &json!({"type": "heartbeat", "agent_id": "a", "cluster_id": "c", "timestamp": timestamp}),
            )
            .unwrap();
            assert_eq!(ping.timestamp, None);
        }
    }

    #[test]
    fn refusals_follow_the_contract() {
        let cases = [
            (json!({"type": "status_update", "agent_id": "a", "cluster_id": "c"}), HeartbeatError::InvalidType),
            (json!({"agent_id": "a", "cluster_id": "c"}), HeartbeatError::InvalidType),
            (json!([1]), HeartbeatError::InvalidType),
            (json!({"type": "heartbeat", "cluster_id": "c"}), HeartbeatError::MissingRequiredField("agent_id")),
            (
                json!({"type": "heartbeat", "agent_id": "", "cluster_id": "c"}),
                HeartbeatError::MissingRequiredField("agent_id"),
            ),
            (
                json!({"type": "heartbeat", "agent_id": 7, "cluster_id": "c"}),
                HeartbeatError::MissingRequiredField("agent_id"),
            ),
            (json!({"type": "heartbeat", "agent_id": "a"}), HeartbeatError::MissingRequiredField("cluster_id")),
        ];
        for (body, expected) in cases {
            assert_eq!(HeartbeatPing::from_json(&body), Err(expected), "{body}");
        }
        assert!(matches!(
            HeartbeatPing::from_json(&json!({"type": "heartbeat", "agent_id": "x".repeat(300), "cluster_id": "c"})),
            Err(HeartbeatError::InvalidField { field: "agent_id", .. })
        ));
        let long_stamp = json!({"type": "heartbeat", "agent_id": "a", "cluster_id": "c", "timestamp": "9".repeat(257)});
        assert_eq!(
            HeartbeatPing::from_json(&long_stamp),
            Err(HeartbeatError::InvalidField { field: "timestamp", reason: "must be at most 256 bytes".into() })
        );
        assert_eq!(
            HeartbeatPing::from_valid_body(long_stamp.to_string().as_bytes()),
            None,
            "left to the value reading"
        );
        let at_bound = json!({"type": "heartbeat", "agent_id": "a", "cluster_id": "c", "timestamp": "9".repeat(256)});
        assert_eq!(HeartbeatPing::from_json(&at_bound).unwrap().timestamp, None, "unparsable but within the bound");
    }
}
