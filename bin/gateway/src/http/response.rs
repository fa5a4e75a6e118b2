//! Response bodies: JSON documents, and the streaming body of Server-Sent Events.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use tokio::sync::mpsc;

/// Response header set when a create request was answered from an earlier one with the same `Idempotency-Key`.
pub const IDEMPOTENT_REPLAYED_HEADER: &str = "idempotent-replayed";

pub type ResponseBody = BoxBody<Bytes, Infallible>;
pub type Response = http::Response<ResponseBody>;

pub fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    let mut response = http::Response::new(full(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// 201 for a create request that created; 200 with `Idempotent-Replayed: true` for one answered from an earlier
/// request with the same `Idempotency-Key`.
pub fn created_or_replayed(body: &serde_json::Value, replayed: bool) -> Response {
    if !replayed {
        return json_response(StatusCode::CREATED, body);
    }
    let mut response = json_response(StatusCode::OK, body);
    response.headers_mut().insert(IDEMPOTENT_REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

fn full(bytes: Bytes) -> ResponseBody {
    http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// A response whose body is whatever chunks arrive on `chunks`, ending when the sender is dropped.
pub fn event_stream(chunks: mpsc::Receiver<Bytes>) -> Response {
    let mut response = http::Response::new(ChannelBody { chunks }.boxed());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Reverse proxies (nginx) otherwise buffer the stream and events arrive in bursts.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[derive(Debug)]
struct ChannelBody {
    chunks: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.chunks.poll_recv(cx).map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}
