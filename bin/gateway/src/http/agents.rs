//! `GET /gateway/agents?limit=&after=`: live agents in id order, keyset-paginated.

use gateway_core::{AgentId, CapabilityEntry, ClusterId};
use gateway_heartbeat::LiveAgent;
use http::StatusCode;
use serde::Serialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::http::error::ApiError;
use crate::http::request::{Query, Request, next_cursor};
use crate::http::response::{Response, json_response};
use crate::state::AppState;
use gateway_api::Operation;
use gateway_api::Reason;
use gateway_api::fields::AgentIdSchema;

pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;

pub async fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["limit", "after"])?;
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after", |text| AgentId::new(text).ok())?;
    let agents = state.heartbeat.live_agents(page.after, page.limit).await?;
    let next_after = next_cursor(&agents, page.limit, |agent| agent.agent_id.clone());
    let agents = agents.iter().map(LiveAgentBody::of).collect();
    Ok(json_response(StatusCode::OK, &AgentPage { agents, next_after }))
}

// A page of live agents.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentPage<'a> {
    pub agents: Vec<LiveAgentBody<'a>>,
    #[schema(value_type = Option<String>, required = true)]
    pub next_after: Option<AgentId>,
}

// A live agent as the operator API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = LiveAgent)]
#[serde(deny_unknown_fields)]
pub struct LiveAgentBody<'a> {
    #[schema(value_type = String)]
    pub agent_id: &'a AgentId,
    #[schema(value_type = String)]
    pub cluster_id: &'a ClusterId,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub last_seen: OffsetDateTime,
    #[schema(inline, required = true)]
    pub capabilities: Option<Capabilities<'a>>,
}

// The agent's capability-map entry: the identity of its latest accepted DecisionLog.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Capabilities<'a> {
    pub agent_type: &'a str,
    pub capability_version: &'a str,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

impl<'a> LiveAgentBody<'a> {
    fn of(agent: &'a LiveAgent) -> Self {
        Self {
            agent_id: &agent.agent_id,
            cluster_id: &agent.cluster_id,
            last_seen: agent.last_seen,
            capabilities: agent.capabilities.as_ref().map(|entry: &'a CapabilityEntry| Capabilities {
                agent_type: &entry.agent_type,
                capability_version: &entry.capability_version,
                updated_at: entry.updated_at,
            }),
        }
    }
}

pub fn list_doc() -> Operation {
    Operation::new("listAgents", "operator", "Live agents")
        .describe("Live agents in `agent_id` order; pass `next_after` as `after` for the next page.")
        .limit(DEFAULT_PAGE, MAX_PAGE)
        .query_of::<AgentIdSchema>("after", "An agent id: the page starts after it.")
        .answer::<AgentPage<'static>>(200, "A page of live agents.")
        .error(503, Reason::StoreUnavailable)
}

/// The agent id of a path `/gateway/agents/{agent_id}/…`, percent-decoded (an id may hold `/`, `:` or spaces,
/// which a path carries as `%2F`, `%3A`, `%20`); 422 `invalid_field` when it is not a valid agent id.
pub fn path_agent_id(path: &str) -> Result<AgentId, ApiError> {
    let invalid = |rule: &str| ApiError::unprocessable(Reason::InvalidField, format!("agent_id (in the path): {rule}"));
    let segment = path.strip_prefix("/gateway/agents/").and_then(|rest| rest.split('/').next()).unwrap_or_default();
    let decoded = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| invalid("must be UTF-8 once percent-decoded"))?;
    AgentId::new(decoded.into_owned()).map_err(|error| invalid(&error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paths_agent_id_is_percent_decoded_and_validated() {
        let id = |path: &str| path_agent_id(path).map(AgentId::into_inner);
        assert_eq!(id("/gateway/agents/agent-7/credentials").unwrap(), "agent-7");
        assert_eq!(id("/gateway/agents/ns%3Aa%2Fb%20c/credentials/x").unwrap(), "ns:a/b c");
        assert_eq!(id("/gateway/agents/%C3%BC/credentials").unwrap(), "ü");
        for bad in
            ["/gateway/agents//credentials", "/gateway/agents/%0A/credentials", "/gateway/agents/%FF/credentials"]
        {
            let refused = path_agent_id(bad).unwrap_err();
            assert_eq!((refused.status, refused.reason), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"), "{bad}");
        }
        assert!(path_agent_id(&format!("/gateway/agents/{}/credentials", "a".repeat(257))).is_err());
    }
}
