//! In-memory implementations of the ports, for anyone's unit tests and for the single-process capability map.
//! The stores can be told to fail, so tests can drive the error paths.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::event::{Event, Topic};
use crate::ids::AgentId;
use crate::ports::{
    CapabilityEntry, CapabilityMap, EventPublisher, HeartbeatRecord, HeartbeatStore, PublishError, StoreError,
    StoreHealth,
};

/// Locks a mutex, ignoring poisoning: every critical section here leaves the data consistent.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A switch tests flip to make a fake store report [`StoreError::Unavailable`].
#[derive(Debug, Default)]
pub struct FailureSwitch(AtomicBool);

impl FailureSwitch {
    pub fn set_failing(&self, failing: bool) {
        self.0.store(failing, Ordering::SeqCst);
    }

    pub fn check(&self) -> Result<(), StoreError> {
        if self.0.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("in-memory store set to fail".to_owned()))
        } else {
            Ok(())
        }
    }
}

#[derive(Debug, Default)]
pub struct InMemoryHeartbeatStore {
    rows: Mutex<HashMap<AgentId, HeartbeatRecord>>,
    pub failure: FailureSwitch,
}

impl InMemoryHeartbeatStore {
    pub fn len(&self) -> usize {
        lock(&self.rows).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl HeartbeatStore for InMemoryHeartbeatStore {
    fn upsert_heartbeats(&self, records: &[HeartbeatRecord]) -> Result<(), StoreError> {
        self.failure.check()?;
        let mut rows = lock(&self.rows);
        for record in records {
            rows.insert(record.agent_id.clone(), record.clone());
        }
        Ok(())
    }

    fn heartbeat(&self, agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError> {
        self.failure.check()?;
        Ok(lock(&self.rows).get(agent_id).cloned())
    }
}

impl StoreHealth for InMemoryHeartbeatStore {
    fn ping(&self) -> Result<(), StoreError> {
        self.failure.check()
    }
}

/// Records every published event in order.
#[derive(Debug, Default)]
pub struct RecordingPublisher {
    events: Mutex<Vec<(Topic, Event)>>,
    pub failure: FailureSwitch,
}

impl RecordingPublisher {
    pub fn events(&self) -> Vec<(Topic, Event)> {
        lock(&self.events).clone()
    }

    pub fn on_topic(&self, topic: &Topic) -> Vec<Event> {
        lock(&self.events).iter().filter(|(on, _)| on == topic).map(|(_, event)| event.clone()).collect()
    }
}

impl EventPublisher for RecordingPublisher {
    fn publish(&self, topic: &Topic, event: &Event) -> Result<(), PublishError> {
        self.failure.check().map_err(|error| PublishError(error.to_string()))?;
        lock(&self.events).push((topic.clone(), event.clone()));
        Ok(())
    }
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

    #[test]
    fn heartbeat_store_upserts_and_can_fail() {
        let store = InMemoryHeartbeatStore::default();
        let agent_id = AgentId::new("a").unwrap();
        let record = |second: u8| HeartbeatRecord {
            agent_id: agent_id.clone(),
            cluster_id: crate::ids::ClusterId::new("c").unwrap(),
            last_seen_at: datetime!(2026-02-22 12:00:00 UTC) + time::Duration::seconds(second.into()),
        };
        store.upsert_heartbeat(&record(1)).unwrap();
        store.upsert_heartbeat(&record(2)).unwrap();
        assert_eq!(store.len(), 1);
        assert_eq!(store.heartbeat(&agent_id).unwrap(), Some(record(2)));
        store.failure.set_failing(true);
        assert!(matches!(store.upsert_heartbeat(&record(3)), Err(StoreError::Unavailable(_))));
    }
}
