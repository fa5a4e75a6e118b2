//! The webhook endpoints (DESIGN.md §4): inbound `POST /gateway/webhooks/{webhook_id}`; the operator's
//! `/gateway/webhook-configs` (create, list, show, delete) and `/gateway/deliveries` (enqueue, the forensic
//! inspector, one delivery with its attempts, "Retry now"). The rules live in gateway-webhooks; this module
//! only reads requests and shapes responses.

use gateway_core::{Delivery, DeliveryAttempt, WebhookConfig, WebhookSecret};
use gateway_webhooks::{SIGNATURE_HEADER, WebhookConfigDraft, WebhookError, delivery_filter};
use http::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::request::{Request, idempotency_key, read_body};
use crate::http::response::{Response, created_or_replayed, json_response};

/// `POST /gateway/webhooks/{webhook_id}`: the raw body and the signature header go to the router untouched;
/// 202 with the new delivery's id. A path id that is not a number names no webhook.
pub async fn inbound(state: &AppState, webhook_id: Option<i64>, request: Request) -> Result<Response, ApiError> {
    let Some(webhook_id) = webhook_id else {
        return Err(WebhookError::UnknownWebhook(0).into());
    };
    let signature = request.headers().get(SIGNATURE_HEADER).map(|value| value.as_bytes().to_vec());
    let body = read_body(request).await?;
    let delivery = state.webhooks.receive_inbound(webhook_id, signature.as_deref(), &body).await?;
    Ok(json_response(StatusCode::ACCEPTED, &json!({"status": "accepted", "delivery_id": delivery.id})))
}

/// The body of `POST /gateway/webhook-configs`. Unknown fields are refused so a typo is not silently dropped.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigBody {
    source_identifier: Option<String>,
    event_type: Option<String>,
    agent_intent: Option<String>,
    target_session: Option<String>,
    target_url: Option<String>,
    secret: Option<String>,
}

/// Reads a JSON object body into `T`; 400 `invalid_json` when it is not JSON, 422 `invalid_field` when a field
/// has the wrong type or is unknown (serde's message names the field, never the value). One parse, straight into
/// `T`, so a `RawValue` field keeps the client's exact text.
async fn read_object<T: for<'de> Deserialize<'de>>(request: Request) -> Result<T, ApiError> {
    let body = read_body(request).await?;
    // serde would also fill a struct from a JSON array; only an object is a valid body.
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
            Ok(_) => ApiError::unprocessable("invalid_field", "the body must be a JSON object"),
            Err(_) => ApiError::invalid_json(),
        });
    }
    serde_json::from_slice(&body).map_err(|error| {
        if !error.is_data() {
            return ApiError::invalid_json();
        }
        let message = error.to_string();
        // serde_json appends " at line L column C", which says nothing useful to a client.
        let message = message.split(" at line ").next().unwrap_or("invalid field").to_owned();
        ApiError::unprocessable("invalid_field", message)
    })
}

fn required(field: &'static str, value: Option<String>) -> Result<String, ApiError> {
    value.ok_or_else(|| ApiError::unprocessable("missing_required_fields", format!("{field} is required")))
}

pub async fn create_config(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let body: ConfigBody = read_object(request).await?;
    let draft = WebhookConfigDraft {
        source_identifier: required("source_identifier", body.source_identifier)?,
        event_type: required("event_type", body.event_type)?,
        agent_intent: required("agent_intent", body.agent_intent)?,
        target_session: required("target_session", body.target_session)?,
        target_url: required("target_url", body.target_url)?,
        secret: WebhookSecret::new(required("secret", body.secret)?),
    };
    let created = state.webhooks.create_config(draft).await?;
    Ok(json_response(StatusCode::CREATED, &config_json(&created)))
}

pub async fn list_configs(state: &AppState) -> Result<Response, ApiError> {
    let configs: Vec<Value> = state.webhooks.configs().await?.iter().map(config_json).collect();
    Ok(json_response(StatusCode::OK, &json!({"webhook_configs": configs})))
}

pub async fn show_config(state: &AppState, id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &config_json(&state.webhooks.config(id).await?)))
}

pub async fn delete_config(state: &AppState, id: i64) -> Result<Response, ApiError> {
    state.webhooks.delete_config(id).await?;
    Ok(json_response(StatusCode::OK, &json!({"status": "deleted", "id": id})))
}

/// The body of `POST /gateway/deliveries`. The payload is kept as the client's exact JSON text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnqueueBody {
    webhook_id: Option<i64>,
    session_id: Option<String>,
    payload: Option<Box<RawValue>>,
}

pub async fn enqueue(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let idempotency_key = idempotency_key(request.headers())?;
    let body: EnqueueBody = read_object(request).await?;
    let webhook_id = body
        .webhook_id
        .ok_or_else(|| ApiError::unprocessable("missing_required_fields", "webhook_id (an integer) is required"))?;
    let session_id = required("session_id", body.session_id)?;
    let payload =
        body.payload.ok_or_else(|| ApiError::unprocessable("missing_required_fields", "payload is required"))?;
    let enqueued =
        state.webhooks.enqueue_idempotent(webhook_id, session_id, payload.get().to_owned(), idempotency_key).await?;
    Ok(created_or_replayed(&delivery_json(&enqueued.delivery, true), enqueued.replayed))
}

/// The forensic inspector: `?session_id=&status=&from=&to=&limit=&after_id=` →
/// `{"deliveries": [...], "next_after_id": id|null}`, ascending id. Payloads are left out of the list (a page of
/// 500 could be 500 MiB); `GET /gateway/deliveries/{id}` has them.
pub async fn list_deliveries(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = request.uri().query().unwrap_or_default();
    let filter = delivery_filter(form_urlencoded::parse(query.as_bytes()))?;
    let limit = filter.limit;
    let deliveries = state.webhooks.deliveries(filter).await?;
    let next_after_id = if deliveries.len() == limit { deliveries.last().map(|delivery| delivery.id) } else { None };
    let deliveries: Vec<Value> = deliveries.iter().map(|delivery| delivery_json(delivery, false)).collect();
    Ok(json_response(StatusCode::OK, &json!({"deliveries": deliveries, "next_after_id": next_after_id})))
}

pub async fn show_delivery(state: &AppState, id: i64) -> Result<Response, ApiError> {
    let detail = state.webhooks.delivery(id).await?;
    let mut body = delivery_json(&detail.delivery, true);
    body["attempts"] = Value::Array(detail.attempts.iter().map(attempt_json).collect());
    Ok(json_response(StatusCode::OK, &body))
}

/// "Retry now": 200 with the reset row; 409 `retry_not_allowed` unless the delivery is failed or dead.
pub async fn retry(state: &AppState, id: i64) -> Result<Response, ApiError> {
    let delivery = state.webhooks.retry_now(id).await?;
    Ok(json_response(StatusCode::OK, &delivery_json(&delivery, false)))
}

fn rfc3339(instant: OffsetDateTime) -> Value {
    instant.format(&Rfc3339).map(Value::String).unwrap_or(Value::Null)
}

/// A config as the API shows it: everything but the secret.
fn config_json(config: &WebhookConfig) -> Value {
    json!({
        "id": config.id,
        "source_identifier": config.source_identifier,
        "event_type": config.event_type,
        "agent_intent": config.agent_intent,
        "target_session": config.target_session,
        "target_url": config.target_url,
        "created_at": rfc3339(config.created_at),
    })
}

fn delivery_json(delivery: &Delivery, with_payload: bool) -> Value {
    let mut value = json!({
        "id": delivery.id,
        "webhook_id": delivery.webhook_id,
        "session_id": delivery.session_id,
        "target_url": delivery.target_url,
        "signature": delivery.signature,
        "status": delivery.status,
        "attempt_count": delivery.attempt_count,
        "last_attempted_at": delivery.last_attempted_at.map(rfc3339),
        "next_retry_at": delivery.next_retry_at.map(rfc3339),
        "created_at": rfc3339(delivery.created_at),
        "error_detail": delivery.error_detail,
        "payload_bytes": delivery.payload.len(),
    });
    if with_payload {
        // Stored payloads are JSON text; should one not parse, it is shown as the string it is.
        value["payload"] =
            serde_json::from_str(&delivery.payload).unwrap_or_else(|_| Value::String(delivery.payload.clone()));
    }
    value
}

fn attempt_json(attempt: &DeliveryAttempt) -> Value {
    json!({
        "attempt_number": attempt.attempt_number,
        "started_at": rfc3339(attempt.started_at),
        "duration_ms": attempt.duration_ms,
        "status_code": attempt.status_code,
        "error_class": attempt.error_class,
        "error_detail": attempt.error_detail,
    })
}
