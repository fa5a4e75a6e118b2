//! The webhook endpoints: inbound `POST /gateway/webhooks/{webhook_id}`; the operator's
//! `/gateway/webhook-configs` (create, list, show, change, delete) and `/gateway/deliveries` (enqueue, the forensic
//! inspector, one delivery with its attempts, "Retry now"). The rules live in gateway-webhooks; this module
//! only reads requests and shapes responses.

use gateway_core::{
    Delivery, DeliveryAttempt, DeliveryFilter, DeliveryStatus, WebhookConfig, WebhookConfigChange, WebhookSecret,
    encoding::rfc3339,
};
use gateway_webhooks::{DEFAULT_PAGE_SIZE, Inbound, InboundSignature, MAX_PAGE_SIZE, WebhookConfigDraft};
use http::StatusCode;
use serde_json::{Value, json};

use crate::http::error::ApiError;
use crate::http::request::{
    JsonObject, MAX_BODY_BYTES, Query, Request, idempotency_key, invalid_query, next_cursor, read_body, required,
};
use crate::http::response::{Response, created_or_replayed, json_response};
use crate::state::AppState;

const CONFIG_FIELDS: [&str; 8] = [
    "source_identifier",
    "event_type",
    "agent_intent",
    "target_session",
    "target_url",
    "secret",
    "inbound_secret",
    "inbound_require_timestamp",
];
const CONFIG_CHANGE_FIELDS: [&str; 7] = [
    "target_url",
    "agent_intent",
    "target_session",
    "secret",
    "inbound_secret",
    "inbound_require_timestamp",
    "revoke_previous",
];
const DELIVERY_FIELDS: [&str; 3] = ["webhook_id", "session_id", "payload"];
const INSPECTOR_PARAMETERS: [&str; 6] = ["session_id", "status", "from", "to", "limit", "after_id"];

/// `POST /gateway/webhooks/{webhook_id}`: the raw body and the signature headers (`X-Observatory-Signature`, or
/// Standard Webhooks' three) go to the router untouched; 202 with the new delivery's id, or 200 `duplicate` with
/// the first one's when the same request was accepted within the replay window.
///
/// Anyone can reach this, so nothing is read before it is known to be worth reading (DESIGN.md §14): a declared
/// length over the limit is 413 and an id that names no config 404, both before a byte of the body is read (the
/// body is then dropped unread and the connection closed after the answer, not drained).
pub async fn inbound(state: &AppState, webhook_id: i64, request: Request) -> Result<Response, ApiError> {
    refuse_declared_oversize(request.headers())?;
    let config = state.webhooks.inbound_config(webhook_id).await?;
    let signature = InboundSignature::from_headers(request.headers());
    let body = read_body(request).await?;
    match state.webhooks.receive_inbound_for(config, &signature, &body).await? {
        Inbound::Accepted(delivery) => {
            Ok(json_response(StatusCode::ACCEPTED, &json!({"status": "accepted", "delivery_id": delivery.id})))
        }
        Inbound::Duplicate { delivery_id } => {
            Ok(json_response(StatusCode::OK, &json!({"status": "duplicate", "delivery_id": delivery_id})))
        }
    }
}

/// 413 for a `Content-Length` over [`MAX_BODY_BYTES`], from the head alone. (`read_body` refuses it too; here it is
/// refused before the config lookup, which costs more than looking at a header.)
fn refuse_declared_oversize(headers: &http::HeaderMap) -> Result<(), ApiError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    match declared {
        Some(length) if length > MAX_BODY_BYTES as u64 => Err(ApiError::payload_too_large(MAX_BODY_BYTES)),
        _ => Ok(()),
    }
}

pub async fn create_config(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let mut body = JsonObject::read(request).await?;
    let mut text = |field| required(field, body.take_string(field)?);
    let draft = WebhookConfigDraft {
        source_identifier: text("source_identifier")?,
        event_type: text("event_type")?,
        agent_intent: text("agent_intent")?,
        target_session: text("target_session")?,
        target_url: text("target_url")?,
        secret: WebhookSecret::new(text("secret")?),
        inbound_secret: body.take_string("inbound_secret")?.map(WebhookSecret::new),
        inbound_require_timestamp: body.take_bool("inbound_require_timestamp")?.unwrap_or(false),
    };
    body.finish(&CONFIG_FIELDS)?;
    let created = state.webhooks.create_config(draft).await?;
    Ok(json_response(StatusCode::CREATED, &config_json(&created)))
}

pub async fn list_configs(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    Query::parse(request.uri(), &[])?;
    let configs: Vec<Value> = state.webhooks.configs().await?.iter().map(config_json).collect();
    Ok(json_response(StatusCode::OK, &json!({"webhook_configs": configs})))
}

pub async fn show_config(state: &AppState, id: i64) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &config_json(&state.webhooks.config(id).await?)))
}

/// `PATCH /gateway/webhook-configs/{id}`: any of `target_url`, `agent_intent`, `target_session`, `secret`,
/// `inbound_secret`, `inbound_require_timestamp`, `revoke_previous` (at least one, each checked as on create) → 200
/// with the config as `GET` shows it; the id and the deliveries stay. `revoke_previous: true` ends the grace of
/// every previous secret at once (a leaked secret).
pub async fn update_config(state: &AppState, id: i64, request: Request) -> Result<Response, ApiError> {
    let mut body = JsonObject::read(request).await?;
    let change = WebhookConfigChange {
        target_url: body.take_string("target_url")?,
        agent_intent: body.take_string("agent_intent")?,
        target_session: body.take_string("target_session")?,
        secret: body.take_string("secret")?.map(WebhookSecret::new),
        inbound_secret: body.take_string("inbound_secret")?.map(WebhookSecret::new),
        inbound_require_timestamp: body.take_bool("inbound_require_timestamp")?,
        revoke_previous: body.take_bool("revoke_previous")?.unwrap_or(false),
    };
    body.finish(&CONFIG_CHANGE_FIELDS)?;
    let updated = state.webhooks.update_config(id, change).await?;
    Ok(json_response(StatusCode::OK, &config_json(&updated)))
}

pub async fn delete_config(state: &AppState, id: i64) -> Result<Response, ApiError> {
    state.webhooks.delete_config(id).await?;
    Ok(json_response(StatusCode::OK, &json!({"status": "deleted", "id": id})))
}

/// `{webhook_id, session_id, payload}`; the payload is kept as the client's exact JSON text, which is what is
/// signed and sent.
pub async fn enqueue(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let idempotency_key = idempotency_key(request.headers())?;
    let mut body = JsonObject::read(request).await?;
    let webhook_id = required("webhook_id", body.take_i64("webhook_id")?)?;
    let session_id = required("session_id", body.take_string("session_id")?)?;
    let payload = required("payload", body.take_raw("payload"))?;
    body.finish(&DELIVERY_FIELDS)?;
    let enqueued =
        state.webhooks.enqueue_idempotent(webhook_id, session_id, payload.get().to_owned(), idempotency_key).await?;
    Ok(created_or_replayed(&delivery_json(&enqueued.delivery, true), enqueued.replayed))
}

/// The forensic inspector: `?session_id=&status=&from=&to=&limit=&after_id=` →
/// `{"deliveries": [...], "next_after_id": id|null}`, ascending id; `from` is inclusive, `to` exclusive, both on
/// `created_at`. Payloads are left out of the list (a page of 500 could be 500 MiB); `GET
/// /gateway/deliveries/{id}` has them.
pub async fn list_deliveries(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &INSPECTOR_PARAMETERS)?;
    let page = query.page(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, "after_id", |text| text.parse::<i64>().ok())?;
    let status = query
        .get("status")
        .map(|text| {
            text.parse::<DeliveryStatus>()
                .map_err(|_| invalid_query("status must be one of pending, delivered, failed, dead"))
        })
        .transpose()?;
    // No stored session id holds a control character; PostgreSQL cannot even compare text holding NUL (a 500
    // before).
    let session_id = query
        .get("session_id")
        .map(|text| {
            (!text.chars().any(char::is_control))
                .then(|| text.to_owned())
                .ok_or_else(|| invalid_query("session_id must not contain control characters"))
        })
        .transpose()?;
    let filter = DeliveryFilter {
        session_id,
        status,
        created_from: query.instant("from")?,
        created_before: query.instant("to")?,
        after_id: page.after,
        limit: page.limit,
    };
    let deliveries = state.webhooks.deliveries(filter).await?;
    let next_after_id = next_cursor(&deliveries, page.limit, |delivery| delivery.id);
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

/// A config as the API shows it: everything but the secrets (whether there is an inbound secret, and whether a
/// previous secret is still accepted, are shown; never their values).
fn config_json(config: &WebhookConfig) -> Value {
    json!({
        "id": config.id,
        "source_identifier": config.source_identifier,
        "event_type": config.event_type,
        "agent_intent": config.agent_intent,
        "target_session": config.target_session,
        "target_url": config.target_url,
        "created_at": rfc3339::format(config.created_at),
        "secret_rotated_at": config.secret_rotated_at.map(rfc3339::format),
        "has_inbound_secret": config.inbound_secret.is_some(),
        "inbound_secret_rotated_at": config.inbound_secret_rotated_at.map(rfc3339::format),
        "inbound_require_timestamp": config.inbound_require_timestamp,
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
        "last_attempted_at": delivery.last_attempted_at.map(rfc3339::format),
        "next_retry_at": delivery.next_retry_at.map(rfc3339::format),
        "created_at": rfc3339::format(delivery.created_at),
        "error_detail": delivery.error_detail,
        "payload_bytes": delivery.payload.len(),
    });
    if with_payload {
        // Stored payloads are JSON text; should one not parse, it is shown as the string it is. As a JSON value it
        // is re-serialized in this response (keys sorted, `1.50` shown as `1.5`): `payload_raw` is the stored text
        // itself, the exact bytes every attempt sends and signs.
        value["payload"] =
            serde_json::from_str(&delivery.payload).unwrap_or_else(|_| Value::String(delivery.payload.clone()));
        value["payload_raw"] = Value::String(delivery.payload.clone());
    }
    value
}

fn attempt_json(attempt: &DeliveryAttempt) -> Value {
    json!({
        "attempt_number": attempt.attempt_number,
        "started_at": rfc3339::format(attempt.started_at),
        "duration_ms": attempt.duration_ms,
        "status_code": attempt.status_code,
        "error_class": attempt.error_class,
        "error_detail": attempt.error_detail,
    })
}
