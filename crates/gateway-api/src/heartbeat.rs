//! `POST /gateway/heartbeat` (FR-10.3): the heartbeat as the document describes it, and the operation.

use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, SchemaType};

use crate::common::StatusOk;
use crate::fields::{AgentIdSchema, name_256};
use crate::{Operation, Reason, literal};

literal!(
    /// `"heartbeat"`.
    HeartbeatType = "heartbeat"
);

// A heartbeat, as the document describes it. (Read by gateway-heartbeat's `HeartbeatPing`, which takes the
// well-formed ones directly from the bytes; other fields are ignored.)
#[derive(Debug, ToSchema)]
#[schema(as = Heartbeat)]
#[allow(dead_code)] // Only its schema is used.
pub struct HeartbeatBody {
    #[schema(inline, rename = "type")]
    kind: HeartbeatType,
    #[schema(value_type = AgentIdSchema)]
    agent_id: String,
    #[schema(schema_with = name_256)]
    cluster_id: String,
    #[schema(schema_with = timestamp)]
    timestamp: Option<Value>,
}

/// A heartbeat's `timestamp`: any JSON, read as an instant when it is one.
fn timestamp() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(SchemaType::AnyValue).max_length(Some(256)).description(Some(
        "RFC 3339 UTC; the receipt time when missing, not a string or not RFC 3339 UTC (a string over 256 bytes is \
         refused).",
    ))
}

pub fn doc() -> Operation {
    Operation::new("heartbeat", "agents", "Record a heartbeat")
        .describe("Never rate-limited. A 422 touches neither the live map nor the database.")
        .json_body::<HeartbeatBody>(true)
        .example(json!({
            "type": "heartbeat", "agent_id": "researcher-alpha-9", "cluster_id": "mesh-04",
            "timestamp": "2026-02-22T12:00:00Z",
        }))
        .answer::<StatusOk>(200, "Recorded.")
        .errors(422, &[Reason::InvalidHeartbeatType, Reason::MissingRequiredFields, Reason::InvalidField])
        .error(503, Reason::HeartbeatManagerUnavailable)
}
