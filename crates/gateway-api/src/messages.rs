//! `POST /gateway/messages`: the DecisionLog as the document describes it (gateway-core's intake reads and validates
//! it), the answers, and the operation.

use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::fields::{AgentIdSchema, text_256};
use crate::{Operation, Reason, literal};

literal!(
    /// `"accepted"`.
    AcceptedStatus = "accepted"
);

// A DecisionLog taken: what the server writes (its handler writes these bytes without the serializer).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageAccepted<'a> {
    #[schema(inline)]
    pub status: AcceptedStatus,
    #[schema(required = true)]
    pub trace_id: Option<&'a str>,
}

literal!(
    /// `"rejected"`.
    RejectedStatus = "rejected"
);

literal!(
    /// `"schema_violation"`.
    SchemaViolation = "schema_violation"
);

// A DecisionLog that breaks the schema. (Fields in alphabetical order, the order they had when built as a JSON
// map: the same bytes.)
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageRejected<'a> {
    // The first error, naming the field path and the rule.
    pub detail: String,
    #[schema(inline)]
    pub reason: SchemaViolation,
    #[schema(inline)]
    pub status: RejectedStatus,
    #[schema(required = true)]
    pub trace_id: Option<&'a str>,
}

// A DecisionLog as the document describes it (gateway-core's `DecisionLogIntake` reads and validates it).
#[derive(Debug, ToSchema)]
#[schema(
    as = DecisionLog,
    description = "Six optional sections; required fields apply within a present section. A `null` section or \
                   optional field counts as absent; other fields are ignored."
)]
#[allow(dead_code)] // Only its schema is used.
pub struct DecisionLogBody {
    #[schema(inline)]
    meta: Option<Meta>,
    #[schema(inline)]
    identity: Option<Identity>,
    #[schema(inline)]
    cognition: Option<Cognition>,
    #[schema(inline)]
    action: Option<Action>,
    #[schema(inline)]
    state_delta: Option<StateDelta>,
    #[schema(inline)]
    control: Option<Control>,
}

#[derive(Debug, ToSchema)]
#[allow(dead_code)]
struct Meta {
    #[schema(min_length = 1)]
    trace_id: String,
    /// ISO-8601 UTC.
    #[schema(format = DateTime)]
    timestamp: String,
    #[schema(required = false)]
    parent_step_id: String,
    #[schema(required = false)]
    cluster_id: String,
}

#[derive(Debug, ToSchema)]
#[allow(dead_code)]
struct Identity {
    #[schema(value_type = AgentIdSchema)]
    agent_id: String,
    #[schema(schema_with = text_256)]
    agent_type: String,
    #[schema(schema_with = text_256)]
    capability_version: String,
}

#[derive(Debug, ToSchema)]
#[allow(dead_code)]
struct Cognition {
    #[schema(min_length = 1)]
    intent: String,
    #[schema(required = false)]
    reasoning_chain: Vec<String>,
    #[schema(required = false)]
    confidence_score: f64,
    #[schema(required = false)]
    strategy_used: String,
    #[schema(required = false)]
    entropy_score: f64,
}

#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
enum ActionStatus {
    Success,
    Failure,
    Pending,
    Skipped,
}

#[derive(Debug, ToSchema)]
#[allow(dead_code)]
struct Action {
    #[schema(inline)]
    status: ActionStatus,
    #[schema(required = false)]
    tool_call: String,
    #[schema(required = false, schema_with = tool_input)]
    tool_input: Value,
    #[schema(required = false)]
    tool_output_summary: String,
}

fn tool_input() -> utoipa::openapi::schema::ObjectBuilder {
    use utoipa::openapi::schema::{SchemaType, Type};
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::String]))
        .description(Some(
            "An object, or a string holding JSON. For `schedule_reminder`: `delay_ms`, `payload` and optionally \
             `max_lateness_ms`.",
        ))
}

#[derive(Debug, ToSchema)]
#[allow(dead_code)]
struct StateDelta {
    #[schema(required = false)]
    added_to_memory: Vec<String>,
    #[schema(required = false)]
    tokens_consumed: u64,
    #[schema(required = false)]
    cumulative_session_cost: f64,
}

#[derive(Debug, ToSchema)]
#[allow(dead_code)]
struct Control {
    #[schema(required = false, default = false)]
    hitl_required: bool,
    #[schema(required = false)]
    interrupt_signal: Value,
    #[schema(required = false, default = false)]
    is_terminal: bool,
}

pub fn doc() -> Operation {
    Operation::new("postDecisionLog", "agents", "Send a DecisionLog")
        .describe(
            "Accepted logs are published on `gateway:messages`; a `schedule_reminder` tool call is handed to the \
             scheduler first. A log that breaks the schema is answered 422 and a `schema_violation` event is \
             published on `gateway:violations`. When the store cannot write the log's reminder (down: 503, full: 507) \
             the log is not accepted: send it again.",
        )
        .json_body::<DecisionLogBody>(true)
        .example(json!({
            "meta": {"trace_id": "trace-1", "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": "researcher-alpha-9", "agent_type": "researcher", "capability_version": "1.4.0"},
            "cognition": {"intent": "check the quota", "reasoning_chain": ["quota resets hourly"], "confidence_score": 0.8},
            "action": {"status": "success", "tool_call": "schedule_reminder", "tool_input": {"delay_ms": 60000, "payload": {"task": "check_quota"}}},
            "state_delta": {"tokens_consumed": 512},
            "control": {"hitl_required": false, "is_terminal": false},
        }))
        .answer::<MessageAccepted<'static>>(202, "Accepted.")
        .answer::<MessageRejected<'static>>(
            422,
            "The log breaks the schema: `detail` names the field path and the rule.",
        )
        .error(429, Reason::RateLimited)
        .error(503, Reason::StoreUnavailable)
}
