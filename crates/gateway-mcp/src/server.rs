//! The server: a POSTed message in, its answer out; the session's stream; the end of a session.

use std::future::Future;
use std::sync::Arc;

use gateway_core::AgentId;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tracing::debug;

use crate::jsonrpc::{self, INTERNAL_ERROR, INVALID_PARAMS, Incoming, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND};
use crate::resource::{REMINDERS_URI_TEMPLATE, ReminderResource, reminders_uri};
use crate::session::{ResourceNotifier, Session, SessionStream, SessionTable};
use crate::{LATEST_PROTOCOL_VERSION, McpError, PROTOCOL_VERSIONS};

/// Held for as long as a subscription lasts; dropping it stops whatever watches for the subscription.
pub type SubscriptionGuard = Box<dyn Send + Sync>;

/// A tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescriptor {
    pub name: String,
    pub description: String,
    /// A JSON Schema of the tool's `arguments`.
    pub input_schema: Value,
}

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// The tool's result.
    Answered(Value),
    /// Refused (bad arguments, a limit, the store down): `reason` is the HTTP tool's reason code, which the
    /// result's text starts with.
    Refused { reason: &'static str, detail: Option<String> },
    /// No tool has this name.
    UnknownTool,
}

/// Why the reminders could not be read (the store is down): a reason code and what to tell the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRefusal {
    pub reason: &'static str,
    pub detail: Option<String>,
}

/// What the server asks of the gateway it runs in: its tools, an agent's reminders, and word of new ones. A call
/// is always for the session's agent, whom the host authenticated before handing the request over.
pub trait McpHost: Sync {
    /// Every tool, in the order `tools/list` shows them.
    fn tools(&self) -> &[ToolDescriptor];

    /// Runs tool `name` for `agent_id` with `arguments` (as the client sent them).
    fn call_tool(
        &self,
        agent_id: &AgentId,
        name: &str,
        arguments: Map<String, Value>,
    ) -> impl Future<Output = ToolOutcome> + Send;

    /// `agent_id`'s reminders as JSON: the fires no stream has received or, `after` a `fire_id`, the retained ones
    /// after it.
    fn read_reminders(
        &self,
        agent_id: &AgentId,
        after: Option<&str>,
    ) -> impl Future<Output = Result<Value, ResourceRefusal>> + Send;

    /// Starts watching for `agent_id`'s new reminders, calling `notifier` for each, until the guard is dropped
    /// (or the notifier says the session is gone). Watching has begun when this returns: a fire after the
    /// `resources/subscribe` answer is never missed.
    fn watch_reminders(&self, agent_id: &AgentId, notifier: ResourceNotifier) -> SubscriptionGuard;
}

/// The two MCP headers of a request, as sent (absent ones `None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestHeaders<'a> {
    pub session_id: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
}

/// The HTTP status of an answer to a POST.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostStatus {
    /// 200 with the JSON-RPC answer.
    Ok,
    /// 202 without a body: a notification or a response was accepted.
    Accepted,
    /// 400 with a JSON-RPC error without id: the body is no message.
    BadRequest,
}

/// The answer to a POST.
#[derive(Debug, Clone, PartialEq)]
pub struct PostAnswer {
    pub status: PostStatus,
    /// The JSON-RPC message (for [`PostStatus::Ok`] and [`PostStatus::BadRequest`]).
    pub body: Option<Vec<u8>>,
    /// The new session's id, for the `Mcp-Session-Id` header of an `initialize` answer.
    pub session_id: Option<String>,
}

impl PostAnswer {
    fn message(status: PostStatus, message: &Value) -> Self {
        // Serializing a `Value` cannot fail: every map key is a string.
        Self { status, body: Some(serde_json::to_vec(message).unwrap_or_default()), session_id: None }
    }

    fn accepted() -> Self {
        Self { status: PostStatus::Accepted, body: None, session_id: None }
    }
}

/// The MCP server of one instance: its sessions, and the dispatch of their messages.
#[derive(Debug)]
pub struct McpServer {
    sessions: SessionTable,
    server_info: Value,
    /// When expired sessions were last swept: a message sweeps them at most every [`SWEEP_INTERVAL`], so that an
    /// abandoned session's subscriptions stop without a loop of their own.
    last_sweep: std::sync::Mutex<Instant>,
}

/// How often expired sessions are swept, at most.
pub const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

impl McpServer {
    /// A server that names itself `name` `version` in its `initialize` answers.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            sessions: SessionTable::default(),
            server_info: json!({"name": name, "version": version}),
            last_sweep: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// Answers one POSTed message of `agent_id` (whom the caller authenticated). [`McpError`] for a request the
    /// transport refuses before any message is answered: no session header, an unknown session, an unsupported
    /// protocol revision, no room for a new session.
    pub async fn post<H: McpHost>(
        &self,
        host: &H,
        agent_id: &AgentId,
        headers: RequestHeaders<'_>,
        body: &[u8],
    ) -> Result<PostAnswer, McpError> {
        if headers.protocol_version.is_some_and(|version| !PROTOCOL_VERSIONS.contains(&version)) {
            return Err(McpError::UnsupportedProtocolVersion);
        }
        self.sweep_now_and_then();
        let message = match jsonrpc::parse(body) {
            Ok(message) => message,
            Err(unreadable) => {
                let answer = jsonrpc::error(&Value::Null, unreadable.code, unreadable.message);
                return Ok(PostAnswer::message(PostStatus::BadRequest, &answer));
            }
        };
        if let Incoming::Request { id, method, params } = &message
            && method == "initialize"
        {
            return self.initialize(agent_id, id, params);
        }
        let session = self.session(agent_id, headers)?;
        match message {
            Incoming::Request { id, method, params } => {
                let answer = match self.dispatch(host, &session, &method, params).await {
                    Ok(result) => jsonrpc::result(id, result),
                    Err((code, message)) => jsonrpc::error(&id, code, &message),
                };
                Ok(PostAnswer::message(PostStatus::Ok, &answer))
            }
            // `notifications/initialized`, `notifications/cancelled` (every request is answered at once) and the
            // rest change nothing here.
            Incoming::Notification { method } => {
                debug!(agent_id = %agent_id, method, "MCP notification");
                Ok(PostAnswer::accepted())
            }
            Incoming::Response => Ok(PostAnswer::accepted()),
        }
    }

    /// Opens `agent_id`'s session stream (`GET`), resuming after `last_event_id` when given.
    pub fn open_stream(
        &self,
        agent_id: &AgentId,
        headers: RequestHeaders<'_>,
        last_event_id: Option<&str>,
    ) -> Result<SessionStream, McpError> {
        if headers.protocol_version.is_some_and(|version| !PROTOCOL_VERSIONS.contains(&version)) {
            return Err(McpError::UnsupportedProtocolVersion);
        }
        let session = self.session(agent_id, headers)?;
        Ok(session.open_stream(last_event_id, Instant::now()))
    }

    /// Ends `agent_id`'s session (`DELETE`).
    pub fn end_session(&self, agent_id: &AgentId, headers: RequestHeaders<'_>) -> Result<(), McpError> {
        let session = self.session(agent_id, headers)?;
        self.sessions.remove(&session);
        Ok(())
    }

    /// Ends the sessions that expired; how many (a periodic sweep, beside the one each new session makes).
    pub fn sweep(&self) -> usize {
        self.sessions.sweep(Instant::now())
    }

    fn sweep_now_and_then(&self) {
        let now = Instant::now();
        {
            let mut last = gateway_core::runtime::sync::lock(&self.last_sweep);
            if now.saturating_duration_since(*last) < SWEEP_INTERVAL {
                return;
            }
            *last = now;
        }
        self.sessions.sweep(now);
    }

    /// Open sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Ends every session: their streams end (shutdown).
    pub fn end_all(&self) {
        self.sessions.end_all();
    }

    fn session(&self, agent_id: &AgentId, headers: RequestHeaders<'_>) -> Result<Arc<Session>, McpError> {
        let id = headers.session_id.ok_or(McpError::SessionRequired)?;
        self.sessions.get(id, agent_id, Instant::now())
    }

    fn initialize(&self, agent_id: &AgentId, id: &Value, params: &Map<String, Value>) -> Result<PostAnswer, McpError> {
        let Some(offered) = params.get("protocolVersion").and_then(Value::as_str) else {
            let answer = jsonrpc::error(id, INVALID_PARAMS, "params.protocolVersion: must be a string");
            return Ok(PostAnswer::message(PostStatus::Ok, &answer));
        };
        let version =
            PROTOCOL_VERSIONS.into_iter().find(|version| *version == offered).unwrap_or(LATEST_PROTOCOL_VERSION);
        let session = self.sessions.create(agent_id.clone(), version, Instant::now())?;
        let result = json!({
            "protocolVersion": session.protocol_version,
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"subscribe": true, "listChanged": false},
            },
            "serverInfo": self.server_info,
            "instructions": "The agent gateway's tools act for the agent of this session's token. Reminders you \
                schedule come back as the resource gateway://agents/{agent_id}/reminders: subscribe to it to be \
                told of each new one.",
        });
        let mut answer = PostAnswer::message(PostStatus::Ok, &jsonrpc::result(id.clone(), result));
        answer.session_id = Some(session.id.clone());
        Ok(answer)
    }

    /// A request's result, or its JSON-RPC error (code, message).
    async fn dispatch<H: McpHost>(
        &self,
        host: &H,
        session: &Arc<Session>,
        method: &str,
        mut params: Map<String, Value>,
    ) -> Result<Value, (i64, String)> {
        let agent_id = &session.agent_id;
        match method {
            "ping" => Ok(json!({})),
            "tools/list" => {
                let tools: Vec<Value> = host
                    .tools()
                    .iter()
                    .map(|tool| {
                        json!({"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema})
                    })
                    .collect();
                Ok(json!({"tools": tools}))
            }
            "tools/call" => {
                let Some(Value::String(name)) = params.remove("name") else {
                    return Err(invalid_params("params.name: must be a string"));
                };
                let arguments = match params.remove("arguments") {
                    None | Some(Value::Null) => Map::new(),
                    Some(Value::Object(arguments)) => arguments,
                    Some(_) => return Err(invalid_params("params.arguments: must be an object")),
                };
                match host.call_tool(agent_id, &name, arguments).await {
                    ToolOutcome::Answered(result) => Ok(tool_result(result)),
                    ToolOutcome::Refused { reason, detail } => {
                        let text = detail.map_or_else(|| reason.to_owned(), |detail| format!("{reason}: {detail}"));
                        Ok(json!({"content": [{"type": "text", "text": text}], "isError": true}))
                    }
                    ToolOutcome::UnknownTool => Err(invalid_params("params.name: no such tool (see tools/list)")),
                }
            }
            "resources/list" => Ok(json!({"resources": [{
                "uri": reminders_uri(agent_id),
                "name": "reminders",
                "title": "Your reminders",
                "description": "The reminders that fired for you and that no event stream of yours has received yet.",
                "mimeType": "application/json",
            }]})),
            "resources/templates/list" => Ok(json!({"resourceTemplates": [{
                "uriTemplate": REMINDERS_URI_TEMPLATE,
                "name": "reminders",
                "title": "An agent's reminders",
                "description": "Your own reminders (only the session's agent): without `after`, those no event \
                    stream of yours has received; with `after=<fire_id>`, every retained one after that fire.",
                "mimeType": "application/json",
            }]})),
            "resources/read" => {
                let (uri, resource) = own_resource(agent_id, &params)?;
                let reminders = host
                    .read_reminders(agent_id, resource.after.as_deref())
                    .await
                    .map_err(|refused| (INTERNAL_ERROR, refusal_text(refused.reason, refused.detail)))?;
                Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": reminders.to_string()}]}))
            }
            "resources/subscribe" => {
                let (uri, _) = own_resource(agent_id, &params)?;
                // Told with the URI as the client wrote it (that is what it matches), kept under the agent's one
                // resource: `?after=` variants are one subscription, not one bus subscription each.
                let notifier = ResourceNotifier { session: Arc::downgrade(session), uri: Arc::from(uri.as_str()) };
                let guard = host.watch_reminders(agent_id, notifier);
                if !session.subscribe(reminders_uri(agent_id), guard) {
                    return Err(invalid_params(&format!(
                        "too_many_subscriptions: a session holds at most {} subscriptions",
                        crate::MAX_SUBSCRIPTIONS_PER_SESSION
                    )));
                }
                Ok(json!({}))
            }
            "resources/unsubscribe" => {
                own_resource(agent_id, &params)?;
                session.unsubscribe(&reminders_uri(agent_id));
                Ok(json!({}))
            }
            _ => Err((METHOD_NOT_FOUND, "Method not found".to_owned())),
        }
    }
}

/// A tool's result as MCP shows it: the JSON as text (for clients that read only text) and as
/// `structuredContent`. Built field by field, moving `result` in (`json!` would serialize a copy of it).
fn tool_result(result: Value) -> Value {
    let text = json!([{"type": "text", "text": result.to_string()}]);
    let mut answer = Map::with_capacity(3);
    answer.insert("content".to_owned(), text);
    answer.insert("structuredContent".to_owned(), result);
    answer.insert("isError".to_owned(), Value::Bool(false));
    Value::Object(answer)
}

fn invalid_params(message: &str) -> (i64, String) {
    (INVALID_PARAMS, message.to_owned())
}

fn refusal_text(reason: &str, detail: Option<String>) -> String {
    detail.map_or_else(|| reason.to_owned(), |detail| format!("{reason}: {detail}"))
}

/// The `uri` of `params`, which must be `agent_id`'s own reminders: another agent's are refused as not found for
/// this session (its token is not theirs), with the reason first.
fn own_resource(agent_id: &AgentId, params: &Map<String, Value>) -> Result<(String, ReminderResource), (i64, String)> {
    let uri =
        params.get("uri").and_then(Value::as_str).ok_or_else(|| invalid_params("params.uri: must be a string"))?;
    let resource = ReminderResource::parse(uri).ok_or_else(|| {
        (
            RESOURCE_NOT_FOUND,
            "Resource not found: the gateway's resources are gateway://agents/{agent_id}/reminders".to_owned(),
        )
    })?;
    if resource.agent_id != *agent_id {
        return Err((
            RESOURCE_NOT_FOUND,
            "identity_mismatch: this resource is another agent's; a session reads only its own agent's reminders"
                .to_owned(),
        ));
    }
    Ok((uri.to_owned(), resource))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::{MAX_SESSIONS_PER_AGENT, SESSION_IDLE_EXPIRY, STREAM_REPLAY_MESSAGES};

    /// A host whose tools answer what they were given, and whose watchers are kept to be fired by hand.
    #[derive(Default)]
    struct FakeHost {
        tools: Vec<ToolDescriptor>,
        watchers: Mutex<Vec<ResourceNotifier>>,
    }

    impl McpHost for FakeHost {
        fn tools(&self) -> &[ToolDescriptor] {
            &self.tools
        }

        async fn call_tool(&self, agent_id: &AgentId, name: &str, arguments: Map<String, Value>) -> ToolOutcome {
            match name {
                "echo" => ToolOutcome::Answered(json!({"agent": agent_id.as_str(), "arguments": arguments})),
                "refuse" => ToolOutcome::Refused { reason: "rate_limited", detail: Some("retry after 3 s".to_owned()) },
                _ => ToolOutcome::UnknownTool,
            }
        }

        async fn read_reminders(&self, agent_id: &AgentId, after: Option<&str>) -> Result<Value, ResourceRefusal> {
            Ok(json!({"agent": agent_id.as_str(), "after": after}))
        }

        fn watch_reminders(&self, _agent_id: &AgentId, notifier: ResourceNotifier) -> SubscriptionGuard {
            self.watchers.lock().unwrap().push(notifier);
            Box::new(())
        }
    }

    fn agent(id: &str) -> AgentId {
        AgentId::new(id).unwrap()
    }

    fn body(message: &Value) -> Vec<u8> {
        message.to_string().into_bytes()
    }

    fn answer_of(answer: &PostAnswer) -> Value {
        serde_json::from_slice(answer.body.as_deref().unwrap()).unwrap()
    }

    async fn initialize(server: &McpServer, host: &FakeHost, agent_id: &AgentId) -> String {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"protocolVersion": "2025-06-18", "capabilities": {}}});
        let answer = server.post(host, agent_id, RequestHeaders::default(), &body(&request)).await.unwrap();
        assert_eq!(answer_of(&answer)["result"]["protocolVersion"], "2025-06-18");
        answer.session_id.unwrap()
    }

    async fn request(
        server: &McpServer,
        host: &FakeHost,
        agent_id: &AgentId,
        session: &str,
        method: &str,
        params: Value,
    ) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let headers = RequestHeaders { session_id: Some(session), protocol_version: Some("2025-06-18") };
        let answer = server.post(host, agent_id, headers, &body(&message)).await.unwrap();
        assert_eq!(answer.status, PostStatus::Ok);
        answer_of(&answer)
    }

    #[tokio::test]
    async fn tool_calls_answer_with_structured_content_and_refusals_are_results_that_start_with_the_reason() {
        let (server, host, a) = (McpServer::new("t", "1"), FakeHost::default(), agent("a"));
        let session = initialize(&server, &host, &a).await;
        let echoed =
            request(&server, &host, &a, &session, "tools/call", json!({"name": "echo", "arguments": {"x": 1}})).await;
        assert_eq!(echoed["result"]["structuredContent"], json!({"agent": "a", "arguments": {"x": 1}}));
        assert_eq!(echoed["result"]["isError"], false);
        let refused = request(&server, &host, &a, &session, "tools/call", json!({"name": "refuse"})).await;
        assert_eq!(refused["result"]["isError"], true);
        assert_eq!(refused["result"]["content"][0]["text"], "rate_limited: retry after 3 s");
        let unknown = request(&server, &host, &a, &session, "tools/call", json!({"name": "nope"})).await;
        assert_eq!(unknown["error"]["code"], INVALID_PARAMS);
    }

    #[tokio::test]
    async fn a_session_is_its_agents_only_and_reads_only_its_own_resource() {
        let (server, host, a, b) = (McpServer::new("t", "1"), FakeHost::default(), agent("a"), agent("b"));
        let session = initialize(&server, &host, &a).await;
        let headers = RequestHeaders { session_id: Some(&session), protocol_version: None };
        let ping = body(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
        assert_eq!(server.post(&host, &b, headers, &ping).await, Err(McpError::UnknownSession));
        let own = request(
            &server,
            &host,
            &a,
            &session,
            "resources/read",
            json!({"uri": "gateway://agents/a/reminders?after=f1"}),
        )
        .await;
        let text: Value = serde_json::from_str(own["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, json!({"agent": "a", "after": "f1"}));
        let other =
            request(&server, &host, &a, &session, "resources/read", json!({"uri": "gateway://agents/b/reminders"}))
                .await;
        assert_eq!(other["error"]["code"], RESOURCE_NOT_FOUND);
        assert!(other["error"]["message"].as_str().unwrap().starts_with("identity_mismatch"));
        let subscribed = request(
            &server,
            &host,
            &a,
            &session,
            "resources/subscribe",
            json!({"uri": "gateway://agents/b/reminders"}),
        )
        .await;
        assert_eq!(subscribed["error"]["code"], RESOURCE_NOT_FOUND);
        assert!(host.watchers.lock().unwrap().is_empty(), "nothing watches another agent's reminders");
    }

    #[tokio::test]
    async fn each_update_reaches_the_stream_which_resumes_after_an_event_id_from_what_is_kept() {
        let (server, host, a) = (McpServer::new("t", "1"), FakeHost::default(), agent("a"));
        let session = initialize(&server, &host, &a).await;
        let uri = "gateway://agents/a/reminders";
        request(&server, &host, &a, &session, "resources/subscribe", json!({"uri": uri})).await;
        let notifier = host.watchers.lock().unwrap()[0].clone();
        let headers = RequestHeaders { session_id: Some(&session), protocol_version: None };
        let mut stream = server.open_stream(&a, headers, None).unwrap();
        assert!(notifier.resource_updated());
        let frame = String::from_utf8(stream.next().await.unwrap().to_vec()).unwrap();
        assert!(frame.starts_with("id: 1\nevent: message\ndata: "), "{frame}");
        assert!(frame.contains(r#""method":"notifications/resources/updated""#) && frame.contains(uri), "{frame}");
        for _ in 0..STREAM_REPLAY_MESSAGES + 5 {
            assert!(notifier.resource_updated());
        }
        // A new stream takes over; the old one ends.
        let mut resumed = server.open_stream(&a, headers, Some("3")).unwrap();
        assert_eq!(stream.next().await, None);
        let first = String::from_utf8(resumed.next().await.unwrap().to_vec()).unwrap();
        // Ids 2 to 6 went out of what is kept: the oldest kept one comes first.
        assert!(first.starts_with("id: 7\n"), "{first}");
        // Ending the session ends its stream and stops its watchers.
        server.end_session(&a, headers).unwrap();
        assert_eq!(resumed.next().await, None);
        assert!(!notifier.resource_updated());
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_are_bounded_per_agent_and_expire_when_idle_unless_their_stream_is_open() {
        let (server, host, a) = (McpServer::new("t", "1"), FakeHost::default(), agent("a"));
        let first = initialize(&server, &host, &a).await;
        tokio::time::advance(Duration::from_millis(1)).await;
        let mut newer = Vec::new();
        for _ in 0..MAX_SESSIONS_PER_AGENT {
            newer.push(initialize(&server, &host, &a).await);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        let headers = |session| RequestHeaders { session_id: Some(session), protocol_version: None };
        assert_eq!(server.open_stream(&a, headers(&first), None).err(), Some(McpError::UnknownSession));
        assert_eq!(server.session_count(), MAX_SESSIONS_PER_AGENT);
        let held = server.open_stream(&a, headers(&newer[0]), None).unwrap();
        tokio::time::advance(SESSION_IDLE_EXPIRY).await;
        assert_eq!(server.sweep(), MAX_SESSIONS_PER_AGENT - 1, "all but the one holding its stream");
        drop(held);
        tokio::time::advance(SESSION_IDLE_EXPIRY).await;
        assert_eq!(server.sweep(), 1);
        assert_eq!(server.session_count(), 0);
    }

    #[tokio::test]
    async fn a_request_before_initialize_or_in_an_unknown_revision_is_refused_by_the_transport() {
        let (server, host, a) = (McpServer::new("t", "1"), FakeHost::default(), agent("a"));
        let ping = body(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
        assert_eq!(server.post(&host, &a, RequestHeaders::default(), &ping).await, Err(McpError::SessionRequired));
        let old = RequestHeaders { session_id: None, protocol_version: Some("2024-11-05") };
        assert_eq!(server.post(&host, &a, old, &ping).await, Err(McpError::UnsupportedProtocolVersion));
        let unreadable = server.post(&host, &a, RequestHeaders::default(), b"{").await.unwrap();
        assert_eq!(unreadable.status, PostStatus::BadRequest);
        assert_eq!(answer_of(&unreadable)["error"]["code"], jsonrpc::PARSE_ERROR);
    }
}
