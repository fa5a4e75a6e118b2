//! `POST /gateway/tools/{tool_name}`: an agent's synchronous tool call (docs/api.md, "Tools"). The rules (the
//! tools, their limits, idempotency per `(agent_id, tool_call_id)`) are gateway-cron's `ReminderTools`; this
//! reads the body and answers.

use std::net::IpAddr;

use gateway_auth::{Access, Named};
use gateway_core::{AgentId, ToolCallId};
use gateway_cron::{MAX_DELAY_MS, MAX_LISTED_REMINDERS, ReminderTool, ToolName};
use http::StatusCode;
use http::header::HeaderValue;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::request::{JsonObject, Request, required};
use crate::http::response::{IDEMPOTENT_REPLAYED_HEADER, Response, json_response};
use crate::state::AppState;
use gateway_api::Reason;
use gateway_api::fields::{AgentIdSchema, int64_schema, name_256};
use gateway_api::openapi::replayed_header;
use gateway_api::{Documented, Operation};

const FIELDS: [&str; 3] = ["agent_id", "tool_call_id", "params"];

/// `{"agent_id","tool_call_id","params":{…}}` → 200 `{"result":{…}}` (with `Idempotent-Replayed: true` when the
/// answer is the recorded one of an earlier call with this id). The caller is authenticated before the body is
/// read, and the agent is read first, so that checks about the caller (the agent is the token's, it is within its
/// rate limit) come before anything about the call; a body whose agent cannot be read still counts against the
/// token's agent.
pub async fn call(state: &AppState, tool_name: &str, request: Request, client: IpAddr) -> Result<Response, ApiError> {
    let caller = state.auth.authenticate(bearer_token(request.headers()), client).await?;
    let read = read_agent(request).await;
    let named = read.as_ref().map_or(Named::Unreadable, |(_, agent_id)| Named::Agent(agent_id));
    state.auth.admit(&caller, named, Access::Act).await?;
    let (mut body, agent_id) = read?;
    let tool = ToolName::parse(tool_name)?;
    let tool_call_id = required("tool_call_id", body.take_string("tool_call_id")?.filter(|id| !id.is_empty()))?;
    let tool_call_id = ToolCallId::new(tool_call_id)
        .map_err(|error| ApiError::unprocessable(Reason::InvalidField, format!("tool_call_id: {error}")))?;
    let params = body.take_object("params")?.unwrap_or_default();
    body.finish(&FIELDS)?;
    let request = ReminderTool::from_params(tool, &params)?;
    let answer = state.tools.call(agent_id, tool_call_id, request).await?;
    let mut response = json_response(StatusCode::OK, &ToolAnswerBody { result: &answer.result });
    if answer.replayed {
        response.headers_mut().insert(IDEMPOTENT_REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The body and the agent it names.
async fn read_agent(request: Request) -> Result<(JsonObject, AgentId), ApiError> {
    let mut body = JsonObject::read(request).await?;
    let agent_id = required("agent_id", body.take_string("agent_id")?.filter(|id| !id.is_empty()))?;
    let agent_id = AgentId::new(agent_id)
        .map_err(|error| ApiError::unprocessable(Reason::InvalidField, format!("agent_id: {error}")))?;
    Ok((body, agent_id))
}

/// A tool's answer: its `result` (each tool's is described below; gateway-cron's `ReminderTools` writes them).
#[derive(Debug, Serialize)]
struct ToolAnswerBody<'a> {
    result: &'a Value,
}

// Written out where they are used, as `inline` would (which utoipa expands to a qualified path the lints refuse).
fn schedule_reminder_params() -> RefOr<Schema> {
    ScheduleReminderParams::schema()
}

fn schedule_reminder_result() -> RefOr<Schema> {
    ScheduleReminderResult::schema()
}

fn cancel_reminder_params() -> RefOr<Schema> {
    CancelReminderParams::schema()
}

fn cancel_reminder_result() -> RefOr<Schema> {
    CancelReminderResult::schema()
}

fn list_reminders_result() -> RefOr<Schema> {
    ListRemindersResult::schema()
}

// The bodies of each tool's call and answer, for the document: the call's `params` and the answer's `result`
// are the tool's own (gateway-cron's `ReminderTools` reads the one and writes the other).

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct ScheduleReminderCall {
    #[schema(value_type = AgentIdSchema)]
    agent_id: String,
    #[schema(schema_with = name_256)]
    tool_call_id: String,
    #[schema(schema_with = schedule_reminder_params)]
    params: ScheduleReminderParams,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
pub struct ScheduleReminderAnswer {
    #[schema(schema_with = schedule_reminder_result)]
    result: ScheduleReminderResult,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct CancelReminderCall {
    #[schema(value_type = AgentIdSchema)]
    agent_id: String,
    #[schema(schema_with = name_256)]
    tool_call_id: String,
    #[schema(schema_with = cancel_reminder_params)]
    params: CancelReminderParams,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
pub struct CancelReminderAnswer {
    #[schema(schema_with = cancel_reminder_result)]
    result: CancelReminderResult,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
pub struct ListRemindersAnswer {
    #[schema(schema_with = list_reminders_result)]
    result: ListRemindersResult,
}

// `list_reminders` takes no parameters: `params` is absent, null or `{}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct ListRemindersCall {
    #[schema(value_type = AgentIdSchema)]
    agent_id: String,
    #[schema(schema_with = name_256)]
    tool_call_id: String,
    #[schema(schema_with = no_params, required = false)]
    params: Value,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ScheduleReminderParams {
    #[schema(schema_with = delay_ms)]
    delay_ms: u64,
    /// At most `--reminder-payload-max-bytes` (65,536) as JSON.
    #[schema(value_type = Object)]
    payload: Map<String, Value>,
}

fn delay_ms() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).maximum(Some(MAX_DELAY_MS))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ScheduleReminderResult {
    #[schema(schema_with = int64_schema)]
    job_id: i64,
    #[schema(format = DateTime)]
    fire_at: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct CancelReminderParams {
    #[schema(schema_with = int64_schema)]
    job_id: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct CancelReminderResult {
    cancelled: bool,
}

fn no_params() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .max_properties(Some(0))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ListRemindersResult {
    #[schema(schema_with = listed_reminders)]
    reminders: Vec<ListedReminder>,
    truncated: bool,
}

/// At most [`MAX_LISTED_REMINDERS`] of them (`truncated` says whether there are more).
fn listed_reminders() -> ArrayBuilder {
    ArrayBuilder::new().items(<ListedReminder as PartialSchema>::schema()).max_items(Some(MAX_LISTED_REMINDERS))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ListedReminder {
    #[schema(schema_with = int64_schema)]
    job_id: i64,
    #[schema(format = DateTime)]
    fire_at: String,
    #[schema(value_type = Object)]
    payload: Map<String, Value>,
}

/// Each tool as a path of its own (`/gateway/tools/schedule_reminder`, …): their bodies differ.
pub fn doc() -> Documented {
    let values = ToolName::ALL.into_iter().map(|tool| (tool.as_str(), tool_doc(tool))).collect();
    Documented::Each { parameter: "tool_name", values }
}

fn tool_doc(tool: ToolName) -> Operation {
    let (id, summary, example) = match tool {
        ToolName::ScheduleReminder => (
            "scheduleReminder",
            "Schedule a one-time reminder",
            json!({"delay_ms": 60_000, "payload": {"task": "check_quota"}}),
        ),
        ToolName::CancelReminder => {
            ("cancelReminder", "Cancel one of the agent's pending reminders", json!({"job_id": 1}))
        }
        ToolName::ListReminders => ("listReminders", "The agent's pending reminders", json!({})),
    };
    let operation = Operation::new(id, "agents", summary).describe(
        "Idempotent per (agent_id, tool_call_id): a retry with the same tool and params gets the recorded answer with \
         `Idempotent-Replayed: true`. Counted against the agent's rate limit.",
    );
    let operation = match tool {
        ToolName::ScheduleReminder => operation
            .json_body_inline::<ScheduleReminderCall>(true)
            .answer_inline::<ScheduleReminderAnswer>(200, "Answered.", replayed_header()),
        ToolName::CancelReminder => operation
            .json_body_inline::<CancelReminderCall>(true)
            .answer_inline::<CancelReminderAnswer>(200, "Answered.", replayed_header()),
        ToolName::ListReminders => operation
            .json_body_inline::<ListRemindersCall>(true)
            .answer_inline::<ListRemindersAnswer>(200, "Answered.", replayed_header()),
    };
    let operation = operation
        .example(json!({"agent_id": "researcher-alpha-9", "tool_call_id": format!("call-{id}"), "params": example}))
        .error(409, Reason::ToolCallConflict)
        .errors(422, &[Reason::MissingRequiredFields, Reason::InvalidField])
        .error(429, Reason::RateLimited);
    match tool {
        ToolName::ScheduleReminder => operation.errors(429, &[Reason::TooManyReminders, Reason::QuotaExceeded]),
        // A cancel frees room, so the quota never refuses it.
        ToolName::CancelReminder | ToolName::ListReminders => operation,
    }
}
