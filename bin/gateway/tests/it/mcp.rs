//! `/mcp`, the MCP endpoint (DESIGN §16): the official MCP Python SDK (`mcp` from PyPI, installed by .ci/run into
//! .ci/venv) running the example of docs/agents.md against the binary with agent auth required, then the
//! transport's rules and refusals spoken by hand.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::python::{python_with_or_skip, step, steps};

use crate::support::{EventStream, Gateway, PATIENCE, TOKEN, raw_request};

/// The example, from the workspace root.
fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/mcp_agent.py")
}

fn issue_token(gateway: &Gateway, agent: &str) -> String {
    let (status, issued) = gateway.operator_post(&format!("/gateway/agents/{agent}/credentials"), &json!({}));
    assert_eq!(status, 201, "{issued}");
    issued["token"].as_str().unwrap().to_owned()
}

#[test]
fn the_official_python_sdk_lists_tools_schedules_and_gets_the_reminder_as_a_resource_update_and_on_its_stream() {
    let test =
        "the_official_python_sdk_lists_tools_schedules_and_gets_the_reminder_as_a_resource_update_and_on_its_stream";
    let Some(python) = python_with_or_skip(test, "mcp", "mcp, jsonschema") else { return };
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let agent = "mcp-example-agent";
    let token = issue_token(&gateway, agent);
    let other = issue_token(&gateway, "mcp-example-other");

    let output = Command::new(python)
        .arg(example())
        .env("GATEWAY_URL", &gateway.base)
        .env("AGENT_ID", agent)
        .env("AGENT_TOKEN", &token)
        .env("OTHER_AGENT_TOKEN", &other)
        .env("REMINDER_DELAY_MS", "800")
        .env("WAIT_SECONDS", "20")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let output_text = format!("stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the client failed:\n{output_text}");
    let steps = steps(&stdout);

    assert_eq!(step(&steps, "initialized")["protocol_version"], "2025-11-25", "{output_text}");
    // Every tool of gateway-cron, each with the schema the client checked; none takes an agent id.
    let tools = step(&steps, "tools");
    let names: Vec<&str> = gateway_cron::ToolName::ALL.iter().map(|tool| tool.as_str()).collect();
    assert_eq!(tools["names"], json!(names), "{output_text}");
    for name in names {
        let schema = &tools["schemas"][name];
        assert_eq!(schema["type"], "object", "{name}: {schema}");
        assert!(schema["properties"].get("agent_id").is_none(), "{name}: {schema}");
        assert_eq!(schema["properties"]["tool_call_id"]["type"], "string", "{name}: {schema}");
    }
    assert_eq!(tools["schemas"]["schedule_reminder"]["required"], json!(["delay_ms", "payload"]));

    let scheduled = step(&steps, "scheduled");
    let job_id = scheduled["job_id"].as_i64().unwrap();
    assert_eq!(step(&steps, "retried"), scheduled, "a retry with the same tool_call_id gets the first answer");
    let refused = step(&steps, "refused");
    assert_eq!(refused["is_error"], true, "{output_text}");
    assert!(refused["text"].as_str().unwrap().starts_with("invalid_field: params.payload"), "{refused}");

    assert_eq!(step(&steps, "notified")["uri"], "gateway://agents/mcp-example-agent/reminders");
    let read = &step(&steps, "read")["reminders"];
    let reminder = read.as_array().unwrap().iter().find(|reminder| reminder["job_id"] == job_id);
    let reminder = reminder.unwrap_or_else(|| panic!("the reminder is not in the resource: {read}"));
    assert_eq!(reminder["payload"], json!({"task": "check_quota"}));
    let on_stream = step(&steps, "stream");
    assert_eq!((on_stream["job_id"].as_i64(), &on_stream["fire_id"]), (Some(job_id), &reminder["fire_id"]));

    let other_agent = step(&steps, "other_agent");
    assert_eq!(other_agent["refused"], true, "{output_text}");
    assert_eq!(other_agent["code"], -32002);
    assert!(other_agent["message"].as_str().unwrap().starts_with("identity_mismatch"), "{other_agent}");
}

/// A client of `/mcp` speaking by hand: who it is (a token, or `X-Agent-Id` on an open gateway) and its session.
struct Client<'g> {
    gateway: &'g Gateway,
    agent: ureq::Agent,
    who: (&'static str, String),
    session: Option<String>,
    /// The `MCP-Protocol-Version` sent with the session.
    version: &'static str,
}

impl<'g> Client<'g> {
    fn with_token(gateway: &'g Gateway, token: &str) -> Self {
        Self::new(gateway, ("authorization", format!("Bearer {token}")))
    }

    fn open(gateway: &'g Gateway, agent_id: &str) -> Self {
        Self::new(gateway, ("x-agent-id", agent_id.to_owned()))
    }

    fn new(gateway: &'g Gateway, who: (&'static str, String)) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(PATIENCE))
            .build()
            .new_agent();
        Self { gateway, agent, who, session: None, version: "2025-11-25" }
    }

    /// POSTs `body` (text as is): the status, the session header, the body as JSON (`null` when empty).
    fn post_text(&self, body: &str, extra: &[(&str, &str)]) -> (u16, Option<String>, Value) {
        let mut request = self
            .agent
            .post(self.gateway.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(self.who.0, &self.who.1);
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session).header("mcp-protocol-version", self.version);
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let mut response = request.send(body).unwrap();
        let status = response.status().as_u16();
        let session = response.headers().get("mcp-session-id").map(|value| value.to_str().unwrap().to_owned());
        let text = response.body_mut().read_to_string().unwrap();
        (status, session, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
    }

    fn post(&self, body: &Value) -> (u16, Value) {
        let (status, _, answer) = self.post_text(&body.to_string(), &[]);
        (status, answer)
    }

    fn initialize(&mut self) -> Value {
        let (status, session, answer) = self.post_text(&initialize("2025-06-18").to_string(), &[]);
        assert_eq!(status, 200, "{answer}");
        self.session = Some(session.unwrap());
        answer
    }

    /// A request's `result`, asserting it has one.
    fn call(&self, id: i64, method: &str, params: Value) -> Value {
        let (status, answer) = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
        answer.get("result").cloned().unwrap_or_else(|| panic!("{method}: no result: {answer}"))
    }

    fn tool(&self, name: &str, arguments: Value) -> Value {
        self.call(9, "tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// The session's stream (`GET /mcp`), after `last_event_id` when given.
    fn stream(&self, last_event_id: Option<&str>) -> EventStream {
        let address = self.gateway.authority().to_owned();
        let mut connection = TcpStream::connect(&address).unwrap();
        let session = self.session.as_deref().unwrap();
        let mut head = format!(
            "GET /mcp HTTP/1.0\r\nhost: {address}\r\naccept: text/event-stream\r\n{}: {}\r\nmcp-session-id: {session}\r\n",
            self.who.0, self.who.1
        );
        if let Some(id) = last_event_id {
            head.push_str(&format!("last-event-id: {id}\r\n"));
        }
        write!(connection, "{head}\r\n").unwrap();
        EventStream::from_http10(connection)
    }
}

fn initialize(version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
           "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}})
}

fn ping() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
}

#[test]
fn who_calls_is_settled_before_any_message_and_no_session_is_made_for_a_refused_caller() {
    let gateway = Gateway::start(&["--agent-auth", "required"]);
    let token = issue_token(&gateway, "mcp-auth-a");
    let anonymous = Client::new(&gateway, ("x-agent-id", "mcp-auth-a".to_owned()));
    let (status, refused) = anonymous.post(&initialize("2025-06-18"));
    assert_eq!((status, refused["reason"].as_str()), (401, Some("unauthorized")), "{refused}");
    let wrong = Client::with_token(&gateway, "agt_0000000000000000000000000000000000000000000000");
    assert_eq!(wrong.post(&initialize("2025-06-18")).0, 401);
    let operator = Client::with_token(&gateway, TOKEN);
    let (status, refused) = operator.post(&initialize("2025-06-18"));
    assert_eq!((status, refused["reason"].as_str()), (403, Some("identity_mismatch")), "{refused}");
    // A token and an X-Agent-Id that names another agent.
    let (status, _, refused) =
        Client::with_token(&gateway, &token).post_text(&initialize("2025-06-18").to_string(), &[("x-agent-id", "b")]);
    assert_eq!((status, refused["reason"].as_str()), (403, Some("identity_mismatch")), "{refused}");
    let metrics = ureq::get(gateway.url("/metrics"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(metrics.contains("gateway_mcp_sessions 0"), "no session was made:\n{metrics}");

    // On an open loopback gateway the agent is named in X-Agent-Id, and must be.
    let open = Gateway::start(&[]);
    let nobody = Client::new(&open, ("x-nothing", String::new()));
    let (status, refused) = nobody.post(&initialize("2025-06-18"));
    assert_eq!((status, refused["reason"].as_str()), (401, Some("agent_required")), "{refused}");
    let mut named = Client::open(&open, "mcp-open-agent");
    assert_eq!(named.initialize()["result"]["protocolVersion"], "2025-06-18");
    let scheduled = named.tool("schedule_reminder", json!({"delay_ms": 60_000, "payload": {}}));
    assert_eq!(scheduled["isError"], false, "{scheduled}");
    let (_, listed) = open.post_json(
        "/gateway/tools/list_reminders",
        &json!({"agent_id": "mcp-open-agent", "tool_call_id": "l1", "params": {}}),
    );
    assert_eq!(listed["result"]["reminders"][0]["job_id"], scheduled["structuredContent"]["job_id"], "{listed}");
}

#[test]
fn the_transport_refuses_what_it_cannot_answer_with_the_status_the_spec_names() {
    let gateway = Gateway::start(&[]);
    let mut client = Client::open(&gateway, "mcp-transport");
    // Before initialize: a message needs the session.
    let (status, refused) = client.post(&ping());
    assert_eq!((status, refused["reason"].as_str()), (400, Some("session_required")), "{refused}");
    // A revision the client offers and the server does not speak: answered with the newest it does.
    let (status, _, answer) = client.post_text(&initialize("2024-11-05").to_string(), &[]);
    assert_eq!((status, &answer["result"]["protocolVersion"]), (200, &json!("2025-11-25")), "{answer}");
    let answer = client.initialize();
    assert_eq!(answer["result"]["capabilities"]["resources"]["subscribe"], true, "{answer}");
    assert_eq!(client.call(1, "ping", json!({})), json!({}));

    client.version = "1999-01-01";
    let (status, refused) = client.post(&ping());
    assert_eq!((status, refused["reason"].as_str()), (400, Some("unsupported_protocol_version")), "{refused}");
    client.version = "2025-06-18";
    assert_eq!(client.post(&ping()).0, 200, "any revision the server speaks");
    // JSON-RPC's own errors: -32700 and -32600 at 400 without id, -32601 and -32602 answered.
    for (body, code) in [("{\"jsonrpc\":", -32700), ("[]", -32600), ("{\"jsonrpc\":\"2.0\",\"id\":1}", -32600)] {
        let (status, _, answer) = client.post_text(body, &[]);
        assert_eq!(
            (status, answer["error"]["code"].as_i64(), &answer["id"]),
            (400, Some(code), &Value::Null),
            "{body}"
        );
    }
    let (status, answer) = client.post(&json!({"jsonrpc": "2.0", "id": "x", "method": "no/such"}));
    assert_eq!((status, answer["error"]["code"].as_i64(), &answer["id"]), (200, Some(-32601), &json!("x")));
    for params in [json!({}), json!({"name": 7}), json!({"name": "schedule_reminder", "arguments": []})] {
        let (status, answer) =
            client.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}));
        assert_eq!((status, answer["error"]["code"].as_i64()), (200, Some(-32602)), "{params}: {answer}");
    }
    let unknown = client.post(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "rm"}}));
    assert_eq!(unknown.1["error"]["code"], -32602, "an unknown tool is a protocol error: {unknown:?}");
    // A notification and a response are accepted without a body.
    let (status, _, body) = client.post_text(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, &[]);
    assert_eq!((status, body), (202, Value::Null));
    let (status, _, body) = client.post_text(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#, &[]);
    assert_eq!((status, body), (202, Value::Null));
    // The session is this agent's only: another agent with its id meets a 404, like a session that ended.
    let mut intruder = Client::open(&gateway, "mcp-intruder");
    intruder.session.clone_from(&client.session);
    let (status, refused) = intruder.post(&ping());
    assert_eq!((status, refused["reason"].as_str()), (404, Some("unknown_session")), "{refused}");
    // DELETE ends it; then it is unknown (the client initializes again).
    let deleted = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
        .delete(gateway.url("/mcp"))
        .header("x-agent-id", "mcp-transport")
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .call()
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    let (status, refused) = client.post(&ping());
    assert_eq!((status, refused["reason"].as_str()), (404, Some("unknown_session")), "{refused}");
    // Bodies as on every route: over the limit before it is read.
    let head =
        "POST /mcp HTTP/1.1\r\nx-agent-id: mcp-transport\r\ncontent-type: application/json\r\ncontent-length: 2000000";
    let answer = raw_request(&gateway, head, b"{");
    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("payload_too_large"), "{answer}");
}

/// A tool called through MCP is the HTTP tool: the same record answers a retry from either side, the same
/// limits refuse, and the rate limit counts both.
#[test]
fn tools_call_is_the_http_tool_one_code_path_for_idempotency_refusals_and_the_rate_limit() {
    let gateway = Gateway::start(&["--agent-rate-limit-per-minute", "6", "--max-pending-reminders-per-agent", "2"]);
    let mut client = Client::open(&gateway, "mcp-tools");
    client.initialize();
    let arguments = json!({"delay_ms": 60_000, "payload": {"n": 1}, "tool_call_id": "shared-1"});
    let through_mcp = client.tool("schedule_reminder", arguments.clone());
    assert_eq!(through_mcp["isError"], false, "{through_mcp}");
    let (status, through_http) = gateway.post_json(
        "/gateway/tools/schedule_reminder",
        &json!({"agent_id": "mcp-tools", "tool_call_id": "shared-1", "params": {"delay_ms": 60_000, "payload": {"n": 1}}}),
    );
    assert_eq!(status, 200, "{through_http}");
    assert_eq!(through_http["result"], through_mcp["structuredContent"], "the HTTP retry got the MCP call's answer");
    // The same id with other params: the HTTP tool's conflict, as a tool result.
    let conflict = client.tool("schedule_reminder", json!({"delay_ms": 5, "payload": {}, "tool_call_id": "shared-1"}));
    assert_eq!(conflict["isError"], true);
    assert!(conflict["content"][0]["text"].as_str().unwrap().starts_with("tool_call_conflict: "), "{conflict}");
    // The pending-reminders cap.
    let second = client.tool("schedule_reminder", json!({"delay_ms": 60_000, "payload": {}}));
    assert_eq!(second["isError"], false, "{second}");
    let third = client.tool("schedule_reminder", json!({"delay_ms": 60_000, "payload": {}}));
    assert!(third["content"][0]["text"].as_str().unwrap().starts_with("too_many_reminders: "), "{third}");
    // Six calls a minute, HTTP's and MCP's together: this is the sixth... and the seventh is refused.
    let listed = client.tool("list_reminders", json!({}));
    assert_eq!(listed["structuredContent"]["reminders"].as_array().unwrap().len(), 2, "{listed}");
    let limited = client.tool("list_reminders", json!({}));
    assert_eq!(limited["isError"], true, "{limited}");
    assert!(limited["content"][0]["text"].as_str().unwrap().starts_with("rate_limited: retry after "), "{limited}");
}

#[test]
fn a_subscribed_session_hears_of_each_fire_on_its_stream_and_resumes_after_last_event_id() {
    let gateway = Gateway::start(&[]);
    let mut client = Client::open(&gateway, "mcp-stream");
    client.initialize();
    let uri = "gateway://agents/mcp-stream/reminders";
    assert_eq!(client.call(1, "resources/subscribe", json!({"uri": uri})), json!({}));
    // Another agent's resource is not this session's to watch or read.
    let other = client.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                                    "params": {"uri": "gateway://agents/someone-else/reminders"}}));
    assert_eq!(other.1["error"]["code"], -32002, "{other:?}");
    let stream = client.stream(None);
    assert_eq!(stream.status, 200);
    for n in 0..2 {
        let scheduled = client.tool("schedule_reminder", json!({"delay_ms": 1, "payload": {"n": n}}));
        assert_eq!(scheduled["isError"], false, "{scheduled}");
    }
    let first = stream.expect("message");
    assert_eq!(first.id.as_deref(), Some("1"));
    assert_eq!(first.data["method"], "notifications/resources/updated");
    assert_eq!(first.data["params"]["uri"], uri);
    assert_eq!(stream.expect("message").id.as_deref(), Some("2"));
    drop(stream);
    // Resumed after the first: the second again, from what the session keeps.
    let resumed = client.stream(Some("1"));
    assert_eq!(resumed.expect("message").id.as_deref(), Some("2"));
    // Both fires are in the resource, and nothing marked them received.
    let read = client.call(3, "resources/read", json!({"uri": uri}));
    let reminders: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(reminders["reminders"].as_array().unwrap().len(), 2, "{reminders}");
    // After unsubscribing, a fire sends nothing.
    assert_eq!(client.call(4, "resources/unsubscribe", json!({"uri": uri})), json!({}));
    client.tool("schedule_reminder", json!({"delay_ms": 1, "payload": {"n": 2}}));
    assert!(resumed.next_within(Duration::from_millis(1500)).is_none(), "no notification after unsubscribe");
}

#[test]
fn an_agent_holds_a_bounded_number_of_sessions_and_its_oldest_ends_first() {
    let gateway = Gateway::start(&[]);
    let mut first = Client::open(&gateway, "mcp-many");
    first.initialize();
    let mut others = Vec::new();
    for _ in 0..gateway_mcp::MAX_SESSIONS_PER_AGENT {
        let mut client = Client::open(&gateway, "mcp-many");
        client.initialize();
        others.push(client);
    }
    let (status, refused) = first.post(&ping());
    assert_eq!((status, refused["reason"].as_str()), (404, Some("unknown_session")), "{refused}");
    for client in &others {
        assert_eq!(client.post(&ping()).0, 200);
    }
    // Another agent is not touched by this one's sessions.
    let mut neighbour = Client::open(&gateway, "mcp-neighbour");
    neighbour.initialize();
    assert_eq!(neighbour.post(&ping()).0, 200);
}

/// Session streams are the agent's event streams for the caps: one over `--agent-streams-per-agent` is refused, and
/// the refused one has not ended the stream it would have replaced.
#[test]
fn session_streams_count_against_the_agents_stream_cap() {
    let gateway = Gateway::start(&["--agent-streams-per-agent", "1"]);
    let mut client = Client::open(&gateway, "mcp-capped");
    client.initialize();
    let uri = "gateway://agents/mcp-capped/reminders";
    client.call(1, "resources/subscribe", json!({"uri": uri}));
    let stream = client.stream(None);
    assert_eq!(stream.status, 200);
    let refused = client.stream(None);
    assert_eq!(refused.status, 429);
    client.tool("schedule_reminder", json!({"delay_ms": 1, "payload": {}}));
    assert_eq!(stream.expect("message").data["params"]["uri"], uri, "the first stream still runs");
}
