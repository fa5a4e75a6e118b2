//! The capability map port: what the gateway knows of each live agent's capabilities, and its in-memory
//! implementation (the single-process adapter, and the fake).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

use serde::Serialize;
use time::OffsetDateTime;

use crate::ids::AgentId;
use crate::ports::store::StoreError;
use crate::runtime::sync::lock;

/// What the gateway knows of a live agent's capabilities: the identity of its latest accepted DecisionLog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapabilityEntry {
    pub agent_type: String,
    pub capability_version: String,
    #[serde(with = "crate::encoding::rfc3339::serde")]
    pub updated_at: OffsetDateTime,
}

/// The live capability map. Entries go when their agent is evicted.
pub trait CapabilityMap: Send + Sync + Debug {
    fn register(&self, agent_id: &AgentId, entry: CapabilityEntry);
    fn remove_agent(&self, agent_id: &AgentId);
    fn get(&self, agent_id: &AgentId) -> Option<CapabilityEntry>;

    /// The entries of `agent_ids`, in their order: what a page of live agents shows. May block on a shared store
    /// (one round trip for the page rather than one per agent).
    fn get_many(&self, agent_ids: &[AgentId]) -> Result<Vec<Option<CapabilityEntry>>, StoreError> {
        Ok(agent_ids.iter().map(|agent_id| self.get(agent_id)).collect())
    }
}

/// Where an accepted DecisionLog's identity is noted: the heartbeat manager, which keeps entries only for live agents
/// (so the map is bounded like the liveness map). The DecisionLog intake's port to it.
pub trait CapabilityNotes: Send + Sync + Debug {
    fn note_capabilities(&self, agent_id: &AgentId, agent_type: &str, capability_version: &str);
}

/// The capability map of a single process, bounded: past `capacity` agents, new ones are not registered.
#[derive(Debug)]
pub struct InMemoryCapabilityMap {
    entries: Mutex<HashMap<AgentId, CapabilityEntry>>,
    capacity: usize,
}

impl InMemoryCapabilityMap {
    pub fn new(capacity: usize) -> Self {
        Self { entries: Mutex::new(HashMap::new()), capacity }
    }

    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl CapabilityMap for InMemoryCapabilityMap {
    fn register(&self, agent_id: &AgentId, entry: CapabilityEntry) {
        let mut entries = lock(&self.entries);
        if entries.len() < self.capacity || entries.contains_key(agent_id) {
            entries.insert(agent_id.clone(), entry);
        }
    }

    fn remove_agent(&self, agent_id: &AgentId) {
        lock(&self.entries).remove(agent_id);
    }

    fn get(&self, agent_id: &AgentId) -> Option<CapabilityEntry> {
        lock(&self.entries).get(agent_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    fn entry() -> CapabilityEntry {
        CapabilityEntry {
            agent_type: "t".into(),
            capability_version: "1".into(),
            updated_at: datetime!(2026-02-22 12:00:00 UTC),
        }
    }

    #[test]
    fn capability_map_is_bounded_but_known_agents_update() {
        let map = InMemoryCapabilityMap::new(1);
        let first = AgentId::new("a").unwrap();
        map.register(&first, entry());
        map.register(&AgentId::new("b").unwrap(), entry());
        assert_eq!(map.len(), 1);
        let updated = CapabilityEntry { capability_version: "2".into(), ..entry() };
        map.register(&first, updated.clone());
        assert_eq!(map.get(&first), Some(updated));
        map.remove_agent(&first);
        assert!(map.is_empty());
    }
}
