//! `POST /gateway/tools/{tool_name}`: an agent's synchronous tool call (docs/api.md, "Tools"). The rules (the
//! tools, their limits, idempotency per `(agent_id, tool_call_id)`) are gateway-cron's `ReminderTools`; this
//! reads the body and answers.

use std::net::IpAddr;

use gateway_auth::{Access, Named};
use gateway_core::{AgentId, ToolCallId};
use gateway_cron::{ReminderTool, ToolAnswer, ToolName};
use http::StatusCode;
use http::header::HeaderValue;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::request::{JsonObject, Request, required};
use crate::http::response::{IDEMPOTENT_REPLAYED_HEADER, Response, json_response};
use crate::state::AppState;
use gateway_api::Reason;

const FIELDS: [&str; 3] = ["agent_id", "tool_call_id", "params"];

/// `{"agent_id","tool_call_id","params":{…}}` → 200 `{"result":{…}}` (with `Idempotent-Replayed: true` when the
/// answer is the recorded one of an earlier call with this id). The caller is authenticated before the body is
/// read, and the agent is read first, so that checks about the caller (the agent is the token's, it is within its
/// rate limit) come before anything about the call; a body whose agent cannot be read still counts against the
/// token's agent.
pub(super) async fn call(
    state: &AppState,
    tool_name: &str,
    request: Request,
    client: IpAddr,
) -> Result<Response, ApiError> {
    let caller = state.auth.authenticate(bearer_token(request.headers()), client).await?;
    let read = read_agent(request).await;
    let named = read.as_ref().map_or(Named::Unreadable, |(_, agent_id)| Named::Agent(agent_id));
    state.auth.admit(&caller, named, Access::Act).await?;
    let (mut body, agent_id) = read?;
    let tool = ToolName::parse(tool_name)?;
    let tool_call_id = required("tool_call_id", body.take_string("tool_call_id")?.filter(|id| !id.is_empty()))?;
    let tool_call_id = ToolCallId::new(tool_call_id)
        .map_err(|error| ApiError::unprocessable(Reason::InvalidField, format!("tool_call_id: {error}")))?;
    let params = body.take_object("params")?.unwrap_or_default();
    body.finish(&FIELDS)?;
    let answer = execute(state, agent_id, tool, tool_call_id, &params).await?;
    let mut response = json_response(StatusCode::OK, &ToolAnswerBody { result: &answer.result });
    if answer.replayed {
        response.headers_mut().insert(IDEMPOTENT_REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// Runs `tool` for `agent_id`, whose call was admitted (authenticated, counted against its rate limit): its
/// parameters checked, then gateway-cron's `ReminderTools` (limits, quotas, idempotency per `tool_call_id`). The one
/// path of every tool call, this route's and `/mcp`'s `tools/call` (http/mcp.rs).
pub(crate) async fn execute(
    state: &AppState,
    agent_id: AgentId,
    tool: ToolName,
    tool_call_id: ToolCallId,
    params: &Map<String, Value>,
) -> Result<ToolAnswer, ApiError> {
    let request = ReminderTool::from_params(tool, params)?;
    Ok(state.tools.call(agent_id, tool_call_id, request).await?)
}

/// The body and the agent it names.
async fn read_agent(request: Request) -> Result<(JsonObject, AgentId), ApiError> {
    let mut body = JsonObject::read(request).await?;
    let agent_id = required("agent_id", body.take_string("agent_id")?.filter(|id| !id.is_empty()))?;
    let agent_id = AgentId::new(agent_id)
        .map_err(|error| ApiError::unprocessable(Reason::InvalidField, format!("agent_id: {error}")))?;
    Ok((body, agent_id))
}

/// A tool's answer: its `result` (each tool's is described below; gateway-cron's `ReminderTools` writes them).
#[derive(Debug, Serialize)]
struct ToolAnswerBody<'a> {
    result: &'a Value,
}
