//! `/mcp`: the MCP endpoint (Streamable HTTP transport, DESIGN §16). Its messages are JSON-RPC, described by the
//! MCP specification rather than here: the document says what each method of the HTTP exchange answers, so that a
//! client (and the fuzzer) knows every status it may meet.

use gateway_mcp::PROTOCOL_VERSIONS;
use serde_json::{Value, json};

use crate::fields::NO_CONTROL_CHARACTERS;
use crate::{Operation, Reason};

const ABOUT: &str = "The gateway is an MCP server (Streamable HTTP transport, revisions 2025-06-18 and 2025-11-25): \
    tools `schedule_reminder`, `cancel_reminder`, `list_reminders` (the functions of `POST /gateway/tools/{tool_name}`, \
    with the same limits, quotas and idempotency), and the resource `gateway://agents/{agent_id}/reminders` with \
    `resources/subscribe`. The caller is its token's agent (agent auth on) or, on an open loopback gateway, the \
    `X-Agent-Id` header's. See docs/agents.md, \"Using the gateway from an MCP client\".";

/// The headers every MCP request may carry.
fn mcp_headers(operation: Operation, session_required: bool) -> Operation {
    operation
        .parameter(
            "header",
            "X-Agent-Id",
            false,
            "On an open loopback gateway (no agent auth): the agent the session acts for. With agent auth on, the \
             token's agent (a different id here is refused).",
            json!({"type": "string", "minLength": 1, "maxLength": 256, "pattern": NO_CONTROL_CHARACTERS}),
        )
        .parameter(
            "header",
            "Mcp-Session-Id",
            session_required,
            "The session id the answer to `initialize` issued.",
            json!({"type": "string", "pattern": "^[!-~]+$"}),
        )
        .parameter(
            "header",
            "MCP-Protocol-Version",
            false,
            "The negotiated MCP revision.",
            json!({"type": "string", "enum": PROTOCOL_VERSIONS}),
        )
        .error(400, Reason::UnsupportedProtocolVersion)
        .error(401, Reason::AgentRequired)
}

fn json_rpc_message() -> Value {
    json!({
        "type": "object",
        "description": "One JSON-RPC 2.0 message: a request, a notification, or a response.",
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "method": {"type": "string"},
            "params": {"type": "object"},
            "result": {},
            "error": {"type": "object"},
        },
        "required": ["jsonrpc"],
    })
}

/// `POST /mcp`.
pub fn post_doc() -> Operation {
    let operation = Operation::new("mcpPost", "agents", "MCP: send one JSON-RPC message")
        .describe(&format!(
            "{ABOUT} A request is answered with `application/json` (its JSON-RPC result or error; `initialize` issues \
             `Mcp-Session-Id`); a notification or response with 202. A body that is no JSON-RPC message is a 400 \
             with a JSON-RPC error (-32700, -32600)."
        ))
        .raw_answer(
            200,
            json!({
                "description": "The JSON-RPC answer (a result or an error).",
                "headers": {"Mcp-Session-Id": {"description": "On the answer to `initialize`: the new session.",
                    "schema": {"type": "string"}}},
                "content": {"application/json": {"schema": json_rpc_message()}},
            }),
        )
        .raw_answer(202, json!({"description": "A notification or a response, accepted."}))
        .raw_answer(
            400,
            json!({
                "description": "The body is no JSON-RPC message: a JSON-RPC error without id.",
                "content": {"application/json": {"schema": json_rpc_message()}},
            }),
        )
        .error(400, Reason::SessionRequired)
        .error(404, Reason::UnknownSession)
        .error(503, Reason::TooManySessions);
    mcp_headers(operation, false).reads_body().example(json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "example", "version": "1"}},
    }))
}

/// `GET /mcp`.
pub fn get_doc() -> Operation {
    let operation = Operation::new("mcpStream", "agents", "MCP: the session's server stream")
        .describe(
            "The session's stream of server messages (`notifications/resources/updated` for subscribed \
             resources), as Server-Sent Events with ids: `Last-Event-ID` resumes after one. A session has one \
             stream; a new one ends the one before.",
        )
        .parameter(
            "header",
            "Last-Event-ID",
            false,
            "The id of the last event received: the kept messages after it are sent first.",
            json!({"type": "string"}),
        )
        .raw_answer(
            200,
            json!({
                "description": "The stream: `id:`, `event: message` and `data:` (one JSON-RPC message) per event.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }),
        )
        .error(400, Reason::SessionRequired)
        .error(404, Reason::UnknownSession)
        .error(429, Reason::TooManyStreams)
        .error(503, Reason::TooManyStreams);
    mcp_headers(operation, true)
}

/// `DELETE /mcp`.
pub fn delete_doc() -> Operation {
    let operation = Operation::new("mcpEnd", "agents", "MCP: end the session")
        .describe("Ends the session: its stream ends and its subscriptions stop.")
        .raw_answer(204, json!({"description": "Ended."}))
        .error(400, Reason::SessionRequired)
        .error(404, Reason::UnknownSession);
    mcp_headers(operation, true)
}
