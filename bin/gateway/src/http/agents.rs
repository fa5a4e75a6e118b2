//! `GET /gateway/agents?limit=&after=`: live agents in id order, keyset-paginated.

use gateway_core::AgentId;
use http::StatusCode;
use serde_json::json;

use crate::http::error::ApiError;
use crate::http::request::{Query, Request, next_cursor};
use crate::http::response::{Response, json_response};
use crate::state::AppState;

pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;

pub async fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["limit", "after"])?;
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after", |text| AgentId::new(text).ok())?;
    let agents = state.heartbeat.live_agents(page.after, page.limit).await?;
    let next_after = next_cursor(&agents, page.limit, |agent| agent.agent_id.clone());
    Ok(json_response(StatusCode::OK, &json!({"agents": agents, "next_after": next_after})))
}
