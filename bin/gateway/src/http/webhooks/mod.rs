//! The webhook endpoints: inbound `POST /gateway/webhooks/{webhook_id}`; the operator's
//! `/gateway/webhook-configs` (create, list, show, change, delete) and `/gateway/deliveries` (enqueue, the forensic
//! inspector, one delivery with its attempts, "Retry now"). The rules live in gateway-webhooks; this module
//! only reads requests and answers with gateway-api's bodies (whose module also documents these endpoints).

use gateway_api::Deleted;
use gateway_api::webhooks::{
    Accepted, DeliveryBody, DeliveryDetail, DeliveryPage, DeliverySummary, Duplicate, InboundAccepted,
    InboundDuplicate, WebhookConfigBody, WebhookConfigList, WebhookEventPublished,
};
use gateway_api::webhooks::{DeliveryAccepted, WebhookRecovered};
use gateway_core::{DeliveryFilter, DeliveryStatus, WebhookConfigChange, WebhookSecret};
use gateway_webhooks::{DEFAULT_PAGE_SIZE, EventDraft, Inbound, InboundSignature, MAX_PAGE_SIZE, WebhookConfigDraft};
use http::StatusCode;

use crate::http::error::ApiError;
use crate::http::request::{
    JsonObject, MAX_BODY_BYTES, Query, Request, idempotency_key, invalid_query, next_cursor, read_body, required,
};
use crate::http::response::{IDEMPOTENT_REPLAYED_HEADER, Response, created_or_replayed, json_response};
use crate::state::AppState;

const CONFIG_FIELDS: [&str; 9] = [
    "source_identifier",
    "event_type",
    "agent_intent",
    "target_session",
    "target_url",
    "secret",
    "inbound_secret",
    "inbound_require_timestamp",
    "rate_limit_per_second",
];
const CONFIG_CHANGE_FIELDS: [&str; 9] = [
    "target_url",
    "agent_intent",
    "target_session",
    "secret",
    "inbound_secret",
    "inbound_require_timestamp",
    "revoke_previous",
    "rate_limit_per_second",
    "enabled",
];
const DELIVERY_FIELDS: [&str; 3] = ["webhook_id", "session_id", "payload"];
const EVENT_FIELDS: [&str; 3] = ["event_type", "source_identifier", "payload"];
const INSPECTOR_PARAMETERS: [&str; 6] = ["session_id", "status", "from", "to", "limit", "after_id"];

/// `POST /gateway/webhooks/{webhook_id}`: the raw body and the signature headers (`X-Observatory-Signature`, or
/// Standard Webhooks' three) go to the router untouched; 202 with the new delivery's id, or 200 `duplicate` with
/// the first one's when the same request was accepted within the replay window.
///
/// Anyone can reach this, so nothing is read before it is known to be worth reading (DESIGN.md §14): a declared
/// length over the limit is 413 and an id that names no config 404, both before a byte of the body is read (the
/// body is then dropped unread and the connection closed after the answer, not drained).
pub(super) async fn inbound(state: &AppState, webhook_id: i64, request: Request) -> Result<Response, ApiError> {
    refuse_declared_oversize(request.headers())?;
    let config = state.webhooks.inbound_config(webhook_id).await?;
    let signature = InboundSignature::from_headers(request.headers());
    let body = read_body(request).await?;
    match state.webhooks.receive_inbound_for(config, &signature, &body).await? {
        Inbound::Accepted(delivery) => {
            Ok(json_response(StatusCode::ACCEPTED, &InboundAccepted { delivery_id: delivery.id, status: Accepted }))
        }
        Inbound::Duplicate { delivery_id } => {
            Ok(json_response(StatusCode::OK, &InboundDuplicate { delivery_id, status: Duplicate }))
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

pub(super) async fn create_config(state: &AppState, request: Request) -> Result<Response, ApiError> {
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
        rate_limit_per_second: body.take_i64("rate_limit_per_second")?,
    };
    body.finish(&CONFIG_FIELDS)?;
    let created = state.webhooks.create_config(draft).await?;
    Ok(json_response(StatusCode::CREATED, &WebhookConfigBody::of(&created)))
}

pub(super) async fn list_configs(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    Query::parse(request.uri(), &[])?;
    let configs = state.webhooks.configs().await?;
    let stats = state.webhooks.endpoint_stats().await?;
    let webhook_configs =
        configs.iter().map(|config| WebhookConfigBody::with_stats(config, stats_of(&stats, config.id))).collect();
    Ok(json_response(StatusCode::OK, &WebhookConfigList { webhook_configs }))
}

pub(super) async fn show_config(state: &AppState, id: i64) -> Result<Response, ApiError> {
    let config = state.webhooks.config(id).await?;
    let stats = state.webhooks.endpoint_stats().await?;
    Ok(json_response(StatusCode::OK, &WebhookConfigBody::with_stats(&config, stats_of(&stats, id))))
}

/// A config's `stats_24h` from every config's (none recorded: zeros).
fn stats_of(
    stats: &std::collections::BTreeMap<i64, gateway_core::EndpointStats>,
    id: i64,
) -> gateway_core::EndpointStats {
    stats.get(&id).copied().unwrap_or_default()
}

/// `PATCH /gateway/webhook-configs/{id}`: any of `target_url`, `agent_intent`, `target_session`, `secret`,
/// `inbound_secret`, `inbound_require_timestamp`, `revoke_previous`, `rate_limit_per_second` (null removes it) (at
/// least one, each checked as on create) → 200
/// with the config as `GET` shows it; the id and the deliveries stay. `revoke_previous: true` ends the grace of
/// every previous secret at once (a leaked secret).
pub(super) async fn update_config(state: &AppState, id: i64, request: Request) -> Result<Response, ApiError> {
    let mut body = JsonObject::read(request).await?;
    let change = WebhookConfigChange {
        target_url: body.take_string("target_url")?,
        agent_intent: body.take_string("agent_intent")?,
        target_session: body.take_string("target_session")?,
        secret: body.take_string("secret")?.map(WebhookSecret::new),
        inbound_secret: body.take_string("inbound_secret")?.map(WebhookSecret::new),
        inbound_require_timestamp: body.take_bool("inbound_require_timestamp")?,
        revoke_previous: body.take_bool("revoke_previous")?.unwrap_or(false),
        rate_limit_per_second: match body.take_nullable_i64("rate_limit_per_second")? {
            Some(Some(rate)) => Some(Some(gateway_webhooks::check_rate_limit(rate)?)),
            Some(None) => Some(None),
            None => None,
        },
        enabled: body.take_bool("enabled")?,
    };
    body.finish(&CONFIG_CHANGE_FIELDS)?;
    let updated = state.webhooks.update_config(id, change).await?;
    let stats = state.webhooks.endpoint_stats().await?;
    Ok(json_response(StatusCode::OK, &WebhookConfigBody::with_stats(&updated, stats_of(&stats, id))))
}

pub(super) async fn delete_config(state: &AppState, id: i64) -> Result<Response, ApiError> {
    state.webhooks.delete_config(id).await?;
    Ok(json_response(StatusCode::OK, &Deleted::new(id)))
}

/// `{webhook_id, session_id, payload}`; the payload is kept as the client's exact JSON text, which is what is
/// signed and sent.
pub(super) async fn enqueue(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let idempotency_key = idempotency_key(request.headers())?;
    let mut body = JsonObject::read(request).await?;
    let webhook_id = required("webhook_id", body.take_i64("webhook_id")?)?;
    let session_id = required("session_id", body.take_string("session_id")?)?;
    let payload = required("payload", body.take_raw("payload"))?;
    body.finish(&DELIVERY_FIELDS)?;
    let enqueued =
        state.webhooks.enqueue_idempotent(webhook_id, session_id, payload.get().to_owned(), idempotency_key).await?;
    Ok(created_or_replayed(&DeliveryBody::of(&enqueued.delivery), enqueued.replayed))
}

/// `POST /gateway/webhook-events` `{event_type, source_identifier?, payload}` → 202 `{event_id, delivery_ids}`: one
/// delivery per subscribed config. A replay of an `Idempotency-Key` answers the same 202 and ids, marked
/// `Idempotent-Replayed: true`.
pub(super) async fn publish_event(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let idempotency_key = idempotency_key(request.headers())?;
    let mut body = JsonObject::read(request).await?;
    let event_type = required("event_type", body.take_string("event_type")?)?;
    let source_identifier = body.take_string("source_identifier")?;
    let payload = required("payload", body.take_raw("payload"))?;
    body.finish(&EVENT_FIELDS)?;
    let draft = EventDraft { event_type, source_identifier, payload: payload.get().to_owned(), idempotency_key };
    let published = state.webhooks.publish_event(draft).await?;
    let answer = WebhookEventPublished { delivery_ids: &published.event.delivery_ids, event_id: published.event.id };
    let mut response = json_response(StatusCode::ACCEPTED, &answer);
    if published.replayed {
        response.headers_mut().insert(IDEMPOTENT_REPLAYED_HEADER, http::HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The forensic inspector: `?session_id=&status=&from=&to=&limit=&after_id=` →
/// `{"deliveries": [...], "next_after_id": id|null}`, ascending id; `from` is inclusive, `to` exclusive, both on
/// `created_at`. Payloads are left out of the list (a page of 500 could be 500 MiB); `GET
/// /gateway/deliveries/{id}` has them.
pub(super) async fn list_deliveries(state: &AppState, request: &Request) -> Result<Response, ApiError> {
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
    let deliveries = deliveries.iter().map(DeliverySummary::of).collect();
    Ok(json_response(StatusCode::OK, &DeliveryPage { deliveries, next_after_id }))
}

pub(super) async fn show_delivery(state: &AppState, id: i64) -> Result<Response, ApiError> {
    let detail = state.webhooks.delivery(id).await?;
    Ok(json_response(StatusCode::OK, &DeliveryDetail::of(&detail.delivery, &detail.attempts)))
}

/// "Retry now": 200 with the reset row; 409 `retry_not_allowed` unless the delivery is failed or dead.
pub(super) async fn retry(state: &AppState, id: i64) -> Result<Response, ApiError> {
    let delivery = state.webhooks.retry_now(id).await?;
    Ok(json_response(StatusCode::OK, &DeliverySummary::of(&delivery)))
}

/// `POST /gateway/webhook-configs/{id}/recover` `{since, until?}` → 202 `{recovered}`: the config's dead deliveries
/// created in the window back to pending, tried under the rate. The window may not be longer than the retention of
/// finished deliveries (`--retention-days`).
pub(super) async fn recover(state: &AppState, id: i64, request: Request) -> Result<Response, ApiError> {
    let mut body = JsonObject::read(request).await?;
    let since = required("since", body.take_string("since")?)?;
    let until = body.take_string("until")?;
    body.finish(&RECOVER_FIELDS)?;
    let since = instant_field("since", &since)?;
    let until = until.map(|until| instant_field("until", &until)).transpose()?;
    let recovered = state.webhooks.recover(id, since, until, state.retention.retention()).await?;
    Ok(json_response(StatusCode::ACCEPTED, &WebhookRecovered { recovered }))
}

/// `POST /gateway/webhook-deliveries/{id}/resend` → 202 `{status: "accepted", delivery_id}` of a new delivery of
/// the same payload.
pub(super) async fn resend(state: &AppState, id: i64) -> Result<Response, ApiError> {
    let resent = state.webhooks.resend(id).await?;
    Ok(json_response(StatusCode::ACCEPTED, &DeliveryAccepted { delivery_id: resent.id, status: Accepted }))
}

/// `POST /gateway/webhook-configs/{id}/test` → 202 `{status: "accepted", delivery_id}` of a `gateway.test` delivery.
pub(super) async fn send_test(state: &AppState, id: i64) -> Result<Response, ApiError> {
    let sent = state.webhooks.send_test(id).await?;
    Ok(json_response(StatusCode::ACCEPTED, &DeliveryAccepted { delivery_id: sent.id, status: Accepted }))
}

const RECOVER_FIELDS: [&str; 2] = ["since", "until"];

/// A body field holding an RFC 3339 instant: 422 `invalid_field` naming it otherwise.
fn instant_field(field: &'static str, text: &str) -> Result<time::OffsetDateTime, ApiError> {
    gateway_core::encoding::rfc3339::parse(text).ok_or_else(|| {
        ApiError::from(gateway_webhooks::WebhookError::InvalidDelivery {
            field,
            problem: "must be an RFC 3339 instant between years 0 and 9999".into(),
        })
    })
}
