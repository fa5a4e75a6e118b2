//! `GET /openapi.json`: the OpenAPI 3.1 document of the HTTP API (docs/api.md says the same in prose).
//!
//! Built in Rust rather than kept as a JSON file: most of the document is the error responses, and each operation
//! states only which refusals it can give ([`Operation::error`], [`Auth`], [`Operation::reads_body`]); the
//! builder turns those into response objects in one shape, with every reason's meaning taken from one table
//! ([`REASONS`]). A hand-written file would repeat that shape some hundred times. The document is built once,
//! at the first request, and served as the same bytes after.
//!
//! Adding a route: an entry in [`paths`], the path and its operations. The router's tests check that the document
//! and the router name the same paths and methods, so a route missing here fails them.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Map, Value, json};

use crate::http::response::{Response, json_bytes};

static DOCUMENT: LazyLock<Bytes> =
    LazyLock::new(|| Bytes::from(serde_json::to_vec(&document()).unwrap_or_else(|_| b"{}".to_vec())));

/// `GET /openapi.json`, for anyone: it describes the API, not the gateway's data.
pub fn get() -> Response {
    json_bytes(StatusCode::OK, DOCUMENT.clone())
}

/// Every error reason the gateway answers with, and when. Error responses in the document list their reasons
/// with these meanings.
pub const REASONS: &[(&str, &str)] = &[
    ("invalid_json", "the body is not JSON (or is nested deeper than 128 levels)"),
    ("invalid_body", "the body could not be read (a broken chunked encoding)"),
    ("invalid_query", "an unknown query parameter, one given twice, or a bad value (`detail` names it)"),
    (
        "invalid_idempotency_key",
        "`Idempotency-Key` is not 1 to 255 visible ASCII characters, or starts with `reminder:`",
    ),
    ("invalid_topic", "`topic` is missing or names no topic"),
    ("unauthorized", "no valid bearer token for this endpoint"),
    ("token_expired", "the agent token's credential has expired (`expires_in_s` at issue): ask for a new token"),
    (
        "too_many_refusals",
        "this client address presented 20 refused agent tokens this second: every agent token it presents is refused \
         for the rest of the second; `Retry-After` is 1",
    ),
    ("identity_mismatch", "with agent auth on: the token's agent is not the agent the request names"),
    ("signature_mismatch", "the signature header is missing, malformed or wrong"),
    (
        "timestamp_required",
        "this webhook config accepts only Standard Webhooks signatures with a timestamp (`inbound_require_timestamp`)",
    ),
    ("not_found", "no such route"),
    ("unknown_agent", "the path's agent id cannot be an agent's (empty, over 256 bytes, control characters)"),
    ("unknown_credential", "the agent has no credential with this id"),
    ("unknown_webhook", "no webhook config has this id"),
    ("unknown_delivery", "no delivery has this id"),
    ("unknown_cron_job", "no cron job has this id"),
    ("unknown_tool", "no such tool"),
    ("request_timeout", "the body did not arrive within 30 s"),
    ("duplicate_webhook_config", "a config for this (source_identifier, event_type) exists"),
    ("retry_not_allowed", "the delivery is pending or delivered: only failed and dead ones are retried"),
    ("tool_call_conflict", "this tool_call_id of this agent was answered for another tool or other params"),
    ("conflict", "the write conflicted with a concurrent one; retry"),
    ("payload_too_large", "the body is over 1 MiB"),
    ("invalid_heartbeat_type", "`type` is not \"heartbeat\""),
    ("missing_required_fields", "a required field is absent or empty (`detail` names it)"),
    ("invalid_field", "a field of the wrong type, out of range, or unknown (`detail` names it, never its value)"),
    ("invalid_schedule", "the cron expression does not parse (`detail` names the field)"),
    ("idempotency_key_reused", "this `Idempotency-Key` was used for a different request"),
    ("rate_limited", "the agent is over `--agent-rate-limit-per-minute`; `Retry-After` says when its window ends"),
    ("too_many_reminders", "the agent has `--max-pending-reminders-per-agent` pending reminders already"),
    (
        "quota_exceeded",
        "the agent's stored bytes (recorded tool answers, pending reminders, mailbox) would pass \
         `--agent-storage-quota-bytes`",
    ),
    ("store_unavailable", "the database cannot be reached right now; retry"),
    ("insufficient_storage", "the gateway's storage (disk or database) is full: nothing was written; retry later"),
    ("heartbeat_manager_unavailable", "the heartbeat manager is not running, or tracks as many agents as it may"),
    (
        "too_many_streams",
        "429: this agent has `--agent-streams-per-agent` streams open on this instance; 503: the gateway (or this \
         client address) holds as many event streams as it may",
    ),
    (
        "misdirected_request",
        "on a loopback listener without agent auth (`--agent-auth auto`): `Host` is not `localhost`, 127.0.0.0/8 \
         or `[::1]`",
    ),
    ("cross_origin", "on a loopback listener without agent auth: `Origin` is present and not the gateway's own"),
    ("unsupported_media_type", "a body whose `Content-Type` is present and not JSON (`application/json`, `+json`)"),
    (
        "overloaded",
        "the request bodies being read hold `--max-inflight-body-bytes`; this one was not read; `Retry-After`",
    ),
    (
        "too_many_connections",
        "the client address holds `--max-connections-per-address` connections; answered before the request is \
         read, then the connection closes",
    ),
];

/// The inbound webhook's path: its body is the sender's, of any type (no 415).
const INBOUND_WEBHOOK_PATH: &str = "/gateway/webhooks/{webhook_id}";

/// Who may call an operation; each adds the refusals it brings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    /// Anyone.
    Open,
    /// Anyone; the operator's token adds details.
    OptionalOperator,
    /// The operator's token.
    Operator,
    /// The agent the request names, with its own token while agent auth is on; anyone while it is off.
    Agent,
    /// That agent's token or the operator's while agent auth is on; anyone while it is off.
    AgentOrOperator,
}

/// One operation of a path, built up from what it reads, answers and refuses.
#[derive(Debug)]
struct Operation {
    fields: Map<String, Value>,
    parameters: Vec<Value>,
    answers: BTreeMap<u16, Value>,
    errors: BTreeMap<u16, Vec<&'static str>>,
}

impl Operation {
    fn new(operation_id: &str, tag: &str, summary: &str, auth: Auth) -> Self {
        let mut fields = Map::new();
        fields.insert("operationId".into(), operation_id.into());
        fields.insert("tags".into(), json!([tag]));
        fields.insert("summary".into(), summary.into());
        let security = match auth {
            Auth::Open => json!([]),
            Auth::OptionalOperator => json!([{}, {"operatorToken": []}]),
            Auth::Operator => json!([{"operatorToken": []}]),
            Auth::Agent => json!([{"agentToken": []}, {}]),
            Auth::AgentOrOperator => json!([{"agentToken": []}, {"operatorToken": []}, {}]),
        };
        fields.insert("security".into(), security);
        let operation = Self { fields, parameters: Vec::new(), answers: BTreeMap::new(), errors: BTreeMap::new() };
        match auth {
            Auth::Open | Auth::OptionalOperator => operation,
            Auth::Operator => operation.error(401, "unauthorized"),
            // Agent tokens are looked up in the store (503 when it cannot be read).
            Auth::Agent | Auth::AgentOrOperator => operation
                .errors(401, &["unauthorized", "token_expired"])
                .error(403, "identity_mismatch")
                .error(429, "too_many_refusals")
                .error(503, "store_unavailable"),
        }
    }

    fn describe(mut self, description: &str) -> Self {
        self.fields.insert("description".into(), description.into());
        self
    }

    fn parameter(mut self, location: &str, name: &str, required: bool, description: &str, schema: Value) -> Self {
        self.parameters.push(json!({
            "name": name, "in": location, "required": required, "description": description, "schema": schema,
        }));
        self
    }

    fn path_id(self, name: &str, description: &str) -> Self {
        self.parameter("path", name, true, description, int64())
    }

    fn query(self, name: &str, description: &str, schema: Value) -> Self {
        self.parameter("query", name, false, description, schema).error(400, "invalid_query")
    }

    /// `limit` from 1 to `max` (default `default`).
    fn limit(self, default: u64, max: u64) -> Self {
        self.query("limit", "Page size.", json!({"type": "integer", "minimum": 1, "maximum": max, "default": default}))
    }

    fn idempotency_key(self) -> Self {
        self.parameter(
            "header",
            "Idempotency-Key",
            false,
            "Makes a retried create safe: the same key with the same request is answered from the first one (200, \
             `Idempotent-Replayed: true`).",
            json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}),
        )
        .error(400, "invalid_idempotency_key")
        .error(422, "idempotency_key_reused")
    }

    /// A body is read: it may be malformed, slow or too large, or the body budget may be full.
    fn reads_body(self) -> Self {
        self.error(400, "invalid_json")
            .error(400, "invalid_body")
            .error(408, "request_timeout")
            .error(413, "payload_too_large")
            .error(503, "overloaded")
    }

    /// The edge's refusals (http/edge.rs), which any operation may meet: on a loopback listener without agent auth
    /// a foreign `Host` (421) or `Origin` (403); on every method that may carry a body, except the inbound
    /// webhook's, a body that is not JSON (415).
    fn at_the_edge(self, method: &str, opaque_body: bool) -> Self {
        let operation = self.error(421, "misdirected_request").error(403, "cross_origin");
        if method == "get" || opaque_body { operation } else { operation.error(415, "unsupported_media_type") }
    }

    /// A JSON body of `schema`; read as an object field by field (a body that is JSON but not an object is 422).
    fn json_body(mut self, schema: Value, required: bool) -> Self {
        self.fields.insert(
            "requestBody".into(),
            json!({"required": required, "content": {"application/json": {"schema": schema}}}),
        );
        self.reads_body()
    }

    /// An example of the JSON body (sent as it is by fuzzers' example phase).
    fn example(mut self, example: Value) -> Self {
        if let Some(body) = self.fields.get_mut("requestBody") {
            body["content"]["application/json"]["example"] = example;
        }
        self
    }

    /// A link from the answer of `status` to another operation, its parameters taken from the answer.
    fn link(mut self, status: u16, operation_id: &str, parameters: Value) -> Self {
        if let Some(answer) = self.answers.get_mut(&status) {
            if answer.get("links").is_none() {
                answer["links"] = json!({});
            }
            answer["links"][operation_id] = json!({"operationId": operation_id, "parameters": parameters});
        }
        self
    }

    fn answer(self, status: u16, description: &str, schema: Value) -> Self {
        self.answer_with_headers(status, description, schema, json!({}))
    }

    fn answer_with_headers(mut self, status: u16, description: &str, schema: Value, headers: Value) -> Self {
        let mut response = json!({"description": description, "content": {"application/json": {"schema": schema}}});
        if headers.as_object().is_some_and(|headers| !headers.is_empty()) {
            response["headers"] = headers;
        }
        self.answers.insert(status, response);
        self
    }

    fn raw_answer(mut self, status: u16, response: Value) -> Self {
        self.answers.insert(status, response);
        self
    }

    fn error(mut self, status: u16, reason: &'static str) -> Self {
        let reasons = self.errors.entry(status).or_default();
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
        self
    }

    fn errors(self, status: u16, reasons: &[&'static str]) -> Self {
        reasons.iter().fold(self, |operation, reason| operation.error(status, reason))
    }

    fn into_value(self) -> Value {
        let Self { mut fields, parameters, mut answers, errors } = self;
        if !parameters.is_empty() {
            fields.insert("parameters".into(), Value::Array(parameters));
        }
        for (status, reasons) in errors {
            let refusal = error_response(&reasons);
            let response = match answers.remove(&status) {
                None => refusal,
                // An answer and a refusal share the status (a 503 that is a report, or an error): either body.
                Some(answer) => {
                    let either = json!({"anyOf": [
                        answer["content"]["application/json"]["schema"].clone(),
                        refusal["content"]["application/json"]["schema"].clone(),
                    ]});
                    let description = format!(
                        "{} Or: {}",
                        answer["description"].as_str().unwrap_or_default(),
                        refusal["description"].as_str().unwrap_or_default()
                    );
                    json!({"description": description, "content": {"application/json": {"schema": either}}})
                }
            };
            answers.insert(status, response);
        }
        let responses: Map<String, Value> =
            answers.into_iter().map(|(status, response)| (status.to_string(), response)).collect();
        fields.insert("responses".into(), Value::Object(responses));
        Value::Object(fields)
    }
}

/// `{"status":"error","reason":…}` with `reason` one of `reasons`; a 429 `rate_limited` or `too_many_refusals` and a
/// 503 `overloaded` carry `Retry-After`.
fn error_response(reasons: &[&'static str]) -> Value {
    let description = reasons
        .iter()
        .map(|reason| {
            let meaning = REASONS.iter().find(|(known, _)| known == reason).map_or("", |(_, meaning)| *meaning);
            format!("`{reason}`: {meaning}.")
        })
        .collect::<Vec<_>>()
        .join(" ");
    let schema = json!({"allOf": [
        {"$ref": "#/components/schemas/Error"},
        {"properties": {"reason": {"enum": reasons}}},
    ]});
    let mut response = json!({"description": description, "content": {"application/json": {"schema": schema}}});
    if reasons.contains(&"rate_limited") || reasons.contains(&"too_many_refusals") || reasons.contains(&"overloaded") {
        response["headers"] = json!({"Retry-After": {"$ref": "#/components/headers/RetryAfter"}});
    }
    response
}

/// What ids and names may not hold: control characters (Unicode's Cc: U+0000-U+001F, U+007F-U+009F).
const NO_CONTROL_CHARACTERS: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

/// An id or a name: 1 to `max` bytes (the schema can only count characters) without control characters.
fn name(max: u64) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max, "pattern": NO_CONTROL_CHARACTERS})
}

/// A webhook secret: 1 to 1024 bytes without NUL; `whsec_` must be followed by base64 (docs/webhooks.md).
fn secret() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 1024, "pattern": "^[^\\u0000]*$"})
}

/// A config's inbound secret: a secret, which must differ from the config's `secret`.
fn inbound_secret() -> Value {
    let mut schema = secret();
    schema["description"] = json!(
        "Verifies inbound signatures instead of `secret` (which then only signs outbound), so a receiver of \
         outbound deliveries cannot post them back in. Never shown; must differ from `secret`."
    );
    schema
}

fn require_timestamp() -> Value {
    json!({
        "type": "boolean",
        "description": "`true`: only Standard Webhooks signatures with a timestamp within 5 minutes are accepted \
                        inbound; `X-Observatory-Signature` alone is 401 `timestamp_required`. Default false.",
    })
}

/// An integer the gateway reads as an `i64` (ids, cursors).
fn int64() -> Value {
    json!({"type": "integer", "format": "int64", "minimum": i64::MIN, "maximum": i64::MAX})
}

fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn replayed_header() -> Value {
    json!({"Idempotent-Replayed": {"$ref": "#/components/headers/IdempotentReplayed"}})
}

/// The paths and their operations, in the order docs/api.md tells them.
fn paths() -> Vec<(&'static str, Vec<(&'static str, Operation)>)> {
    let agent_id = |operation: Operation| {
        operation.parameter(
            "path",
            "agent_id",
            true,
            "The agent's id, percent-encoded as one path segment (`ns%3Aagent%2F7`).",
            schema("AgentId"),
        )
    };
    vec![
        ("/gateway/heartbeat", vec![("post", heartbeat())]),
        ("/gateway/messages", vec![("post", messages())]),
        ("/gateway/tools/schedule_reminder", vec![("post", tool(Tool::ScheduleReminder))]),
        ("/gateway/tools/cancel_reminder", vec![("post", tool(Tool::CancelReminder))]),
        ("/gateway/tools/list_reminders", vec![("post", tool(Tool::ListReminders))]),
        ("/gateway/events", vec![("get", events())]),
        (
            "/gateway/agents/{agent_id}/reminders",
            vec![(
                "get",
                agent_id(Operation::new("listAgentReminders", "agents", "An agent's retained reminders", Auth::AgentOrOperator))
                    .describe("The agent's retained fires (received or not) in firing order; reading marks nothing received.")
                    .query("after", "A `fire_id`: only fires after it.", json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": NO_CONTROL_CHARACTERS}))
                    .limit(100, 1000)
                    .answer(200, "The fires.", schema("MailboxPage"))
                    .error(404, "unknown_agent")
                    .error(503, "store_unavailable"),
            )],
        ),
        (INBOUND_WEBHOOK_PATH, vec![("post", inbound_webhook())]),
        (
            "/gateway/agents",
            vec![(
                "get",
                Operation::new("listAgents", "operator", "Live agents", Auth::Operator)
                    .describe("Live agents in `agent_id` order; pass `next_after` as `after` for the next page.")
                    .limit(100, 1000)
                    .query("after", "An agent id: the page starts after it.", schema("AgentId"))
                    .answer(200, "A page of live agents.", schema("AgentPage"))
                    .error(503, "store_unavailable"),
            )],
        ),
        (
            "/gateway/agents/{agent_id}/credentials",
            vec![
                (
                    "post",
                    agent_id(Operation::new("issueCredential", "operator", "Issue an agent token", Auth::Operator))
                        .describe("The token is shown this once (`Cache-Control: no-store`); the gateway keeps only its hash. With `expires_in_s` it stops authenticating that many seconds after issue (401 `token_expired`).")
                        .json_body(
                            json!({
                                "type": "object", "additionalProperties": false,
                                "properties": {"expires_in_s": {
                                    "type": ["integer", "null"], "minimum": 1,
                                    "maximum": gateway_core::ports::credential::MAX_TOKEN_LIFETIME_S,
                                    "description": "Seconds from issue after which the token expires (at most ten years); absent or null: never.",
                                }},
                            }),
                            false,
                        )
                        .example(json!({"expires_in_s": 86_400}))
                        .answer_with_headers(
                            201,
                            "Issued.",
                            schema("IssuedCredential"),
                            json!({"Cache-Control": {"schema": {"type": "string", "const": "no-store"}}}),
                        )
                        .link(
                            201,
                            "revokeCredential",
                            json!({"agent_id": "$response.body#/agent_id", "credential_id": "$response.body#/credential_id"}),
                        )
                        .error(422, "invalid_field")
                        .error(503, "store_unavailable"),
                ),
                (
                    "get",
                    agent_id(Operation::new("listCredentials", "operator", "An agent's credentials", Auth::Operator))
                        .describe("Oldest first, revoked ones included, never a token; pass `next_after` as `after` for the next page.")
                        .limit(100, 1000)
                        .query("after", "A credential id: the page starts after it.", json!({"type": "string", "pattern": "^[0-9a-f]{24}$"}))
                        .answer(200, "A page of credentials.", schema("CredentialPage"))
                        .error(422, "invalid_field")
                        .error(503, "store_unavailable"),
                ),
            ],
        ),
        (
            "/gateway/agents/{agent_id}/credentials/{credential_id}",
            vec![(
                "delete",
                agent_id(Operation::new("revokeCredential", "operator", "Revoke an agent token", Auth::Operator))
                    .describe("Revoked at once on this instance, within 5 s on the others; revoking again answers the same.")
                    .parameter("path", "credential_id", true, "The credential's id.", json!({"type": "string", "pattern": "^[0-9a-f]{24}$"}))
                    .answer(200, "Revoked.", schema("RevokedCredential"))
                    .error(404, "unknown_credential")
                    .error(422, "invalid_field")
                    .error(503, "store_unavailable"),
            )],
        ),
        (
            "/gateway/webhook-configs",
            vec![
                (
                    "post",
                    Operation::new("createWebhookConfig", "webhooks", "Create a webhook config", Auth::Operator)
                        .json_body(schema("WebhookConfigCreate"), true)
                        .example(json!({
                            "source_identifier": "github", "event_type": "push", "agent_intent": "review_code",
                            "target_session": "session-1", "target_url": "https://hooks.example.com/in",
                            "secret": "a-shared-secret",
                        }))
                        .answer(201, "Created (never the secret).", schema("WebhookConfig"))
                        .link(201, "getWebhookConfig", json!({"id": "$response.body#/id"}))
                        .link(201, "deleteWebhookConfig", json!({"id": "$response.body#/id"}))
                        .link(201, "inboundWebhook", json!({"webhook_id": "$response.body#/id"}))
                        .error(409, "duplicate_webhook_config")
                        .errors(422, &["missing_required_fields", "invalid_field"])
                        .error(503, "store_unavailable"),
                ),
                (
                    "get",
                    Operation::new("listWebhookConfigs", "webhooks", "Webhook configs", Auth::Operator)
                        .describe("Every config in id order. Takes no query parameter (400 `invalid_query` for any).")
                        .error(400, "invalid_query")
                        .answer(200, "The configs.", schema("WebhookConfigList"))
                        .error(503, "store_unavailable"),
                ),
            ],
        ),
        (
            "/gateway/webhook-configs/{id}",
            vec![
                (
                    "get",
                    Operation::new("getWebhookConfig", "webhooks", "One webhook config", Auth::Operator)
                        .path_id("id", "The config's id.")
                        .answer(200, "The config (never the secret).", schema("WebhookConfig"))
                        .error(404, "unknown_webhook")
                        .error(503, "store_unavailable"),
                ),
                (
                    "delete",
                    Operation::new("deleteWebhookConfig", "webhooks", "Delete a webhook config", Auth::Operator)
                        .describe("Deletes the config with its deliveries and their attempts.")
                        .path_id("id", "The config's id.")
                        .answer(200, "Deleted.", schema("Deleted"))
                        .error(404, "unknown_webhook")
                        .error(503, "store_unavailable"),
                ),
                (
                    "patch",
                    Operation::new("updateWebhookConfig", "webhooks", "Change a webhook config", Auth::Operator)
                        .describe(
                            "Any of the fields, at least one, each checked as on create; the id and the deliveries \
                             stay. A new secret signs outbound at once; inbound accepts the previous one too for \
                             24 h after `secret_rotated_at`, unless `revoke_previous` is true. The inbound secret \
                             rotates the same way, apart.",
                        )
                        .path_id("id", "The config's id.")
                        .json_body(schema("WebhookConfigChange"), true)
                        .example(json!({"target_url": "https://hooks.example.com/v2/in", "secret": "a-new-secret"}))
                        .answer(200, "The config as `GET` shows it (never the secret).", schema("WebhookConfig"))
                        .error(404, "unknown_webhook")
                        .error(422, "invalid_field")
                        .error(503, "store_unavailable"),
                ),
            ],
        ),
        (
            "/gateway/deliveries",
            vec![
                (
                    "post",
                    Operation::new("enqueueDelivery", "webhooks", "Enqueue an outbound webhook", Auth::Operator)
                        .describe("The payload is stored, signed and sent byte for byte as posted; the first attempt goes out at once.")
                        .idempotency_key()
                        .json_body(schema("DeliveryCreate"), true)
                        .example(json!({"webhook_id": 1, "session_id": "session-1", "payload": {"order": 17}}))
                        .answer(201, "Enqueued.", schema("Delivery"))
                        .link(201, "getDelivery", json!({"id": "$response.body#/id"}))
                        .link(201, "retryDelivery", json!({"id": "$response.body#/id"}))
                        .answer_with_headers(200, "Answered from an earlier request with this `Idempotency-Key`.", schema("Delivery"), replayed_header())
                        .error(404, "unknown_webhook")
                        .errors(422, &["missing_required_fields", "invalid_field"])
                        .error(503, "store_unavailable"),
                ),
                (
                    "get",
                    Operation::new("listDeliveries", "webhooks", "The forensic inspector", Auth::Operator)
                        .describe("Deliveries in ascending id, every filter optional and ANDed; entries carry `payload_bytes`, not the payload.")
                        .query("session_id", "Only this session's deliveries.", json!({"type": "string", "pattern": NO_CONTROL_CHARACTERS}))
                        .query("status", "Only deliveries in this state.", schema("DeliveryStatus"))
                        .query("from", "Created at or after this instant (RFC 3339).", json!({"type": "string", "format": "date-time"}))
                        .query("to", "Created before this instant (RFC 3339).", json!({"type": "string", "format": "date-time"}))
                        .limit(100, 500)
                        .query("after_id", "A delivery id: the page starts after it.", int64())
                        .answer(200, "A page of deliveries.", schema("DeliveryPage"))
                        .error(503, "store_unavailable"),
                ),
            ],
        ),
        (
            "/gateway/deliveries/{id}",
            vec![(
                "get",
                Operation::new("getDelivery", "webhooks", "One delivery with its attempts", Auth::Operator)
                    .path_id("id", "The delivery's id.")
                    .answer(200, "The delivery, its payload and its attempts, oldest first.", schema("DeliveryDetail"))
                    .error(404, "unknown_delivery")
                    .error(503, "store_unavailable"),
            )],
        ),
        (
            "/gateway/deliveries/{id}/retry",
            vec![(
                "post",
                Operation::new("retryDelivery", "webhooks", "Retry now", Auth::Operator)
                    .describe("A failed or dead delivery becomes pending with attempt_count 0, due at once. The body is ignored.")
                    .path_id("id", "The delivery's id.")
                    .answer(200, "The reset delivery.", schema("DeliverySummary"))
                    .error(404, "unknown_delivery")
                    .error(409, "retry_not_allowed")
                    .error(503, "store_unavailable"),
            )],
        ),
        (
            "/gateway/cron/jobs",
            vec![
                (
                    "post",
                    Operation::new("createCronJob", "cron", "Create a recurring job", Auth::Operator)
                        .idempotency_key()
                        .json_body(schema("CronJobCreate"), true)
                        .example(json!({"agent_id": "researcher-alpha-9", "schedule": "*/5 * * * *", "payload": {"task": "sweep"}}))
                        .answer(201, "Created, with a preview of its next instants.", schema("CronJob"))
                        .link(201, "getCronJob", json!({"id": "$response.body#/id"}))
                        .link(201, "deleteCronJob", json!({"id": "$response.body#/id"}))
                        .link(201, "pauseCronJob", json!({"id": "$response.body#/id"}))
                        .link(201, "resumeCronJob", json!({"id": "$response.body#/id"}))
                        .answer_with_headers(200, "Answered from an earlier request with this `Idempotency-Key`.", schema("CronJob"), replayed_header())
                        .errors(422, &["invalid_schedule", "missing_required_fields", "invalid_field"])
                        .error(503, "store_unavailable"),
                ),
                (
                    "get",
                    Operation::new("listCronJobs", "cron", "Cron jobs and pending reminders", Auth::Operator)
                        .describe("Ascending id; one-time reminders appear with `is_one_time: true`.")
                        .limit(100, 1000)
                        .query("after_id", "A job id: the page starts after it.", int64())
                        .answer(200, "A page of jobs.", schema("CronJobPage"))
                        .error(503, "store_unavailable"),
                ),
            ],
        ),
        (
            "/gateway/cron/jobs/{id}",
            vec![
                (
                    "get",
                    Operation::new("getCronJob", "cron", "One cron job", Auth::Operator)
                        .path_id("id", "The job's id.")
                        .answer(200, "The job.", schema("CronJob"))
                        .error(404, "unknown_cron_job")
                        .error(503, "store_unavailable"),
                ),
                (
                    "delete",
                    Operation::new("deleteCronJob", "cron", "Delete a cron job", Auth::Operator)
                        .describe("A fire already claimed when the delete lands may still be published.")
                        .path_id("id", "The job's id.")
                        .answer(200, "Deleted.", schema("Deleted"))
                        .error(404, "unknown_cron_job")
                        .error(503, "store_unavailable"),
                ),
            ],
        ),
        (
            "/gateway/cron/jobs/{id}/pause",
            vec![(
                "post",
                Operation::new("pauseCronJob", "cron", "Pause a cron job", Auth::Operator)
                    .describe(
                        "A paused job keeps its row and does not fire; pausing a paused job changes nothing. One-time \
                         reminders can be paused too. The body is ignored.",
                    )
                    .path_id("id", "The job's id.")
                    .answer(200, "The job, paused.", schema("CronJob"))
                    .error(404, "unknown_cron_job")
                    .error(503, "store_unavailable"),
            )],
        ),
        (
            "/gateway/cron/jobs/{id}/resume",
            vec![(
                "post",
                Operation::new("resumeCronJob", "cron", "Resume a cron job", Auth::Operator)
                    .describe(
                        "The job fires again; one whose next instant passed while it was paused fires once at once. \
                         Resuming a running job changes nothing. The body is ignored.",
                    )
                    .path_id("id", "The job's id.")
                    .answer(200, "The job, running.", schema("CronJob"))
                    .error(404, "unknown_cron_job")
                    .error(503, "store_unavailable"),
            )],
        ),
        (
            "/gateway/cluster",
            vec![(
                "get",
                Operation::new("getCluster", "operator", "This instance and its cluster", Auth::Operator)
                    .answer(200, "This instance, its role, the leader and its term, Redis reachability.", schema("ClusterView")),
            )],
        ),
        (
            "/healthz",
            vec![(
                "get",
                Operation::new("liveness", "probes", "Liveness", Auth::Open).answer(200, "The process answers.", schema("StatusOk")),
            )],
        ),
        (
            "/readyz",
            vec![(
                "get",
                Operation::new("readiness", "probes", "Readiness", Auth::OptionalOperator)
                    .describe("With the operator token the body adds `checks` (an invalid token is not refused: it just adds nothing).")
                    .answer(200, "The store answers and every loop runs.", schema("Ready"))
                    .answer(503, "Not ready: `not_ready` names what.", schema("NotReady")),
            )],
        ),
        (
            "/metrics",
            vec![(
                "get",
                Operation::new("metrics", "operator", "The Prometheus scrape", Auth::Operator)
                    .describe("Requests, heartbeats, fires, deliveries, streams and the leader role (docs/operations.md).")
                    .raw_answer(
                        200,
                        json!({
                            "description": "The OpenMetrics text exposition.",
                            "content": {"application/openmetrics-text": {"schema": {"type": "string"}}},
                        }),
                    ),
            )],
        ),
        ("/", vec![("get", console_file("console", "The operator console's page", &["text/html"]))]),
        (
            "/console/{asset}",
            vec![(
                "get",
                console_file("consoleAsset", "A file of the console", &["text/javascript", "text/css", "image/svg+xml"])
                    .parameter(
                        "path",
                        "asset",
                        true,
                        "A file the console embeds (`app.js`, `app.css`, …); any other name is 404 `not_found`.",
                        json!({"type": "string"}),
                    )
                    .error(404, "not_found"),
            )],
        ),
        (
            "/openapi.json",
            vec![(
                "get",
                Operation::new("openapi", "probes", "This document", Auth::Open)
                    .answer(200, "The OpenAPI 3.1 document of this API.", json!({"type": "object"})),
            )],
        ),
    ]
}

/// A file of the console: no token (the page asks for it and sends it with every call it makes), and 304 when
/// `If-None-Match` names the file's entity tag.
fn console_file(operation_id: &str, summary: &str, media_types: &[&str]) -> Operation {
    let content: Map<String, Value> = media_types
        .iter()
        .map(|media_type| ((*media_type).to_owned(), json!({"schema": {"type": "string"}})))
        .collect();
    Operation::new(operation_id, "probes", summary, Auth::Open)
        .parameter("header", "If-None-Match", false, "Entity tags the client holds.", json!({"type": "string"}))
        .raw_answer(200, json!({"description": "The file.", "content": content}))
        .raw_answer(304, json!({"description": "The client's copy is current (its entity tag matches)."}))
}

fn heartbeat() -> Operation {
    Operation::new("heartbeat", "agents", "Record a heartbeat", Auth::Agent)
        .describe("Never rate-limited. A 422 touches neither the live map nor the database.")
        .json_body(schema("Heartbeat"), true)
        .example(json!({
            "type": "heartbeat", "agent_id": "researcher-alpha-9", "cluster_id": "mesh-04",
            "timestamp": "2026-02-22T12:00:00Z",
        }))
        .answer(200, "Recorded.", schema("StatusOk"))
        .errors(422, &["invalid_heartbeat_type", "missing_required_fields", "invalid_field"])
        .error(503, "heartbeat_manager_unavailable")
}

fn messages() -> Operation {
    Operation::new("postDecisionLog", "agents", "Send a DecisionLog", Auth::Agent)
        .describe(
            "Accepted logs are published on `gateway:messages`; a `schedule_reminder` tool call is handed to the \
             scheduler first. A log that breaks the schema is answered 422 and a `schema_violation` event is \
             published on `gateway:violations`. When the store cannot write the log's reminder (down: 503, full: 507) \
             the log is not accepted: send it again.",
        )
        .json_body(schema("DecisionLog"), true)
        .example(json!({
            "meta": {"trace_id": "trace-1", "timestamp": "2026-02-22T12:00:00Z"},
            "identity": {"agent_id": "researcher-alpha-9", "agent_type": "researcher", "capability_version": "1.4.0"},
            "cognition": {"intent": "check the quota", "reasoning_chain": ["quota resets hourly"], "confidence_score": 0.8},
            "action": {"status": "success", "tool_call": "schedule_reminder", "tool_input": {"delay_ms": 60000, "payload": {"task": "check_quota"}}},
            "state_delta": {"tokens_consumed": 512},
            "control": {"hitl_required": false, "is_terminal": false},
        }))
        .answer(202, "Accepted.", schema("MessageAccepted"))
        .answer(
            422,
            "The log breaks the schema: `detail` names the field path and the rule.",
            schema("MessageRejected"),
        )
        .error(429, "rate_limited")
        .error(503, "store_unavailable")
}

#[derive(Debug, Clone, Copy)]
enum Tool {
    ScheduleReminder,
    CancelReminder,
    ListReminders,
}

fn tool(tool: Tool) -> Operation {
    let (id, summary, params, example, result) = match tool {
        Tool::ScheduleReminder => (
            "scheduleReminder",
            "Schedule a one-time reminder",
            json!({
                "type": "object",
                "required": ["delay_ms", "payload"],
                "additionalProperties": false,
                "properties": {
                    "delay_ms": {"type": "integer", "minimum": 1, "maximum": 315_576_000_000_u64},
                    "payload": {"type": "object", "description": "At most `--reminder-payload-max-bytes` (65,536) as JSON."},
                },
            }),
            json!({"delay_ms": 60_000, "payload": {"task": "check_quota"}}),
            json!({
                "type": "object",
                "required": ["job_id", "fire_at"],
                "additionalProperties": false,
                "properties": {"job_id": int64(), "fire_at": {"type": "string", "format": "date-time"}},
            }),
        ),
        Tool::CancelReminder => (
            "cancelReminder",
            "Cancel one of the agent's pending reminders",
            json!({
                "type": "object",
                "required": ["job_id"],
                "additionalProperties": false,
                "properties": {"job_id": int64()},
            }),
            json!({"job_id": 1}),
            json!({
                "type": "object",
                "required": ["cancelled"],
                "additionalProperties": false,
                "properties": {"cancelled": {"type": "boolean"}},
            }),
        ),
        Tool::ListReminders => (
            "listReminders",
            "The agent's pending reminders",
            json!({"type": ["object", "null"], "additionalProperties": false, "maxProperties": 0}),
            json!({}),
            json!({
                "type": "object",
                "required": ["reminders", "truncated"],
                "additionalProperties": false,
                "properties": {
                    "reminders": {"type": "array", "maxItems": 100, "items": {
                        "type": "object",
                        "required": ["job_id", "fire_at", "payload"],
                        "additionalProperties": false,
                        "properties": {
                            "job_id": int64(),
                            "fire_at": {"type": "string", "format": "date-time"},
                            "payload": {"type": "object"},
                        },
                    }},
                    "truncated": {"type": "boolean"},
                },
            }),
        ),
    };
    let required: &[&str] = match tool {
        Tool::ScheduleReminder | Tool::CancelReminder => &["agent_id", "tool_call_id", "params"],
        Tool::ListReminders => &["agent_id", "tool_call_id"],
    };
    let body = json!({
        "type": "object",
        "required": required,
        "additionalProperties": false,
        "properties": {
            "agent_id": schema("AgentId"),
            "tool_call_id": name(256),
            "params": params,
        },
    });
    let answer = json!({
        "type": "object",
        "required": ["result"],
        "additionalProperties": false,
        "properties": {"result": result},
    });
    let operation = Operation::new(id, "agents", summary, Auth::Agent)
        .describe(
            "Idempotent per (agent_id, tool_call_id): a retry with the same tool and params gets the recorded answer \
             with `Idempotent-Replayed: true`. Counted against the agent's rate limit.",
        )
        .json_body(body, true)
        .example(json!({"agent_id": "researcher-alpha-9", "tool_call_id": format!("call-{id}"), "params": example}))
        .answer_with_headers(200, "Answered.", answer, replayed_header())
        .error(409, "tool_call_conflict")
        .errors(422, &["missing_required_fields", "invalid_field"])
        .error(429, "rate_limited");
    match tool {
        Tool::ScheduleReminder => operation.errors(429, &["too_many_reminders", "quota_exceeded"]),
        // A cancel frees room, so the quota never refuses it.
        Tool::CancelReminder | Tool::ListReminders => operation,
    }
}

fn events() -> Operation {
    Operation::new("events", "agents", "Server-Sent Events of one topic", Auth::AgentOrOperator)
        .describe(
            "`gateway:*` topics need the operator token; `agent:<agent_id>:scheduled` needs, with agent auth on, \
             that agent's token or the operator's, and first replays the agent's mailbox. The stream does not end \
             by itself: it opens with `: connected`, then sends events and a padded keep-alive comment every 15 s.",
        )
        .parameter(
            "query",
            "topic",
            true,
            "`gateway:messages`, `gateway:violations`, `gateway:webhooks`, `gateway:agents` or `agent:<agent_id>:scheduled`.",
            json!({"type": "string", "pattern": "^(gateway:(messages|violations|webhooks|agents)|agent:[^\\u0000-\\u001F\\u007F-\\u009F]{1,256}:scheduled)$"}),
        )
        .parameter(
            "header",
            "Last-Event-ID",
            false,
            "On an agent's topic: the `fire_id` of the last reminder received; every retained fire after it is replayed.",
            json!({"type": "string"}),
        )
        .error(400, "invalid_query")
        .error(400, "invalid_topic")
        .raw_answer(
            200,
            json!({
                "description": "The stream: `id:`, `event:` and `data:` (the event's JSON) lines per event.",
                // Without OpenAPI 3.2's `itemSchema`, the schema of an event stream describes one event.
                "content": {"text/event-stream": {"schema": schema("ServerSentEvent")}},
            }),
        )
        .error(429, "too_many_streams")
        .error(503, "too_many_streams")
}

fn inbound_webhook() -> Operation {
    Operation::new("inboundWebhook", "agents", "Receive an inbound webhook", Auth::Open)
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
        .with_any_body()
        .reads_body()
        .answer(202, "Verified; a delivery is stored and tried at once.", schema("InboundAccepted"))
        .answer(
            200,
            "Verified, and the same request (its `webhook-id`, or its `X-Observatory-Signature` and body) was \
             accepted within the last 24 h: nothing is stored; `delivery_id` is the first one's.",
            schema("InboundDuplicate"),
        )
        .errors(401, &["signature_mismatch", "timestamp_required"])
        .error(404, "unknown_webhook")
        .error(503, "store_unavailable")
}

impl Operation {
    /// Any bytes: the inbound body is kept as sent (embedded as JSON when it is JSON).
    fn with_any_body(mut self) -> Self {
        self.fields.insert(
            "requestBody".into(),
            json!({"required": false, "content": {
                "application/json": {"schema": {}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            }}),
        );
        self
    }
}

/// The whole document.
pub fn document() -> Value {
    let paths: Map<String, Value> = paths()
        .into_iter()
        .map(|(path, operations)| {
            let opaque_body = path == INBOUND_WEBHOOK_PATH;
            let item: Map<String, Value> = operations
                .into_iter()
                .map(|(method, operation)| {
                    // Every write may find the storage full (docs/operations.md, "Failure modes").
                    let operation = match method {
                        "post" | "put" | "patch" | "delete" => operation.error(507, "insufficient_storage"),
                        _ => operation,
                    };
                    (method.to_owned(), operation.at_the_edge(method, opaque_body).into_value())
                })
                .collect();
            (path.to_owned(), Value::Object(item))
        })
        .collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Agent Gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Heartbeats, DecisionLogs, reminders and webhooks of a network of agents (docs/api.md). \
                Every error body is `{\"status\":\"error\",\"reason\":\"<snake_case>\",\"detail\":…}`; `detail` \
                names fields and limits, never request values. Besides what each operation lists: an unknown path \
                is 404 `not_found`; a known path with another method is 405 `method_not_allowed` with `Allow`; \
                a tool the gateway does not have is 404 `unknown_tool`; a write that conflicts with a concurrent \
                one may be 409 `conflict`; a write while the gateway's storage is full is 507 `insufficient_storage` (nothing \
                written; reads still answer); a bug is 500 `internal_error`. A body without `Content-Type` is read as JSON; one \
                with another type than JSON is 415 (inbound webhooks excepted). A client address holding \
                `--max-connections-per-address` connections gets 503 `too_many_connections` and the close before \
                its request is read. Every answer carries `X-Content-Type-Options: nosniff`, and all but the \
                console's files `Cache-Control: no-store`.",
            "license": {"name": "See the repository", "identifier": "MIT"},
        },
        "tags": [
            {"name": "agents", "description": "What agents call."},
            {"name": "operator", "description": "Agents and credentials, for the operator."},
            {"name": "webhooks", "description": "Inbound and outbound webhooks (docs/webhooks.md)."},
            {"name": "cron", "description": "Recurring jobs and reminders (docs/scheduler.md)."},
            {"name": "probes", "description": "Liveness, readiness, this document and the console's files; no token."},
        ],
        "paths": paths,
        "components": components(),
    })
}

fn components() -> Value {
    json!({
        "securitySchemes": {
            "operatorToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "The admin token (`--admin-token`).",
            },
            "agentToken": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "agt_<credential_id>_<64 hex digits>",
                "description": "An agent's token, issued by the operator; needed only while agent auth is on \
                    (`--agent-auth`). With it off, no token is asked for and any is ignored.",
            },
        },
        "headers": {
            "RetryAfter": {"description": "Seconds to wait before retrying (429: until the agent's window ends).", "schema": {"type": "integer", "minimum": 1}},
            "IdempotentReplayed": {"description": "The answer of an earlier request.", "schema": {"type": "string", "const": "true"}},
        },
        "schemas": schemas(),
    })
}

fn schemas() -> Map<String, Value> {
    let timestamp = json!({"type": "string", "format": "date-time"});
    let nullable_timestamp = json!({"type": ["string", "null"], "format": "date-time"});
    let id = int64();
    let text = |max: u64| json!({"type": "string", "minLength": 1, "maxLength": max});
    [
        ("Error", json!({
                "type": "object",
                "required": ["status", "reason"],
                "additionalProperties": false,
                "properties": {
                    "status": {"const": "error"},
                    "reason": {"type": "string", "pattern": "^[a-z_]+$"},
                    "detail": {"type": "string"},
                },
            })),
        ("StatusOk", json!({
                "type": "object", "required": ["status"], "additionalProperties": false,
                "properties": {"status": {"const": "ok"}},
            })),
        ("AgentId", json!({"type": "string", "minLength": 1, "maxLength": 256, "pattern": NO_CONTROL_CHARACTERS, "description": "At most 256 bytes, no control characters."})),
        ("Role", json!({"enum": ["leader", "follower", "single"]})),
        ("Ready", json!({
                "type": "object", "required": ["status", "role"], "additionalProperties": false,
                "properties": {"status": {"const": "ready"}, "role": schema("Role"), "checks": schema("ReadinessChecks")},
            })),
        ("NotReady", json!({
                "type": "object", "required": ["status", "reason", "not_ready", "role"], "additionalProperties": false,
                "properties": {
                    "status": {"const": "error"},
                    "reason": {"const": "not_ready"},
                    "not_ready": {"type": "array", "items": {"type": "string"}},
                    "role": schema("Role"),
                    "checks": schema("ReadinessChecks"),
                },
            })),
        ("ReadinessChecks", json!({
                "type": "object", "required": ["store", "components"], "additionalProperties": false,
                "properties": {
                    "store": {
                        "type": "object", "required": ["healthy", "problem"], "additionalProperties": false,
                        "properties": {"healthy": {"type": "boolean"}, "problem": {"type": ["string", "null"]}},
                    },
                    "components": {"type": "array", "items": {
                        "type": "object", "required": ["component", "running", "healthy"], "additionalProperties": false,
                        "properties": {
                            "component": {"type": "string"},
                            "running": {"type": "boolean"},
                            "healthy": {"type": "boolean"},
                            "problem": {"type": "string"},
                        },
                    }},
                },
            })),
        ("ClusterView", json!({
                "type": "object", "required": ["instance_id", "role", "leader", "redis"], "additionalProperties": false,
                "properties": {
                    "instance_id": {"type": "string"},
                    "role": schema("Role"),
                    "leader": {"oneOf": [{"type": "null"}, {
                        "type": "object", "required": ["instance_id", "epoch", "since"], "additionalProperties": false,
                        "properties": {
                            "instance_id": {"type": "string"},
                            "epoch": {"type": ["integer", "null"], "minimum": 0},
                            "since": nullable_timestamp,
                        },
                    }]},
                    "redis": {"enum": ["ok", "unreachable", "none"]},
                },
            })),
        ("Heartbeat", json!({
                "type": "object",
                "required": ["type", "agent_id", "cluster_id"],
                "properties": {
                    "type": {"const": "heartbeat"},
                    "agent_id": schema("AgentId"),
                    "cluster_id": name(256),
                    "timestamp": {"maxLength": 256, "description": "RFC 3339 UTC; the receipt time when missing, not a string or not RFC 3339 UTC (a string over 256 bytes is refused)."},
                },
            })),
        ("DecisionLog", json!({
                "type": "object",
                "description": "Six optional sections; required fields apply within a present section. A `null` section or optional field counts as absent; other fields are ignored.",
                "properties": {
                    "meta": {"type": ["object", "null"], "required": ["trace_id", "timestamp"], "properties": {
                        "trace_id": {"type": "string", "minLength": 1},
                        "timestamp": {"type": "string", "format": "date-time", "description": "ISO-8601 UTC."},
                        "parent_step_id": {"type": "string"},
                        "cluster_id": {"type": "string"},
                    }},
                    "identity": {"type": ["object", "null"], "required": ["agent_id", "agent_type", "capability_version"], "properties": {
                        "agent_id": schema("AgentId"),
                        "agent_type": text(256),
                        "capability_version": text(256),
                    }},
                    "cognition": {"type": ["object", "null"], "required": ["intent"], "properties": {
                        "intent": {"type": "string", "minLength": 1},
                        "reasoning_chain": {"type": "array", "items": {"type": "string"}},
                        "confidence_score": {"type": "number"},
                        "strategy_used": {"type": "string"},
                        "entropy_score": {"type": "number"},
                    }},
                    "action": {"type": ["object", "null"], "required": ["status"], "properties": {
                        "status": {"enum": ["success", "failure", "pending", "skipped"]},
                        "tool_call": {"type": "string"},
                        "tool_input": {"type": ["object", "string"], "description": "An object, or a string holding JSON. For `schedule_reminder`: `delay_ms` and `payload`."},
                        "tool_output_summary": {"type": "string"},
                    }},
                    "state_delta": {"type": ["object", "null"], "properties": {
                        "added_to_memory": {"type": "array", "items": {"type": "string"}},
                        "tokens_consumed": {"type": "integer", "minimum": 0},
                        "cumulative_session_cost": {"type": "number"},
                    }},
                    "control": {"type": ["object", "null"], "properties": {
                        "hitl_required": {"type": "boolean", "default": false},
                        "interrupt_signal": {},
                        "is_terminal": {"type": "boolean", "default": false},
                    }},
                },
            })),
        ("ServerSentEvent", json!({
                "type": "object",
                "description": "One event of a stream (comments such as `: connected` and keep-alives are not events).",
                "required": ["event", "data"],
                "properties": {
                    "event": {"enum": [
                        "decision_log", "schema_violation", "reminder", "agent_evicted", "webhook_delivery_status",
                        "webhook_dlq", "webhook_signature_failure", "lagged",
                    ]},
                    "id": {"type": "string", "description": "The event's id (a reminder's `fire_id`); `lagged` has none."},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "description": "The event as JSON: `event_type`, `id`, `timestamp` and its fields; for `lagged`, `{\"missed\":N}`.",
                    },
                },
            })),
        ("MessageAccepted", json!({
                "type": "object", "required": ["status", "trace_id"], "additionalProperties": false,
                "properties": {"status": {"const": "accepted"}, "trace_id": {"type": ["string", "null"]}},
            })),
        ("MessageRejected", json!({
                "type": "object", "required": ["status", "reason", "detail", "trace_id"], "additionalProperties": false,
                "properties": {
                    "status": {"const": "rejected"},
                    "reason": {"const": "schema_violation"},
                    "detail": {"type": "string"},
                    "trace_id": {"type": ["string", "null"]},
                },
            })),
        ("LiveAgent", json!({
                "type": "object", "required": ["agent_id", "cluster_id", "last_seen", "capabilities"], "additionalProperties": false,
                "properties": {
                    "agent_id": {"type": "string"},
                    "cluster_id": {"type": "string"},
                    "last_seen": timestamp,
                    "capabilities": {"oneOf": [{"type": "null"}, {
                        "type": "object", "required": ["agent_type", "capability_version", "updated_at"], "additionalProperties": false,
                        "properties": {"agent_type": {"type": "string"}, "capability_version": {"type": "string"}, "updated_at": timestamp},
                    }]},
                },
            })),
        ("AgentPage", json!({
                "type": "object", "required": ["agents", "next_after"], "additionalProperties": false,
                "properties": {"agents": {"type": "array", "items": schema("LiveAgent")}, "next_after": {"type": ["string", "null"]}},
            })),
        ("MailboxPage", json!({
                "type": "object", "required": ["reminders"], "additionalProperties": false,
                "properties": {"reminders": {"type": "array", "items": {
                    "type": "object", "required": ["fire_id", "job_id", "payload", "scheduled_for", "fired_at"], "additionalProperties": false,
                    "properties": {
                        "fire_id": {"type": "string"},
                        "job_id": id,
                        "payload": {"type": "object"},
                        "scheduled_for": timestamp,
                        "fired_at": timestamp,
                    },
                }}},
            })),
        ("IssuedCredential", json!({
                "type": "object", "required": ["credential_id", "token", "agent_id", "created_at", "expires_at"], "additionalProperties": false,
                "properties": {
                    "credential_id": {"type": "string", "pattern": "^[0-9a-f]{24}$"},
                    "token": {"type": "string", "pattern": "^agt_[0-9a-f]{24}_[0-9a-f]{64}$"},
                    "agent_id": {"type": "string"},
                    "created_at": timestamp,
                    "expires_at": nullable_timestamp,
                },
            })),
        ("Credential", json!({
                "type": "object", "required": ["credential_id", "agent_id", "created_at", "revoked_at", "expires_at"], "additionalProperties": false,
                "properties": {
                    "credential_id": {"type": "string", "pattern": "^[0-9a-f]{24}$"},
                    "agent_id": {"type": "string"},
                    "created_at": timestamp,
                    "revoked_at": nullable_timestamp,
                    "expires_at": nullable_timestamp,
                },
            })),
        ("RevokedCredential", json!({
                "type": "object", "required": ["status", "credential_id", "agent_id", "created_at", "revoked_at", "expires_at"], "additionalProperties": false,
                "properties": {
                    "status": {"const": "revoked"},
                    "credential_id": {"type": "string", "pattern": "^[0-9a-f]{24}$"},
                    "agent_id": {"type": "string"},
                    "created_at": timestamp,
                    "revoked_at": timestamp,
                    "expires_at": nullable_timestamp,
                },
            })),
        ("CredentialPage", json!({
                "type": "object", "required": ["credentials", "next_after"], "additionalProperties": false,
                "properties": {
                    "credentials": {"type": "array", "items": schema("Credential")},
                    "next_after": {"type": ["string", "null"]},
                },
            })),
        ("InboundAccepted", json!({
                "type": "object", "required": ["status", "delivery_id"], "additionalProperties": false,
                "properties": {"status": {"const": "accepted"}, "delivery_id": id},
            })),
        ("InboundDuplicate", json!({
                "type": "object", "required": ["status", "delivery_id"], "additionalProperties": false,
                "properties": {"status": {"const": "duplicate"}, "delivery_id": id},
            })),
        ("WebhookConfigCreate", json!({
                "type": "object",
                "required": ["source_identifier", "event_type", "agent_intent", "target_session", "target_url", "secret"],
                "additionalProperties": false,
                "properties": {
                    "source_identifier": name(256),
                    "event_type": name(256),
                    "agent_intent": name(256),
                    "target_session": name(256),
                    "target_url": {"type": "string", "format": "uri", "maxLength": 2048, "description": "An absolute http(s) URL without credentials."},
                    "secret": secret(),
                    "inbound_secret": inbound_secret(),
                    "inbound_require_timestamp": require_timestamp(),
                },
            })),
        ("WebhookConfig", json!({
                "type": "object",
                "required": ["id", "source_identifier", "event_type", "agent_intent", "target_session", "target_url", "created_at", "secret_rotated_at", "has_inbound_secret", "inbound_secret_rotated_at", "inbound_require_timestamp"],
                "additionalProperties": false,
                "properties": {
                    "id": id,
                    "source_identifier": {"type": "string"},
                    "event_type": {"type": "string"},
                    "agent_intent": {"type": "string"},
                    "target_session": {"type": "string"},
                    "target_url": {"type": "string"},
                    "created_at": timestamp,
                    "secret_rotated_at": {
                        "type": ["string", "null"], "format": "date-time",
                        "description": "When the secret was last changed; the previous one is accepted inbound until 24 h after (unless revoked).",
                    },
                    "has_inbound_secret": {"type": "boolean", "description": "Inbound signatures are verified with the inbound secret, never with `secret`."},
                    "inbound_secret_rotated_at": {
                        "type": ["string", "null"], "format": "date-time",
                        "description": "When the inbound secret was last set or changed; a replaced one is accepted until 24 h after (unless revoked).",
                    },
                    "inbound_require_timestamp": {"type": "boolean"},
                },
            })),
        ("WebhookConfigChange", json!({
                "type": "object", "minProperties": 1, "additionalProperties": false,
                "properties": {
                    "target_url": {"type": "string", "format": "uri", "maxLength": 2048, "description": "An absolute http(s) URL without credentials."},
                    "agent_intent": name(256),
                    "target_session": name(256),
                    "secret": secret(),
                    "inbound_secret": inbound_secret(),
                    "inbound_require_timestamp": require_timestamp(),
                    "revoke_previous": {
                        "type": "boolean",
                        "description": "`true`: the previous secret and the previous inbound secret stop verifying at once (a leaked secret), instead of 24 h after their rotation.",
                    },
                },
            })),
        ("WebhookConfigList", json!({
                "type": "object", "required": ["webhook_configs"], "additionalProperties": false,
                "properties": {"webhook_configs": {"type": "array", "items": schema("WebhookConfig")}},
            })),
        ("Deleted", json!({
                "type": "object", "required": ["status", "id"], "additionalProperties": false,
                "properties": {"status": {"const": "deleted"}, "id": id},
            })),
        ("DeliveryStatus", json!({"enum": ["pending", "delivered", "failed", "dead"]})),
        ("DeliveryCreate", json!({
                "type": "object", "required": ["webhook_id", "session_id", "payload"], "additionalProperties": false,
                "properties": {
                    "webhook_id": id,
                    "session_id": name(256),
                    "payload": {"description": "Any JSON; sent byte for byte as posted."},
                },
            })),
        ("DeliverySummary", json!(delivery(&[]))),
        ("Delivery", json!(delivery(&[("payload", payload()), ("payload_raw", payload_raw())]))),
        ("DeliveryDetail", json!(delivery(&[
                ("payload", payload()),
                ("payload_raw", payload_raw()),
                ("attempts", json!({"type": "array", "items": {
                    "type": "object",
                    "required": ["attempt_number", "started_at", "duration_ms", "status_code", "error_class", "error_detail"],
                    "additionalProperties": false,
                    "properties": {
                        "attempt_number": {"type": "integer", "minimum": 1},
                        "started_at": timestamp,
                        "duration_ms": {"type": "integer", "minimum": 0},
                        "status_code": {"type": ["integer", "null"]},
                        "error_class": {"type": ["string", "null"]},
                        "error_detail": {"type": ["string", "null"]},
                    },
                }})),
            ]))),
        ("DeliveryPage", json!({
                "type": "object", "required": ["deliveries", "next_after_id"], "additionalProperties": false,
                "properties": {
                    "deliveries": {"type": "array", "items": schema("DeliverySummary")},
                    "next_after_id": {"type": ["integer", "null"], "format": "int64"},
                },
            })),
        ("CronJobCreate", json!({
                "type": "object", "required": ["agent_id", "schedule"], "additionalProperties": false,
                "properties": {
                    "agent_id": schema("AgentId"),
                    "schedule": {"type": "string", "minLength": 1, "description": "A cron expression (docs/scheduler.md)."},
                    "payload": {"type": ["object", "null"], "description": "Absent or `null`: `{}`."},
                },
            })),
        ("CronJob", json!({
                "type": "object",
                "required": ["id", "agent_id", "schedule", "next_fire_at", "payload", "is_one_time", "paused"],
                "additionalProperties": false,
                "properties": {
                    "id": id,
                    "agent_id": {"type": "string"},
                    "schedule": {"type": ["string", "null"], "description": "`null` for a one-time reminder."},
                    "next_fire_at": timestamp,
                    "payload": {"type": "object"},
                    "is_one_time": {"type": "boolean"},
                    "paused": {"type": "boolean", "description": "A paused job does not fire until resumed."},
                    "preview": {"type": "array", "items": timestamp, "description": "The next instants; recurring jobs only."},
                },
            })),
        ("CronJobPage", json!({
                "type": "object", "required": ["jobs", "next_after_id"], "additionalProperties": false,
                "properties": {
                    "jobs": {"type": "array", "items": schema("CronJob")},
                    "next_after_id": {"type": ["integer", "null"], "format": "int64"},
                },
            })),
    ]
    .into_iter()
    .map(|(name, schema)| (name.to_owned(), schema))
    .collect()
}

/// A delivery's payload as a JSON value.
fn payload() -> Value {
    json!({"description": "The stored payload as JSON, re-serialized (a string should it not parse)."})
}

/// A delivery's payload as stored: what every attempt sends and signs.
fn payload_raw() -> Value {
    json!({"type": "string", "description": "The stored payload text, byte for byte what is sent and signed."})
}

/// A delivery as the API shows it, with `extra` fields (the payload, the attempts) where an endpoint adds them.
fn delivery(extra: &[(&str, Value)]) -> Value {
    let timestamp = json!({"type": "string", "format": "date-time"});
    let nullable_timestamp = json!({"type": ["string", "null"], "format": "date-time"});
    let id = int64();
    let mut properties = json!({
        "id": id,
        "webhook_id": id,
        "session_id": {"type": "string"},
        "target_url": {"type": "string"},
        "signature": {"type": "string"},
        "status": schema("DeliveryStatus"),
        "attempt_count": {"type": "integer", "minimum": 0},
        "last_attempted_at": nullable_timestamp,
        "next_retry_at": nullable_timestamp,
        "created_at": timestamp,
        "error_detail": {"type": ["string", "null"]},
        "payload_bytes": {"type": "integer", "minimum": 0},
    });
    let mut required: Vec<String> =
        properties.as_object().map(|fields| fields.keys().cloned().collect()).unwrap_or_default();
    for (name, field) in extra {
        properties[*name] = field.clone();
        required.push((*name).to_owned());
    }
    json!({"type": "object", "required": required, "additionalProperties": false, "properties": properties})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in `value`.
    fn references(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                for (key, field) in fields {
                    match field {
                        Value::String(target) if key == "$ref" => found.push(target.clone()),
                        _ => references(field, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| references(item, found)),
            _ => {}
        }
    }

    #[test]
    fn the_document_parses_as_openapi_3_1_and_its_references_resolve() {
        let served: Value = serde_json::from_slice(&DOCUMENT).unwrap();
        assert_eq!(served, document());
        let spec = oas3::from_json(String::from_utf8(DOCUMENT.to_vec()).unwrap()).unwrap();
        assert_eq!(spec.validate_version().unwrap().minor, 1);
        let mut found = Vec::new();
        references(&served, &mut found);
        assert!(found.len() > 50, "the document refers to its components");
        for target in found {
            let pointer = target.strip_prefix('#').unwrap_or_else(|| panic!("{target} is not local"));
            assert!(served.pointer(pointer).is_some(), "{target} names nothing");
        }
        let mut operation_ids = Vec::new();
        for (path, method, operation) in spec.operations() {
            let id = operation.operation_id.clone().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(!operation_ids.contains(&id), "operationId {id} is given twice");
            operation_ids.push(id);
            assert!(!operation.responses.as_ref().is_none_or(|responses| responses.is_empty()), "{method} {path}");
        }
    }

    #[test]
    fn every_operation_lists_the_edges_refusals_where_it_can_meet_them() {
        let document = document();
        let reasons = |operation: &Value, status: &str| -> String { operation["responses"][status].to_string() };
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                assert!(reasons(operation, "421").contains("misdirected_request"), "{method} {path}");
                assert!(reasons(operation, "403").contains("cross_origin"), "{method} {path}");
                let json_body = method != "get" && path != INBOUND_WEBHOOK_PATH;
                assert_eq!(reasons(operation, "415").contains("unsupported_media_type"), json_body, "{method} {path}");
                if operation.get("requestBody").is_some() {
                    let overloaded = &operation["responses"]["503"];
                    assert!(overloaded.to_string().contains("overloaded"), "{method} {path}");
                    assert!(overloaded["headers"].get("Retry-After").is_some(), "{method} {path}");
                }
            }
        }
    }

    #[test]
    fn every_operation_states_who_may_call_it_and_every_refusal_has_a_meaning() {
        let document = document();
        let schemes = document["components"]["securitySchemes"].as_object().unwrap();
        let mut used_reasons = Vec::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                for requirement in operation["security"].as_array().unwrap_or_else(|| panic!("{method} {path}")) {
                    for scheme in requirement.as_object().unwrap().keys() {
                        assert!(schemes.contains_key(scheme), "{method} {path}: no scheme {scheme}");
                    }
                }
                for (status, response) in operation["responses"].as_object().unwrap() {
                    let schema = &response["content"]["application/json"]["schema"];
                    let refusals = schema["allOf"].as_array().into_iter().chain(
                        schema["anyOf"]
                            .as_array()
                            .into_iter()
                            .flat_map(|either| either.iter().filter_map(|one| one["allOf"].as_array())),
                    );
                    for refusal in refusals {
                        for reason in refusal[1]["properties"]["reason"]["enum"].as_array().unwrap() {
                            let reason = reason.as_str().unwrap();
                            assert!(
                                REASONS.iter().any(|(known, _)| *known == reason),
                                "{method} {path} {status}: `{reason}` is not in REASONS"
                            );
                            used_reasons.push(reason.to_owned());
                        }
                    }
                }
            }
        }
        // Refusals no operation lists: a tool that does not exist (the document lists each tool as a path of its
        // own), a write conflict the store reports, and a connection over its address's cap (the document's
        // description says so).
        // A connection refused at its address's cap is answered before any request is read, by no operation.
        let not_per_operation = ["unknown_tool", "conflict", "too_many_connections"];
        for (reason, _) in REASONS {
            assert!(
                used_reasons.iter().any(|used| used == reason) || not_per_operation.contains(reason),
                "`{reason}` is in REASONS but no operation answers with it"
            );
        }
    }
}
