//! The SchemaInterceptor: raw request bytes in, a validated DecisionLog (and any reminder it asks for) or a
//! rejection out.
//!
//! A rejection carries only the SHA-256 of the raw body, the field path that failed, and the two identity fields
//! the `schema_violation` event names; never the body itself.

use serde_json::{Map, Value};

use crate::ids::{AgentId, IdempotencyKey, ToolCallId, validate_id};
use crate::intake::decision_log::{DecisionLog, DirectLog, SchemaViolation};

/// The tool call that asks the gateway for a one-time reminder (FR-10.7).
pub const SCHEDULE_REMINDER_TOOL: &str = "schedule_reminder";

/// The position of the reminder's call among the log's tool calls. The DecisionLog carries one call
/// (`action.tool_call`), so it is always the first; the position is part of the reminder's key anyway, so that
/// a schema with several calls per log keys each call apart without changing the keys of today's logs.
const REMINDER_CALL_INDEX: usize = 0;

/// What the interceptor made of an accepted body.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedLog {
    pub log: DecisionLog,
    /// `Some` when `action.tool_call == "schedule_reminder"`: the request, or why it cannot be scheduled.
    pub reminder: Option<Result<ReminderRequest, ReminderRequestError>>,
}

/// An accepted body, read as cheaply as it could be: straight from the body when the log asks for no reminder,
/// else owned, with its reminder (see [`SchemaInterceptor::read`]).
#[derive(Debug)]
pub enum ReadLog<'a> {
    /// A log read straight from the body, without a reminder: what most logs are.
    Direct(DirectLog<'a>),
    /// A log with its reminder, or one that only the value reading took (a repeated key, ...).
    Accepted(AcceptedLog),
}

impl ReadLog<'_> {
    pub fn agent_id(&self) -> Option<&AgentId> {
        match self {
            Self::Direct(log) => log.agent_id(),
            Self::Accepted(accepted) => accepted.log.agent_id(),
        }
    }

    /// The owned form, as [`SchemaInterceptor::inspect`] gives it.
    pub fn into_accepted(self) -> AcceptedLog {
        match self {
            Self::Direct(log) => AcceptedLog { log: log.into_owned(), reminder: None },
            Self::Accepted(accepted) => accepted,
        }
    }
}

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("body is not valid JSON")]
    InvalidJson,
    #[error("schema violation: {}", .0.violation)]
    SchemaViolation(Box<RejectedLog>),
    /// Not the interceptor's: a valid log whose reminder could not be written because the store failed (down,
    /// full). The log is not accepted and not published, so the agent retries it, and the reminder's idempotency
    /// key makes the retry schedule it once (`crate::intake`).
    #[error("the log's reminder could not be stored: {0}")]
    StoreFailed(crate::ports::store::StoreError),
}

/// A well-formed JSON body that broke the DecisionLog schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedLog {
    pub violation: SchemaViolation,
    /// `identity.agent_id` when it is a valid id, else `"unknown"`.
    pub agent_id: String,
    /// `identity.capability_version` when it is a plausible version string, else `"unknown"`.
    pub capability_version: String,
    /// `sha256:<64 lowercase hex>` of the raw body.
    pub raw_payload_hash: String,
    /// `meta.trace_id` when the body gave one that is a valid id, so a client can match the refusal to its log.
    pub trace_id: Option<String>,
}

/// A validated `schedule_reminder` request.
#[derive(Debug, Clone, PartialEq)]
pub struct ReminderRequest {
    pub agent_id: AgentId,
    pub delay_ms: u64,
    pub payload: Map<String, Value>,
    /// What makes a retry of the same log recognisable (see [`reminder_idempotency_key`]); `None` for a log
    /// without `meta.trace_id`, whose retries cannot be told from new requests.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Optional `max_lateness_ms`: a reminder published later than this after its instant is not delivered.
    pub max_lateness_ms: Option<u64>,
}

/// The key under which the reminder of one tool call of one log is stored:
/// `reminder:sha256:<hex>` over `agent_id`, a 0 byte, `trace_id`, a 0 byte and the call's index in decimal.
/// The agent is part of it so that two agents reusing a trace id never suppress each other's reminders. The
/// bytes name one (agent, trace, index) only: an agent id holds no 0 byte (no control characters) and the index
/// none, so the first 0 byte ends the agent id and the last one starts the index, whatever the trace id holds.
/// Hashing keeps the agent's trace id out of the table and the key within [`IdempotencyKey`]'s length and
/// alphabet. `None` never happens in practice (the key is 80 visible ASCII characters); it exists so that a
/// key that failed validation would cost the deduplication, not the reminder.
pub fn reminder_idempotency_key(agent_id: &AgentId, trace_id: &str, call_index: usize) -> Option<IdempotencyKey> {
    let identity = [agent_id.as_str(), trace_id, &call_index.to_string()].join("\0");
    IdempotencyKey::new(format!("{REMINDER_KEY_PREFIX}{}", sha256_tag(identity.as_bytes()))).ok()
}

/// The key under which the reminder of an agent's `schedule_reminder` tool call is stored:
/// `reminder:tool:sha256:<hex>` over `agent_id`, a 0 byte and `tool_call_id` (neither holds a 0 byte: ids have no
/// control characters). A retry of the call after a crash between scheduling and recording its answer finds the
/// job its first attempt scheduled. The `tool:` part keeps these keys apart from DecisionLogs' (`reminder:sha256:`)
/// whatever the hashes. `None` never happens in practice (the key is 85 visible ASCII characters).
pub fn tool_reminder_idempotency_key(agent_id: &AgentId, tool_call_id: &ToolCallId) -> Option<IdempotencyKey> {
    let identity = [agent_id.as_str(), tool_call_id.as_str()].join("\0");
    IdempotencyKey::new(format!("{REMINDER_KEY_PREFIX}tool:{}", sha256_tag(identity.as_bytes()))).ok()
}

/// Reminder keys share the `cron_jobs.idempotency_key` column with operators' `Idempotency-Key`s; the HTTP layer
/// refuses operator keys that start with this, so an operator key can never suppress an agent's reminder.
pub const REMINDER_KEY_PREFIX: &str = "reminder:";

/// Why a `schedule_reminder` call is not scheduled. The DecisionLog is still accepted; the display text is the
/// warning the gateway logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReminderRequestError {
    #[error("invalid tool_input for schedule_reminder: must be an object or a string holding a JSON object")]
    InvalidToolInput,
    /// Carries the offending value rendered as compact JSON and cut to [`MAX_LOGGED_VALUE_CHARS`].
    #[error("invalid delay_ms for schedule_reminder: {0}")]
    InvalidDelay(String),
    #[error("invalid payload for schedule_reminder: must be an object")]
    InvalidPayload,
    /// Carries the offending value as [`Self::InvalidDelay`] does.
    #[error("invalid max_lateness_ms for schedule_reminder: {0}")]
    InvalidMaxLateness(String),
    #[error("schedule_reminder without identity.agent_id: not scheduled")]
    MissingAgentId,
}

/// Largest accepted `max_lateness_ms` of a reminder: ten years (of 365.25 days), the longest delay; a reminder may
/// always be late by less than that and still be delivered. 0 is accepted: delivered only if published on time
/// to the millisecond.
pub const MAX_LATENESS_MS: u64 = 10 * 36_525 * 86_400_000 / 100;

/// How much of an invalid `delay_ms` value reaches the warning, so an agent cannot flood the log.
pub const MAX_LOGGED_VALUE_CHARS: usize = 64;

/// Validates DecisionLog bodies. Stateless; a unit struct so call sites read `SchemaInterceptor.inspect(body)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchemaInterceptor;

impl SchemaInterceptor {
    pub fn inspect(&self, raw: &[u8]) -> Result<AcceptedLog, Rejection> {
        self.read(raw).map(ReadLog::into_accepted)
    }

    /// What [`Self::inspect`] decides, with the owned log built only for a log that asks for a reminder (or that
    /// only the value reading takes): the same answers, the same logs, the same errors.
    pub fn read<'a>(&self, raw: &'a [u8]) -> Result<ReadLog<'a>, Rejection> {
        let accepted = |log: DecisionLog| {
            let reminder = reminder_request(&log);
            ReadLog::Accepted(AcceptedLog { log, reminder })
        };
        // A valid log is read without building a JSON tree; the tree reading decides and names everything else.
        if let Some(log) = DirectLog::read(raw) {
            if log.tool_call() == Some(SCHEDULE_REMINDER_TOOL) {
                return Ok(accepted(log.into_owned()));
            }
            return Ok(ReadLog::Direct(log));
        }
        let value: Value = serde_json::from_slice(raw).map_err(|_| Rejection::InvalidJson)?;
        match DecisionLog::from_json(&value) {
            Ok(log) => Ok(accepted(log)),
            Err(violation) => Err(Rejection::SchemaViolation(Box::new(RejectedLog {
                violation,
                agent_id: identity_field(&value, "agent_id")
                    .filter(|id| validate_id(id).is_ok())
                    .unwrap_or("unknown")
                    .to_owned(),
                capability_version: identity_field(&value, "capability_version")
                    .filter(|version| validate_id(version).is_ok())
                    .unwrap_or("unknown")
                    .to_owned(),
                raw_payload_hash: sha256_tag(raw),
                trace_id: value
                    .get("meta")
                    .and_then(|meta| meta.get("trace_id"))
                    .and_then(Value::as_str)
                    .filter(|trace_id| validate_id(trace_id).is_ok())
                    .map(str::to_owned),
            }))),
        }
    }
}

fn identity_field<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get("identity")?.get(field)?.as_str()
}

/// `sha256:<hex>` of `bytes`, the only trace of a rejected body that leaves the gateway.
pub fn sha256_tag(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    format!("sha256:{}", crate::encoding::hex::encode(digest.as_ref()))
}

fn reminder_request(log: &DecisionLog) -> Option<Result<ReminderRequest, ReminderRequestError>> {
    let action = log.action.as_ref()?;
    if action.tool_call.as_deref() != Some(SCHEDULE_REMINDER_TOOL) {
        return None;
    }
    Some(parse_reminder(log, action.tool_input.as_ref()))
}

fn parse_reminder(log: &DecisionLog, tool_input: Option<&Value>) -> Result<ReminderRequest, ReminderRequestError> {
    let decoded;
    let input = match tool_input {
        Some(Value::Object(input)) => input,
        Some(Value::String(text)) => {
            decoded = serde_json::from_str::<Value>(text).map_err(|_| ReminderRequestError::InvalidToolInput)?;
            decoded.as_object().ok_or(ReminderRequestError::InvalidToolInput)?
        }
        _ => return Err(ReminderRequestError::InvalidToolInput),
    };
    let delay_ms = match input.get("delay_ms") {
        None => return Err(ReminderRequestError::InvalidDelay("missing".to_owned())),
        Some(value) => value
            .as_u64()
            .filter(|delay| *delay > 0)
            .ok_or_else(|| ReminderRequestError::InvalidDelay(loggable(value)))?,
    };
    let payload = match input.get("payload") {
        Some(Value::Object(payload)) => payload.clone(),
        _ => return Err(ReminderRequestError::InvalidPayload),
    };
    let max_lateness_ms = match input.get("max_lateness_ms") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_u64()
                .filter(|lateness| *lateness <= MAX_LATENESS_MS)
                .ok_or_else(|| ReminderRequestError::InvalidMaxLateness(loggable(value)))?,
        ),
    };
    // Fail closed: a reminder is never filed under a guessed identity.
    let agent_id = log.agent_id().cloned().ok_or(ReminderRequestError::MissingAgentId)?;
    let idempotency_key =
        log.trace_id().and_then(|trace_id| reminder_idempotency_key(&agent_id, trace_id, REMINDER_CALL_INDEX));
    Ok(ReminderRequest { agent_id, delay_ms, payload, idempotency_key, max_lateness_ms })
}

/// Compact JSON (so control characters arrive escaped), cut to [`MAX_LOGGED_VALUE_CHARS`].
fn loggable(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(MAX_LOGGED_VALUE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reminder_log(tool_input: Value) -> Vec<u8> {
        json!({
            "identity": {"agent_id": "agent-7", "agent_type": "t", "capability_version": "1"},
            "action": {"status": "pending", "tool_call": "schedule_reminder", "tool_input": tool_input}
        })
        .to_string()
        .into_bytes()
    }

    fn reminder_of(raw: &[u8]) -> Result<ReminderRequest, ReminderRequestError> {
        SchemaInterceptor.inspect(raw).unwrap().reminder.unwrap()
    }

    #[test]
    fn malformed_json_is_invalid_json() {
        assert_eq!(SchemaInterceptor.inspect(b"{not json"), Err(Rejection::InvalidJson));
        assert_eq!(SchemaInterceptor.inspect(b""), Err(Rejection::InvalidJson));
        assert_eq!(SchemaInterceptor.inspect(&[0xff, 0xfe]), Err(Rejection::InvalidJson));
    }

    #[test]
    fn violation_carries_hash_path_and_identity_but_not_body() {
        let raw = br#"{"identity":{"agent_id":"agent-9","capability_version":"2.0"},"cognition":{"intent":"leak-me"}}"#;
        let Err(Rejection::SchemaViolation(rejected)) = SchemaInterceptor.inspect(raw) else {
            panic!("expected a violation")
        };
        assert_eq!(rejected.violation.path, "identity.agent_type");
        assert_eq!(rejected.agent_id, "agent-9");
        assert_eq!(rejected.capability_version, "2.0");
        assert_eq!(rejected.raw_payload_hash, sha256_tag(raw));
        assert!(rejected.raw_payload_hash.starts_with("sha256:"));
        assert_eq!(rejected.raw_payload_hash.len(), "sha256:".len() + 64);
        assert!(!format!("{rejected:?}").contains("leak-me"));
    }

    #[test]
    fn unknown_identity_when_absent_or_invalid() {
        let Err(Rejection::SchemaViolation(rejected)) = SchemaInterceptor.inspect(br#"{"action":{}}"#) else {
            panic!("expected a violation")
        };
        assert_eq!((rejected.agent_id.as_str(), rejected.capability_version.as_str()), ("unknown", "unknown"));
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        assert_eq!(sha256_tag(b"abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn no_reminder_for_other_tool_calls() {
        let raw = json!({"action": {"status": "success", "tool_call": "search"}}).to_string();
        assert_eq!(SchemaInterceptor.inspect(raw.as_bytes()).unwrap().reminder, None);
    }

    #[test]
    fn reminder_from_object_tool_input() {
        let request =
            reminder_of(&reminder_log(json!({"delay_ms": 60000, "payload": {"task": "check_quota"}}))).unwrap();
        assert_eq!(request.agent_id.as_str(), "agent-7");
        assert_eq!(request.delay_ms, 60_000);
        assert_eq!(request.payload["task"], "check_quota");
        assert_eq!(request.max_lateness_ms, None, "delivered however late unless asked");
    }

    #[test]
    fn a_reminder_may_carry_max_lateness_and_a_bad_one_is_named() {
        let input = |lateness: Value| json!({"delay_ms": 60000, "payload": {}, "max_lateness_ms": lateness});
        assert_eq!(reminder_of(&reminder_log(input(json!(5_000)))).unwrap().max_lateness_ms, Some(5_000));
        assert_eq!(reminder_of(&reminder_log(input(json!(0)))).unwrap().max_lateness_ms, Some(0));
        assert_eq!(reminder_of(&reminder_log(input(Value::Null))).unwrap().max_lateness_ms, None);
        let as_text = json!(input(json!(250)).to_string());
        assert_eq!(reminder_of(&reminder_log(as_text)).unwrap().max_lateness_ms, Some(250));
        for bad in [json!(-1), json!(1.5), json!("5000"), json!(MAX_LATENESS_MS + 1)] {
            let refused = reminder_of(&reminder_log(input(bad.clone()))).unwrap_err();
            assert_eq!(refused, ReminderRequestError::InvalidMaxLateness(bad.to_string()), "{bad}");
            assert!(refused.to_string().starts_with("invalid max_lateness_ms for schedule_reminder"));
        }
    }

    #[test]
    fn a_reminder_key_is_a_hash_of_agent_trace_and_call_index() {
        let agent = AgentId::new("agent-7").unwrap();
        // Reference digests computed outside this code: sha256(b"agent-7\x00trace-1\x000") and (…\x001).
        assert_eq!(
            reminder_idempotency_key(&agent, "trace-1", 0).unwrap().as_str(),
            "reminder:sha256:baa4cb31637e8148205a1e5a0a163caf533fc6bde5bf4d54d62d13588f999621"
        );
        assert_eq!(
            reminder_idempotency_key(&agent, "trace-1", 1).unwrap().as_str(),
            "reminder:sha256:d6ce4e9e7a33fdbecca6e4fd31043fa44a552d0aa9487ed530066e31174cfdba"
        );
        // The separators keep fields apart: moving bytes between agent and trace gives another key.
        let shifted = reminder_idempotency_key(&AgentId::new("agent-").unwrap(), "7trace-1", 0).unwrap();
        assert_ne!(shifted, reminder_idempotency_key(&agent, "trace-1", 0).unwrap());
        // Whatever the trace id holds, the key passes validation and does not carry it.
        let odd_trace = "\u{0}ünï code\n".repeat(100);
        let key = reminder_idempotency_key(&agent, &odd_trace, 0).unwrap();
        assert_eq!(IdempotencyKey::new(key.as_str()).as_ref(), Ok(&key));
        assert_eq!(key.as_str().len(), "reminder:sha256:".len() + 64);
    }

    #[test]
    fn a_tool_calls_reminder_key_is_a_hash_of_agent_and_call_apart_from_logs_keys() {
        let agent = AgentId::new("agent-7").unwrap();
        let call = ToolCallId::new("trace-1").unwrap();
        // Reference digest computed outside this code: sha256(b"agent-7\x00trace-1").
        assert_eq!(
            tool_reminder_idempotency_key(&agent, &call).unwrap().as_str(),
            "reminder:tool:sha256:c307148e1372cb0df84e41dd2c766d8d543920fd321d7a1a9b76255f557e07e1"
        );
        assert_ne!(
            tool_reminder_idempotency_key(&agent, &call).unwrap().as_str()["reminder:tool:".len()..],
            reminder_idempotency_key(&agent, "trace-1", 0).unwrap().as_str()["reminder:".len()..]
        );
        let other = ToolCallId::new("trace-2").unwrap();
        assert_ne!(tool_reminder_idempotency_key(&agent, &call), tool_reminder_idempotency_key(&agent, &other));
        let long = ToolCallId::new("x".repeat(256)).unwrap();
        assert_eq!(tool_reminder_idempotency_key(&agent, &long).unwrap().as_str().len(), 85);
    }

    #[test]
    fn a_reminder_is_keyed_by_the_logs_trace_id_and_unkeyed_without_one() {
        let mut log: Value = serde_json::from_slice(&reminder_log(json!({"delay_ms": 5, "payload": {}}))).unwrap();
        assert_eq!(reminder_of(log.to_string().as_bytes()).unwrap().idempotency_key, None, "no meta.trace_id");
        log["meta"] = json!({"trace_id": "trace-1", "timestamp": "2026-02-22T12:00:00Z"});
        let keyed = reminder_of(log.to_string().as_bytes()).unwrap();
        let agent = AgentId::new("agent-7").unwrap();
        assert_eq!(keyed.idempotency_key, reminder_idempotency_key(&agent, "trace-1", 0));
        log["meta"]["trace_id"] = json!("trace-2");
        assert_ne!(reminder_of(log.to_string().as_bytes()).unwrap().idempotency_key, keyed.idempotency_key);
    }

    #[test]
    fn reminder_from_string_tool_input() {
        let input = json!({"delay_ms": 5, "payload": {}}).to_string();
        assert_eq!(reminder_of(&reminder_log(Value::String(input))).unwrap().delay_ms, 5);
    }

    #[test]
    fn invalid_delays_are_named_in_the_warning() {
        let cases = [
            (json!({"delay_ms": -500, "payload": {}}), "invalid delay_ms for schedule_reminder: -500"),
            (json!({"delay_ms": 0, "payload": {}}), "invalid delay_ms for schedule_reminder: 0"),
            (json!({"delay_ms": 1.5, "payload": {}}), "invalid delay_ms for schedule_reminder: 1.5"),
            (json!({"delay_ms": "100", "payload": {}}), "invalid delay_ms for schedule_reminder: \"100\""),
            (json!({"payload": {}}), "invalid delay_ms for schedule_reminder: missing"),
        ];
        for (input, warning) in cases {
            assert_eq!(reminder_of(&reminder_log(input)).unwrap_err().to_string(), warning);
        }
    }

    #[test]
    fn oversized_delay_value_is_cut_in_the_warning() {
        let error = reminder_of(&reminder_log(json!({"delay_ms": "x".repeat(1000), "payload": {}}))).unwrap_err();
        assert!(error.to_string().chars().count() < 120, "{error}");
    }

    #[test]
    fn other_invalid_requests() {
        assert_eq!(
            reminder_of(&reminder_log(json!({"delay_ms": 5, "payload": [1]}))),
            Err(ReminderRequestError::InvalidPayload)
        );
        assert_eq!(reminder_of(&reminder_log(json!("not json"))), Err(ReminderRequestError::InvalidToolInput));
        assert_eq!(reminder_of(&reminder_log(json!("[1]"))), Err(ReminderRequestError::InvalidToolInput));
        let no_identity = json!({"action": {"status": "pending", "tool_call": "schedule_reminder",
            "tool_input": {"delay_ms": 5, "payload": {}}}})
        .to_string();
        assert_eq!(reminder_of(no_identity.as_bytes()), Err(ReminderRequestError::MissingAgentId));
    }
}
