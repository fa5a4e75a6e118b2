//! Rules every [`ToolCallStore`] must keep: one row per agent and call id, a held id answered with its row
//! unchanged, and pruning by age in batches.

use serde_json::json;
use time::{Duration, OffsetDateTime};

use crate::{AgentId, ToolCallId, ToolCallRecord, ToolCallStore};

fn call(agent: &str, id: &str, at: OffsetDateTime) -> ToolCallRecord {
    ToolCallRecord {
        agent_id: AgentId::new(agent).expect("a valid agent id"),
        tool_call_id: ToolCallId::new(id).expect("a valid tool call id"),
        tool_name: "schedule_reminder".to_owned(),
        params_hash: format!("sha256:{}", "0".repeat(64)),
        result: json!({"job_id": 7, "fire_at": "2026-02-22T12:00:05Z", "nested": {"list": [1, "two", null]}}),
        created_at: at,
    }
}

/// A recorded call comes back whole (tool, hash, result as JSON, instant to the microsecond) under its agent and
/// id; the same id under another agent is another call, and an id nobody recorded is `None`. Expects an empty
/// store.
pub fn a_call_round_trips_under_its_agent_and_id(store: &dyn ToolCallStore, at: OffsetDateTime) {
    let first = call("agent-7", "call-1", at + Duration::microseconds(123_456));
    assert_eq!(store.record_tool_call(&first).expect("record"), (first.clone(), true));
    assert_eq!(store.tool_call(&first.agent_id, &first.tool_call_id).expect("read"), Some(first.clone()));

    let other_agent = ToolCallRecord { result: json!({"cancelled": false}), ..call("agent-8", "call-1", at) };
    assert_eq!(store.record_tool_call(&other_agent).expect("record"), (other_agent.clone(), true));
    assert_eq!(store.tool_call(&other_agent.agent_id, &other_agent.tool_call_id).expect("read"), Some(other_agent));
    assert_eq!(store.tool_call(&first.agent_id, &first.tool_call_id).expect("read"), Some(first.clone()));

    let unknown = ToolCallId::new("call-2").expect("a valid tool call id");
    assert_eq!(store.tool_call(&first.agent_id, &unknown).expect("read"), None);
}

/// Recording a call whose agent and id a row holds writes nothing: the holder comes back unchanged with
/// `false`, whatever the new call's tool, hash or result. Expects an empty store.
pub fn an_id_held_answers_with_its_row_unchanged(store: &dyn ToolCallStore, at: OffsetDateTime) {
    let first = call("agent-7", "call-1", at);
    assert!(store.record_tool_call(&first).expect("record").1);
    let rival = ToolCallRecord {
        tool_name: "cancel_reminder".to_owned(),
        params_hash: format!("sha256:{}", "1".repeat(64)),
        result: json!({"cancelled": true}),
        created_at: at + Duration::seconds(5),
        ..first.clone()
    };
    assert_eq!(store.record_tool_call(&rival).expect("record"), (first.clone(), false));
    assert_eq!(store.tool_call(&first.agent_id, &first.tool_call_id).expect("read"), Some(first));
}

/// Pruning deletes only rows created before the cutoff, oldest first, at most `limit` per call, and says how
/// many went. Expects an empty store.
pub fn pruning_takes_old_calls_oldest_first_a_batch_at_a_time(store: &dyn ToolCallStore, at: OffsetDateTime) {
    for minute in 0..5 {
        let row = call("agent-7", &format!("old-{minute}"), at + Duration::minutes(minute));
        store.record_tool_call(&row).expect("record");
    }
    let recent = call("agent-7", "recent", at + Duration::hours(1));
    store.record_tool_call(&recent).expect("record");
    let cutoff = at + Duration::minutes(30);
    assert_eq!(store.prune_tool_calls(cutoff, 2).expect("prune"), 2);
    let agent = AgentId::new("agent-7").expect("a valid agent id");
    let held = |id: &str| {
        store.tool_call(&agent, &ToolCallId::new(id).expect("a valid tool call id")).expect("read").is_some()
    };
    assert!(!held("old-0") && !held("old-1"), "the oldest went first");
    assert!(held("old-2"));
    assert_eq!(store.prune_tool_calls(cutoff, 10).expect("prune"), 3);
    assert_eq!(store.prune_tool_calls(cutoff, 10).expect("prune"), 0);
    assert!(held("recent"), "a call newer than the cutoff stays");
    assert!(!held("old-4"));
}
