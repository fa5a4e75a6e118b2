//! Property tests of what the HTTP layer reads from a request before any handler: query strings, JSON object
//! bodies field by field, the `Idempotency-Key`, `Last-Event-ID` and `Authorization` headers, agent ids in paths.
//! For each: an answer for any input (a value or a 4xx), never a panic; round trips where the client has a
//! printer (form encoding, percent-encoding, JSON); and no refusal's detail repeats a value the client sent.

use http::{HeaderMap, HeaderValue, StatusCode};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use proptest::prelude::*;
use serde_json::Value;

use crate::http::agents::path_agent_id;
use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::events::last_event_id;
use crate::http::request::{IDEMPOTENCY_KEY_HEADER, JsonObject, Query, idempotency_key};

const KNOWN: [&str; 4] = ["limit", "after", "from", "session_id"];

/// A value no detail may repeat: long enough that it cannot appear by chance in a fixed text.
fn marked_value() -> impl Strategy<Value = String> {
    "[A-Za-z0-9 ]{0,12}".prop_map(|text| format!("SECRET-{text}-VALUE"))
}

fn refused_without_the_value(error: &ApiError, value: &str) -> Result<(), TestCaseError> {
    prop_assert!(error.status.is_client_error(), "{:?}", error);
    let detail = error.detail.as_deref().unwrap_or_default();
    prop_assert!(!detail.contains(value), "the detail {:?} repeats a value", detail);
    Ok(())
}

fn header(name: &'static str, bytes: &[u8]) -> Option<HeaderMap> {
    let value = HeaderValue::from_bytes(bytes).ok()?;
    let mut headers = HeaderMap::new();
    headers.insert(name, value);
    Some(headers)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Known parameters, form-encoded by a client, read back as they were.
    #[test]
    fn a_form_encoded_query_reads_back(params in prop::collection::btree_map(prop::sample::select(KNOWN.to_vec()), "\\PC{0,24}", 0..4)) {
        let query: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(params.iter()).finish();
        let uri: http::Uri = format!("/x?{query}").parse().unwrap();
        let parsed = Query::parse(&uri, &KNOWN).unwrap();
        for (name, value) in &params {
            prop_assert_eq!(parsed.get(name), Some(value.as_str()));
        }
    }

    /// Any query a URI can carry: parsed or refused with 400 `invalid_query`, and the page and instant readers
    /// answer for any value; no detail repeats a value.
    #[test]
    fn any_query_gets_an_answer(query in "[ -~]{0,80}", value in marked_value()) {
        let Ok(uri) = format!("/x?{query}&limit={}&from={}", value.replace(' ', "+"), value.replace(' ', "+")).parse::<http::Uri>() else {
            return Ok(());
        };
        match Query::parse(&uri, &KNOWN) {
            Ok(parsed) => {
                if let Err(error) = parsed.page(100, 500, "after", |text| text.parse::<i64>().ok()) {
                    refused_without_the_value(&error, &value)?;
                    prop_assert_eq!(error.status, StatusCode::BAD_REQUEST);
                }
                if let Err(error) = parsed.instant("from") {
                    refused_without_the_value(&error, &value)?;
                }
            }
            Err(error) => {
                prop_assert_eq!(error.reason, "invalid_query");
                refused_without_the_value(&error, &value)?;
            }
        }
    }

    /// `limit` is taken exactly when it is an integer from 1 to the maximum.
    #[test]
    fn a_limit_is_taken_only_in_range(limit in prop_oneof!["[0-9]{1,22}", "-?[0-9]{1,4}", "\\PC{0,6}"]) {
        let query: String = form_urlencoded::Serializer::new(String::new()).append_pair("limit", &limit).finish();
        let parsed = Query::parse(&format!("/x?{query}").parse().unwrap(), &KNOWN).unwrap();
        let page = parsed.page(100, 500, "after", |text| text.parse::<i64>().ok());
        let in_range = limit.parse::<usize>().is_ok_and(|limit| (1..=500).contains(&limit));
        prop_assert_eq!(page.map(|page| page.limit).ok(), in_range.then(|| limit.parse::<usize>().unwrap()));
    }

    /// Any bytes as a body: an object read field by field, or 400 `invalid_json` / 422 `invalid_field`.
    #[test]
    fn any_body_gets_an_answer(body in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..128),
        "\\{(\"[a-z]{1,4}\":(1|\"x\"|null|\\[\\]|\\{\\}),?){0,4}\\}".prop_map(String::into_bytes),
    ]) {
        if let Err(error) = JsonObject::parse(&body) {
            prop_assert!(["invalid_json", "invalid_field"].contains(&error.reason), "{:?}", error);
        }
    }

    /// Every field of a JSON object keeps its exact text until taken; taking it as a type it is not is a 422
    /// naming the field, never its value; a field nobody took is named only when short and printable.
    #[test]
    fn fields_keep_their_text_and_refusals_keep_their_values(
        value in marked_value(),
        number in any::<i64>(),
        unknown in "\\PC{1,80}",
    ) {
        let body = serde_json::json!({"text": value, "number": number, "payload": {"k": [value, 1.50]}});
        let mut object = JsonObject::parse(body.to_string().as_bytes()).unwrap();
        let payload = object.take_raw("payload").unwrap();
        prop_assert_eq!(payload.get(), body["payload"].to_string());
        prop_assert_eq!(object.take_i64("number").unwrap(), Some(number));
        refused_without_the_value(&object.take_i64("text").unwrap_err(), &value)?;
        let mut extra = serde_json::Map::new();
        extra.insert(unknown.clone(), Value::from(1));
        let refused = JsonObject::parse(Value::Object(extra).to_string().as_bytes()).unwrap().finish(&["text"]).unwrap_err();
        let detail = refused.detail.unwrap_or_default();
        let printable = unknown.len() <= 64 && unknown.chars().all(|c| c.is_ascii_graphic() || c == ' ');
        prop_assert_eq!(detail.contains(&format!("`{unknown}`")), printable, "{}", detail);
    }

    /// `Idempotency-Key`: taken exactly when it is 1 to 255 visible ASCII characters outside the reserved prefix.
    #[test]
    fn an_idempotency_key_is_taken_only_in_its_shape(key in prop_oneof![
        "[!-~]{1,20}",
        "[!-~]{250,260}",
        prop::collection::vec(any::<u8>(), 0..24).prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        "reminder:[a-z]{0,8}",
    ]) {
        let Some(headers) = header(IDEMPOTENCY_KEY_HEADER, key.as_bytes()) else { return Ok(()) };
        let shaped = (1..=255).contains(&key.len())
            && key.bytes().all(|byte| byte.is_ascii_graphic())
            && !key.starts_with(gateway_core::intake::interceptor::REMINDER_KEY_PREFIX);
        match idempotency_key(&headers) {
            Ok(taken) => {
                prop_assert!(shaped, "{:?}", key);
                prop_assert_eq!(taken.map(|taken| taken.as_str().to_owned()), Some(key));
            }
            Err(error) => {
                prop_assert!(!shaped, "{:?}", key);
                prop_assert_eq!(error.reason, "invalid_idempotency_key");
            }
        }
    }

    /// `Last-Event-ID` of any bytes names a fire or none; `Authorization` of any bytes gives a token or none, and a
    /// `Bearer` header in any case gives its token.
    #[test]
    fn event_ids_and_bearer_tokens_of_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64), token in "[!-~]{1,40}", scheme in "[bB][eE][aA][rR][eE][rR]") {
        if let Some(headers) = header("last-event-id", &bytes) {
            let _ = last_event_id(&headers);
        }
        if let Some(headers) = header("authorization", &bytes) {
            let _ = bearer_token(&headers);
        }
        let headers = header("authorization", format!("{scheme} {token} ").as_bytes()).unwrap();
        prop_assert_eq!(bearer_token(&headers), Some(token.as_str()));
    }

    /// An agent id percent-encoded into a path reads back as itself; any path segment gets an id or a 422.
    #[test]
    fn agent_ids_in_paths_round_trip(id in "\\PC{1,40}", raw in "[ -~]{0,40}") {
        let path = format!("/gateway/agents/{}/credentials", utf8_percent_encode(&id, NON_ALPHANUMERIC));
        match gateway_core::AgentId::new(id.clone()) {
            Ok(valid) => prop_assert_eq!(path_agent_id(&path).unwrap(), valid),
            Err(_) => prop_assert_eq!(path_agent_id(&path).unwrap_err().reason, "invalid_field"),
        }
        if let Err(error) = path_agent_id(&format!("/gateway/agents/{raw}")) {
            prop_assert_eq!(error.status, StatusCode::UNPROCESSABLE_ENTITY);
        }
    }
}
