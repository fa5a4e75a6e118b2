//! `GET /openapi.json`: the OpenAPI 3.1 document of the HTTP API (docs/api.md says the same in prose).
//!
//! Derived, not written: its paths and operations are the route table's (http/routes.rs: each route's path, its
//! methods, who may call each, and the `…_doc` function beside each handler), and the schemas of the bodies are
//! derived from the body types (`utoipa::ToSchema`), so neither a route nor a body can be missing or differ from
//! what is served. Most of the document is the error responses; each operation states only which refusals it
//! can give ([`Operation::error`], the route's [`Access`], [`Operation::reads_body`]) and the builder turns them
//! into response objects in one shape, with every reason's meaning taken from [`Reason`]. The document is built
//! once, at the first request, and served as the same bytes after.

pub mod fields;
mod operation;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Map, Value, json};
use utoipa::{PartialSchema, ToSchema};

pub use self::operation::{Components, Operation, reference};
use crate::http::error::ErrorBody;
use crate::http::response::{Response, json_bytes};
use crate::http::router::Access;
use crate::http::routes::Route;

use crate::http::reason::Reason;

static DOCUMENT: LazyLock<Bytes> =
    LazyLock::new(|| Bytes::from(serde_json::to_vec(&document()).unwrap_or_else(|_| b"{}".to_vec())));

/// `GET /openapi.json`, for anyone: it describes the API, not the gateway's data.
pub fn get() -> Response {
    json_bytes(StatusCode::OK, DOCUMENT.clone())
}

/// How a route's operation appears in the document.
#[derive(Debug)]
pub enum Documented {
    /// At the route's path.
    One(Operation),
    /// Once per value of the path parameter `parameter`, each at the path with that value written in: the tools,
    /// whose bodies differ per tool.
    Each { parameter: &'static str, values: Vec<(&'static str, Operation)> },
}

impl From<Operation> for Documented {
    fn from(operation: Operation) -> Self {
        Self::One(operation)
    }
}

/// This document's own operation.
pub fn doc() -> Operation {
    Operation::new("openapi", "probes", "This document").raw_answer(
        200,
        json!({
            "description": "The OpenAPI 3.1 document of this API.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }),
    )
}

/// The paths of the route table, each with its operations, and the components they refer to.
fn paths() -> (Map<String, Value>, Components) {
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut components = Components::new();
    for &route in Route::ALL {
        for (method, access, documented) in route.documented() {
            let method = method.as_str().to_lowercase();
            let instances = match documented {
                Documented::One(operation) => vec![(route.path().to_owned(), operation)],
                Documented::Each { parameter, values } => values
                    .into_iter()
                    .map(|(value, operation)| (route.path().replace(&format!("{{{parameter}}}"), value), operation))
                    .collect(),
            };
            for (path, operation) in instances {
                let (operation, used) = finish(operation, &method, access, route.opaque_body()).into_value();
                components.extend(used);
                paths.entry(path).or_default().insert(method.clone(), operation);
            }
        }
    }
    (paths.into_iter().map(|(path, item)| (path, Value::Object(item))).collect(), components)
}

/// What every operation of its kind adds: who may call it, a full storage for writes, the edge's refusals.
fn finish(operation: Operation, method: &str, access: Access, opaque_body: bool) -> Operation {
    let operation = operation.secured(access);
    // Every write may find the storage full (docs/operations.md, "Failure modes").
    let operation = match method {
        "post" | "put" | "patch" | "delete" => operation.error(507, Reason::InsufficientStorage),
        _ => operation,
    };
    operation.at_the_edge(method, opaque_body)
}

/// The whole document.
pub fn document() -> Value {
    let (paths, mut schemas) = paths();
    schemas.insert(ErrorBody::name().into_owned(), serde_json::to_value(ErrorBody::schema()).unwrap_or_default());
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
        "components": {
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
            "schemas": schemas,
        },
    })
}

/// The headers of an answer given again for a repeated `Idempotency-Key` or tool call.
pub fn replayed_header() -> Value {
    json!({"Idempotent-Replayed": {"$ref": "#/components/headers/IdempotentReplayed"}})
}
