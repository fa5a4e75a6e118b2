//! `/gateway/cron/jobs`: recurring jobs as the API shows them (docs/scheduler.md), their page sizes, and the
//! operations.

use gateway_core::{AgentId, CronJob, CronJobRun, encoding::rfc3339};
use gateway_cron::{preview, preview_local};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::common::Deleted;
use crate::fields::{AgentIdSchema, int64, int64_schema};
use crate::openapi::replayed_header;
use crate::{Operation, Reason};

/// The page size of cron jobs when `limit` is absent.
pub const DEFAULT_PAGE: usize = 100;
/// The largest `limit` of cron jobs.
pub const MAX_PAGE: usize = gateway_cron::MAX_LIST_LIMIT;

// A job as the API shows it; recurring jobs carry `preview`, their next instants (the first is `next_fire_at`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = CronJob)]
#[serde(deny_unknown_fields)]
pub struct CronJobBody<'a> {
    #[schema(value_type = String)]
    pub agent_id: &'a AgentId,
    #[schema(schema_with = int64_schema)]
    pub id: i64,
    pub is_one_time: bool,
    /// One-time reminders only: published later than this after `next_fire_at`, the reminder is not delivered (its
    /// run is `skipped_late`); `null`: delivered however late.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, minimum = 0)]
    pub max_lateness_ms: Option<Option<u64>>,
    /// Recurring jobs only: what the job does about instants it missed (docs/scheduler.md "Misfires").
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = MisfirePolicyName)]
    pub misfire_policy: Option<&'static str>,
    #[schema(format = DateTime)]
    pub next_fire_at: String,
    /// A paused job does not fire until resumed.
    pub paused: bool,
    #[schema(value_type = Object)]
    pub payload: &'a Map<String, Value>,
    /// The next instants, RFC 3339 in UTC; recurring jobs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub preview: Option<Vec<String>>,
    /// The same instants with the offset of the job's time zone at each (`2027-03-14T03:00:00-04:00`); recurring
    /// jobs only, UTC ones too (`+00:00`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub preview_local: Option<Vec<String>>,
    /// `null` for a one-time reminder.
    #[schema(required = true)]
    pub schedule: Option<&'a str>,
    /// The IANA time zone the schedule is read in (`UTC` for one-time reminders).
    #[schema(example = "America/New_York")]
    pub timezone: &'a str,
}

impl<'a> CronJobBody<'a> {
    pub fn of(job: &'a CronJob) -> Self {
        Self {
            agent_id: &job.agent_id,
            id: job.id,
            is_one_time: job.is_one_time,
            max_lateness_ms: job.is_one_time.then_some(job.max_lateness_ms),
            misfire_policy: (!job.is_one_time).then(|| job.misfire_policy.as_str()),
            next_fire_at: rfc3339::format(job.next_fire_at),
            paused: job.paused,
            payload: &job.payload,
            preview: (!job.is_one_time).then(|| preview(job).into_iter().map(rfc3339::format).collect()),
            preview_local: (!job.is_one_time).then(|| preview_local(job)),
            schedule: job.schedule.as_deref(),
            timezone: &job.timezone,
        }
    }
}

// A page of jobs, by ascending id.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CronJobPage<'a> {
    pub jobs: Vec<CronJobBody<'a>>,
    #[schema(required = true)]
    pub next_after_id: Option<i64>,
}

// `POST /gateway/cron/jobs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct CronJobCreate {
    #[schema(value_type = AgentIdSchema)]
    agent_id: String,
    /// A cron expression (docs/scheduler.md).
    #[schema(min_length = 1)]
    schedule: String,
    /// Absent or `null`: `{}`.
    #[schema(value_type = Option<Object>)]
    payload: Option<Map<String, Value>>,
    /// An IANA time zone name (`Europe/Paris`) the schedule is read in; absent or `null`: `UTC`. Across a DST change
    /// a wall-clock time that does not exist fires at the first instant after the gap, one that occurs twice fires
    /// at its first occurrence (docs/scheduler.md, "Time zones").
    #[schema(value_type = Option<String>, max_length = 64, example = "America/New_York")]
    timezone: Option<String>,
    /// Absent or `null`: `fire_once`.
    #[schema(value_type = Option<MisfirePolicyName>)]
    misfire_policy: Option<String>,
}

/// What a recurring job does about instants it missed: `fire_once` (one catch-up fire, carrying the newest missed
/// instant), `skip` (none; each missed instant is recorded as a `skipped_misfire` run), `fire_all` (each missed
/// instant, at most the newest 100).
#[derive(Debug, ToSchema)]
#[schema(as = MisfirePolicy, rename_all = "snake_case")]
#[allow(dead_code)] // Only its schema is used.
#[allow(clippy::enum_variant_names)]
pub enum MisfirePolicyName {
    FireOnce,
    Skip,
    FireAll,
}

/// The runs a `runs` call returns when `limit` is absent.
pub const DEFAULT_RUNS_PAGE: usize = gateway_cron::DEFAULT_RUNS_LIMIT;
/// The largest `limit` of runs.
pub const MAX_RUNS_PAGE: usize = gateway_cron::MAX_RUNS_LIMIT;

// One instant of a job: fired, or why not.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = CronJobRun)]
#[serde(deny_unknown_fields)]
pub struct CronJobRunBody {
    /// The event id it fired with (or would have): `<job_id>:<scheduled_for>`.
    pub fire_id: String,
    /// When it was published, or (skipped) when the scheduler decided not to publish it.
    #[schema(format = DateTime)]
    pub fired_at: String,
    /// `fired_at` minus `scheduled_for`, in milliseconds.
    #[schema(minimum = 0)]
    pub lateness_ms: u64,
    #[schema(value_type = RunOutcomeName)]
    pub outcome: &'static str,
    /// When a stream of the agent first handed it to a client; `null` until then, and always for a skipped run.
    #[schema(required = true, format = DateTime)]
    pub received_at: Option<String>,
    #[schema(format = DateTime)]
    pub scheduled_for: String,
}

impl CronJobRunBody {
    pub fn of(run: &CronJobRun) -> Self {
        Self {
            fire_id: run.fire_id.clone(),
            fired_at: rfc3339::format(run.fired_at),
            lateness_ms: run.lateness_ms(),
            outcome: run.outcome.as_str(),
            received_at: run.received_at.map(rfc3339::format),
            scheduled_for: rfc3339::format(run.scheduled_for),
        }
    }
}

/// What happened at an instant: `fired` (published, in the agent's mailbox), `skipped_misfire` (missed, not fired:
/// the job's policy is `skip`), `skipped_late` (a reminder later than its `max_lateness_ms`: not delivered).
#[derive(Debug, ToSchema)]
#[schema(as = RunOutcome, rename_all = "snake_case")]
#[allow(dead_code)] // Only its schema is used.
pub enum RunOutcomeName {
    Fired,
    SkippedMisfire,
    SkippedLate,
}

// A job's runs, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = CronJobRuns)]
#[serde(deny_unknown_fields)]
pub struct CronJobRunsBody {
    pub runs: Vec<CronJobRunBody>,
}

pub fn runs_doc() -> Operation {
    Operation::new("listCronJobRuns", "cron", "A cron job's runs")
        .describe(
            "Newest first: each instant fired (from the agent's mailbox, with when a stream handed it out) or skipped \
             (`skipped_misfire`, `skipped_late`). Kept as long as the mailbox keeps its entries (`--retention-days`), \
             also after the job is deleted.",
        )
        .path_id("id", "The job's id.")
        .limit(DEFAULT_RUNS_PAGE, MAX_RUNS_PAGE)
        .answer::<CronJobRunsBody>(200, "The runs, newest first.")
        .error(404, Reason::UnknownCronJob)
        .error(503, Reason::StoreUnavailable)
}

pub fn create_doc() -> Operation {
    Operation::new("createCronJob", "cron", "Create a recurring job")
        .idempotency_key()
        .json_body::<CronJobCreate>(true)
        .example(json!({
            "agent_id": "researcher-alpha-9",
            "schedule": "0 9 * * mon-fri",
            "timezone": "America/New_York",
            "payload": {"task": "sweep"},
            "misfire_policy": "fire_once"
        }))
        .answer::<CronJobBody<'static>>(201, "Created, with a preview of its next instants.")
        .link(201, "getCronJob", json!({"id": "$response.body#/id"}))
        .link(201, "deleteCronJob", json!({"id": "$response.body#/id"}))
        .link(201, "pauseCronJob", json!({"id": "$response.body#/id"}))
        .link(201, "resumeCronJob", json!({"id": "$response.body#/id"}))
        .link(201, "listCronJobRuns", json!({"id": "$response.body#/id"}))
        .answer_with_headers::<CronJobBody<'static>>(
            200,
            "Answered from an earlier request with this `Idempotency-Key`.",
            replayed_header(),
        )
        .errors(422, &[Reason::InvalidSchedule, Reason::MissingRequiredFields, Reason::InvalidField])
        .error(503, Reason::StoreUnavailable)
}

pub fn list_doc() -> Operation {
    Operation::new("listCronJobs", "cron", "Cron jobs and pending reminders")
        .describe("Ascending id; one-time reminders appear with `is_one_time: true`.")
        .limit(DEFAULT_PAGE, MAX_PAGE)
        .query("after_id", "A job id: the page starts after it.", int64())
        .answer::<CronJobPage<'static>>(200, "A page of jobs.")
        .error(503, Reason::StoreUnavailable)
}

pub fn show_doc() -> Operation {
    Operation::new("getCronJob", "cron", "One cron job")
        .path_id("id", "The job's id.")
        .answer::<CronJobBody<'static>>(200, "The job.")
        .error(404, Reason::UnknownCronJob)
        .error(503, Reason::StoreUnavailable)
}

pub fn delete_doc() -> Operation {
    Operation::new("deleteCronJob", "cron", "Delete a cron job")
        .describe("A fire already claimed when the delete lands may still be published.")
        .path_id("id", "The job's id.")
        .answer::<Deleted>(200, "Deleted.")
        .error(404, Reason::UnknownCronJob)
        .error(503, Reason::StoreUnavailable)
}

pub fn pause_doc() -> Operation {
    Operation::new("pauseCronJob", "cron", "Pause a cron job")
        .describe(
            "A paused job keeps its row and does not fire; pausing a paused job changes nothing. One-time reminders \
             can be paused too. The body is ignored.",
        )
        .path_id("id", "The job's id.")
        .answer::<CronJobBody<'static>>(200, "The job, paused.")
        .error(404, Reason::UnknownCronJob)
        .error(503, Reason::StoreUnavailable)
}

pub fn resume_doc() -> Operation {
    Operation::new("resumeCronJob", "cron", "Resume a cron job")
        .describe(
            "The job fires again; one whose next instant passed while it was paused fires once at once. Resuming a \
             running job changes nothing. The body is ignored.",
        )
        .path_id("id", "The job's id.")
        .answer::<CronJobBody<'static>>(200, "The job, running.")
        .error(404, Reason::UnknownCronJob)
        .error(503, Reason::StoreUnavailable)
}
