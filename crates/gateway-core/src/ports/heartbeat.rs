//! The durable heartbeat port (`gateway_heartbeats`, docs/requirements.md FR-10.3/10.4): the latest heartbeat of
//! each agent, and its in-memory implementation.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

use time::OffsetDateTime;

use crate::ids::{AgentId, ClusterId};
use crate::ports::failure::FailureSwitch;
use crate::ports::store::{StoreError, StoreHealth};
use crate::runtime::sync::lock;

/// One row of `gateway_heartbeats`: the most recent heartbeat of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRecord {
    pub agent_id: AgentId,
    pub cluster_id: ClusterId,
    /// The timestamp the agent sent (or the receipt time when it sent none that parses).
    pub last_seen_at: OffsetDateTime,
}

/// Durable liveness snapshot, one row per agent (FR-10.4).
pub trait HeartbeatStore: Send + Sync + Debug {
    /// Inserts each row, or replaces the agent's existing one, in order and in one transaction: the last
    /// heartbeat wins, also between two records of one agent in the same call.
    fn upsert_heartbeats(&self, records: &[HeartbeatRecord]) -> Result<(), StoreError>;

    fn upsert_heartbeat(&self, record: &HeartbeatRecord) -> Result<(), StoreError> {
        self.upsert_heartbeats(std::slice::from_ref(record))
    }

    fn heartbeat(&self, agent_id: &AgentId) -> Result<Option<HeartbeatRecord>, StoreError>;

    /// Whether [`HeartbeatStore::upsert_heartbeats`] also makes visible to every instance, in the rows'
    /// transaction, each receipt the heartbeat manager's liveness map recorded before the call: true only for a
    /// store that is that map itself (a shared map that writes the receipts with the rows). The manager then has
    /// no [`crate::LivenessMap::flush`] to do after the rows; under load, one there would find the receipts of the
    /// heartbeats that arrived meanwhile and write them in a commit of their own, a second commit per group.
    fn writes_receipts(&self) -> bool {
        false
    }
}

/// `gateway_heartbeats` in memory. [`Self::failure`] makes every operation report [`StoreError::Unavailable`].
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

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    crate::heartbeat_store_conformance!(Some(Box::<InMemoryHeartbeatStore>::default()));

    #[test]
    fn one_row_per_agent_and_the_switch_fails_it() {
        let store = InMemoryHeartbeatStore::default();
        let agent_id = AgentId::new("a").unwrap();
        let record = |second: u8| HeartbeatRecord {
            agent_id: agent_id.clone(),
            cluster_id: ClusterId::new("c").unwrap(),
            last_seen_at: datetime!(2026-02-22 12:00:00 UTC) + time::Duration::seconds(second.into()),
        };
        store.upsert_heartbeat(&record(1)).unwrap();
        store.upsert_heartbeat(&record(2)).unwrap();
        assert_eq!(store.len(), 1);
        store.failure.set_failing(true);
        assert!(matches!(store.upsert_heartbeat(&record(3)), Err(StoreError::Unavailable(_))));
        assert!(store.heartbeat(&agent_id).is_err());
        assert!(store.ping().is_err());
        store.failure.set_failing(false);
        assert_eq!(store.heartbeat(&agent_id).unwrap(), Some(record(2)), "the failed upsert wrote nothing");
    }
}
