//! The tool-call port (`tool_calls`): the answers of agents' synchronous tool calls
//! (`POST /gateway/tools/{tool_name}`, docs/api.md), kept so that a retried call gets the answer of the first one,
//! and its in-memory implementation.
//!
//! A call is named by its agent and the agent's own `tool_call_id`; the row holds which tool it was, a hash of
//! its parameters (to tell a retry from a different call that reuses the id) and the result it was answered
//! with. Rows are kept for the retention period (`--retention-days`), then pruned.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::Value;
use time::OffsetDateTime;

use crate::ids::{AgentId, ToolCallId};
use crate::ports::failure::FailureSwitch;
use crate::ports::store::{StoreError, StoreHealth};
use crate::runtime::sync::lock;

/// One answered tool call, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub agent_id: AgentId,
    pub tool_call_id: ToolCallId,
    /// The tool's name as the agent called it (`schedule_reminder`).
    pub tool_name: String,
    /// `sha256:<hex>` of the call's parameters in canonical form (see [`params_hash`]).
    pub params_hash: String,
    /// The `result` the call was answered with: a JSON object.
    pub result: Value,
    pub created_at: OffsetDateTime,
}

/// Durable storage of answered tool calls.
///
/// Rule every implementation must keep: one row per `(agent_id, tool_call_id)`; recording a call whose key a row
/// already holds writes nothing and returns that row unchanged, also when two recorders race (the loser gets the
/// winner's row).
pub trait ToolCallStore: Send + Sync + std::fmt::Debug {
    /// The recorded call of `agent_id` with `tool_call_id`, if any.
    fn tool_call(&self, agent_id: &AgentId, tool_call_id: &ToolCallId) -> Result<Option<ToolCallRecord>, StoreError>;
    /// Writes `call` unless a row holds its `(agent_id, tool_call_id)`; returns the row that holds the key and
    /// whether this call wrote it.
    fn record_tool_call(&self, call: &ToolCallRecord) -> Result<(ToolCallRecord, bool), StoreError>;
    /// Deletes at most `limit` rows created before `created_before`, oldest first; returns how many went.
    fn prune_tool_calls(&self, created_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError>;
}

/// `sha256:<hex>` of `params` written canonically: object keys sorted at every level, no whitespace. Two calls
/// with the same parameters in another key order hash the same, whatever serde_json's map preserves.
pub fn params_hash(params: &Value) -> String {
    let mut canonical = Vec::new();
    write_canonical(&mut canonical, params);
    crate::intake::interceptor::sha256_tag(&canonical)
}

fn write_canonical(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by_key(|(key, _)| *key);
            out.push(b'{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                // Writing a string into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, key);
                out.push(b':');
                write_canonical(out, value);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// `tool_calls` in memory. [`Self::failure`] makes every operation report [`StoreError::Unavailable`].
#[derive(Debug, Default)]
pub struct InMemoryToolCallStore {
    rows: Mutex<BTreeMap<(AgentId, ToolCallId), ToolCallRecord>>,
    pub failure: FailureSwitch,
}

impl InMemoryToolCallStore {
    pub fn len(&self) -> usize {
        lock(&self.rows).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What `agent_id`'s recorded answers are charged ([`crate::AgentStorage`]).
    pub(crate) fn charged_bytes(&self, agent_id: &AgentId) -> Result<u64, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.rows)
            .values()
            .filter(|row| &row.agent_id == agent_id)
            .map(|row| crate::ports::store::row_charge(row.result.to_string().len()))
            .sum())
    }
}

impl ToolCallStore for InMemoryToolCallStore {
    fn tool_call(&self, agent_id: &AgentId, tool_call_id: &ToolCallId) -> Result<Option<ToolCallRecord>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.rows).get(&(agent_id.clone(), tool_call_id.clone())).cloned())
    }

    fn record_tool_call(&self, call: &ToolCallRecord) -> Result<(ToolCallRecord, bool), StoreError> {
        self.failure.check()?;
        let mut rows = lock(&self.rows);
        let key = (call.agent_id.clone(), call.tool_call_id.clone());
        if let Some(holder) = rows.get(&key) {
            return Ok((holder.clone(), false));
        }
        rows.insert(key, call.clone());
        Ok((call.clone(), true))
    }

    fn prune_tool_calls(&self, created_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError> {
        self.failure.check()?;
        let mut rows = lock(&self.rows);
        let mut old: Vec<(OffsetDateTime, (AgentId, ToolCallId))> = rows
            .iter()
            .filter(|(_, row)| row.created_at < created_before)
            .map(|(key, row)| (row.created_at, key.clone()))
            .collect();
        old.sort_unstable();
        old.truncate(limit);
        for (_, key) in &old {
            rows.remove(key);
        }
        Ok(old.len())
    }
}

impl StoreHealth for InMemoryToolCallStore {
    fn ping(&self) -> Result<(), StoreError> {
        self.failure.check()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    crate::tool_call_store_conformance!(Some(Box::<InMemoryToolCallStore>::default()));

    #[test]
    fn the_params_hash_ignores_key_order_and_whitespace_but_not_values() {
        let a: Value =
            serde_json::from_str(r#"{"delay_ms": 5, "payload": {"b": [1, {"y": 2, "x": 1}], "a": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"payload":{"a":"s","b":[1,{"x":1,"y":2}]},"delay_ms":5}"#).unwrap();
        assert_eq!(params_hash(&a), params_hash(&b));
        assert_ne!(
            params_hash(&a),
            params_hash(&json!({"delay_ms": 6, "payload": {"a": "s", "b": [1, {"x": 1, "y": 2}]}}))
        );
        assert_ne!(params_hash(&json!({"a": [1, 2]})), params_hash(&json!({"a": [2, 1]})), "arrays keep their order");
        assert_ne!(params_hash(&json!({"a": "1"})), params_hash(&json!({"a": 1})));
        assert!(params_hash(&json!({})).starts_with("sha256:"));
    }

    #[test]
    fn a_failing_store_fails_every_operation() {
        let store = InMemoryToolCallStore::default();
        store.failure.set_failing(true);
        let agent = AgentId::new("a").unwrap();
        let id = ToolCallId::new("c").unwrap();
        assert!(store.tool_call(&agent, &id).is_err());
        assert!(store.prune_tool_calls(OffsetDateTime::UNIX_EPOCH, 1).is_err());
        assert!(store.ping().is_err());
        store.failure.set_failing(false);
        assert!(store.is_empty());
    }
}
