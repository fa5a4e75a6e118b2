//! The operator's cron endpoints: `POST /gateway/cron/jobs`, `GET /gateway/cron/jobs`,
//! `GET /gateway/cron/jobs/{id}`, `DELETE /gateway/cron/jobs/{id}`, `POST /gateway/cron/jobs/{id}/pause` and
//! `…/resume`.

use gateway_core::{AgentId, CronJob, encoding::rfc3339};
use gateway_cron::preview;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::http::error::ApiError;
use crate::http::request::{JsonObject, Query, Request, idempotency_key, next_cursor, required};
use crate::http::response::{Response, created_or_replayed, json_response};
use crate::state::AppState;
use gateway_api::Deleted;
use gateway_api::Operation;
use gateway_api::Reason;
use gateway_api::fields::{AgentIdSchema, int64, int64_schema};
use gateway_api::openapi::replayed_header;

pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = gateway_cron::MAX_LIST_LIMIT;

const FIELDS: [&str; 3] = ["agent_id", "schedule", "payload"];

/// `{agent_id, schedule, payload}` → 201 with the job, its `next_fire_at` and a preview of its next instants
/// (200 and `Idempotent-Replayed: true` when an `Idempotency-Key` repeats an earlier request).
pub async fn create(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let idempotency_key = idempotency_key(request.headers())?;
    let mut body = JsonObject::read(request).await?;
    let agent_id = required("agent_id", body.take_string("agent_id")?.filter(|id| !id.is_empty()))?;
    let agent_id = AgentId::new(agent_id)
        .map_err(|error| ApiError::unprocessable(Reason::InvalidField, format!("agent_id: {error}")))?;
    let schedule = required("schedule", body.take_string("schedule")?.filter(|text| !text.trim().is_empty()))?;
    let payload = body.take_object("payload")?.unwrap_or_else(Map::new);
    body.finish(&FIELDS)?;
    let (job, replayed) = state.cron.add_recurring_idempotent(agent_id, &schedule, payload, idempotency_key).await?;
    Ok(created_or_replayed(&CronJobBody::of(&job), replayed))
}

/// `?limit=&after_id=` → `{"jobs": [...], "next_after_id": id|null}`, by ascending id.
pub async fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["limit", "after_id"])?;
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after_id", |text| text.parse::<i64>().ok())?;
    let jobs = state.cron.list(page.after, page.limit).await?;
    let next_after_id = next_cursor(&jobs, page.limit, |job| job.id);
    let jobs = jobs.iter().map(CronJobBody::of).collect();
    Ok(json_response(StatusCode::OK, &CronJobPage { jobs, next_after_id }))
}

pub async fn show(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &CronJobBody::of(&state.cron.job(job_id).await?)))
}

pub async fn delete(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    state.cron.remove(job_id).await?;
    Ok(json_response(StatusCode::OK, &Deleted::new(job_id)))
}

/// `POST /gateway/cron/jobs/{id}/pause` (any body, ignored) → 200 with the job, now paused; idempotent.
pub async fn pause(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &CronJobBody::of(&state.cron.pause(job_id).await?)))
}

/// `POST /gateway/cron/jobs/{id}/resume` (any body, ignored) → 200 with the job, running again; idempotent. A job
/// whose `next_fire_at` has passed fires once at once.
pub async fn resume(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &CronJobBody::of(&state.cron.resume(job_id).await?)))
}

// The answers' fields are in alphabetical order, the order they had when built as JSON maps: the same bytes.

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
    #[schema(format = DateTime)]
    pub next_fire_at: String,
    /// A paused job does not fire until resumed.
    pub paused: bool,
    #[schema(value_type = Object)]
    pub payload: &'a Map<String, Value>,
    /// The next instants; recurring jobs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub preview: Option<Vec<String>>,
    /// `null` for a one-time reminder.
    #[schema(required = true)]
    pub schedule: Option<&'a str>,
}

impl<'a> CronJobBody<'a> {
    fn of(job: &'a CronJob) -> Self {
        Self {
            agent_id: &job.agent_id,
            id: job.id,
            is_one_time: job.is_one_time,
            next_fire_at: rfc3339::format(job.next_fire_at),
            paused: job.paused,
            payload: &job.payload,
            preview: (!job.is_one_time).then(|| preview(job).into_iter().map(rfc3339::format).collect()),
            schedule: job.schedule.as_deref(),
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
}

pub fn create_doc() -> Operation {
    Operation::new("createCronJob", "cron", "Create a recurring job")
        .idempotency_key()
        .json_body::<CronJobCreate>(true)
        .example(json!({"agent_id": "researcher-alpha-9", "schedule": "*/5 * * * *", "payload": {"task": "sweep"}}))
        .answer::<CronJobBody<'static>>(201, "Created, with a preview of its next instants.")
        .link(201, "getCronJob", json!({"id": "$response.body#/id"}))
        .link(201, "deleteCronJob", json!({"id": "$response.body#/id"}))
        .link(201, "pauseCronJob", json!({"id": "$response.body#/id"}))
        .link(201, "resumeCronJob", json!({"id": "$response.body#/id"}))
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
