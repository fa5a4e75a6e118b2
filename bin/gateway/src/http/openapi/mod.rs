//! `GET /openapi.json`: the OpenAPI 3.1 document of the HTTP API, built by gateway-api from this server's route
//! table (http/routes.rs): every route's path, methods, who may call each and its operation. So the document and
//! the router cannot disagree. It is built once, at the first request, and served as the same bytes after.

use std::sync::OnceLock;

use bytes::Bytes;
use gateway_api::RouteOperation;
use http::StatusCode;
use serde_json::Value;

use crate::http::response::{Response, json_bytes};

static DOCUMENT: OnceLock<Bytes> = OnceLock::new();

/// `GET /openapi.json`, for anyone: it describes the API, not the gateway's data. `operations` are the route
/// table's (the table passes them, so that this module need not know it), read at the first request.
pub(crate) fn get(operations: impl FnOnce() -> Vec<RouteOperation>) -> Response {
    let document = DOCUMENT
        .get_or_init(|| Bytes::from(serde_json::to_vec(&document(operations())).unwrap_or_else(|_| b"{}".to_vec())));
    json_bytes(StatusCode::OK, document.clone())
}

/// The whole document of `operations`, in their order.
pub(crate) fn document(operations: Vec<RouteOperation>) -> Value {
    gateway_api::openapi::document(operations)
}

#[cfg(test)]
mod tests {
    use gateway_api::Reason;

    use super::*;
    use crate::http::routes::Route;

    fn document() -> Value {
        super::document(Route::operations_documented())
    }

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
        get(Route::operations_documented);
        let served: Value = serde_json::from_slice(DOCUMENT.get().unwrap()).unwrap();
        assert_eq!(served, document());
        let spec = oas3::from_json(
            String::from_utf8(DOCUMENT.get_or_init(|| Bytes::from(serde_json::to_vec(&document()).unwrap())).to_vec())
                .unwrap(),
        )
        .unwrap();
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
