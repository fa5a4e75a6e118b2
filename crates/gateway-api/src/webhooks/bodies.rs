//! The bodies of the webhook endpoints: what they read (described for the document; the handlers read them field
//! by field) and what they answer, with their schemas derived from these types.
//!
//! The answers' fields are in alphabetical order, the order they had when the handlers built them as JSON maps:
//! the same bytes; fields added since come after them.

use gateway_core::{Delivery, DeliveryAttempt, DeliveryStatus, EndpointStats, WebhookConfig, encoding::rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::KnownFormat;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, SchemaType, Type};

use crate::fields::{int64_schema, name_256, secret, target_url};
use crate::literal;

literal!(
    /// `"accepted"`.
    Accepted = "accepted"
);

literal!(
    /// `"duplicate"`.
    Duplicate = "duplicate"
);

// A verified inbound request, stored as a delivery.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InboundAccepted {
    #[schema(schema_with = int64_schema)]
    pub delivery_id: i64,
    #[schema(inline)]
    pub status: Accepted,
}

// A verified inbound request accepted before: `delivery_id` is the first one's.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InboundDuplicate {
    #[schema(schema_with = int64_schema)]
    pub delivery_id: i64,
    #[schema(inline)]
    pub status: Duplicate,
}

fn inbound_secret() -> ObjectBuilder {
    secret().description(Some(
        "Verifies inbound signatures instead of `secret` (which then only signs outbound), so a receiver of outbound \
         deliveries cannot post them back in. Never shown; must differ from `secret`.",
    ))
}

fn require_timestamp() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean).description(Some(
        "`true`: only Standard Webhooks signatures with a timestamp within 5 minutes are accepted inbound; \
         `X-Observatory-Signature` alone is 401 `timestamp_required`. Default false.",
    ))
}

fn revoke_previous() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean).description(Some(
        "`true`: the previous secret and the previous inbound secret stop verifying at once (a leaked secret), \
         instead of 24 h after their rotation.",
    ))
}

fn enabled_change() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean).description(Some(
        "`false` disables the config by hand (`disabled_reason: \"manual\"`): its deliveries are held. `true` resumes \
         a disabled config: the reason and the failure count are cleared, and its held deliveries are due at once \
         (sent oldest first under `--webhook-max-per-second`).",
    ))
}

fn nullable_instant(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
        .description(Some(description))
}

fn secret_rotated_at() -> ObjectBuilder {
    nullable_instant(
        "When the secret was last changed; the previous one is accepted inbound until 24 h after (unless revoked).",
    )
}

fn inbound_secret_rotated_at() -> ObjectBuilder {
    nullable_instant(
        "When the inbound secret was last set or changed; a replaced one is accepted until 24 h after (unless \
         revoked).",
    )
}

fn rate_limit_per_second() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(1))
        .maximum(Some(gateway_webhooks::MAX_RATE_LIMIT_PER_SECOND))
        .description(Some(
            "At most this many attempts to this endpoint start in any one second, inside the global \
             `--webhook-max-per-second` cap (cluster-wide with Redis). Absent or null on create: none (only the global \
             cap); null in a PATCH removes it.",
        ))
}

// `POST /gateway/webhook-configs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct WebhookConfigCreate {
    #[schema(schema_with = name_256)]
    source_identifier: String,
    #[schema(schema_with = name_256)]
    event_type: String,
    #[schema(schema_with = name_256)]
    agent_intent: String,
    #[schema(schema_with = name_256)]
    target_session: String,
    #[schema(schema_with = target_url)]
    target_url: String,
    #[schema(schema_with = secret)]
    secret: String,
    #[schema(schema_with = inbound_secret, required = false)]
    inbound_secret: String,
    #[schema(schema_with = require_timestamp, required = false)]
    inbound_require_timestamp: bool,
    #[schema(schema_with = rate_limit_per_second, required = false)]
    rate_limit_per_second: Option<u32>,
}

// `PATCH /gateway/webhook-configs/{id}`: any of the fields, at least one ([`WebhookConfigChange`] adds that).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct WebhookConfigChangeFields {
    #[schema(schema_with = target_url, required = false)]
    target_url: String,
    #[schema(schema_with = name_256, required = false)]
    agent_intent: String,
    #[schema(schema_with = name_256, required = false)]
    target_session: String,
    #[schema(schema_with = secret, required = false)]
    secret: String,
    #[schema(schema_with = inbound_secret, required = false)]
    inbound_secret: String,
    #[schema(schema_with = require_timestamp, required = false)]
    inbound_require_timestamp: bool,
    #[schema(schema_with = revoke_previous, required = false)]
    revoke_previous: bool,
    #[schema(schema_with = rate_limit_per_second, required = false)]
    rate_limit_per_second: Option<u32>,
    #[schema(schema_with = enabled_change, required = false)]
    enabled: bool,
}

/// The schema of a config's change: its fields, at least one. (utoipa's `min_properties` writes `maxProperties`,
/// a bug of utoipa-gen 5.5; this says `minProperties` itself.)
#[derive(Debug)]
pub struct WebhookConfigChange;

impl utoipa::PartialSchema for WebhookConfigChange {
    fn schema() -> RefOr<Schema> {
        let mut schema = <WebhookConfigChangeFields as utoipa::PartialSchema>::schema();
        if let RefOr::T(Schema::Object(object)) = &mut schema {
            object.min_properties = Some(1);
        }
        schema
    }
}

impl ToSchema for WebhookConfigChange {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        WebhookConfigChangeFields::schemas(schemas);
    }
}

// A config as the API shows it: everything but the secrets (whether there is an inbound secret, and when each
// secret was last changed, are shown; never their values).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = WebhookConfig)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfigBody<'a> {
    pub agent_intent: &'a str,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub event_type: &'a str,
    /// Inbound signatures are verified with the inbound secret, never with `secret`.
    pub has_inbound_secret: bool,
    #[schema(schema_with = int64_schema)]
    pub id: i64,
    pub inbound_require_timestamp: bool,
    #[schema(schema_with = inbound_secret_rotated_at, required = true)]
    pub inbound_secret_rotated_at: Option<String>,
    #[schema(schema_with = secret_rotated_at, required = true)]
    pub secret_rotated_at: Option<String>,
    pub source_identifier: &'a str,
    pub target_session: &'a str,
    pub target_url: &'a str,
    #[schema(schema_with = rate_limit_per_second, required = true)]
    pub rate_limit_per_second: Option<u32>,
    /// Whether deliveries are sent. A disabled config's deliveries are held: neither attempted nor aging toward dead.
    pub enabled: bool,
    #[schema(schema_with = disabled_reason, required = true)]
    pub disabled_reason: Option<&'static str>,
    /// Failed attempts in a row; a success resets it.
    pub consecutive_failures: i64,
    #[schema(schema_with = last_success_at, required = true)]
    pub last_success_at: Option<String>,
    pub stats_24h: Stats24h,
}

/// The last 24 hours of a config: successful attempts, failed attempts, and deliveries that went dead.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Stats24h {
    pub delivered: u64,
    pub failed_attempts: u64,
    pub dead: u64,
}

impl From<EndpointStats> for Stats24h {
    fn from(stats: EndpointStats) -> Self {
        Self { delivered: stats.delivered, failed_attempts: stats.failed_attempts, dead: stats.dead }
    }
}

fn disabled_reason() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(["failing", "manual"]))
        .description(Some(
            "Why the config is disabled: `failing` (after `--webhook-disable-after-failures` failed attempts in a \
             row) or `manual` (`PATCH {\"enabled\": false}`); null while enabled.",
        ))
}

fn last_success_at() -> ObjectBuilder {
    nullable_instant("The start of the latest successful attempt; null when none succeeded yet.")
}

impl<'a> WebhookConfigBody<'a> {
    /// The config with its `stats_24h` (`EndpointStats` since 24 hours ago).
    pub fn with_stats(config: &'a WebhookConfig, stats: EndpointStats) -> Self {
        Self { stats_24h: stats.into(), ..Self::of(config) }
    }

    pub fn of(config: &'a WebhookConfig) -> Self {
        Self {
            agent_intent: &config.agent_intent,
            created_at: rfc3339::format(config.created_at),
            event_type: &config.event_type,
            has_inbound_secret: config.inbound_secret.is_some(),
            id: config.id,
            inbound_require_timestamp: config.inbound_require_timestamp,
            inbound_secret_rotated_at: config.inbound_secret_rotated_at.map(rfc3339::format),
            secret_rotated_at: config.secret_rotated_at.map(rfc3339::format),
            source_identifier: &config.source_identifier,
            target_session: &config.target_session,
            target_url: &config.target_url,
            rate_limit_per_second: config.rate_limit_per_second,
            enabled: config.enabled,
            disabled_reason: config.disabled_reason.map(|reason| reason.as_str()),
            consecutive_failures: config.consecutive_failures,
            last_success_at: config.last_success_at.map(rfc3339::format),
            stats_24h: Stats24h::default(),
        }
    }
}

// Every config, in id order.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfigList<'a> {
    pub webhook_configs: Vec<WebhookConfigBody<'a>>,
}

// A delivery's state, as its `status` column names it (gateway-core's `DeliveryStatus`, which the answers
// serialize: this type only gives it its schema).
#[derive(Debug, Clone, Copy, ToSchema)]
#[schema(as = DeliveryStatus, rename_all = "snake_case")]
#[allow(dead_code)] // Only its schema is used.
pub enum DeliveryStatusSchema {
    Pending,
    Delivered,
    Failed,
    Dead,
}

// `POST /gateway/deliveries`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct DeliveryCreate {
    #[schema(schema_with = int64_schema)]
    webhook_id: i64,
    #[schema(schema_with = name_256)]
    session_id: String,
    /// Any JSON; sent byte for byte as posted.
    payload: Value,
}

// A delivery in a list: without its payload (a page of 500 could be 500 MiB), with its size.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliverySummary<'a> {
    #[schema(minimum = 0)]
    pub attempt_count: i32,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(required = true)]
    pub error_detail: Option<&'a str>,
    #[schema(schema_with = int64_schema)]
    pub id: i64,
    #[schema(format = DateTime, required = true)]
    pub last_attempted_at: Option<String>,
    #[schema(format = DateTime, required = true)]
    pub next_retry_at: Option<String>,
    pub payload_bytes: usize,
    pub session_id: &'a str,
    pub signature: &'a str,
    #[schema(value_type = DeliveryStatusSchema)]
    pub status: DeliveryStatus,
    pub target_url: &'a str,
    #[schema(schema_with = int64_schema)]
    pub webhook_id: i64,
}

/// The stored payload as JSON, re-serialized (a string should it not parse).
fn payload() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some("The stored payload as JSON, re-serialized (a string should it not parse)."))
}

// A delivery with its payload: as JSON, and as the stored text that every attempt sends and signs.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Delivery)]
#[serde(deny_unknown_fields)]
pub struct DeliveryBody<'a> {
    #[schema(minimum = 0)]
    pub attempt_count: i32,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(required = true)]
    pub error_detail: Option<&'a str>,
    #[schema(schema_with = int64_schema)]
    pub id: i64,
    #[schema(format = DateTime, required = true)]
    pub last_attempted_at: Option<String>,
    #[schema(format = DateTime, required = true)]
    pub next_retry_at: Option<String>,
    #[schema(schema_with = payload)]
    pub payload: PayloadValue<'a>,
    pub payload_bytes: usize,
    /// The stored payload text, byte for byte what is sent and signed.
    pub payload_raw: &'a str,
    pub session_id: &'a str,
    pub signature: &'a str,
    #[schema(value_type = DeliveryStatusSchema)]
    pub status: DeliveryStatus,
    pub target_url: &'a str,
    #[schema(schema_with = int64_schema)]
    pub webhook_id: i64,
}

// A delivery with its payload and its attempts, oldest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryDetail<'a> {
    #[schema(minimum = 0)]
    pub attempt_count: i32,
    #[schema(inline)]
    pub attempts: Vec<Attempt<'a>>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(required = true)]
    pub error_detail: Option<&'a str>,
    #[schema(schema_with = int64_schema)]
    pub id: i64,
    #[schema(format = DateTime, required = true)]
    pub last_attempted_at: Option<String>,
    #[schema(format = DateTime, required = true)]
    pub next_retry_at: Option<String>,
    #[schema(schema_with = payload)]
    pub payload: PayloadValue<'a>,
    pub payload_bytes: usize,
    /// The stored payload text, byte for byte what is sent and signed.
    pub payload_raw: &'a str,
    pub session_id: &'a str,
    pub signature: &'a str,
    #[schema(value_type = DeliveryStatusSchema)]
    pub status: DeliveryStatus,
    pub target_url: &'a str,
    #[schema(schema_with = int64_schema)]
    pub webhook_id: i64,
}

/// A delivery's payload as a JSON value: stored payloads are JSON text; should one not parse, it is shown as the
/// string it is. As a JSON value it is re-serialized in the answer (keys sorted, `1.50` shown as `1.5`):
/// `payload_raw` is the stored text itself.
#[derive(Debug)]
pub struct PayloadValue<'a>(&'a str);

impl Serialize for PayloadValue<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_str::<Value>(self.0) {
            Ok(value) => value.serialize(serializer),
            Err(_) => serializer.serialize_str(self.0),
        }
    }
}

// One attempt of a delivery.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Attempt<'a> {
    #[schema(minimum = 1)]
    pub attempt_number: i32,
    #[schema(minimum = 0)]
    pub duration_ms: i64,
    #[schema(required = true)]
    pub error_class: Option<&'a str>,
    #[schema(required = true)]
    pub error_detail: Option<&'a str>,
    #[schema(format = DateTime)]
    pub started_at: String,
    #[schema(required = true)]
    pub status_code: Option<u16>,
}

impl<'a> Attempt<'a> {
    fn of(attempt: &'a DeliveryAttempt) -> Self {
        Self {
            attempt_number: attempt.attempt_number,
            duration_ms: attempt.duration_ms,
            error_class: attempt.error_class.as_deref(),
            error_detail: attempt.error_detail.as_deref(),
            started_at: rfc3339::format(attempt.started_at),
            status_code: attempt.status_code,
        }
    }
}

// A page of the forensic inspector.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryPage<'a> {
    pub deliveries: Vec<DeliverySummary<'a>>,
    #[schema(required = true)]
    pub next_after_id: Option<i64>,
}

impl<'a> DeliverySummary<'a> {
    pub fn of(delivery: &'a Delivery) -> Self {
        Self {
            attempt_count: delivery.attempt_count,
            created_at: rfc3339::format(delivery.created_at),
            error_detail: delivery.error_detail.as_deref(),
            id: delivery.id,
            last_attempted_at: delivery.last_attempted_at.map(rfc3339::format),
            next_retry_at: delivery.next_retry_at.map(rfc3339::format),
            payload_bytes: delivery.payload.len(),
            session_id: &delivery.session_id,
            signature: &delivery.signature,
            status: delivery.status,
            target_url: &delivery.target_url,
            webhook_id: delivery.webhook_id,
        }
    }
}

impl<'a> DeliveryBody<'a> {
    pub fn of(delivery: &'a Delivery) -> Self {
        let summary = DeliverySummary::of(delivery);
        Self {
            attempt_count: summary.attempt_count,
            created_at: summary.created_at,
            error_detail: summary.error_detail,
            id: summary.id,
            last_attempted_at: summary.last_attempted_at,
            next_retry_at: summary.next_retry_at,
            payload: PayloadValue(&delivery.payload),
            payload_bytes: summary.payload_bytes,
            payload_raw: &delivery.payload,
            session_id: summary.session_id,
            signature: summary.signature,
            status: summary.status,
            target_url: summary.target_url,
            webhook_id: summary.webhook_id,
        }
    }
}

impl<'a> DeliveryDetail<'a> {
    pub fn of(delivery: &'a Delivery, attempts: &'a [DeliveryAttempt]) -> Self {
        let body = DeliveryBody::of(delivery);
        Self {
            attempt_count: body.attempt_count,
            attempts: attempts.iter().map(Attempt::of).collect(),
            created_at: body.created_at,
            error_detail: body.error_detail,
            id: body.id,
            last_attempted_at: body.last_attempted_at,
            next_retry_at: body.next_retry_at,
            payload: body.payload,
            payload_bytes: body.payload_bytes,
            payload_raw: body.payload_raw,
            session_id: body.session_id,
            signature: body.signature,
            status: body.status,
            target_url: body.target_url,
            webhook_id: body.webhook_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_schema_names_every_status_the_store_knows() {
        let schema = serde_json::to_value(<DeliveryStatusSchema as utoipa::PartialSchema>::schema()).unwrap();
        let names: Vec<&str> = schema["enum"].as_array().unwrap().iter().map(|name| name.as_str().unwrap()).collect();
        for name in &names {
            let status: DeliveryStatus = name.parse().unwrap();
            assert_eq!(status.as_str(), *name);
        }
        assert_eq!(names.len(), 4);
    }
}

// `POST /gateway/webhook-events`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct WebhookEventCreate {
    #[schema(schema_with = name_256)]
    event_type: String,
    #[schema(schema_with = name_256, required = false)]
    source_identifier: String,
    /// Any JSON; each delivery's envelope carries it byte for byte as posted.
    payload: Value,
}

// A published event: one delivery per matching config, in config id order (none when no config matches).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookEventPublished<'a> {
    #[schema(value_type = Vec<i64>)]
    pub delivery_ids: &'a [i64],
    #[schema(schema_with = int64_schema)]
    pub event_id: i64,
}

// `POST /gateway/webhook-configs/{id}/recover`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct WebhookRecoverRequest {
    /// The window's start (RFC 3339), included: dead deliveries created at or after it are recovered.
    #[schema(format = DateTime)]
    since: String,
    /// The window's end (RFC 3339), included; now when absent.
    #[schema(format = DateTime, required = false)]
    until: String,
}

// How many dead deliveries a recover put back to pending.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRecovered {
    pub recovered: usize,
}

// A new delivery made by a resend or a test, tried at once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryAccepted {
    #[schema(schema_with = int64_schema)]
    pub delivery_id: i64,
    #[schema(inline)]
    pub status: Accepted,
}
