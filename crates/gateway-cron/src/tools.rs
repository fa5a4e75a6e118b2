//! Agents' synchronous reminder tools (`POST /gateway/tools/{tool_name}`, docs/api.md): `schedule_reminder`,
//! `cancel_reminder`, `list_reminders`, `schedule_recurring`, each answered at once with its result, and idempotent
//! per `(agent_id, tool_call_id)`. `schedule_recurring` files a recurring job owned by the calling agent, whose
//! fires reach it as its reminders do; `cancel_reminder` cancels either kind and `list_reminders` lists both
//! (docs/agents.md).
//!
//! The answer of a tool that writes (`schedule_reminder`, `cancel_reminder`, `schedule_recurring`) is recorded in the tool-call store; a
//! retry with the same id and the same tool and parameters gets the recorded answer and does nothing again, and one
//! with another tool or other parameters is refused ([`CronError::ToolCallConflict`]). Only answers are recorded: a
//! refused call (bad parameters, too many reminders, the store down) may be retried as it is. A read-only tool
//! (`list_reminders`) is never recorded: running it again changes nothing, and its answers (up to
//! [`MAX_LISTED_PAYLOAD_BYTES`] each) were what let one agent fill the disk (issue 16): a retry simply lists again.
//!
//! Scheduling and recording are two writes. A crash between them cannot schedule twice: the reminder's
//! idempotency key (a recurring job's too) is derived from `(agent_id, tool_call_id)`
//! ([`gateway_core::intake::interceptor::tool_reminder_idempotency_key`]), so the retry's scheduling finds the job the
//! first attempt wrote, while it is pending, and answers with it (docs/scheduler.md says why this rather than one
//! transaction).
//!
//! The records are pruned after the retention (`--retention-days`) by the loop of [`ReminderTools`]
//! ([`BackgroundLoop::run`]), on the leader.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::intake::ReminderRefusal;
use gateway_core::intake::interceptor::{MAX_LATENESS_MS, tool_reminder_idempotency_key};
use gateway_core::ports::tool_call::params_hash;
use gateway_core::{
    AgentId, BackgroundLoop, Clock, ComponentHealth, LeaderLoop, Leadership, PruningPass, ReminderRequest, StoreError,
    ToolCallId, ToolCallRecord, ToolCallStore, encoding::rfc3339, run_blocking,
};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::error::CronError;
use crate::jobs::{MAX_DELAY_MS, preview_local};
use crate::reminders::{RecurringRequest, json_len};
use crate::schedule::CronSchedule;
use crate::schedule::{MAX_SCHEDULE_LEN, MAX_TIMEZONE_LEN};
use crate::scheduler::CronScheduler;

/// Most reminders one `list_reminders` answer holds (the agent's soonest).
pub const MAX_LISTED_REMINDERS: usize = 100;
/// Most payload bytes (as JSON) one `list_reminders` answer holds: what one answer costs to build and send.
pub const MAX_LISTED_PAYLOAD_BYTES: usize = 1024 * 1024;
/// How long answered tool calls are kept by default (the binary passes `--retention-days`).
pub const DEFAULT_TOOL_CALL_RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// How often the records are pruned (the first pass at start).
pub const TOOL_CALL_PRUNE_INTERVAL: Duration = Duration::from_secs(3_600);
/// Records deleted per transaction.
pub const TOOL_CALL_PRUNE_BATCH: usize = 500;
/// Pause between two batches of one pass, so other writers never wait long.
pub const TOOL_CALL_PRUNE_PAUSE: Duration = Duration::from_millis(50);

/// A tool's name, as the path names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolName {
    ScheduleReminder,
    CancelReminder,
    ListReminders,
    ScheduleRecurring,
}

impl ToolName {
    /// Every tool, in the order the API lists them.
    pub const ALL: [Self; 4] =
        [Self::ScheduleReminder, Self::CancelReminder, Self::ListReminders, Self::ScheduleRecurring];

    /// [`CronError::UnknownTool`] for a name that is none of [`Self::ALL`].
    pub fn parse(name: &str) -> Result<Self, CronError> {
        Self::ALL.into_iter().find(|tool| tool.as_str() == name).ok_or(CronError::UnknownTool)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScheduleReminder => "schedule_reminder",
            Self::CancelReminder => "cancel_reminder",
            Self::ListReminders => "list_reminders",
            Self::ScheduleRecurring => "schedule_recurring",
        }
    }

    /// Whether the tool only reads: its answers are not recorded (a retry runs it again).
    pub fn is_read_only(self) -> bool {
        matches!(self, Self::ListReminders)
    }

    /// The parameters the tool takes.
    pub fn params(self) -> &'static [&'static str] {
        match self {
            Self::ScheduleReminder => &["delay_ms", "payload", "max_lateness_ms"],
            Self::CancelReminder => &["job_id"],
            Self::ListReminders => &[],
            Self::ScheduleRecurring => &["schedule", "payload", "timezone"],
        }
    }

    /// The parameters a call must give (the others of [`Self::params`] are optional).
    pub fn required_params(self) -> &'static [&'static str] {
        match self {
            Self::ScheduleReminder => &["delay_ms", "payload"],
            Self::CancelReminder => &["job_id"],
            Self::ListReminders => &[],
            Self::ScheduleRecurring => &["schedule", "payload"],
        }
    }
}

impl ToolName {
    /// What the tool does, for a client that discovers tools (MCP's `tools/list`, docs/agents.md).
    pub fn description(self) -> &'static str {
        match self {
            Self::ScheduleReminder => {
                "Schedules a one-time reminder for the calling agent: after `delay_ms` the gateway delivers `payload` \
                 to the agent (its event stream, its mailbox). Answers `job_id` and `fire_at`."
            }
            Self::CancelReminder => {
                "Cancels one of the calling agent's pending reminders or recurring jobs. Answers `cancelled`: false \
                 for a job that is not this agent's or no longer pending."
            }
            Self::ListReminders => "Lists the calling agent's pending reminders and recurring jobs, soonest first.",
            Self::ScheduleRecurring => {
                "Schedules a recurring job for the calling agent: at each instant of the cron expression `schedule`, \
                 read in the IANA time zone `timezone` (UTC when absent), the gateway delivers `payload` to the agent. \
                 Answers `job_id`, `fire_at` and `fire_at_local`; `cancel_reminder` stops it."
            }
        }
    }

    /// The JSON Schema (2020-12) of the tool's `params`: an object of exactly [`Self::params`], each described by
    /// [`param_schema`]. What [`ReminderTool::from_params`] accepts is what this schema allows, so a client that
    /// validates its arguments against it is refused by neither.
    pub fn params_schema(self) -> Value {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for &param in self.params() {
            let (schema, is_required) = param_schema(self, param);
            properties.insert(param.to_owned(), schema);
            if is_required {
                required.push(Value::from(param));
            }
        }
        json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
    }
}

/// The schema of one parameter and whether it is required. A parameter this does not know yet (one a tool has
/// just gained) is described as any value and optional: the tool still appears with it, and
/// [`ReminderTool::from_params`] stays the judge of what it takes.
fn param_schema(tool: ToolName, param: &str) -> (Value, bool) {
    let required = tool.required_params().contains(&param);
    let schema = match (tool, param) {
        (_, "delay_ms") => json!({"type": "integer", "minimum": 1, "maximum": MAX_DELAY_MS,
                   "description": "Milliseconds from now until the reminder fires (at most ten years)."}),
        (_, "payload") => json!({"type": "object",
                   "description": "What the reminder delivers back to the agent, as it was given (a JSON object)."}),
        (_, "job_id") => json!({"type": "integer",
                   "description": "The `job_id` that `schedule_reminder` or `schedule_recurring` answered."}),
        (_, "max_lateness_ms") => json!({"type": "integer", "minimum": 0, "maximum": MAX_LATENESS_MS,
                   "description": "If the reminder would be delivered later than this many milliseconds after its \
                                   instant (the gateway was down, say), it is not delivered at all."}),
        (_, "schedule") => json!({"type": "string", "minLength": 1, "maxLength": MAX_SCHEDULE_LEN,
                   "description": "A cron expression: crontab's 5 fields, or 6/7 with seconds, or @daily and friends."}),
        (_, "timezone") => json!({"type": "string", "maxLength": MAX_TIMEZONE_LEN,
                   "description": "The IANA time zone the schedule is read in (`Europe/Paris`); UTC when absent."}),
        _ => json!({}),
    };
    (schema, required)
}

/// One tool call's request, its parameters checked.
#[derive(Debug, Clone, PartialEq)]
pub enum ReminderTool {
    /// A one-time reminder for the calling agent in `delay_ms` (1 to [`MAX_DELAY_MS`]); not delivered if published
    /// more than `max_lateness_ms` late (optional, 0 to [`MAX_LATENESS_MS`]).
    ScheduleReminder { delay_ms: u64, payload: Map<String, Value>, max_lateness_ms: Option<u64> },
    /// Cancels one of the calling agent's pending reminders or recurring jobs.
    CancelReminder { job_id: i64 },
    /// The calling agent's pending reminders and recurring jobs, soonest first.
    ListReminders,
    /// A recurring job for the calling agent: `schedule` (crontab) read in the IANA zone `timezone` (checked when the
    /// tool runs: `UTC` when absent).
    ScheduleRecurring { schedule: String, timezone: String, payload: Map<String, Value> },
}

impl ReminderTool {
    /// Reads `params` for tool `name`: every parameter the tool requires, of its type, and no other. A refusal
    /// names the parameter (`params.delay_ms`) and what was expected, never the value.
    pub fn from_params(name: ToolName, params: &Map<String, Value>) -> Result<Self, CronError> {
        let known = name.params();
        if let Some(unknown) = params.keys().find(|key| !known.contains(&key.as_str())) {
            let expected = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
            return Err(CronError::InvalidToolParams(format!(
                "params: unknown field {}; expected {expected}",
                quoted_name(unknown)
            )));
        }
        let present = |field: &'static str| params.get(field).filter(|value| !value.is_null());
        let required = |field: &'static str| present(field).ok_or(CronError::MissingToolParam(field));
        Ok(match name {
            ToolName::ScheduleReminder => {
                let delay_ms = required("delay_ms")?
                    .as_u64()
                    .filter(|delay| (1..=MAX_DELAY_MS.unsigned_abs()).contains(delay))
                    .ok_or_else(|| {
                        CronError::InvalidToolParams(format!(
                            "params.delay_ms: must be an integer from 1 to {MAX_DELAY_MS} (ten years)"
                        ))
                    })?;
                let payload = required("payload")?
                    .as_object()
                    .cloned()
                    .ok_or_else(|| CronError::InvalidToolParams("params.payload: must be a JSON object".to_owned()))?;
                let max_lateness_ms = present("max_lateness_ms")
                    .map(|value| {
                        value.as_u64().filter(|lateness| *lateness <= MAX_LATENESS_MS).ok_or_else(|| {
                            CronError::InvalidToolParams(format!(
                                "params.max_lateness_ms: must be an integer from 0 to {MAX_LATENESS_MS} (ten years)"
                            ))
                        })
                    })
                    .transpose()?;
                Self::ScheduleReminder { delay_ms, payload, max_lateness_ms }
            }
            ToolName::CancelReminder => {
                let job_id = required("job_id")?
                    .as_i64()
                    .ok_or_else(|| CronError::InvalidToolParams("params.job_id: must be an integer".to_owned()))?;
                Self::CancelReminder { job_id }
            }
            ToolName::ListReminders => Self::ListReminders,
            ToolName::ScheduleRecurring => {
                let schedule = required("schedule")?
                    .as_str()
                    .filter(|schedule| !schedule.trim().is_empty())
                    .ok_or_else(|| {
                        CronError::InvalidToolParams("params.schedule: must be a non-empty string".to_owned())
                    })?
                    .to_owned();
                let timezone = match present("timezone") {
                    None => gateway_core::DEFAULT_TIMEZONE.to_owned(),
                    Some(zone) => zone
                        .as_str()
                        .ok_or_else(|| {
                            CronError::InvalidToolParams("params.timezone: must be a string (an IANA name)".to_owned())
                        })?
                        .to_owned(),
                };
                let payload = required("payload")?
                    .as_object()
                    .cloned()
                    .ok_or_else(|| CronError::InvalidToolParams("params.payload: must be a JSON object".to_owned()))?;
                // Checked here, so a refusal names the parameter before anything runs; the zone is kept by its
                // database name.
                let parsed = CronSchedule::parse_in(&schedule, &timezone).map_err(recurring_refusal)?;
                Self::ScheduleRecurring {
                    schedule: parsed.source().to_owned(),
                    timezone: parsed.timezone().to_owned(),
                    payload,
                }
            }
        })
    }

    pub fn name(&self) -> ToolName {
        match self {
            Self::ScheduleReminder { .. } => ToolName::ScheduleReminder,
            Self::CancelReminder { .. } => ToolName::CancelReminder,
            Self::ListReminders => ToolName::ListReminders,
            Self::ScheduleRecurring { .. } => ToolName::ScheduleRecurring,
        }
    }

    /// The parameters as JSON, what the record's hash is taken over: two calls are the same call when these are
    /// equal, however the agent wrote them.
    fn params(&self) -> Value {
        match self {
            // Without `max_lateness_ms` the JSON is what it was before the parameter existed, so calls recorded then
            // still match their retries.
            Self::ScheduleReminder { delay_ms, payload, max_lateness_ms: None } => {
                json!({"delay_ms": delay_ms, "payload": payload})
            }
            Self::ScheduleReminder { delay_ms, payload, max_lateness_ms: Some(lateness) } => {
                json!({"delay_ms": delay_ms, "payload": payload, "max_lateness_ms": lateness})
            }
            Self::CancelReminder { job_id } => json!({"job_id": job_id}),
            Self::ListReminders => json!({}),
            Self::ScheduleRecurring { schedule, timezone, payload } => {
                json!({"schedule": schedule, "timezone": timezone, "payload": payload})
            }
        }
    }
}

/// A recurring job's refusal in the tools' words: the parameter it is about, as the other tools' refusals.
fn recurring_refusal(refusal: CronError) -> CronError {
    match refusal {
        CronError::InvalidSchedule(why) => CronError::InvalidToolParams(format!("params.schedule: {why}")),
        CronError::UnknownTimezone(_) => CronError::InvalidToolParams(format!("params.{refusal}")),
        // The key is this call's (agent, tool_call_id): the job holding it was asked for by this id with other params.
        CronError::IdempotencyKeyReused => CronError::ToolCallConflict,
        other => other,
    }
}

/// A client-chosen name in a detail, only when short and printable (a detail never carries a smuggled value).
fn quoted_name(name: &str) -> String {
    let printable = name.len() <= 64 && name.chars().all(|c| c.is_ascii_graphic() || c == ' ');
    if printable { format!("`{name}`") } else { "(unprintable)".to_owned() }
}

/// A tool call's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    /// The `result` object.
    pub result: Value,
    /// `true` when the answer is the recorded one of an earlier call with this id (nothing was done again).
    pub replayed: bool,
}

/// What the tools work through: the scheduler (reminders), the records of answered calls, the time, and whether
/// this process prunes (leadership).
#[derive(Debug, Clone)]
pub struct ToolPorts {
    pub scheduler: CronScheduler,
    pub calls: Arc<dyn ToolCallStore>,
    pub clock: Arc<dyn Clock>,
    pub leadership: Arc<dyn Leadership>,
}

/// How long records are kept and how they are pruned; the defaults are the constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolConfig {
    pub retention: Duration,
    pub prune_interval: Duration,
    pub prune_batch: usize,
    pub prune_pause: Duration,
}

impl Default for ToolConfig {
    fn default() -> Self {
        Self {
            retention: DEFAULT_TOOL_CALL_RETENTION,
            prune_interval: TOOL_CALL_PRUNE_INTERVAL,
            prune_batch: TOOL_CALL_PRUNE_BATCH,
            prune_pause: TOOL_CALL_PRUNE_PAUSE,
        }
    }
}

/// The reminder tools, and the loop that prunes their records. Cheap to clone; run its loop
/// ([`run`](gateway_core::BackgroundLoop::run)) once.
#[derive(Debug, Clone)]
pub struct ReminderTools {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ports: ToolPorts,
    config: ToolConfig,
    health: ComponentHealth,
}

impl ReminderTools {
    pub fn new(ports: ToolPorts, mut config: ToolConfig) -> Self {
        config.prune_batch = config.prune_batch.max(1);
        config.prune_interval = config.prune_interval.max(Duration::from_millis(1));
        Self { inner: Arc::new(Inner { ports, config, health: ComponentHealth::new("tool_call_retention") }) }
    }

    /// The pruning loop's readiness.
    pub fn health(&self) -> ComponentHealth {
        self.inner.health.clone()
    }

    /// Answers `agent_id`'s call `tool_call_id` of `tool`: the recorded answer when this id was answered before
    /// with the same tool and parameters ([`CronError::ToolCallConflict`] when with others), else the tool's
    /// result, recorded before it is returned when the tool writes (a read-only tool's is not recorded).
    pub async fn call(
        &self,
        agent_id: AgentId,
        tool_call_id: ToolCallId,
        tool: ReminderTool,
    ) -> Result<ToolAnswer, CronError> {
        let tool_name = tool.name().as_str();
        let hash = params_hash(&tool.params());
        let recorded = {
            let (calls, agent_id, tool_call_id) =
                (Arc::clone(&self.inner.ports.calls), agent_id.clone(), tool_call_id.clone());
            run_blocking(move || calls.tool_call(&agent_id, &tool_call_id)).await.map_err(StoreError::from)??
        };
        if let Some(recorded) = recorded {
            return replay(recorded, tool_name, &hash);
        }
        let name = tool.name();
        let result = self.run_tool(&agent_id, &tool_call_id, tool).await?;
        if name.is_read_only() || !self.records(name, &agent_id, &result).await? {
            return Ok(ToolAnswer { result, replayed: false });
        }
        let record = ToolCallRecord {
            agent_id,
            tool_call_id,
            tool_name: tool_name.to_owned(),
            params_hash: hash.clone(),
            result,
            created_at: self.inner.ports.clock.now(),
        };
        let calls = Arc::clone(&self.inner.ports.calls);
        let (holder, written) =
            run_blocking(move || calls.record_tool_call(&record)).await.map_err(StoreError::from)??;
        if written {
            debug!(agent_id = %holder.agent_id, tool = tool_name, "tool call answered");
            return Ok(ToolAnswer { result: holder.result, replayed: false });
        }
        // A concurrent call with the same id recorded its answer first: that answer stands, if it was this call.
        replay(holder, tool_name, &hash)
    }

    /// Whether a writing tool's answer is recorded for its retries. Always, but for a cancel that cancelled nothing
    /// while the agent is at its quota: such answers could otherwise be stored without end by an agent the quota
    /// has stopped, and a retry of it answers the same (a job that is not the agent's, or no longer pending, does
    /// not become so). A cancel that did cancel frees the job's row, which holds more than the answer takes, and
    /// every such job was accepted under the quota.
    async fn records(&self, tool: ToolName, agent_id: &AgentId, result: &Value) -> Result<bool, CronError> {
        if tool != ToolName::CancelReminder || result["cancelled"] == Value::Bool(true) {
            return Ok(true);
        }
        let reserve = crate::reminders::ANSWER_RESERVE_BYTES;
        match self.inner.ports.scheduler.check_quota(agent_id.clone(), reserve).await {
            Ok(()) => Ok(true),
            Err(CronError::QuotaExceeded { .. }) => Ok(false),
            Err(other) => Err(other),
        }
    }

    async fn run_tool(
        &self,
        agent_id: &AgentId,
        tool_call_id: &ToolCallId,
        tool: ReminderTool,
    ) -> Result<Value, CronError> {
        let scheduler = &self.inner.ports.scheduler;
        match tool {
            ReminderTool::ScheduleReminder { delay_ms, payload, max_lateness_ms } => {
                let request = ReminderRequest {
                    agent_id: agent_id.clone(),
                    delay_ms,
                    payload,
                    idempotency_key: tool_reminder_idempotency_key(agent_id, tool_call_id),
                    max_lateness_ms,
                };
                let reserve = crate::reminders::ANSWER_RESERVE_BYTES;
                let scheduled =
                    scheduler.schedule_reminder_reserving(request, reserve).await.map_err(|refusal| match refusal {
                        ReminderRefusal::PayloadTooLarge { limit } => CronError::InvalidToolParams(format!(
                            "params.payload: must be at most {limit} bytes as JSON"
                        )),
                        ReminderRefusal::TooManyPending { limit } => CronError::TooManyReminders { limit },
                        ReminderRefusal::QuotaExceeded { limit } => CronError::QuotaExceeded { limit },
                        ReminderRefusal::InvalidDelay(_) => CronError::InvalidToolParams(format!(
                            "params.delay_ms: must be an integer from 1 to {MAX_DELAY_MS} (ten years)"
                        )),
                        ReminderRefusal::Store(error) => CronError::Store(error),
                    })?;
                let job = scheduled.job;
                if scheduled.already_scheduled {
                    info!(%agent_id, job_id = job.id, "reminder already scheduled by this tool call");
                } else {
                    info!(%agent_id, job_id = job.id, delay_ms, "reminder scheduled by a tool call");
                }
                Ok(json!({"job_id": job.id, "fire_at": rfc3339::format(job.next_fire_at)}))
            }
            // Never refused by the quota: cancelling is how an agent at its quota makes room (see `records`). A
            // recurring job of the agent's is cancelled too: an agent that can create one must be able to stop it.
            ReminderTool::CancelReminder { job_id } => {
                let cancelled = scheduler.cancel_reminder(agent_id.clone(), job_id).await?;
                Ok(json!({"cancelled": cancelled}))
            }
            ReminderTool::ListReminders => {
                let one_time = scheduler.pending_reminders(agent_id.clone(), MAX_LISTED_REMINDERS + 1).await?;
                let recurring = scheduler.recurring_jobs_of(agent_id.clone(), MAX_LISTED_REMINDERS + 1).await?;
                let mut pending: Vec<&gateway_core::CronJob> = one_time.iter().chain(&recurring).collect();
                pending.sort_by_key(|job| (job.next_fire_at, job.id));
                let mut listed = Vec::with_capacity(pending.len().min(MAX_LISTED_REMINDERS));
                let mut bytes = 0;
                for job in &pending {
                    bytes += json_len(&job.payload);
                    if listed.len() == MAX_LISTED_REMINDERS || bytes > MAX_LISTED_PAYLOAD_BYTES {
                        break;
                    }
                    let mut entry = json!({
                        "job_id": job.id,
                        "fire_at": rfc3339::format(job.next_fire_at),
                        "payload": job.payload,
                    });
                    if let (Some(schedule), Some(fields)) = (&job.schedule, entry.as_object_mut()) {
                        fields.insert("schedule".to_owned(), json!(schedule));
                        fields.insert("timezone".to_owned(), json!(job.timezone));
                    }
                    listed.push(entry);
                }
                let truncated = listed.len() < pending.len();
                Ok(json!({"reminders": listed, "truncated": truncated}))
            }
            ReminderTool::ScheduleRecurring { schedule, timezone, payload } => {
                let request = RecurringRequest {
                    agent_id: agent_id.clone(),
                    schedule,
                    timezone,
                    payload,
                    idempotency_key: tool_reminder_idempotency_key(agent_id, tool_call_id),
                };
                let reserve = crate::reminders::RECURRING_ANSWER_RESERVE_BYTES;
                let (job, already_scheduled) =
                    scheduler.schedule_recurring_reserving(request, reserve).await.map_err(recurring_refusal)?;
                if already_scheduled {
                    info!(%agent_id, job_id = job.id, "recurring job already scheduled by this tool call");
                } else {
                    info!(%agent_id, job_id = job.id, "recurring job scheduled by a tool call");
                }
                let fire_at_local = preview_local(&job).into_iter().next();
                Ok(json!({
                    "job_id": job.id,
                    "fire_at": rfc3339::format(job.next_fire_at),
                    "fire_at_local": fire_at_local,
                }))
            }
        }
    }

    /// One pass: batches until none is full. Returns how many records went.
    pub async fn prune_once(&self, shutdown: &CancellationToken) -> Result<usize, StoreError> {
        let config = self.inner.config;
        let pass = PruningPass {
            now: self.inner.ports.clock.now(),
            retention: config.retention,
            batch: config.prune_batch,
            pause: config.prune_pause,
            short_batch_ends: true,
        };
        let calls = Arc::clone(&self.inner.ports.calls);
        pass.run(shutdown, move |cutoff, limit| calls.prune_tool_calls(cutoff, limit)).await
    }
}

impl BackgroundLoop for ReminderTools {
    fn name(&self) -> &'static str {
        "tool_call_retention"
    }

    /// A pass every interval (the first at once), only while leader; failures back off (capped) and never stop
    /// the loop.
    async fn run(&self, shutdown: CancellationToken) {
        let passes = LeaderLoop {
            pass: "pruning tool calls",
            interval: self.inner.config.prune_interval,
            first_backoff: self.inner.config.prune_pause,
            max_backoff: gateway_core::runtime::periodic::MAX_PRUNE_BACKOFF,
            health: &self.inner.health,
            leadership: self.inner.ports.leadership.as_ref(),
        };
        passes
            .run(&shutdown, |_| async {
                let pruned = self.prune_once(&shutdown).await?;
                if pruned > 0 {
                    let retention_days = self.inner.config.retention.as_secs() / 86_400;
                    info!(pruned, retention_days, "old tool calls pruned");
                }
                Ok::<_, StoreError>(())
            })
            .await;
    }
}

/// The recorded answer, if the call asking for it is the one that was recorded (same tool, same parameters).
fn replay(recorded: ToolCallRecord, tool_name: &str, hash: &str) -> Result<ToolAnswer, CronError> {
    if recorded.tool_name == tool_name && recorded.params_hash == hash {
        Ok(ToolAnswer { result: recorded.result, replayed: true })
    } else {
        Err(CronError::ToolCallConflict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn names_parse_and_unknown_ones_are_refused() {
        for tool in ToolName::ALL {
            assert_eq!(ToolName::parse(tool.as_str()), Ok(tool));
        }
        for unknown in ["", "Schedule_reminder", "delete_everything", "schedule_reminder "] {
            assert_eq!(ToolName::parse(unknown), Err(CronError::UnknownTool), "{unknown:?}");
        }
    }

    #[test]
    fn params_are_checked_and_refusals_name_the_field_never_the_value() {
        let schedule = ToolName::ScheduleReminder;
        assert_eq!(
            ReminderTool::from_params(schedule, &params(json!({"delay_ms": 5, "payload": {"k": 1}}))),
            Ok(ReminderTool::ScheduleReminder { delay_ms: 5, payload: params(json!({"k": 1})), max_lateness_ms: None })
        );
        assert_eq!(
            ReminderTool::from_params(schedule, &params(json!({"delay_ms": 5, "payload": {}, "max_lateness_ms": 0}))),
            Ok(ReminderTool::ScheduleReminder { delay_ms: 5, payload: Map::new(), max_lateness_ms: Some(0) })
        );
        let secret = "sk-live-secret";
        let refusals = [
            (schedule, json!({"payload": {}}), "params.delay_ms is required"),
            (schedule, json!({"delay_ms": null, "payload": {}}), "params.delay_ms is required"),
            (schedule, json!({"delay_ms": 5}), "params.payload is required"),
            (schedule, json!({"delay_ms": secret, "payload": {}}), "params.delay_ms: must be an integer"),
            (schedule, json!({"delay_ms": 0, "payload": {}}), "params.delay_ms: must be an integer"),
            (schedule, json!({"delay_ms": -5, "payload": {}}), "params.delay_ms: must be an integer"),
            (schedule, json!({"delay_ms": 1.5, "payload": {}}), "params.delay_ms: must be an integer"),
            (schedule, json!({"delay_ms": MAX_DELAY_MS + 1, "payload": {}}), "params.delay_ms: must be an integer"),
            (schedule, json!({"delay_ms": 5, "payload": [secret]}), "params.payload: must be a JSON object"),
            (schedule, json!({"delay_ms": 5, "payload": {}, "when": 1}), "params: unknown field `when`"),
            (schedule, json!({"delay_ms": 5, "payload": {}, "max_lateness_ms": -1}), "params.max_lateness_ms: must be"),
            (
                schedule,
                json!({"delay_ms": 5, "payload": {}, "max_lateness_ms": secret}),
                "params.max_lateness_ms: must",
            ),
            (
                schedule,
                json!({"delay_ms": 5, "payload": {}, "max_lateness_ms": MAX_LATENESS_MS + 1}),
                "params.max_lateness_ms: must be an integer from 0",
            ),
            (ToolName::CancelReminder, json!({"job_id": secret}), "params.job_id: must be an integer"),
            (ToolName::CancelReminder, json!({}), "params.job_id is required"),
            (ToolName::ListReminders, json!({"agent_id": "other"}), "params: unknown field `agent_id`; expected none"),
        ];
        for (tool, given, detail) in refusals {
            let refused = ReminderTool::from_params(tool, &params(given.clone())).unwrap_err().to_string();
            assert!(refused.starts_with(detail), "{given}: {refused}");
            assert!(!refused.contains(secret), "{refused}");
        }
        assert_eq!(
            ReminderTool::from_params(schedule, &params(json!({"delay_ms": MAX_DELAY_MS, "payload": {}}))).unwrap(),
            ReminderTool::ScheduleReminder {
                delay_ms: MAX_DELAY_MS.unsigned_abs(),
                payload: Map::new(),
                max_lateness_ms: None
            }
        );
        let smuggled = format!("x{}", "\n".repeat(3));
        let refused = ReminderTool::from_params(ToolName::ListReminders, &params(json!({smuggled: 1}))).unwrap_err();
        assert!(refused.to_string().contains("(unprintable)"), "{refused}");
    }

    /// Every tool's schema lists exactly its parameters, and a call its schema allows is accepted.
    #[test]
    fn each_tools_schema_names_exactly_its_params() {
        for tool in ToolName::ALL {
            let schema = tool.params_schema();
            let properties = schema["properties"].as_object().unwrap();
            let named: Vec<&str> = properties.keys().map(String::as_str).collect();
            let mut expected = tool.params().to_vec();
            expected.sort_unstable();
            assert_eq!(named, expected, "{tool:?}");
            assert_eq!(schema["additionalProperties"], false);
            assert!(!tool.description().is_empty());
        }
        let schedule = ToolName::ScheduleReminder.params_schema();
        assert_eq!(schedule["required"], json!(["delay_ms", "payload"]));
        assert_eq!(schedule["properties"]["delay_ms"]["maximum"], MAX_DELAY_MS);
        assert_eq!(ToolName::ListReminders.params_schema()["required"], json!([]));
        assert_eq!(param_schema(ToolName::ScheduleReminder, "not_yet_described"), (json!({}), false));
    }

    #[test]
    fn the_same_call_written_another_way_has_the_same_params() {
        let a = ReminderTool::from_params(
            ToolName::ScheduleReminder,
            &params(json!({"payload": {"b": 1, "a": 2}, "delay_ms": 5})),
        )
        .unwrap();
        let b = ReminderTool::from_params(
            ToolName::ScheduleReminder,
            &params(json!({"delay_ms": 5, "payload": {"a": 2, "b": 1}})),
        )
        .unwrap();
        assert_eq!(params_hash(&a.params()), params_hash(&b.params()));
    }
}
