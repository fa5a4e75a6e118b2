//! How the document shows the webhook endpoints (the server's route table names these functions).

use serde_json::json;

use super::bodies::{DeliveryAccepted, WebhookRecoverRequest, WebhookRecovered};
use super::bodies::{
    DeliveryBody, DeliveryCreate, DeliveryDetail, DeliveryPage, DeliveryStatusSchema, DeliverySummary, InboundAccepted,
    InboundDuplicate, WebhookConfigBody, WebhookConfigChange, WebhookConfigCreate, WebhookConfigList,
    WebhookEventCreate, WebhookEventPublished,
};
use gateway_webhooks::{DEFAULT_PAGE_SIZE, MAX_DELIVERIES_PER_EVENT, MAX_PAGE_SIZE, RECOVER_BATCH, TEST_EVENT_TYPE};

use crate::common::Deleted;
use crate::fields::{NO_CONTROL_CHARACTERS, int64};
use crate::openapi::replayed_header;
use crate::{Operation, Reason};

pub fn inbound_doc() -> Operation {
    Operation::new("inboundWebhook", "agents", "Receive an inbound webhook")
        .describe(
            "Any body up to 1 MiB, signed with the config's inbound secret (its secret when it has none). The \
             envelope of a verified request is delivered to the config's `target_url`. An unknown id (404) and a \
             declared `Content-Length` over 1 MiB (413) are refused before the body is read.",
        )
        .path_id("webhook_id", "The webhook config's id.")
        .parameter(
            "header",
            "X-Observatory-Signature",
            false,
            "`sha256=<hex HMAC-SHA256 of the raw body with the config's secret>`.",
            json!({"type": "string"}),
        )
        .parameter("header", "webhook-id", false, "Standard Webhooks: the message id.", json!({"type": "string"}))
        .parameter(
            "header",
            "webhook-timestamp",
            false,
            "Standard Webhooks: Unix seconds; a signature older than 5 minutes is refused.",
            json!({"type": "string"}),
        )
        .parameter(
            "header",
            "webhook-signature",
            false,
            "Standard Webhooks: `v1,<base64 HMAC-SHA256>` entries, space-separated (either scheme is accepted).",
            json!({"type": "string"}),
        )
        .any_body()
        .answer::<InboundAccepted>(202, "Verified; a delivery is stored and tried at once.")
        .answer::<InboundDuplicate>(
            200,
            "Verified, and the same request (its `webhook-id`, or its `X-Observatory-Signature` and body) was \
             accepted within the last 24 h: nothing is stored; `delivery_id` is the first one's.",
        )
        .errors(401, &[Reason::SignatureMismatch, Reason::TimestampRequired])
        .error(404, Reason::UnknownWebhook)
        .error(503, Reason::StoreUnavailable)
}

pub fn create_config_doc() -> Operation {
    Operation::new("createWebhookConfig", "webhooks", "Create a webhook config")
        .json_body::<WebhookConfigCreate>(true)
        .example(json!({
            "source_identifier": "github", "event_type": "push", "agent_intent": "review_code",
            "target_session": "session-1", "target_url": "https://hooks.example.com/in",
            "secret": "a-shared-secret",
        }))
        .answer::<WebhookConfigBody<'static>>(201, "Created (never the secret).")
        .link(201, "getWebhookConfig", json!({"id": "$response.body#/id"}))
        .link(201, "deleteWebhookConfig", json!({"id": "$response.body#/id"}))
        .link(201, "inboundWebhook", json!({"webhook_id": "$response.body#/id"}))
        .error(409, Reason::DuplicateWebhookConfig)
        .errors(422, &[Reason::MissingRequiredFields, Reason::InvalidField])
        .error(503, Reason::StoreUnavailable)
}

pub fn list_configs_doc() -> Operation {
    Operation::new("listWebhookConfigs", "webhooks", "Webhook configs")
        .describe("Every config in id order. Takes no query parameter (400 `invalid_query` for any).")
        .error(400, Reason::InvalidQuery)
        .answer::<WebhookConfigList<'static>>(200, "The configs.")
        .error(503, Reason::StoreUnavailable)
}

pub fn show_config_doc() -> Operation {
    Operation::new("getWebhookConfig", "webhooks", "One webhook config")
        .path_id("id", "The config's id.")
        .answer::<WebhookConfigBody<'static>>(200, "The config (never the secret).")
        .error(404, Reason::UnknownWebhook)
        .error(503, Reason::StoreUnavailable)
}

pub fn delete_config_doc() -> Operation {
    Operation::new("deleteWebhookConfig", "webhooks", "Delete a webhook config")
        .describe("Deletes the config with its deliveries and their attempts.")
        .path_id("id", "The config's id.")
        .answer::<Deleted>(200, "Deleted.")
        .error(404, Reason::UnknownWebhook)
        .error(503, Reason::StoreUnavailable)
}

pub fn update_config_doc() -> Operation {
    Operation::new("updateWebhookConfig", "webhooks", "Change a webhook config")
        .describe(
            "Any of the fields, at least one, each checked as on create; the id and the deliveries stay. A new secret \
             signs outbound at once; inbound accepts the previous one too for 24 h after `secret_rotated_at`, unless \
             `revoke_previous` is true. The inbound secret rotates the same way, apart.",
        )
        .path_id("id", "The config's id.")
        .json_body::<WebhookConfigChange>(true)
        .example(json!({"target_url": "https://hooks.example.com/v2/in", "secret": "a-new-secret"}))
        .answer::<WebhookConfigBody<'static>>(200, "The config as `GET` shows it (never the secret).")
        .error(404, Reason::UnknownWebhook)
        .error(422, Reason::InvalidField)
        .error(503, Reason::StoreUnavailable)
}

pub fn enqueue_doc() -> Operation {
    Operation::new("enqueueDelivery", "webhooks", "Enqueue an outbound webhook")
        .describe("The payload is stored, signed and sent byte for byte as posted; the first attempt goes out at once.")
        .idempotency_key()
        .json_body::<DeliveryCreate>(true)
        .example(json!({"webhook_id": 1, "session_id": "session-1", "payload": {"order": 17}}))
        .answer::<DeliveryBody<'static>>(201, "Enqueued.")
        .link(201, "getDelivery", json!({"id": "$response.body#/id"}))
        .link(201, "retryDelivery", json!({"id": "$response.body#/id"}))
        .answer_with_headers::<DeliveryBody<'static>>(
            200,
            "Answered from an earlier request with this `Idempotency-Key`.",
            replayed_header(),
        )
        .error(404, Reason::UnknownWebhook)
        .errors(422, &[Reason::MissingRequiredFields, Reason::InvalidField])
        .error(503, Reason::StoreUnavailable)
}

pub fn list_deliveries_doc() -> Operation {
    Operation::new("listDeliveries", "webhooks", "The forensic inspector")
        .describe(
            "Deliveries in ascending id, every filter optional and ANDed; entries carry `payload_bytes`, not the \
             payload.",
        )
        .query(
            "session_id",
            "Only this session's deliveries.",
            json!({"type": "string", "pattern": NO_CONTROL_CHARACTERS}),
        )
        .query_of::<DeliveryStatusSchema>("status", "Only deliveries in this state.")
        .query("from", "Created at or after this instant (RFC 3339).", json!({"type": "string", "format": "date-time"}))
        .query("to", "Created before this instant (RFC 3339).", json!({"type": "string", "format": "date-time"}))
        .limit(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        .query("after_id", "A delivery id: the page starts after it.", int64())
        .answer::<DeliveryPage<'static>>(200, "A page of deliveries.")
        .error(503, Reason::StoreUnavailable)
}

pub fn show_delivery_doc() -> Operation {
    Operation::new("getDelivery", "webhooks", "One delivery with its attempts")
        .path_id("id", "The delivery's id.")
        .answer::<DeliveryDetail<'static>>(200, "The delivery, its payload and its attempts, oldest first.")
        .error(404, Reason::UnknownDelivery)
        .error(503, Reason::StoreUnavailable)
}

pub fn retry_doc() -> Operation {
    Operation::new("retryDelivery", "webhooks", "Retry now")
        .describe("A failed or dead delivery becomes pending with attempt_count 0, due at once. The body is ignored.")
        .path_id("id", "The delivery's id.")
        .answer::<DeliverySummary<'static>>(200, "The reset delivery.")
        .error(404, Reason::UnknownDelivery)
        .error(409, Reason::RetryNotAllowed)
        .error(503, Reason::StoreUnavailable)
}

pub fn publish_event_doc() -> Operation {
    Operation::new("publishWebhookEvent", "webhooks", "Publish an event to every subscribed endpoint")
        .describe(&format!(
            "Fan-out: one delivery per webhook config whose `event_type` is the event's or `*` (only the configs of \
             `source_identifier` when given), all written at once or none, each signed with its config's secret and \
             retried on its own schedule. Each receives `{{\"event_id\",\"event_type\",\"webhook_id\",\"published_at\",\
             \"payload\"}}`. No config matching: 202 with `delivery_ids: []`. More than {MAX_DELIVERIES_PER_EVENT} \
             matching: 422 `invalid_field` naming `event_type`, nothing written. A repeated `Idempotency-Key` with the \
             same request answers as the first did (202, same ids, `Idempotent-Replayed: true`); with another \
             request, 422 `idempotency_key_reused`."
        ))
        .idempotency_key()
        .json_body::<WebhookEventCreate>(true)
        .example(json!({"event_type": "order.paid", "payload": {"order": 17}}))
        .answer_with_headers::<WebhookEventPublished<'static>>(
            202,
            "Published; the deliveries are tried at once.",
            replayed_header(),
        )
        .errors(422, &[Reason::MissingRequiredFields, Reason::InvalidField, Reason::IdempotencyKeyReused])
        .error(503, Reason::StoreUnavailable)
}

pub fn recover_doc() -> Operation {
    Operation::new("recoverWebhookDeliveries", "webhooks", "Recover an endpoint's dead deliveries")
        .describe(&format!(
            "Every dead delivery of the config created in the window (`since` to `until`, both included; `until` \
             defaults to now) goes back to pending with a full set of attempts, as Retry now resets one, \
             {RECOVER_BATCH} per transaction. They go out through the dispatcher under the global rate \
             (`--webhook-max-per-second`), oldest first, not all at once. `since` after `until`, or a window longer \
             than `--retention-days`: 422 `invalid_field` naming `since`."
        ))
        .path_id("id", "The config's id.")
        .json_body::<WebhookRecoverRequest>(true)
        .example(json!({"since": "2026-12-01T00:00:00Z", "until": "2026-12-02T00:00:00Z"}))
        .answer::<WebhookRecovered>(202, "Recovered; the deliveries are tried under the rate.")
        .error(404, Reason::UnknownWebhook)
        .errors(422, &[Reason::MissingRequiredFields, Reason::InvalidField])
        .error(503, Reason::StoreUnavailable)
}

pub fn resend_doc() -> Operation {
    Operation::new("resendDelivery", "webhooks", "Resend a delivery")
        .describe(
            "A new delivery of the same payload to the same config and session, whatever the status of this one \
             (delivered and dead included), signed with the config's current secret and tried at once. The body is \
             ignored.",
        )
        .path_id("id", "The delivery's id.")
        .answer::<DeliveryAccepted>(202, "The new delivery's id.")
        .link(202, "getDelivery", json!({"id": "$response.body#/delivery_id"}))
        .error(404, Reason::UnknownDelivery)
        .error(503, Reason::StoreUnavailable)
}

pub fn test_doc() -> Operation {
    Operation::new("testWebhookConfig", "webhooks", "Send a test event to an endpoint")
        .describe(&format!(
            "A new delivery to the config's target whose envelope is `{{\"event_type\":\"{TEST_EVENT_TYPE}\",\
             \"webhook_id\",\"published_at\",\"payload\":{{\"test\":true,\"message\"}}}}`, signed and retried like any \
             other. The body is ignored."
        ))
        .path_id("id", "The config's id.")
        .answer::<DeliveryAccepted>(202, "The test delivery's id.")
        .link(202, "getDelivery", json!({"id": "$response.body#/delivery_id"}))
        .error(404, Reason::UnknownWebhook)
        .error(503, Reason::StoreUnavailable)
}
