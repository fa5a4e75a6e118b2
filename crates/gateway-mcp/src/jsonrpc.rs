//! JSON-RPC 2.0 as MCP uses it: one message per POST (MCP removed batches in 2025-06-18), ids that are strings or
//! integers, and the error codes.

use serde_json::{Map, Value, json};

/// The body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON, but not a JSON-RPC message (or a batch).
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The method's params are wrong (a missing or mistyped field, an unknown tool).
pub const INVALID_PARAMS: i64 = -32602;
/// The server failed; the message says no more.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP's code for a resource URI that names nothing the caller may read.
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// One message a client sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// A request: it gets an answer with its id.
    Request { id: Value, method: String, params: Map<String, Value> },
    /// A notification: no answer.
    Notification { method: String },
    /// The client's answer to a request of the server's (this server sends none; accepted and dropped).
    Response,
}

/// Why a body is no message: the JSON-RPC error it gets, without an id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unreadable {
    pub(crate) code: i64,
    pub(crate) message: &'static str,
}

/// Reads one message. A request's `params`, when present, must be an object (MCP never sends positional ones).
pub(crate) fn parse(body: &[u8]) -> Result<Incoming, Unreadable> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| Unreadable { code: PARSE_ERROR, message: "Parse error: the body is not JSON" })?;
    let invalid = |message| Unreadable { code: INVALID_REQUEST, message };
    let Value::Object(mut message) = value else {
        return Err(invalid("Invalid Request: one JSON-RPC message per POST, as an object (no batches)"));
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("Invalid Request: jsonrpc must be \"2.0\""));
    }
    let id = message.remove("id");
    if let Some(id) = &id
        && !(id.is_string() || id.is_i64() || id.is_u64())
    {
        return Err(invalid("Invalid Request: id must be a string or an integer"));
    }
    let Some(method) = message.remove("method") else {
        return if id.is_some() && (message.contains_key("result") || message.contains_key("error")) {
            Ok(Incoming::Response)
        } else {
            Err(invalid("Invalid Request: a message needs a method, or a result or error with an id"))
        };
    };
    let Value::String(method) = method else { return Err(invalid("Invalid Request: method must be a string")) };
    let params = match message.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params,
        Some(_) => return Err(invalid("Invalid Request: params must be an object")),
    };
    Ok(match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method },
    })
}

/// The answer to request `id`. Built field by field: `json!` serializes what it is given, which would copy the
/// whole result once more.
pub(crate) fn result(id: Value, result: Value) -> Value {
    let mut answer = Map::with_capacity(3);
    answer.insert("jsonrpc".to_owned(), Value::from("2.0"));
    answer.insert("id".to_owned(), id);
    answer.insert("result".to_owned(), result);
    Value::Object(answer)
}

/// A JSON-RPC error for request `id` (null when the request's id could not be read).
pub(crate) fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A notification from the server.
pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn reads_requests_notifications_and_responses() {
        let request = parse(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":null}}"#).unwrap();
        let Incoming::Request { id, method, params } = request else { panic!("{request:?}") };
        assert_eq!((id, method.as_str(), params.len()), (json!(7), "tools/list", 1));
        let request = parse(br#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#).unwrap();
        assert!(matches!(request, Incoming::Request { params, .. } if params.is_empty()));
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap(),
            Incoming::Notification { method: "notifications/initialized".to_owned() }
        );
        assert_eq!(parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap(), Incoming::Response);
        assert_eq!(parse(br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#).unwrap(), Incoming::Response);
    }

    #[test]
    fn refuses_what_is_no_message_with_its_code() {
        for (body, code) in [
            (&b"{"[..], PARSE_ERROR),
            (b"", PARSE_ERROR),
            (b"\xff", PARSE_ERROR),
            (br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, INVALID_REQUEST),
            (b"7", INVALID_REQUEST),
            (br#"{"id":1,"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":7}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","result":{}}"#, INVALID_REQUEST),
        ] {
            assert_eq!(parse(body).unwrap_err().code, code, "{}", String::from_utf8_lossy(body));
        }
    }
}
