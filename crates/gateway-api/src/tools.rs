//! `POST /gateway/tools/{tool_name}`: each tool's call and answer (gateway-cron's `ReminderTools` reads and writes
//! them), and the operations, one path per tool.

use gateway_core::intake::interceptor::MAX_LATENESS_MS;
use gateway_cron::{MAX_DELAY_MS, MAX_LISTED_REMINDERS, ToolName};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::fields::{AgentIdSchema, int64_schema, name_256};
use crate::openapi::replayed_header;
use crate::{Documented, Operation, Reason};

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

fn schedule_recurring_params() -> RefOr<Schema> {
    ScheduleRecurringParams::schema()
}

fn schedule_recurring_result() -> RefOr<Schema> {
    ScheduleRecurringResult::schema()
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
    /// Optional: published later than this after its instant (the gateway was down), the reminder is not delivered
    /// and its run is recorded `skipped_late`.
    #[schema(schema_with = max_lateness_ms, required = false)]
    max_lateness_ms: Option<u64>,
}

fn delay_ms() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).maximum(Some(MAX_DELAY_MS))
}

fn max_lateness_ms() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)).maximum(Some(MAX_LATENESS_MS))
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
    /// The next fire.
    #[schema(format = DateTime)]
    fire_at: String,
    #[schema(value_type = Object)]
    payload: Map<String, Value>,
    /// A recurring job's cron expression (absent for a one-time reminder).
    #[serde(default)]
    #[schema(required = false, nullable = false)]
    schedule: Option<String>,
    /// A recurring job's time zone (absent for a one-time reminder).
    #[serde(default)]
    #[schema(required = false, nullable = false)]
    timezone: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct ScheduleRecurringCall {
    #[schema(value_type = AgentIdSchema)]
    agent_id: String,
    #[schema(schema_with = name_256)]
    tool_call_id: String,
    #[schema(schema_with = schedule_recurring_params)]
    params: ScheduleRecurringParams,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
pub struct ScheduleRecurringAnswer {
    #[schema(schema_with = schedule_recurring_result)]
    result: ScheduleRecurringResult,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ScheduleRecurringParams {
    /// A cron expression: crontab's 5 fields, an `@` shorthand, or 6/7 fields with seconds (docs/scheduler.md).
    #[schema(min_length = 1, max_length = 256, example = "0 9 * * mon-fri")]
    schedule: String,
    /// At most `--reminder-payload-max-bytes` (65,536) as JSON; each fire delivers it.
    #[schema(value_type = Object)]
    payload: Map<String, Value>,
    /// The IANA time zone the schedule is read in; absent or `null`: `UTC`. A wall-clock time that does not exist
    /// (spring forward) fires at the first instant after the gap; one that occurs twice fires at its first occurrence.
    #[schema(value_type = Option<String>, max_length = 64, example = "America/New_York")]
    timezone: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ScheduleRecurringResult {
    #[schema(schema_with = int64_schema)]
    job_id: i64,
    /// The first fire, in UTC.
    #[schema(format = DateTime)]
    fire_at: String,
    /// The same instant with the offset of the job's time zone.
    #[schema(format = DateTime)]
    fire_at_local: String,
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
            ("cancelReminder", "Cancel one of the agent's pending reminders or recurring jobs", json!({"job_id": 1}))
        }
        ToolName::ListReminders => {
            ("listReminders", "The agent's pending reminders and recurring jobs, soonest first", json!({}))
        }
        ToolName::ScheduleRecurring => (
            "scheduleRecurring",
            "Schedule a recurring job for the agent",
            json!({"schedule": "0 9 * * mon-fri", "timezone": "America/New_York", "payload": {"task": "standup"}}),
        ),
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
        ToolName::ScheduleRecurring => operation
            .json_body_inline::<ScheduleRecurringCall>(true)
            .answer_inline::<ScheduleRecurringAnswer>(200, "Answered.", replayed_header()),
    };
    let operation = operation
        .example(json!({"agent_id": "researcher-alpha-9", "tool_call_id": format!("call-{id}"), "params": example}))
        .error(409, Reason::ToolCallConflict)
        .errors(422, &[Reason::MissingRequiredFields, Reason::InvalidField])
        .error(429, Reason::RateLimited);
    match tool {
        // `too_many_reminders` for a recurring job: the agent has `--max-pending-reminders-per-agent` of them.
        ToolName::ScheduleReminder | ToolName::ScheduleRecurring => {
            operation.errors(429, &[Reason::TooManyReminders, Reason::QuotaExceeded])
        }
        // A cancel frees room, so the quota never refuses it.
        ToolName::CancelReminder | ToolName::ListReminders => operation,
    }
}
