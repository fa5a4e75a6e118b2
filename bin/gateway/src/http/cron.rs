//! The operator's cron endpoints: `POST /gateway/cron/jobs`, `GET /gateway/cron/jobs`,
//! `GET /gateway/cron/jobs/{id}`, `DELETE /gateway/cron/jobs/{id}`, `POST /gateway/cron/jobs/{id}/pause`,
//! `…/resume` and `GET …/runs`.

use gateway_core::{AgentId, DEFAULT_TIMEZONE, MisfirePolicy};
use http::StatusCode;
use serde_json::Map;

use crate::http::error::ApiError;
use crate::http::request::{JsonObject, Query, Request, idempotency_key, next_cursor, required};
use crate::http::response::{Response, created_or_replayed, json_response};
use crate::state::AppState;
use gateway_api::Deleted;
use gateway_api::Reason;
use gateway_api::cron::{
    CronJobBody, CronJobPage, CronJobRunBody, CronJobRunsBody, DEFAULT_PAGE, DEFAULT_RUNS_PAGE, MAX_PAGE, MAX_RUNS_PAGE,
};

const FIELDS: [&str; 5] = ["agent_id", "schedule", "payload", "timezone", "misfire_policy"];

/// `{agent_id, schedule, payload, timezone?, misfire_policy?}` → 201 with the job, its `next_fire_at` and a preview of its next instants
/// (200 and `Idempotent-Replayed: true` when an `Idempotency-Key` repeats an earlier request).
pub(super) async fn create(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let idempotency_key = idempotency_key(request.headers())?;
    let mut body = JsonObject::read(request).await?;
    let agent_id = required("agent_id", body.take_string("agent_id")?.filter(|id| !id.is_empty()))?;
    let agent_id = AgentId::new(agent_id)
        .map_err(|error| ApiError::unprocessable(Reason::InvalidField, format!("agent_id: {error}")))?;
    let schedule = required("schedule", body.take_string("schedule")?.filter(|text| !text.trim().is_empty()))?;
    let payload = body.take_object("payload")?.unwrap_or_else(Map::new);
    let timezone = body.take_string("timezone")?.unwrap_or_else(|| DEFAULT_TIMEZONE.to_owned());
    let misfire_policy = match body.take_string("misfire_policy")? {
        None => MisfirePolicy::default(),
        Some(name) => MisfirePolicy::parse(&name).ok_or_else(|| {
            ApiError::unprocessable(Reason::InvalidField, "misfire_policy: must be one of fire_once, skip, fire_all")
        })?,
    };
    body.finish(&FIELDS)?;
    let (job, replayed) =
        state.cron.add_recurring_with(agent_id, &schedule, &timezone, payload, idempotency_key, misfire_policy).await?;
    Ok(created_or_replayed(&CronJobBody::of(&job), replayed))
}

/// `?limit=&after_id=` → `{"jobs": [...], "next_after_id": id|null}`, by ascending id.
pub(super) async fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["limit", "after_id"])?;
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after_id", |text| text.parse::<i64>().ok())?;
    let jobs = state.cron.list(page.after, page.limit).await?;
    let next_after_id = next_cursor(&jobs, page.limit, |job| job.id);
    let jobs = jobs.iter().map(CronJobBody::of).collect();
    Ok(json_response(StatusCode::OK, &CronJobPage { jobs, next_after_id }))
}

/// `GET /gateway/cron/jobs/{id}/runs?limit=` → `{"runs": [...]}`, newest first; also for a deleted job that has
/// runs left (404 only when there is neither the job nor a run).
pub(super) async fn runs(state: &AppState, request: &Request, job_id: i64) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["limit"])?;
    let runs = state.cron.runs(job_id, query.limit(DEFAULT_RUNS_PAGE, MAX_RUNS_PAGE)?).await?;
    Ok(json_response(StatusCode::OK, &CronJobRunsBody { runs: runs.iter().map(CronJobRunBody::of).collect() }))
}

pub(super) async fn show(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &CronJobBody::of(&state.cron.job(job_id).await?)))
}

pub(super) async fn delete(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    state.cron.remove(job_id).await?;
    Ok(json_response(StatusCode::OK, &Deleted::new(job_id)))
}

/// `POST /gateway/cron/jobs/{id}/pause` (any body, ignored) → 200 with the job, now paused; idempotent.
pub(super) async fn pause(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &CronJobBody::of(&state.cron.pause(job_id).await?)))
}

/// `POST /gateway/cron/jobs/{id}/resume` (any body, ignored) → 200 with the job, running again; idempotent. A job
/// whose `next_fire_at` has passed fires once at once.
pub(super) async fn resume(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &CronJobBody::of(&state.cron.resume(job_id).await?)))
}

// The answers' fields are in alphabetical order, the order they had when built as JSON maps: the same bytes.
