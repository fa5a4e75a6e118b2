//! `GET /gateway/agents/{agent_id}/reminders`: a page of an agent's retained reminders, its page sizes, and the
//! operation.

use gateway_core::{MailboxEntry, encoding::rfc3339};
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::fields::{AgentIdSchema, NO_CONTROL_CHARACTERS, int64_schema};
use crate::{Operation, Reason};

/// The page size of an agent's retained reminders when `limit` is absent.
pub const DEFAULT_PAGE: usize = 100;
/// The largest `limit` of an agent's retained reminders.
pub const MAX_PAGE: usize = 1_000;
/// Longest `after`: a `fire_id` is a job id and an RFC 3339 instant, well under this.
pub const MAX_CURSOR_BYTES: usize = 128;

// An agent's retained fires, in firing order.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MailboxPage<'a> {
    #[schema(inline)]
    pub reminders: Vec<MailboxReminder<'a>>,
}

// One fire. (Fields in alphabetical order, the order they had when built as a JSON map: the same bytes.)
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MailboxReminder<'a> {
    /// The leadership term (fencing epoch) that fired it, as its `reminder` event carries it; 0 if recorded before.
    pub epoch: u64,
    pub fire_id: &'a str,
    #[schema(format = DateTime)]
    pub fired_at: String,
    #[schema(schema_with = int64_schema)]
    pub job_id: i64,
    #[schema(value_type = Object)]
    pub payload: &'a Map<String, Value>,
    #[schema(format = DateTime)]
    pub scheduled_for: String,
}

impl<'a> MailboxReminder<'a> {
    pub fn of(entry: &'a MailboxEntry) -> Self {
        let reminder = &entry.reminder;
        Self {
            epoch: reminder.epoch,
            fire_id: &reminder.fire_id,
            fired_at: rfc3339::format(reminder.fired_at),
            job_id: reminder.job_id,
            payload: &reminder.payload,
            scheduled_for: rfc3339::format(reminder.scheduled_for),
        }
    }
}

pub fn doc() -> Operation {
    Operation::new("listAgentReminders", "agents", "An agent's retained reminders")
        .describe("The agent's retained fires (received or not) in firing order; reading marks nothing received.")
        .parameter_of::<AgentIdSchema>(
            "path",
            "agent_id",
            true,
            "The agent's id, percent-encoded as one path segment (`ns%3Aagent%2F7`).",
        )
        .query(
            "after",
            "A `fire_id`: only fires after it.",
            json!({"type": "string", "minLength": 1, "maxLength": MAX_CURSOR_BYTES, "pattern": NO_CONTROL_CHARACTERS}),
        )
        .limit(DEFAULT_PAGE, MAX_PAGE)
        .answer::<MailboxPage<'static>>(200, "The fires.")
        .error(404, Reason::UnknownAgent)
        .error(503, Reason::StoreUnavailable)
}
