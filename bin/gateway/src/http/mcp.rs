//! `/mcp`: the MCP endpoint (DESIGN §16, docs/agents.md). The protocol (JSON-RPC, sessions, their streams) is
//! gateway-mcp's; here is who the caller is (before any message is read), the body as every route reads it
//! (gateway-edge's budget and limits), and the [`McpHost`] that runs a tool through the same function as
//! `POST /gateway/tools/{tool_name}` (http/tools.rs), reads the mailbox and watches the bus.

use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use gateway_api::Reason;
use gateway_api::reminders::{MailboxPage, MailboxReminder};
use gateway_auth::{Access, AuthError, Caller, Mismatch, Named};
use gateway_core::{AgentId, FiredReminder, ToolCallId, Topic};
use gateway_cron::{Replay, ToolName};
use gateway_mcp::{
    McpHost, PROTOCOL_VERSION_HEADER, PostAnswer, PostStatus, RequestHeaders, ResourceNotifier, ResourceRefusal,
    SESSION_ID_HEADER, STREAM_KEEP_ALIVE, SubscriptionGuard, ToolDescriptor, ToolOutcome,
};
use gateway_pubsub::{PublishedEvent, Received};
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tracing::debug;

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::events::last_event_id;
use crate::http::request::{Request, read_body};
use crate::http::response::{Response, event_stream, json_bytes};
use crate::http::tools;
use crate::state::AppState;

/// The header that names the agent on an open loopback gateway.
pub(crate) const AGENT_ID_HEADER: &str = "x-agent-id";
/// Most reminders one `resources/read` answer holds (the oldest unreceived first, as a stream replays them).
pub(crate) const MAX_RESOURCE_REMINDERS: usize = 100;
/// Frames a session stream holds for a client that reads slowly; past them the stream ends (the client resumes
/// with `Last-Event-ID`, and the messages are still kept).
const STREAM_QUEUE: usize = 16;

/// The tools as `tools/list` shows them, from gateway-cron's [`ToolName::ALL`] and each tool's parameter schema: a
/// tool added there is here without a change to this file. `tool_call_id` is the MCP call's own optional argument
/// (without it each call is a new one).
pub(crate) fn tool_descriptors() -> Vec<ToolDescriptor> {
    ToolName::ALL
        .into_iter()
        .map(|tool| {
            let mut schema = tool.params_schema();
            if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
                properties.insert(
                    "tool_call_id".to_owned(),
                    json!({"type": "string", "minLength": 1, "maxLength": 256,
                           "description": "Your id for this call: a retry with the same id gets the first answer \
                                           and does nothing again. Without it, each call is a new one."}),
                );
            }
            ToolDescriptor {
                name: tool.as_str().to_owned(),
                description: tool.description().to_owned(),
                input_schema: schema,
            }
        })
        .collect()
}

/// Who calls, before anything of the request is read: its token's agent (agent auth on: a token is required, and
/// an `X-Agent-Id` must be that agent), or on an open loopback gateway the `X-Agent-Id` header's. The operator's
/// token acts for no agent.
async fn caller(state: &AppState, headers: &HeaderMap, client: IpAddr) -> Result<(Caller, AgentId), ApiError> {
    let caller = state.auth.authenticate(bearer_token(headers), client).await?;
    let named = headers.get(AGENT_ID_HEADER).map(|value| {
        value.to_str().ok().and_then(|text| AgentId::new(text).ok()).ok_or_else(|| {
            ApiError::new(StatusCode::UNAUTHORIZED, Reason::AgentRequired)
                .with_detail("X-Agent-Id must be an agent id: 1 to 256 bytes of visible text")
        })
    });
    let named = named.transpose()?;
    let agent_id = match &caller {
        Caller::Agent(verified) => {
            let own = verified.agent_id();
            if named.as_ref().is_some_and(|named| *named != own) {
                return Err(AuthError::IdentityMismatch(Mismatch::OtherAgent).into());
            }
            own
        }
        Caller::Open => named.ok_or_else(|| {
            ApiError::new(StatusCode::UNAUTHORIZED, Reason::AgentRequired)
                .with_detail("without agent auth, an MCP request names its agent in X-Agent-Id")
        })?,
        Caller::Operator => return Err(AuthError::IdentityMismatch(Mismatch::OperatorActs).into()),
    };
    Ok((caller, agent_id))
}

/// A header's text; one that is not visible ASCII is kept as an empty string (no session, no revision has it).
fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|value| value.to_str().unwrap_or_default())
}

fn mcp_headers(headers: &HeaderMap) -> RequestHeaders<'_> {
    RequestHeaders {
        session_id: header_text(headers, SESSION_ID_HEADER),
        protocol_version: header_text(headers, PROTOCOL_VERSION_HEADER),
    }
}

/// `POST /mcp`: one JSON-RPC message.
pub(super) async fn post(state: &AppState, request: Request, client: IpAddr) -> Result<Response, ApiError> {
    let (caller, agent_id) = caller(state, request.headers(), client).await?;
    let (session_id, protocol_version) = {
        let headers = mcp_headers(request.headers());
        (headers.session_id.map(str::to_owned), headers.protocol_version.map(str::to_owned))
    };
    let body = read_body(request).await?;
    let headers = RequestHeaders { session_id: session_id.as_deref(), protocol_version: protocol_version.as_deref() };
    let host = Host { state, caller: &caller };
    let answer = state.mcp.post(&host, &agent_id, headers, &body).await?;
    Ok(post_response(answer))
}

fn post_response(answer: PostAnswer) -> Response {
    let status = match answer.status {
        PostStatus::Ok => StatusCode::OK,
        PostStatus::Accepted => StatusCode::ACCEPTED,
        PostStatus::BadRequest => StatusCode::BAD_REQUEST,
    };
    let mut response = match answer.body {
        Some(body) => json_bytes(status, Bytes::from(body)),
        None => empty(status),
    };
    if let Some(value) = answer.session_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        response.headers_mut().insert(SESSION_ID_HEADER, value);
    }
    response
}

fn empty(status: StatusCode) -> Response {
    let mut response = json_bytes(status, Bytes::new());
    response.headers_mut().remove(CONTENT_TYPE);
    response
}

/// `DELETE /mcp`: ends the session.
pub(super) async fn delete(state: &AppState, request: &Request, client: IpAddr) -> Result<Response, ApiError> {
    let (_, agent_id) = caller(state, request.headers(), client).await?;
    state.mcp.end_session(&agent_id, mcp_headers(request.headers()))?;
    Ok(empty(StatusCode::NO_CONTENT))
}

/// `GET /mcp`: the session's server stream. Counted with the agent's event streams (gateway-auth's caps), and
/// ended, as they are, when the token is revoked or the gateway shuts down.
pub(super) async fn get(state: &AppState, request: &Request, client: IpAddr) -> Result<Response, ApiError> {
    let (caller, agent_id) = caller(state, request.headers(), client).await?;
    let last_event_id = last_event_id(request.headers());
    // Admitted first: a stream refused by the caps must not have ended the session's stream it would replace.
    let admitted = state.auth.admit_stream(&caller, &agent_id, client, &state.shutdown)?;
    let mut stream = state.mcp.open_stream(&agent_id, mcp_headers(request.headers()), last_event_id.as_deref())?;
    let stop = admitted.stop().clone();
    let (frames, receiver) = mpsc::channel(STREAM_QUEUE);
    tokio::spawn(async move {
        let _admitted = admitted;
        let mut keep_alive = tokio::time::interval(STREAM_KEEP_ALIVE);
        keep_alive.tick().await;
        let mut next = Some(Bytes::from_static(b": connected\n\n"));
        while let Some(frame) = next.take() {
            // A client that takes nothing while the queue fills loses its stream, not the gateway's memory; it
            // resumes with Last-Event-ID.
            if frames.try_send(frame).is_err() {
                break;
            }
            next = tokio::select! {
                () = stop.cancelled() => None,
                () = frames.closed() => None,
                frame = stream.next() => frame,
                _ = keep_alive.tick() => Some(Bytes::from_static(b": keep-alive\n\n")),
            };
        }
    });
    Ok(event_stream(ChannelBody { receiver }))
}

/// A stream's body: the frames its task queued.
struct ChannelBody {
    receiver: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.receiver.poll_recv(cx).map(|frame| frame.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// The gateway as the MCP server's host, for one request of `caller`.
struct Host<'a> {
    state: &'a AppState,
    caller: &'a Caller,
}

impl Host<'_> {
    /// The HTTP tool's answer or refusal, through the same function.
    async fn run_tool(
        &self,
        agent_id: &AgentId,
        name: &str,
        mut arguments: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        // Counted against the agent's rate limit as every HTTP tool call is, whatever follows.
        self.state.auth.admit(self.caller, Named::Agent(agent_id), Access::Act).await?;
        let tool = ToolName::parse(name)?;
        let tool_call_id = match arguments.remove("tool_call_id") {
            None | Some(Value::Null) => fresh_tool_call_id()?,
            Some(Value::String(id)) => ToolCallId::new(id)
                .map_err(|error| ApiError::unprocessable(Reason::InvalidField, format!("tool_call_id: {error}")))?,
            Some(_) => return Err(ApiError::unprocessable(Reason::InvalidField, "tool_call_id: must be a string")),
        };
        let answer = tools::execute(self.state, agent_id.clone(), tool, tool_call_id, &arguments).await?;
        Ok(answer.result)
    }
}

impl McpHost for Host<'_> {
    fn tools(&self) -> &[ToolDescriptor] {
        &self.state.mcp_tools
    }

    async fn call_tool(&self, agent_id: &AgentId, name: &str, arguments: Map<String, Value>) -> ToolOutcome {
        match self.run_tool(agent_id, name, arguments).await {
            Ok(result) => ToolOutcome::Answered(result),
            Err(refused) if refused.reason == Reason::UnknownTool.as_str() => ToolOutcome::UnknownTool,
            Err(refused) => {
                let detail = match (refused.detail, refused.retry_after_s) {
                    (Some(detail), _) => Some(detail),
                    (None, Some(seconds)) => Some(format!("retry after {seconds} s")),
                    (None, None) => None,
                };
                ToolOutcome::Refused { reason: refused.reason, detail }
            }
        }
    }

    async fn read_reminders(&self, agent_id: &AgentId, after: Option<&str>) -> Result<Value, ResourceRefusal> {
        let mailbox = &self.state.mailbox;
        let refused = |error: gateway_cron::CronError| {
            let error = ApiError::from(error);
            ResourceRefusal { reason: error.reason, detail: error.detail }
        };
        let entries = match after {
            Some(fire_id) => mailbox
                .reminders_after(agent_id.clone(), Some(fire_id), MAX_RESOURCE_REMINDERS)
                .await
                .map_err(refused)?,
            None => {
                let mut replay = Replay::unreceived(agent_id.clone());
                let mut entries = Vec::new();
                while entries.len() < MAX_RESOURCE_REMINDERS && !replay.is_done() {
                    let page = mailbox
                        .next_page(&mut replay, MAX_RESOURCE_REMINDERS - entries.len())
                        .await
                        .map_err(refused)?;
                    if page.is_empty() {
                        break;
                    }
                    entries.extend(page);
                }
                entries
            }
        };
        let reminders = entries.iter().map(MailboxReminder::of).collect();
        Ok(serde_json::to_value(MailboxPage { reminders }).unwrap_or(Value::Null))
    }

    fn watch_reminders(&self, agent_id: &AgentId, notifier: ResourceNotifier) -> SubscriptionGuard {
        // Subscribed before the answer goes out: a fire after it is never missed.
        let mut subscription = self.state.bus.subscribe(&Topic::AgentScheduled(agent_id.clone()));
        let (mailbox, agent_id) = (self.state.mailbox.clone(), agent_id.clone());
        let watching = self.state.shutdown.child_token();
        let stop = watching.clone();
        tokio::spawn(async move {
            loop {
                let received = tokio::select! {
                    () = stop.cancelled() => break,
                    received = subscription.recv() => received,
                };
                let more = match received {
                    Received::Event(event) => {
                        let readable = tokio::select! {
                            () = stop.cancelled() => break,
                            readable = readable(&mailbox, &agent_id, &event) => readable,
                        };
                        !readable || notifier.resource_updated()
                    }
                    // A lagged subscription missed fires: one notification says the same (read the resource).
                    Received::Lagged(_) => notifier.resource_updated(),
                    Received::Closed => false,
                };
                if !more {
                    break;
                }
            }
        });
        Box::new(watching.drop_guard())
    }
}

/// Whether the resource's read would give the fire `event` announces: a fire is published at its instant and
/// recorded in the mailbox by the firing loop's next write, and a client told of it at once would read the
/// resource without it. Waits for the record; `false` for a fire never recorded (its refire is published, and
/// announced, again). Anything that is not a reminder of `agent_id`, or a store that cannot say, is announced.
async fn readable(mailbox: &gateway_cron::Mailbox, agent_id: &AgentId, event: &PublishedEvent) -> bool {
    let Some(reminder) = FiredReminder::from_event_json(event.json()) else { return true };
    if reminder.agent_id != *agent_id {
        return true;
    }
    match mailbox.recorded(agent_id, &reminder.fire_id).await {
        Ok(recorded) => {
            if !recorded {
                debug!(fire_id = reminder.fire_id, "a published fire was never recorded; not announced");
            }
            recorded
        }
        Err(error) => {
            debug!(fire_id = reminder.fire_id, %error, "cannot tell whether a fire is recorded; announced");
            true
        }
    }
}

/// An id for a call that brought none: unique, so the call is a new one.
fn fresh_tool_call_id() -> Result<ToolCallId, ApiError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 8];
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_nanos());
        if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
            bytes = (nanos as u64).to_be_bytes();
        }
        gateway_core::encoding::hex::encode(&bytes)
    });
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Short and of visible ASCII: always a valid id.
    ToolCallId::new(format!("mcp-{prefix}-{count}")).map_err(|_| ApiError::internal())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use gateway_core::{CronJobStore, FencingToken, InMemoryCronJobStore, ManualClock, SingleProcessLeadership};
    use gateway_cron::{Mailbox, MailboxConfig, MailboxPorts};
    use serde_json::Map;
    use time::OffsetDateTime;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_reminder_is_announced_once_its_fire_is_recorded_and_any_other_event_at_once() {
        let at = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let store = Arc::new(InMemoryCronJobStore::default());
        let ports = MailboxPorts {
            store: store.clone(),
            clock: Arc::new(ManualClock::new(at)),
            leadership: Arc::new(SingleProcessLeadership),
        };
        let mailbox = Mailbox::new(ports, MailboxConfig::default());
        let agent = AgentId::new("agent-7").unwrap();
        let fire = FiredReminder {
            fire_id: gateway_cron::fire_id(1, at),
            job_id: 1,
            agent_id: agent.clone(),
            payload: Map::new(),
            scheduled_for: at,
            fired_at: at,
            epoch: 1,
        };
        let published = PublishedEvent::of(&fire.event());

        let announced = tokio::spawn({
            let (mailbox, agent, published) = (mailbox.clone(), agent.clone(), published.clone());
            async move { readable(&mailbox, &agent, &published).await }
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!announced.is_finished(), "published, not yet recorded: a read would not give it");
        store.complete_fires("scheduler", FencingToken(1), &[], std::slice::from_ref(&fire)).unwrap();
        assert!(announced.await.unwrap(), "announced once recorded");

        let other = AgentId::new("agent-8").unwrap();
        let unrecorded = FiredReminder { fire_id: gateway_cron::fire_id(2, at), job_id: 2, ..fire };
        assert!(readable(&mailbox, &other, &PublishedEvent::of(&unrecorded.event())).await, "not this agent's fire");
        let eviction = PublishedEvent::from_json("e-1", "agent_evicted", r#"{"event_type":"agent_evicted"}"#).unwrap();
        assert!(readable(&mailbox, &agent, &eviction).await, "not a reminder");
        let started = tokio::time::Instant::now();
        assert!(!readable(&mailbox, &agent, &PublishedEvent::of(&unrecorded.event())).await, "never recorded");
        assert!(started.elapsed() >= gateway_cron::RECEIPT_PATIENCE - gateway_cron::RECORD_LOOK_MAX);
    }
}
