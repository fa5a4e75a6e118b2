//! The agent storage port: how many bytes of the store one agent's rows take, as the storage quota counts them
//! (`--agent-storage-quota-bytes`, DESIGN §14 "Storage per agent is bounded"; docs/architecture.md "Storage per
//! agent").
//!
//! What an agent makes the gateway keep: its recorded tool answers (`tool_calls`, kept `--retention-days`), its
//! pending reminders (one-time `cron_jobs` rows, each to become a mailbox entry of the same payload when it fires)
//! and its mailbox (`agent_mailbox`, fired reminders kept `--mailbox-retention-h`). Each row is charged the bytes of
//! its JSON (the answer, or the payload) plus [`STORED_ROW_CHARGE_BYTES`]. A reminder is charged while pending and,
//! once fired, as its mailbox entry (the same bytes): counted before it is accepted, so the quota is decided at
//! acceptance and a reminder already accepted is never refused when it fires. Recurring jobs are the operator's and
//! are not charged while pending; their fires are, as mailbox entries.
//!
//! Read by the scheduler before it accepts a reminder and by the tools before they record an answer, so it is
//! answered from the rows themselves every time (an indexed sum in a database adapter): correct by construction,
//! nothing to keep in step with every write that adds or prunes rows.

use std::sync::Arc;

use crate::ids::AgentId;
use crate::ports::cron::InMemoryCronJobStore;
use crate::ports::store::StoreError;
// Defined beside the store ports' error, since the in-memory stores charge their rows with them too.
pub use crate::ports::store::{STORED_ROW_CHARGE_BYTES, row_charge};
use crate::ports::tool_call::InMemoryToolCallStore;

/// The stored bytes of one agent's rows.
pub trait AgentStorage: Send + Sync + std::fmt::Debug {
    /// The bytes charged to `agent_id`: for each of its recorded tool answers, jobs (pending one-time reminders and
    /// recurring jobs: an agent creates both) and mailbox entries, the length of its JSON (answer or payload, in bytes) plus [`STORED_ROW_CHARGE_BYTES`].
    fn agent_storage_bytes(&self, agent_id: &AgentId) -> Result<u64, StoreError>;
}

/// [`AgentStorage`] over the in-memory cron, mailbox and tool-call stores (a database adapter answers from one
/// database): the same stores the scheduler and the tools are given.
#[derive(Debug, Default, Clone)]
pub struct InMemoryAgentStorage {
    pub jobs: Arc<InMemoryCronJobStore>,
    pub calls: Arc<InMemoryToolCallStore>,
}

impl AgentStorage for InMemoryAgentStorage {
    fn agent_storage_bytes(&self, agent_id: &AgentId) -> Result<u64, StoreError> {
        Ok(self.jobs.charged_bytes(agent_id)?.saturating_add(self.calls.charged_bytes(agent_id)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::storage::StorageParts;

    fn parts(storage: &InMemoryAgentStorage) -> StorageParts<'_> {
        StorageParts { usage: storage, jobs: &*storage.jobs, mailbox: &*storage.jobs, calls: &*storage.calls }
    }

    crate::agent_storage_conformance!(Some(Box::<InMemoryAgentStorage>::default()), parts);

    #[test]
    fn a_failing_store_is_an_error_not_zero() {
        let storage = InMemoryAgentStorage::default();
        storage.jobs.failure.set_failing(true);
        assert!(storage.agent_storage_bytes(&AgentId::new("a").unwrap()).is_err());
    }
}
