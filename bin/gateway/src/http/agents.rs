//! `GET /gateway/agents?limit=&after=`: live agents in id order, keyset-paginated.

use gateway_api::agents::{AgentPage, Capabilities, DEFAULT_PAGE, LiveAgentBody, MAX_PAGE, MAX_ROWS_READ};
use gateway_core::{AgentId, CapabilityEntry};
use gateway_heartbeat::LiveAgent;
use http::StatusCode;

use crate::http::error::ApiError;
use crate::http::request::{Query, Request};
use crate::http::response::{Response, json_response};
use crate::state::AppState;
use gateway_api::Reason;

pub(super) async fn list(state: &AppState, request: &Request) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri(), &["limit", "after"])?;
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after", |text| AgentId::new(text).ok())?;
    let page = state.heartbeat.live_agents(page.after, page.limit, MAX_ROWS_READ).await?;
    let agents = page.agents.iter().map(live_agent_body).collect();
    Ok(json_response(StatusCode::OK, &AgentPage { agents, next_after: page.next_after }))
}

/// A live agent as the operator API shows it.
fn live_agent_body(agent: &LiveAgent) -> LiveAgentBody<'_> {
    LiveAgentBody {
        agent_id: &agent.agent_id,
        cluster_id: &agent.cluster_id,
        last_seen: agent.last_seen,
        capabilities: agent.capabilities.as_ref().map(|entry: &CapabilityEntry| Capabilities {
            agent_type: &entry.agent_type,
            capability_version: &entry.capability_version,
            updated_at: entry.updated_at,
        }),
    }
}

/// The agent id of a path `/gateway/agents/{agent_id}/…`, percent-decoded (an id may hold `/`, `:` or spaces,
/// which a path carries as `%2F`, `%3A`, `%20`); 422 `invalid_field` when it is not a valid agent id.
pub(super) fn path_agent_id(path: &str) -> Result<AgentId, ApiError> {
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
