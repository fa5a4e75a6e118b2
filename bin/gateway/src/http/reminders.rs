//! `GET /gateway/agents/{agent_id}/reminders?after=&limit=`: an agent's retained fires in firing order, for agents
//! that cannot hold an event stream (docs/api.md). The caller keeps its own cursor (the last `fire_id` it got);
//! nothing is marked received.

use std::net::IpAddr;

use gateway_auth::Access;
use gateway_core::AgentId;
use http::{HeaderMap, StatusCode};

use crate::http::auth::bearer_token;
use crate::http::error::ApiError;
use crate::http::request::{Query, Request, invalid_query};
use crate::http::response::{Response, json_response};
use crate::state::AppState;
use gateway_api::Reason;
use gateway_api::reminders::{DEFAULT_PAGE, MAX_CURSOR_BYTES, MAX_PAGE, MailboxPage, MailboxReminder};

/// Who may read `agent_id`'s mailbox: whoever may hold its reminder stream (the agent's token or the operator's
/// while agent auth is on; anyone while it is off).
async fn check_mailbox_reader(
    state: &AppState,
    headers: &HeaderMap,
    client: IpAddr,
    agent_id: &AgentId,
) -> Result<(), ApiError> {
    state.auth.authorize(bearer_token(headers), client, agent_id, Access::Read).await?;
    Ok(())
}

/// The agent id of `/gateway/agents/{agent_id}/reminders`, percent-decoded; `None` when the path is not that.
pub(super) fn agent_of(path: &str) -> Option<&str> {
    path.strip_prefix("/gateway/agents/")?.strip_suffix("/reminders").filter(|agent| !agent.contains('/'))
}

pub(super) async fn list(state: &AppState, request: &Request, client: IpAddr) -> Result<Response, ApiError> {
    let unknown_agent = || ApiError::unknown(Reason::UnknownAgent, "agent");
    let raw = agent_of(request.uri().path()).ok_or_else(unknown_agent)?;
    let decoded = percent_encoding::percent_decode_str(raw).decode_utf8().map_err(|_| unknown_agent())?;
    let agent_id = AgentId::new(decoded.into_owned()).map_err(|_| unknown_agent())?;
    check_mailbox_reader(state, request.headers(), client, &agent_id).await?;
    let query = Query::parse(request.uri(), &["after", "limit"])?;
    // A `fire_id` never holds a control character; PostgreSQL cannot even compare text holding NUL (a 500 before).
    let page = query.page(DEFAULT_PAGE, MAX_PAGE, "after", |text| {
        let cursor = !text.is_empty() && text.len() <= MAX_CURSOR_BYTES && !text.chars().any(char::is_control);
        cursor.then(|| text.to_owned())
    })?;
    if query.get("after").is_some() && page.after.is_none() {
        return Err(invalid_query("after must be a fire_id"));
    }
    let entries = state.mailbox.reminders_after(agent_id, page.after.as_deref(), page.limit).await?;
    let reminders = entries.iter().map(MailboxReminder::of).collect();
    Ok(json_response(StatusCode::OK, &MailboxPage { reminders }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_the_one_segment_between_agents_and_reminders() {
        assert_eq!(agent_of("/gateway/agents/agent-7/reminders"), Some("agent-7"));
        assert_eq!(agent_of("/gateway/agents/ns%2Fx/reminders"), Some("ns%2Fx"));
        assert_eq!(agent_of("/gateway/agents//reminders"), Some(""));
        for other in
            ["/gateway/agents/a/b/reminders", "/gateway/agents/a/reminders/", "/gateway/agents/a", "/gateway/agents"]
        {
            assert_eq!(agent_of(other), None, "{other}");
        }
    }
}
