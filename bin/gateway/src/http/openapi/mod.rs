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
                let json_body = method != "get" && path != Route::WebhookInbound.path();
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
                                Reason::ALL.iter().any(|known| known.as_str() == reason),
                                "{method} {path} {status}: `{reason}` is not a Reason"
                            );
                            used_reasons.push(reason.to_owned());
                        }
                    }
                }
            }
        }
        // Refusals no operation lists: a tool that does not exist (the document lists each tool as a path of its
        // own), a write conflict the store reports, and a connection over its address's cap (the document's
        // description says so); a known path's other method, and a bug (the description says so too); a
        // reminder's delay that is not positive, which the tools refuse as `invalid_field` before the scheduler
        // could.
        // A connection refused at its address's cap is answered before any request is read, by no operation.
        let not_per_operation = [
            "unknown_tool",
            "conflict",
            "too_many_connections",
            "method_not_allowed",
            "internal_error",
            "invalid_delay",
        ];
        for reason in Reason::ALL.iter().map(|reason| reason.as_str()) {
            assert!(
                used_reasons.iter().any(|used| used == reason) || not_per_operation.contains(&reason),
                "`{reason}` is a Reason but no operation answers with it"
            );
        }
    }

    /// The document is made from the route table: each route's path (each tool's, for the tool route) holds
    /// exactly the route's methods, and each operation describes every parameter of its path.
    #[test]
    fn the_document_shows_each_route_of_the_table_with_its_methods_and_path_parameters() {
        let document = document();
        let paths = document["paths"].as_object().unwrap();
        let mut shown = 0;
        for &route in Route::ALL {
            let served: Vec<String> =
                route.operations().iter().map(|(method, _)| method.as_str().to_lowercase()).collect();
            let documented: Vec<&str> = if route == Route::Tool {
                gateway_cron::ToolName::ALL.iter().map(|tool| tool.as_str()).collect()
            } else {
                vec![""]
            };
            for value in documented {
                let path =
                    if value.is_empty() { route.path().to_owned() } else { route.path().replace("{tool_name}", value) };
                let item = paths[&path].as_object().unwrap_or_else(|| panic!("{path} is not in the document"));
                let mut methods: Vec<&String> = item.keys().collect();
                let mut expected: Vec<&String> = served.iter().collect();
                methods.sort();
                expected.sort();
                assert_eq!(methods, expected, "{path}");
                shown += 1;
                let parameters: Vec<&str> =
                    path.split('/').filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}')).collect();
                for (method, operation) in item {
                    let described: Vec<&str> = operation["parameters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|parameter| parameter["in"] == "path")
                        .map(|parameter| parameter["name"].as_str().unwrap())
                        .collect();
                    assert_eq!(described, parameters, "{method} {path}: the path's parameters");
                }
            }
        }
        assert_eq!(shown, paths.len(), "every path of the document is a route's");
    }
}
