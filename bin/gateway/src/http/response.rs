//! Responses: JSON documents (the bodies are gateway-api's types), and the streaming body of Server-Sent Events.

use std::convert::Infallible;

use bytes::Bytes;
use http::StatusCode;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http_body::Body;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use serde::Serialize;

/// Response header set when a create request was answered from an earlier one with the same `Idempotency-Key`.
pub(crate) const IDEMPOTENT_REPLAYED_HEADER: &str = "idempotent-replayed";

pub(crate) type ResponseBody = BoxBody<Bytes, Infallible>;
pub(crate) type Response = http::Response<ResponseBody>;

pub(crate) fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    // Serializing a JSON value or a plain struct cannot fail: every map key is a string. (`serde_json::to_vec`
    // rather than `Value`'s `Display`: the formatter machinery cost more than the rest of a 200.)
    json_bytes(status, Bytes::from(serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec())))
}

/// A response whose JSON body is already serialized (static bodies cost no serialization at all).
pub(crate) fn json_bytes(status: StatusCode, body: Bytes) -> Response {
    let mut response = http::Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// 201 for a create request that created; 200 with `Idempotent-Replayed: true` for one answered from an earlier
/// request with the same `Idempotency-Key`.
pub(crate) fn created_or_replayed(body: &impl Serialize, replayed: bool) -> Response {
    if !replayed {
        return json_response(StatusCode::CREATED, body);
    }
    let mut response = json_response(StatusCode::OK, body);
    response.headers_mut().insert(IDEMPOTENT_REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

/// A 200 with a text body of `content_type` (a metrics scrape).
pub(crate) fn text_response(content_type: &'static str, body: String) -> Response {
    let mut response = http::Response::new(full(Bytes::from(body)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn full(bytes: Bytes) -> ResponseBody {
    http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// A Server-Sent Events response whose body is `body`.
pub(crate) fn event_stream(body: impl Body<Data = Bytes, Error = Infallible> + Send + Sync + 'static) -> Response {
    let mut response = http::Response::new(body.boxed());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    // Never kept by a cache: an agent's stream carries its reminders (the edge adds nosniff).
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Reverse proxies (nginx) otherwise buffer the stream and events arrive in bursts.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
