//! `POST /gateway/tools/{tool_name}`: an agent's synchronous tool call (docs/api.md, "Tools"). The rules (the
//! tools, their limits, idempotency per `(agent_id, tool_call_id)`) are gateway-cron's `ReminderTools`; this
//! reads the body and answers.

use gateway_core::{AgentId, ToolCallId};
use gateway_cron::{ReminderTool, ToolName};
use http::header::HeaderValue;
use http::{HeaderMap, StatusCode};
use serde_json::json;

use crate::http::error::ApiError;
use crate::http::request::{JsonObject, Request, required};
use crate::http::response::{IDEMPOTENT_REPLAYED_HEADER, Response, json_response};
use crate::state::AppState;

const FIELDS: [&str; 3] = ["agent_id", "tool_call_id", "params"];

/// `{"agent_id","tool_call_id","params":{…}}` → 200 `{"result":{…}}` (with `Idempotent-Replayed: true` when the
/// answer is the recorded one of an earlier call with this id). The agent is read first, so that checks about
/// the caller (who it is, how often it calls) come before anything about the call: see [`check_caller`].
pub async fn call(state: &AppState, tool_name: &str, request: Request) -> Result<Response, ApiError> {
    let headers = request.headers().clone();
    let mut body = JsonObject::read(request).await?;
    let agent_id = required("agent_id", body.take_string("agent_id")?.filter(|id| !id.is_empty()))?;
    let agent_id = AgentId::new(agent_id)
        .map_err(|error| ApiError::unprocessable("invalid_field", format!("agent_id: {error}")))?;
    check_caller(state, &headers, &agent_id)?;
    let tool = ToolName::parse(tool_name)?;
    let tool_call_id = required("tool_call_id", body.take_string("tool_call_id")?.filter(|id| !id.is_empty()))?;
    let tool_call_id = ToolCallId::new(tool_call_id)
        .map_err(|error| ApiError::unprocessable("invalid_field", format!("tool_call_id: {error}")))?;
    let params = body.take_object("params")?.unwrap_or_default();
    body.finish(&FIELDS)?;
    let request = ReminderTool::from_params(tool, &params)?;
    let answer = state.tools.call(agent_id, tool_call_id, request).await?;
    let mut response = json_response(StatusCode::OK, &json!({"result": answer.result}));
    if answer.replayed {
        response.headers_mut().insert(IDEMPOTENT_REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// Where the checks of the caller belong, once its agent id is known and before the tool is looked at: agent
/// authentication (`Authorization` against `agent_id`) and the per-agent rate limit. None exists yet; a call of
/// each goes here.
fn check_caller(_state: &AppState, _headers: &HeaderMap, _agent_id: &AgentId) -> Result<(), ApiError> {
    Ok(())
}
