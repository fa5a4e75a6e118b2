//! The heartbeat body (FR-10.3).

use gateway_core::{AgentId, ClusterId};
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
        let timestamp = body.get("timestamp").and_then(Value::as_str).and_then(gateway_core::rfc3339::parse_utc);
        Ok(Self { agent_id, cluster_id, timestamp })
    }
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
    }
}
