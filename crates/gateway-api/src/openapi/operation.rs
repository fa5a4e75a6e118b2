//! One operation of the document, built up from what it reads, answers and refuses: each handler's module states
//! only that (its `…_doc` functions), and the document adds who may call it (the route table's [`Access`]) and
//! the refusals every operation of its kind may meet (the edge's, a full storage's).
//!
//! Bodies are named by their types: `json_body::<T>`, `answer::<T>` refer to `T`'s schema, derived from `T`
//! (`utoipa::ToSchema`), and collect it for the document's components, so a body's schema is never written
//! beside its type.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

use crate::Reason;
use crate::openapi::Access;

/// The schemas an operation refers to, by component name.
pub type Components = BTreeMap<String, Value>;

/// One operation of a path.
#[derive(Debug)]
pub struct Operation {
    fields: Map<String, Value>,
    parameters: Vec<Value>,
    answers: BTreeMap<u16, Value>,
    errors: BTreeMap<u16, Vec<Reason>>,
    components: Components,
}

/// `T`'s schema as JSON.
fn json_of(schema: RefOr<Schema>) -> Value {
    // A schema is plain data: its serialization cannot fail.
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// A reference to the component named `name`.
pub fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

impl Operation {
    pub fn new(operation_id: &str, tag: &str, summary: &str) -> Self {
        let mut fields = Map::new();
        fields.insert("operationId".into(), operation_id.into());
        fields.insert("tags".into(), json!([tag]));
        fields.insert("summary".into(), summary.into());
        Self {
            fields,
            parameters: Vec::new(),
            answers: BTreeMap::new(),
            errors: BTreeMap::new(),
            components: Components::new(),
        }
    }

    /// `T` as a component (and the components it refers to); returns the reference to it.
    fn component<T: ToSchema>(&mut self) -> Value {
        self.dependencies::<T>();
        let name = T::name();
        self.components.insert(name.to_string(), json_of(T::schema()));
        reference(&name)
    }

    /// `T`'s schema written out where it is used; the components it refers to are collected.
    fn inline<T: ToSchema>(&mut self) -> Value {
        self.dependencies::<T>();
        json_of(T::schema())
    }

    fn dependencies<T: ToSchema>(&mut self) {
        let mut found = Vec::new();
        T::schemas(&mut found);
        for (name, schema) in found {
            self.components.insert(name, json_of(schema));
        }
    }

    /// Who may call it, and the refusals that brings (put first, as every operation meets them before its own).
    pub(super) fn secured(mut self, access: Access) -> Self {
        let security = match access {
            Access::Open => json!([]),
            Access::OptionalOperator => json!([{}, {"operatorToken": []}]),
            Access::Operator => json!([{"operatorToken": []}]),
            Access::Agent => json!([{"agentToken": []}, {}]),
            Access::AgentOrOperator => json!([{"agentToken": []}, {"operatorToken": []}, {}]),
        };
        self.fields.insert("security".into(), security);
        let own = std::mem::take(&mut self.errors);
        let operation = match access {
            Access::Open | Access::OptionalOperator => self,
            Access::Operator => self.error(401, Reason::Unauthorized),
            // Agent tokens are looked up in the store (503 when it cannot be read).
            Access::Agent | Access::AgentOrOperator => self
                .errors(401, &[Reason::Unauthorized, Reason::TokenExpired])
                .error(403, Reason::IdentityMismatch)
                .error(429, Reason::TooManyRefusals)
                .error(503, Reason::StoreUnavailable),
        };
        own.into_iter().fold(operation, |operation, (status, reasons)| operation.errors(status, &reasons))
    }

    pub fn describe(mut self, description: &str) -> Self {
        self.fields.insert("description".into(), description.into());
        self
    }

    pub fn parameter(mut self, location: &str, name: &str, required: bool, description: &str, schema: Value) -> Self {
        self.parameters.push(json!({
            "name": name, "in": location, "required": required, "description": description, "schema": schema,
        }));
        self
    }

    /// A parameter whose schema is the component `T`.
    pub fn parameter_of<T: ToSchema>(mut self, location: &str, name: &str, required: bool, description: &str) -> Self {
        let schema = self.component::<T>();
        self.parameter(location, name, required, description, schema)
    }

    /// An integer id in the path (any other text is the same 404 as an id that names nothing).
    pub fn path_id(self, name: &str, description: &str) -> Self {
        self.parameter("path", name, true, description, crate::fields::int64())
    }

    pub fn query(self, name: &str, description: &str, schema: Value) -> Self {
        self.parameter("query", name, false, description, schema).error(400, Reason::InvalidQuery)
    }

    /// A query parameter whose schema is the component `T`.
    pub fn query_of<T: ToSchema>(self, name: &str, description: &str) -> Self {
        self.parameter_of::<T>("query", name, false, description).error(400, Reason::InvalidQuery)
    }

    /// `limit` from 1 to `max` (default `default`).
    pub fn limit(self, default: usize, max: usize) -> Self {
        self.query("limit", "Page size.", json!({"type": "integer", "minimum": 1, "maximum": max, "default": default}))
    }

    pub fn idempotency_key(self) -> Self {
        self.parameter(
            "header",
            "Idempotency-Key",
            false,
            "Makes a retried create safe: the same key with the same request is answered from the first one (200, \
             `Idempotent-Replayed: true`).",
            json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}),
        )
        .error(400, Reason::InvalidIdempotencyKey)
        .error(422, Reason::IdempotencyKeyReused)
    }

    /// A body is read: it may be malformed, slow or too large, or the body budget may be full.
    pub fn reads_body(self) -> Self {
        self.error(400, Reason::InvalidJson)
            .error(400, Reason::InvalidBody)
            .error(408, Reason::RequestTimeout)
            .error(413, Reason::PayloadTooLarge)
            .error(503, Reason::Overloaded)
    }

    /// The edge's refusals (gateway-edge), which any operation may meet: on a loopback listener without agent auth
    /// a foreign `Host` (421) or `Origin` (403); on every method that may carry a body, except where the route
    /// takes any body (the inbound webhook), a body that is not JSON (415).
    pub(super) fn at_the_edge(self, method: &str, any_body: bool) -> Self {
        let operation = self.error(421, Reason::MisdirectedRequest).error(403, Reason::CrossOrigin);
        if method == "get" || any_body { operation } else { operation.error(415, Reason::UnsupportedMediaType) }
    }

    /// A JSON body of type `T` (its component); read as an object field by field (a body that is JSON but not an
    /// object is 422).
    pub fn json_body<T: ToSchema>(mut self, required: bool) -> Self {
        let schema = self.component::<T>();
        self.body_schema(schema, required)
    }

    /// A JSON body of type `T`, its schema written out in the operation.
    pub fn json_body_inline<T: ToSchema>(mut self, required: bool) -> Self {
        let schema = self.inline::<T>();
        self.body_schema(schema, required)
    }

    fn body_schema(mut self, schema: Value, required: bool) -> Self {
        self.fields.insert(
            "requestBody".into(),
            json!({"required": required, "content": {"application/json": {"schema": schema}}}),
        );
        self.reads_body()
    }

    /// Any bytes: the inbound body is kept as sent (embedded as JSON when it is JSON).
    pub fn any_body(mut self) -> Self {
        self.fields.insert(
            "requestBody".into(),
            json!({"required": false, "content": {
                "application/json": {"schema": {}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            }}),
        );
        self.reads_body()
    }

    /// An example of the JSON body (sent as it is by fuzzers' example phase).
    pub fn example(mut self, example: Value) -> Self {
        if let Some(body) = self.fields.get_mut("requestBody") {
            body["content"]["application/json"]["example"] = example;
        }
        self
    }

    /// A link from the answer of `status` to another operation, its parameters taken from the answer.
    pub fn link(mut self, status: u16, operation_id: &str, parameters: Value) -> Self {
        if let Some(answer) = self.answers.get_mut(&status) {
            if answer.get("links").is_none() {
                answer["links"] = json!({});
            }
            answer["links"][operation_id] = json!({"operationId": operation_id, "parameters": parameters});
        }
        self
    }

    /// A JSON answer of type `T` (its component).
    pub fn answer<T: ToSchema>(mut self, status: u16, description: &str) -> Self {
        let schema = self.component::<T>();
        self.answer_schema(status, description, schema, Value::Null)
    }

    /// A JSON answer of type `T` (its component) with `headers`.
    pub fn answer_with_headers<T: ToSchema>(mut self, status: u16, description: &str, headers: Value) -> Self {
        let schema = self.component::<T>();
        self.answer_schema(status, description, schema, headers)
    }

    /// A JSON answer of type `T`, its schema written out in the operation, with `headers`.
    pub fn answer_inline<T: ToSchema>(mut self, status: u16, description: &str, headers: Value) -> Self {
        let schema = self.inline::<T>();
        self.answer_schema(status, description, schema, headers)
    }

    /// An answer that is not one of the API's JSON bodies (a file, a stream, the scrape), described as it is.
    pub fn raw_answer(mut self, status: u16, response: Value) -> Self {
        self.answers.insert(status, response);
        self
    }

    fn answer_schema(mut self, status: u16, description: &str, schema: Value, headers: Value) -> Self {
        let mut response = json!({"description": description, "content": {"application/json": {"schema": schema}}});
        if headers.as_object().is_some_and(|headers| !headers.is_empty()) {
            response["headers"] = headers;
        }
        self.answers.insert(status, response);
        self
    }

    /// The component `T`, for a raw answer that refers to it.
    pub fn with_component<T: ToSchema>(mut self) -> Self {
        self.component::<T>();
        self
    }

    pub fn error(mut self, status: u16, reason: Reason) -> Self {
        let reasons = self.errors.entry(status).or_default();
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
        self
    }

    pub fn errors(self, status: u16, reasons: &[Reason]) -> Self {
        reasons.iter().fold(self, |operation, reason| operation.error(status, *reason))
    }

    /// The operation object, and the components it refers to.
    pub(super) fn into_value(self) -> (Value, Components) {
        let Self { mut fields, parameters, mut answers, errors, components } = self;
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
        (Value::Object(fields), components)
    }
}

/// The error body with `reason` one of `reasons`; a 429 `rate_limited` or `too_many_refusals` and a 503
/// `overloaded` carry `Retry-After`.
fn error_response(reasons: &[Reason]) -> Value {
    let description =
        reasons.iter().map(|reason| format!("`{reason}`: {}.", reason.meaning())).collect::<Vec<_>>().join(" ");
    let names: Vec<&str> = reasons.iter().map(|reason| reason.as_str()).collect();
    let schema = json!({"allOf": [
        reference("Error"),
        {"properties": {"reason": {"enum": names}}},
    ]});
    let mut response = json!({"description": description, "content": {"application/json": {"schema": schema}}});
    let retry_after = [Reason::RateLimited, Reason::TooManyRefusals, Reason::Overloaded];
    if reasons.iter().any(|reason| retry_after.contains(reason)) {
        response["headers"] = json!({"Retry-After": {"$ref": "#/components/headers/RetryAfter"}});
    }
    response
}
