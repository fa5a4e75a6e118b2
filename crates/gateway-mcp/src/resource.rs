//! The one kind of resource: an agent's reminders, `gateway://agents/{agent_id}/reminders`.

use gateway_core::AgentId;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// The URI template of an agent's reminders (RFC 6570): the agent id percent-encoded, and optionally `after` (a
/// `fire_id`: the retained fires after that one, for a client that keeps its own cursor).
pub const REMINDERS_URI_TEMPLATE: &str = "gateway://agents/{agent_id}/reminders{?after}";

const PREFIX: &str = "gateway://agents/";
const SUFFIX: &str = "/reminders";

/// What is left as it is in a URI's segment: RFC 3986's unreserved characters.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The URI of `agent_id`'s reminders.
pub fn reminders_uri(agent_id: &AgentId) -> String {
    format!("{PREFIX}{}{SUFFIX}", utf8_percent_encode(agent_id.as_str(), SEGMENT))
}

/// A reminders URI, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderResource {
    /// Whose reminders.
    pub agent_id: AgentId,
    /// `?after=<fire_id>`: every retained fire after that one; without it, the fires no stream has received.
    pub after: Option<String>,
}

impl ReminderResource {
    /// `None` for a URI that is not one of an agent's reminders.
    pub fn parse(uri: &str) -> Option<Self> {
        let rest = uri.strip_prefix(PREFIX)?;
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let encoded = path.strip_suffix(SUFFIX).filter(|agent| !agent.contains('/'))?;
        let agent_id = AgentId::new(percent_decode_str(encoded).decode_utf8().ok()?.into_owned()).ok()?;
        let after = match query {
            None => None,
            Some(query) => {
                let value = query.strip_prefix("after=").filter(|value| !value.contains('&'))?;
                let fire_id = percent_decode_str(value).decode_utf8().ok()?.into_owned();
                // A `fire_id` never holds a control character, and is short.
                if fire_id.is_empty() || fire_id.len() > 512 || fire_id.chars().any(char::is_control) {
                    return None;
                }
                Some(fire_id)
            }
        };
        Some(Self { agent_id, after })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_agents_uri_reads_back_as_that_agent() {
        for agent in ["agent-7", "ns/x", "a b:c?d#e", "é"] {
            let agent_id = AgentId::new(agent).unwrap();
            let uri = reminders_uri(&agent_id);
            assert_eq!(ReminderResource::parse(&uri), Some(ReminderResource { agent_id, after: None }), "{uri}");
        }
        assert_eq!(reminders_uri(&AgentId::new("ns/x").unwrap()), "gateway://agents/ns%2Fx/reminders");
        let after = ReminderResource::parse("gateway://agents/a/reminders?after=7%3A2026-02-22T12%3A00%3A05Z").unwrap();
        assert_eq!(after.after.as_deref(), Some("7:2026-02-22T12:00:05Z"));
    }

    #[test]
    fn other_uris_name_nothing() {
        for uri in [
            "",
            "gateway://agents//reminders",
            "gateway://agents/a/b/reminders",
            "gateway://agents/a/reminders/",
            "gateway://agents/a",
            "gateway://agents/%00/reminders",
            "gateway://agents/%ff/reminders",
            "http://agents/a/reminders",
            "gateway://agents/a/reminders?before=1",
            "gateway://agents/a/reminders?after=",
            "gateway://agents/a/reminders?after=1&x=2",
            "gateway://agents/a/reminders?after=%0a",
        ] {
            assert_eq!(ReminderResource::parse(uri), None, "{uri}");
        }
    }
}
