//! `GET /gateway/agents?limit=&after=`: a page of live agents, its page sizes, and the operation.

use gateway_core::{AgentId, ClusterId};
use serde::Serialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::fields::AgentIdSchema;
use crate::{Operation, Reason};

/// The page size of live agents when `limit` is absent.
pub const DEFAULT_PAGE: usize = 100;
/// The largest `limit` of live agents.
pub const MAX_PAGE: usize = 1000;
/// The most agent rows a page reads, live or not. In cluster mode the rows of evicted agents are kept (DESIGN §8)
/// and no index holds the live ones alone, so a page reads the rows after `after` in id order until it has `limit`
/// live agents or has read this many: its cost is bounded however many evicted agents there are, and a page among
/// them may hold fewer than `limit` agents, or none, with `next_after` set.
pub const MAX_ROWS_READ: usize = 10 * MAX_PAGE;

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
    #[serde(with = "gateway_core::encoding::rfc3339::serde")]
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
    #[serde(with = "gateway_core::encoding::rfc3339::serde")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

pub fn list_doc() -> Operation {
    Operation::new("listAgents", "operator", "Live agents")
        .describe(&format!(
            "Live agents in `agent_id` order; pass `next_after` as `after` for the next page, until it is null. A page \
             reads at most {} agent rows, live or not (in cluster mode evicted agents keep theirs), so it may \
             hold fewer than `limit` agents, or none, and still have a `next_after`: following it lists every agent \
             that stayed live.",
            rows_read_in_words()
        ))
        .limit(DEFAULT_PAGE, MAX_PAGE)
        .query_of::<AgentIdSchema>("after", "An agent id: the page starts after it.")
        .answer::<AgentPage<'static>>(200, "A page of live agents.")
        .error(503, Reason::StoreUnavailable)
}

/// [`MAX_ROWS_READ`] as the documents write it ("10,000"): the OpenAPI description is built from it, and
/// docs/api.md is checked against it.
fn rows_read_in_words() -> String {
    grouped(MAX_ROWS_READ)
}

/// `n` with its thousands separated by commas.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_guide_states_the_rows_a_page_reads_as_the_code_bounds_them() {
        let guide = include_str!("../../../docs/api.md");
        let stated = format!("A page reads at most {} agent rows", rows_read_in_words());
        assert!(guide.contains(&stated), "docs/api.md should say: {stated}");
    }

    #[test]
    fn thousands_are_grouped_by_commas() {
        let cases = [(0, "0"), (999, "999"), (1_000, "1,000"), (10_000, "10,000"), (1_234_567, "1,234,567")];
        for (n, words) in cases {
            assert_eq!(grouped(n), words);
        }
    }
}
