//! Reading requests: bounded bodies, JSON objects read field by field, query strings with only known
//! parameters, pages, instants and the `Idempotency-Key` header.
//!
//! Every refusal names the field or parameter and what was expected, never the value the client sent: values
//! may be secrets or customer data, and a detail that repeats them would carry them into logs and dashboards.

use std::collections::BTreeMap;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use gateway_edge::{BodyBudget, Reservation};
use http::StatusCode;
use http::header::CONTENT_LENGTH;
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::http::error::ApiError;
use gateway_api::Reason;

/// Largest accepted request body (the contract's 1 MiB).
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;
/// A client that has not sent its whole body by then is cut off, so slow senders cannot hold connections.
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Request header naming a create request's idempotency key.
pub(crate) const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

pub(crate) type Request = http::Request<RequestBody>;

/// A request's body as hyper delivers it, with the budget its bytes are read against.
#[derive(Debug)]
pub(crate) struct RequestBody {
    incoming: Incoming,
    /// `None` for a body known to be empty (no `Content-Length` or 0, not chunked): there is nothing to count, and
    /// a request without a body (most `GET`s) costs the budget nothing.
    budget: Option<Arc<BodyBudget>>,
}

impl RequestBody {
    pub(crate) fn new(incoming: Incoming, budget: &Arc<BodyBudget>) -> Self {
        let budget = (!incoming.is_end_stream()).then(|| Arc::clone(budget));
        Self { incoming, budget }
    }

    /// Whether the request has a body to read (one that may still turn out empty: `chunked` with no chunk).
    pub(crate) fn is_present(&self) -> bool {
        self.budget.is_some()
    }
}

/// The whole body, at most [`MAX_BODY_BYTES`]. A declared length over the limit is refused before reading (413),
/// and so is one the body budget cannot hold beside the bodies being read (503 `overloaded`).
///
/// The head is looked at and dropped before the returned future, which so holds only the body: handlers' futures
/// hold it while they await it, and hyper moves those several times per request.
pub(crate) fn read_body(request: Request) -> impl Future<Output = Result<Bytes, ApiError>> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let too_large = declared.is_some_and(|length| length > MAX_BODY_BYTES as u64);
    // At most MAX_BODY_BYTES once `too_large` is ruled out.
    let declared = declared.and_then(|length| usize::try_from(length).ok());
    let RequestBody { incoming, budget } = request.into_body();
    async move {
        if too_large {
            return Err(ApiError::payload_too_large(MAX_BODY_BYTES));
        }
        let Some(budget) = budget else { return Ok(Bytes::new()) };
        // A declared length is reserved whole before the first byte is read: a client that sends the head and
        // holds the body back still holds what its body will take. A chunked body reserves as it grows.
        let reservation = budget.reserve(declared.unwrap_or(0))?;
        let mut gather = pin!(gather(incoming, reservation, declared));
        // A small body usually arrives with the head and is complete on the first poll: no deadline is computed
        // and no timer entry built and dropped for it (about 200 instructions per request). One that is still
        // arriving gets the whole timeout from here.
        match poll_fn(|cx| Poll::Ready(gather.as_mut().poll(cx))).await {
            Poll::Ready(gathered) => gathered,
            Poll::Pending => tokio::time::timeout(BODY_READ_TIMEOUT, gather)
                .await
                .unwrap_or_else(|_| Err(ApiError::new(StatusCode::REQUEST_TIMEOUT, Reason::RequestTimeout))),
        }
    }
}

/// The body's data, refused once it passes [`MAX_BODY_BYTES`] or once its buffer would pass what `reservation`
/// can hold. A body in one frame (the usual small one) is that frame's bytes as they are: a slice of hyper's
/// connection buffer (at most [`crate::http::CONNECTION_BUFFER_BYTES`], counted with the connection), so its
/// reservation ends here. A body of several frames is copied into one buffer, sized once to a declared length
/// (else doubled as it grows, up to the limit); the reservation covers that buffer's capacity and travels with
/// the returned bytes, ending when the handler drops them.
async fn gather(mut body: Incoming, mut reservation: Reservation, declared: Option<usize>) -> Result<Bytes, ApiError> {
    let mut first = Bytes::new();
    let mut joined: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, Reason::InvalidBody))?;
        // Trailers carry nothing a handler reads.
        let Ok(data) = frame.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        let so_far = if joined.is_empty() { first.len() } else { joined.len() };
        let total = so_far + data.len();
        if total > MAX_BODY_BYTES {
            return Err(ApiError::payload_too_large(MAX_BODY_BYTES));
        }
        if so_far == 0 {
            reservation.cover(total)?;
            first = data;
            continue;
        }
        if total > joined.capacity() {
            let doubled = joined.capacity().saturating_mul(2).min(MAX_BODY_BYTES);
            let capacity = declared.unwrap_or(doubled).max(total);
            reservation.cover(capacity)?;
            joined.reserve_exact(capacity - joined.len());
            if joined.is_empty() {
                joined.extend_from_slice(&std::mem::take(&mut first));
            }
        }
        joined.extend_from_slice(&data);
    }
    if joined.is_empty() {
        return Ok(first);
    }
    Ok(Bytes::from_owner(ReadBody { bytes: joined, _reservation: reservation }))
}

/// A body read from several frames, holding its place in the body budget for as long as it is kept.
struct ReadBody {
    bytes: Vec<u8>,
    _reservation: Reservation,
}

impl AsRef<[u8]> for ReadBody {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// `body` as a JSON value; 400 `invalid_json` when it is not one.
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|_| ApiError::invalid_json())
}

/// A JSON object body, its fields taken one by one with their expected types, then [`Self::finish`] refuses
/// whatever is left: an unknown field is a typo the client should hear about, not something silently dropped.
/// Each field is kept as the client's exact text until it is taken, so a payload can be stored byte for byte.
#[derive(Debug)]
pub(crate) struct JsonObject {
    fields: BTreeMap<String, Box<RawValue>>,
}

impl JsonObject {
    /// 400 `invalid_json` when the body is not JSON; 422 `invalid_field` when it is JSON but not an object.
    pub(crate) async fn read(request: Request) -> Result<Self, ApiError> {
        Self::parse(&read_body(request).await?)
    }

    pub(crate) fn parse(body: &[u8]) -> Result<Self, ApiError> {
        match serde_json::from_slice::<BTreeMap<String, Box<RawValue>>>(body) {
            Ok(fields) => Ok(Self { fields }),
            Err(error) if error.is_data() => {
                Err(ApiError::unprocessable(Reason::InvalidField, "the body must be a JSON object"))
            }
            Err(_) => Err(ApiError::invalid_json()),
        }
    }

    /// The field's exact JSON text, if present.
    pub(crate) fn take_raw(&mut self, field: &'static str) -> Option<Box<RawValue>> {
        self.fields.remove(field)
    }

    /// A field of type `T`; absent or `null` is `None`, any other type a 422 naming the field and `expected`.
    fn take_as<T: DeserializeOwned>(&mut self, field: &'static str, expected: &str) -> Result<Option<T>, ApiError> {
        let Some(raw) = self.fields.remove(field) else { return Ok(None) };
        if raw.get() == "null" {
            return Ok(None);
        }
        serde_json::from_str(raw.get())
            .map(Some)
            .map_err(|_| ApiError::unprocessable(Reason::InvalidField, format!("{field}: expected {expected}")))
    }

    pub(crate) fn take_string(&mut self, field: &'static str) -> Result<Option<String>, ApiError> {
        self.take_as(field, "a string")
    }

    pub(crate) fn take_i64(&mut self, field: &'static str) -> Result<Option<i64>, ApiError> {
        self.take_as(field, "an integer")
    }

    /// An integer field where `null` means something (remove it): absent is `None`, `null` is `Some(None)`.
    pub(crate) fn take_nullable_i64(&mut self, field: &'static str) -> Result<Option<Option<i64>>, ApiError> {
        match self.fields.get(field).map(|raw| raw.get() == "null") {
            None => Ok(None),
            Some(true) => {
                self.fields.remove(field);
                Ok(Some(None))
            }
            Some(false) => self.take_i64(field).map(Some),
        }
    }

    pub(crate) fn take_bool(&mut self, field: &'static str) -> Result<Option<bool>, ApiError> {
        self.take_as(field, "true or false")
    }

    pub(crate) fn take_object(&mut self, field: &'static str) -> Result<Option<Map<String, Value>>, ApiError> {
        self.take_as(field, "a JSON object")
    }

    /// 422 `invalid_field` naming the first field nobody took, and the fields the endpoint knows.
    pub(crate) fn finish(self, known: &[&str]) -> Result<(), ApiError> {
        match self.fields.keys().next() {
            None => Ok(()),
            Some(unknown) => Err(ApiError::unprocessable(
                Reason::InvalidField,
                format!("unknown field {}; expected {}", quoted_name(unknown), known.join(", ")),
            )),
        }
    }
}

/// A required field's value, or 422 `missing_required_fields` naming it.
pub(crate) fn required<T>(field: &'static str, value: Option<T>) -> Result<T, ApiError> {
    value.ok_or_else(|| ApiError::unprocessable(Reason::MissingRequiredFields, format!("{field} is required")))
}

/// A client-chosen name in a detail: shown only when short and printable, so a detail never carries a value
/// that was smuggled into a key.
fn quoted_name(name: &str) -> String {
    let printable = name.len() <= 64 && name.chars().all(|c| c.is_ascii_graphic() || c == ' ');
    if printable { format!("`{name}`") } else { "(unprintable)".to_owned() }
}

/// A query string with only the parameters an endpoint knows, each at most once (400 `invalid_query` otherwise).
#[derive(Debug, Default)]
pub(crate) struct Query {
    params: BTreeMap<String, String>,
}

/// One page of a keyset-paginated list: at most `limit` items after the cursor `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Page<K> {
    pub(crate) limit: usize,
    pub(crate) after: Option<K>,
}

impl Query {
    pub(crate) fn parse(uri: &http::Uri, known: &[&str]) -> Result<Self, ApiError> {
        let mut params = BTreeMap::new();
        for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
            if !known.contains(&name.as_ref()) {
                return Err(invalid_query(format!(
                    "unknown parameter {}; expected {}",
                    quoted_name(&name),
                    known.join(", ")
                )));
            }
            if params.insert(name.to_string(), value.into_owned()).is_some() {
                return Err(invalid_query(format!("{} is given more than once", quoted_name(&name))));
            }
        }
        Ok(Self { params })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    /// `limit`: 1..=`max`, `default` when absent.
    pub(crate) fn limit(&self, default: usize, max: usize) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(default),
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|limit| (1..=max).contains(limit))
                .ok_or_else(|| invalid_query(format!("limit must be an integer from 1 to {max}"))),
        }
    }

    /// `limit` (1..=`max`, `default` when absent) and the cursor parameter `after`, read by `cursor`.
    pub(crate) fn page<K>(
        &self,
        default: usize,
        max: usize,
        after: &'static str,
        cursor: impl FnOnce(&str) -> Option<K>,
    ) -> Result<Page<K>, ApiError> {
        let limit = self.limit(default, max)?;
        let after = match self.get(after) {
            None => None,
            Some(text) => Some(cursor(text).ok_or_else(|| invalid_query(format!("{after} is not a valid cursor")))?),
        };
        Ok(Page { limit, after })
    }

    /// An RFC 3339 instant, in UTC; 400 when it is not one or cannot be represented in UTC.
    pub(crate) fn instant(&self, name: &'static str) -> Result<Option<OffsetDateTime>, ApiError> {
        self.get(name)
            .map(|text| {
                gateway_core::encoding::rfc3339::parse(text).ok_or_else(|| {
                    invalid_query(format!("{name} must be an RFC 3339 instant between years 0 and 9999 in UTC"))
                })
            })
            .transpose()
    }
}

/// The next page's cursor: the last item's key when the page is full (there may be more), else `None`.
pub(crate) fn next_cursor<T, K>(items: &[T], limit: usize, key: impl FnOnce(&T) -> K) -> Option<K> {
    if items.len() == limit { items.last().map(key) } else { None }
}

pub(crate) fn invalid_query(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, Reason::InvalidQuery).with_detail(detail)
}

/// The `Idempotency-Key` header, if present; 400 `invalid_idempotency_key` when it is not 1 to 255 visible
/// ASCII characters, or starts with the prefix reserved for reminders scheduled from DecisionLogs.
pub(crate) fn idempotency_key(headers: &http::HeaderMap) -> Result<Option<gateway_core::IdempotencyKey>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY_HEADER) else { return Ok(None) };
    let invalid =
        |detail: String| ApiError::new(StatusCode::BAD_REQUEST, Reason::InvalidIdempotencyKey).with_detail(detail);
    let text =
        value.to_str().map_err(|_| invalid("Idempotency-Key must be visible ASCII characters only".to_owned()))?;
    if text.starts_with(gateway_core::intake::interceptor::REMINDER_KEY_PREFIX) {
        let prefix = gateway_core::intake::interceptor::REMINDER_KEY_PREFIX;
        return Err(invalid(format!("Idempotency-Key must not start with {prefix:?} (reserved for agent reminders)")));
    }
    gateway_core::IdempotencyKey::new(text).map(Some).map_err(|error| invalid(format!("Idempotency-Key {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> http::Uri {
        text.parse().unwrap()
    }

    #[test]
    fn fields_are_taken_by_type_and_refusals_name_the_field_not_the_value() {
        let mut body = JsonObject::parse(br#"{"name":"a","count":"secret-value","payload":{"k":1.50}}"#).unwrap();
        assert_eq!(body.take_string("name").unwrap().as_deref(), Some("a"));
        let refused = body.take_i64("count").unwrap_err();
        assert_eq!(refused.reason, "invalid_field");
        assert_eq!(refused.detail.as_deref(), Some("count: expected an integer"));
        assert_eq!(body.take_raw("payload").unwrap().get(), r#"{"k":1.50}"#, "the exact text is kept");
        body.finish(&["name", "count", "payload"]).unwrap();

        let body = JsonObject::parse(br#"{"extra":1}"#).unwrap();
        let refused = body.finish(&["name"]).unwrap_err();
        assert_eq!(refused.detail.as_deref(), Some("unknown field `extra`; expected name"));
        assert_eq!(JsonObject::parse(b"[1]").unwrap_err().reason, "invalid_field");
        assert_eq!(JsonObject::parse(b"{").unwrap_err().reason, "invalid_json");
    }

    #[test]
    fn queries_take_only_known_parameters_once() {
        let query = Query::parse(&uri("/x?limit=5&after_id=9"), &["limit", "after_id"]).unwrap();
        assert_eq!(
            query.page(100, 500, "after_id", |text| text.parse::<i64>().ok()).unwrap(),
            Page { limit: 5, after: Some(9) }
        );
        assert_eq!(Query::parse(&uri("/x?limt=5"), &["limit"]).unwrap_err().reason, "invalid_query");
        assert_eq!(Query::parse(&uri("/x?limit=5&limit=6"), &["limit"]).unwrap_err().reason, "invalid_query");
        for bad in ["/x?limit=0", "/x?limit=501", "/x?limit=ten", "/x?after_id=z"] {
            let query = Query::parse(&uri(bad), &["limit", "after_id"]).unwrap();
            assert!(query.page(100, 500, "after_id", |text| text.parse::<i64>().ok()).is_err(), "{bad}");
        }
    }

    #[test]
    fn instants_out_of_range_are_refused_not_converted() {
        let query = Query::parse(&uri("/x?to=9999-12-31T23:59:59-01:00"), &["to"]).unwrap();
        assert_eq!(query.instant("to").unwrap_err().status, StatusCode::BAD_REQUEST);
        let query = Query::parse(&uri("/x?to=2026-02-22T14:00:00%2B02:00"), &["to"]).unwrap();
        assert_eq!(query.instant("to").unwrap(), Some(time::macros::datetime!(2026-02-22 12:00:00 UTC)));
    }
}
