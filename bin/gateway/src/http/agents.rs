//! `GET /gateway/agents?limit=&after=`: live agents in id order, keyset-paginated.

use gateway_core::AgentId;
use http::StatusCode;
use serde_json::json;

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::request::{Request, query_param};
use crate::http::response::{Response, json_response};

pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;

pub fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let limit = match query_param(request.uri(), "limit") {
        None => DEFAULT_PAGE,
        Some(text) => text.parse::<usize>().ok().filter(|n| (1..=MAX_PAGE).contains(n)).ok_or_else(|| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_query").with_detail(format!("limit must be 1..={MAX_PAGE}"))
        })?,
    };
    let after = query_param(request.uri(), "after").map(AgentId::new).transpose().map_err(|error| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_query").with_detail(format!("after: {error}"))
    })?;
    let agents = state.heartbeat.live_agents(after.as_ref(), limit);
    let next_after = if agents.len() == limit { agents.last().map(|agent| agent.agent_id.clone()) } else { None };
    Ok(json_response(StatusCode::OK, &json!({"agents": agents, "next_after": next_after})))
}
