//! The operator's cron endpoints (DESIGN.md §4): `POST /gateway/cron/jobs`, `GET /gateway/cron/jobs`,
//! `GET /gateway/cron/jobs/{id}`, `DELETE /gateway/cron/jobs/{id}`.

use gateway_core::{AgentId, CronJob, run_blocking};
use gateway_cron::preview;
use http::StatusCode;
use serde_json::{Map, Value, json};
use time::format_description::well_known::Rfc3339;

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::request::{Request, idempotency_key, query_param, read_json};
use crate::http::response::{Response, created_or_replayed, json_response};

pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = gateway_cron::MAX_LIST_LIMIT;

/// `{agent_id, schedule, payload}` → 201 with the job, its `next_fire_at` and a preview of its next instants
/// (200 and `Idempotent-Replayed: true` when an `Idempotency-Key` repeats an earlier request).
pub async fn create(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let idempotency_key = idempotency_key(request.headers())?;
    let body = read_json(request).await?;
    let Value::Object(mut body) = body else {
        return Err(ApiError::unprocessable("invalid_field", "the body must be a JSON object"));
    };
    let agent_id = match body.remove("agent_id") {
        Some(Value::String(text)) if !text.is_empty() => AgentId::new(text)
            .map_err(|error| ApiError::unprocessable("invalid_field", format!("agent_id: {error}")))?,
        _ => {
            return Err(ApiError::unprocessable(
                "missing_required_fields",
                "agent_id (a non-empty string) is required",
            ));
        }
    };
    let schedule = match body.remove("schedule") {
        Some(Value::String(text)) if !text.trim().is_empty() => text,
        _ => {
            return Err(ApiError::unprocessable("missing_required_fields", "schedule (a cron expression) is required"));
        }
    };
    let payload = match body.remove("payload") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(payload)) => payload,
        Some(_) => return Err(ApiError::unprocessable("invalid_field", "payload must be a JSON object")),
    };
    let scheduler = state.cron.clone();
    let (job, replayed) =
        run_blocking(move || scheduler.add_recurring_idempotent(agent_id, &schedule, payload, idempotency_key))
            .await
            .map_err(gateway_core::StoreError::from)??;
    Ok(created_or_replayed(&job_json(&job), replayed))
}

/// `?limit=&after_id=` → `{"jobs": [...], "next_after_id": id|null}`, by ascending id.
pub async fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let invalid_query = |detail: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query").with_detail(detail);
    let limit = match query_param(request.uri(), "limit") {
        None => DEFAULT_PAGE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|limit| (1..=MAX_PAGE).contains(limit))
            .ok_or_else(|| invalid_query(format!("limit must be 1..={MAX_PAGE}")))?,
    };
    let after_id = query_param(request.uri(), "after_id")
        .map(|text| text.parse::<i64>().map_err(|_| invalid_query("after_id must be an integer".to_owned())))
        .transpose()?;
    let scheduler = state.cron.clone();
    let jobs =
        run_blocking(move || scheduler.list(after_id, limit)).await.map_err(gateway_core::StoreError::from)??;
    let next_after_id = if jobs.len() == limit { jobs.last().map(|job| job.id) } else { None };
    let jobs: Vec<Value> = jobs.iter().map(job_json).collect();
    Ok(json_response(StatusCode::OK, &json!({"jobs": jobs, "next_after_id": next_after_id})))
}

pub async fn show(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    let scheduler = state.cron.clone();
    let job = run_blocking(move || scheduler.job(job_id)).await.map_err(gateway_core::StoreError::from)??;
    Ok(json_response(StatusCode::OK, &job_json(&job)))
}

pub async fn delete(state: &AppState, job_id: i64) -> Result<Response, ApiError> {
    let scheduler = state.cron.clone();
    run_blocking(move || scheduler.remove(job_id)).await.map_err(gateway_core::StoreError::from)??;
    Ok(json_response(StatusCode::OK, &json!({"status": "deleted", "id": job_id})))
}

fn rfc3339(instant: time::OffsetDateTime) -> Value {
    instant.format(&Rfc3339).map(Value::String).unwrap_or(Value::Null)
}

/// A job as the API shows it; recurring jobs carry `preview`, their next instants (the first is
/// `next_fire_at`).
fn job_json(job: &CronJob) -> Value {
    let mut value = json!({
        "id": job.id,
        "agent_id": job.agent_id,
        "schedule": job.schedule,
        "next_fire_at": rfc3339(job.next_fire_at),
        "payload": job.payload,
        "is_one_time": job.is_one_time,
    });
    if !job.is_one_time {
        value["preview"] = Value::Array(preview(job).into_iter().map(rfc3339).collect());
    }
    value
}
