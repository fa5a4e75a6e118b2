//! The OpenAPI 3.1 document of the HTTP API (docs/api.md says the same in prose), built from what the server
//! routes.
//!
//! Derived, not written: its paths and operations are the server's route table (each route's path, its methods,
//! who may call each, and the `…_doc` function of each operation, given to [`document`] as [`RouteOperation`]s),
//! and the schemas of the bodies are derived from the body types (`utoipa::ToSchema`), so neither a route nor a
//! body can be missing or differ from what is served. Most of the document is the error responses; each operation
//! states only which refusals it can give ([`Operation::error`], the route's [`Access`],
//! [`Operation::reads_body`]) and the builder turns them into response objects in one shape, with every reason's
//! meaning taken from [`Reason`].

mod operation;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use utoipa::{PartialSchema, ToSchema};

pub use self::operation::{Components, Operation, reference};
use crate::Reason;
use crate::common::ErrorBody;

/// Who may call an operation. The server checks the operator's token before the handler ([`Access::Operator`]);
/// the other kinds are checked by their handlers (an agent's token names the agent the body must name, an event
/// stream decides per topic), and the document states each kind's security and refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone.
    Open,
    /// Anyone; the operator's token adds details.
    OptionalOperator,
    /// The operator's token (checked by the router, before the handler).
    Operator,
    /// The agent the request names, with its own token while agent auth is on; anyone while it is off.
    Agent,
    /// That agent's token or the operator's while agent auth is on; anyone while it is off.
    AgentOrOperator,
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

/// One method of one route, as the server's route table declares it.
#[derive(Debug)]
pub struct RouteOperation {
    /// The route's path, `{name}` for each parameter.
    pub path: &'static str,
    /// The HTTP method (`GET`, `POST`…).
    pub method: &'static str,
    /// Who may call it.
    pub access: Access,
    /// Whether the route takes any body, not only JSON (no 415): the inbound webhook.
    pub opaque_body: bool,
    /// Its operation (the route's `…_doc` function's).
    pub documented: Documented,
}

/// The document's own operation (`GET /openapi.json`).
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
fn paths(routes: impl IntoIterator<Item = RouteOperation>) -> (Map<String, Value>, Components) {
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut components = Components::new();
    for RouteOperation { path: route_path, method, access, opaque_body, documented } in routes {
        let method = method.to_lowercase();
        let instances = match documented {
            Documented::One(operation) => vec![(route_path.to_owned(), operation)],
            Documented::Each { parameter, values } => values
                .into_iter()
                .map(|(value, operation)| (route_path.replace(&format!("{{{parameter}}}"), value), operation))
                .collect(),
        };
        for (path, operation) in instances {
            let (operation, used) = finish(operation, &method, access, opaque_body).into_value();
            components.extend(used);
            paths.entry(path).or_default().insert(method.clone(), operation);
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

/// The whole document of the routes `routes` (every method of every route, in the route table's order).
pub fn document(routes: impl IntoIterator<Item = RouteOperation>) -> Value {
    let (paths, mut schemas) = paths(routes);
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
